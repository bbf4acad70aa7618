"""Where bfloat16 and float16 programs round: once, where an output is stored (tilec.ir.dtypes).

A program's 16-bit temporaries are held in float32 (a softmax's exponentials and their sum, a
norm's centred values), except where a matrix product reads them or they are its result with no
bias or activation after it; a float literal in a bfloat16 expression keeps float32's precision,
unless an explicit conversion rounds it. References are float64 computations on the same bfloat16
values; the interpreter (target "interp") must agree, bit for bit where no sum's order matters.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import torch

import tilec
import tilec.nn.functional
from tilec.ops import sources

BF16 = ml_dtypes.bfloat16
ULP = 2.0 ** -8  # the largest relative error of a correct rounding to bfloat16 (8 significant bits)
HALF_ULP = {BF16: 2.0 ** -9, np.float16: 2.0 ** -12}  # half a unit in the last place at 1.0 (8 and 11 bits)
LOW = pytest.mark.parametrize("dtype", [BF16, np.float16], ids=["bfloat16", "float16"])


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def softmax64(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def layer_norm64(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    xc = x - x.mean(axis=1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + eps) * g + b


@LOW
@pytest.mark.parametrize("rows,cols", [(7, 13), (64, 1000)])
def test_softmax_and_layer_norm_round_once(rows, cols, dtype):
    """Every cell within a 16-bit rounding (plus float32's noise) of the float64 result: holding
    exp(x - max) or x - mean in bfloat16 cost several units of the last place (1.6% on a softmax)."""
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, cols)) * 4).astype(dtype)
    g, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    x64, g64, b64 = (a.astype(np.float64) for a in (x, g, b))
    cases = [(sources.softmax_source(), (x,), softmax64(x64)),
             (sources.layer_norm_source(cols, 1e-5, True, True), (x, g, b), layer_norm64(x64, g64, b64, 1e-5))]
    for source, args, exact in cases:
        for target in ("llvm", "interp"):  # (their float32 sums add in other orders: not bit for bit)
            got = tilec.compile(source, target=target)(*args)
            assert got.dtype == dtype
            error = np.abs(got.astype(np.float64) - exact)
            bound = 2 * HALF_ULP[dtype] + 1e-5  # a rounding's relative error, below the type's smallest normals too
            assert np.all(error <= bound * np.abs(exact) + 1e-6), (source, target, float(error.max()))


@LOW
@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_a_row_sum_of_held_terms_rounds_once(dtype, target):
    """S = row sums of X * Y: the products are a temporary held in float32, and the sum rounds once.
    The row-wise template had converted each product to the sum's 16-bit type before adding it (169
    units in the last place off on float16 rows of 1000; the derived gradient of a cross-entropy
    with class weights came out 2.3 units off)."""
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((64, 1000)).astype(dtype) for _ in range(2))
    got = tilec.compile("function (X[R, C], Y[R, C]) -> (S) { T = X * Y; S[r, 0: R, 1] = +(T[r, c]); }",
                        target=target)(x, y)
    exact = (x.astype(np.float64) * y.astype(np.float64)).sum(axis=1, keepdims=True)
    assert got.dtype == dtype
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)  # a unit in the last place of each
    assert np.all(np.abs(got.astype(np.float64) - exact) <= 0.5 * spacing + 1e-6 * np.abs(exact))


def test_which_temporaries_are_held_in_float32(without_tiles):
    """Layer norm holds its centred values in float32 (one row at a time: the row-wise template keeps a
    temporary that a later pass over the row reads in a row buffer); a convolution's input and filter copies (a matrix
    product's operands) stay bfloat16, and its product, which a bias follows, is held in float32 and
    stored through the bias and the copy back to NCHW."""
    dt = {"X": "bfloat16", "G": "bfloat16", "Bt": "bfloat16"}
    loop = tilec.explain(sources.layer_norm_source(768, 1e-5, True, True), {"X": (8, 768), "G": (768,), "Bt": (768,)},
                         dt, stage="loop")
    assert "allocate Xc.rowbuf: float32[768] local" in loop  # one row at a time (tilec.schedule.cpu.rowwise)
    assert "O: bfloat16" in loop.splitlines()[0] and "Xc:" not in loop.splitlines()[0]
    conv = sources.conv2d_source((1, 1), (1, 1), (1, 1), True)
    shapes = {"X": (2, 64, 12, 12), "F": (64, 64, 3, 3), "Bias": (64,)}
    templates = tilec.explain(conv, shapes, dict.fromkeys(shapes, "bfloat16"), stage="templates")
    assert "(with statements 3..3)" in templates and "stored_copy" in templates  # the bias fused, the copy stored
    loop = tilec.explain(conv, shapes, dict.fromkeys(shapes, "bfloat16"), stage="loop").splitlines()[0]
    assert " K: bfloat16" in loop or " K:" not in loop  # a filter copy, where made, is a bfloat16 operand
    x = np.random.default_rng(1).standard_normal(shapes["X"]).astype(BF16)
    w = (np.random.default_rng(2).standard_normal(shapes["F"]) * 0.1).astype(BF16)
    bias = np.random.default_rng(3).standard_normal(64).astype(BF16)
    got = tilec.compile(conv)(x, w, bias)
    want = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                      torch.from_numpy(bias.astype(np.float64)), padding=1).numpy()
    error = np.abs(got.astype(np.float64) - want)
    assert np.all(error <= ULP * np.abs(want) + 1e-3), float((error - ULP * np.abs(want)).max())


@LOW
def test_a_literal_keeps_float32_precision_unless_converted(dtype):
    """x * 2/sqrt(pi) multiplies by float32's 1.1283792 (bfloat16's would be 1.125, 0.3% off, which a
    gradient's cancellation turns into whole percents); an explicit conversion of the literal rounds it."""
    x = np.random.default_rng(0).standard_normal(4096).astype(dtype)
    c = 1.1283791670955126
    convert_c = f"as_bfloat16({c!r})" if dtype == BF16 else f"as_float({c!r}, 16)"
    got = tilec.compile(f"O = X * {c!r}")(x)
    want = (x.astype(np.float32) * np.float32(c)).astype(dtype)
    np.testing.assert_array_equal(bits(got), bits(want))
    rounded = tilec.compile(f"O = X * {convert_c}")(x)
    c16 = np.float32(np.asarray(c).astype(dtype))  # 1.125 in bfloat16, 1.128906 in float16
    np.testing.assert_array_equal(bits(rounded), bits((x.astype(np.float32) * c16).astype(dtype)))
    for src in (f"O = X * {c!r}", f"O = X * {convert_c}"):
        np.testing.assert_array_equal(bits(tilec.compile(src)(x)), bits(tilec.compile(src, target="interp")(x)))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_compiled_nll_loss_keeps_bfloat16(reduction):
    """torch.compile(backend="tilec") of cross_entropy on bfloat16 logits returns bfloat16, as eager
    does (the count of kept targets was a float32 tensor, which made the loss float32)."""
    logits = torch.randn(6, 5, dtype=torch.bfloat16)
    target = torch.tensor([0, 4, 2, 1, 3, 2])
    fn = torch.compile(lambda x, t: torch.nn.functional.cross_entropy(x, t, reduction=reduction), backend="tilec")
    got, want = fn(logits, target), torch.nn.functional.cross_entropy(logits, target, reduction=reduction)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, atol=1e-2, rtol=2e-2)


@pytest.mark.parametrize("pack_a", [True, False])
def test_a_bias_epilogue_rounds_once_over_blocked_reductions(pack_a):
    """The packed variant (and the direct one) with K in three blocks (kc 64 of K 160) and a bias
    fused: the product is held in float32 for its epilogue, so its partial sums wait in a float32
    workspace, not in the bfloat16 output, and each cell rounds once."""
    from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule

    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((40, 160)).astype(BF16), rng.standard_normal((96, 160)).astype(BF16)
    bias = rng.standard_normal(96).astype(BF16)
    knobs = (("mr", 4), ("nr", 32), ("kc", 64), ("pack_a", pack_a))
    f = tilec.compile(sources.linear_source(True, "none")).with_schedule(
        TemplateSchedule((TemplateConfig(0, "implicit_gemm", knobs),)))
    shapes, dtypes = {"X": x.shape, "W": w.shape, "Bias": bias.shape}, dict.fromkeys("XW", "bfloat16")
    templates = f.explain(shapes, {**dtypes, "Bias": "bfloat16"}, stage="templates")
    assert ("packed" in templates) == pack_a and "(with statements 1..1)" in templates
    got = f(x, w, bias)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    assert got.dtype == BF16
    error = np.abs(got.astype(np.float64) - exact)
    assert np.all(error <= ULP * np.abs(exact) + 1e-4), float((error - ULP * np.abs(exact)).max())


@pytest.mark.parametrize("stride", [1, 2])
def test_bfloat16_depthwise_convolutions_take_the_stencil(stride):
    """A depthwise convolution in bfloat16 without bias (its product is the output) runs the stencil
    template, summing each cell's taps in float32 and rounding once, as float32 ones do."""
    x = torch.randn(2, 16, 19, 19, dtype=torch.bfloat16)
    w = torch.randn(16, 1, 3, 3, dtype=torch.bfloat16)
    src = sources.depthwise_source((stride, stride), ((1, 1), (1, 1)), (1, 1), False)
    shapes = {"X": tuple(x.shape), "F": tuple(w.shape)}
    assert "0: stencil" in tilec.explain(src, shapes, dict.fromkeys(shapes, "bfloat16"), stage="templates")
    got = tilec.nn.functional.conv2d(x, w, stride=stride, padding=1, groups=16)
    exact = torch.nn.functional.conv2d(x.double(), w.double(), stride=stride, padding=1, groups=16)
    assert got.dtype == torch.bfloat16
    error = (got.double() - exact).abs()
    assert bool((error <= ULP * exact.abs() + 1e-4).all()), float((error - ULP * exact.abs()).max())


def test_a_temporary_only_copied_into_an_output_is_stored_in_its_16_bit_type():
    """A biased convolution's channels-last result Yb, which only the copy back to NCHW reads, is
    stored in bfloat16 (the copy would round each cell anyway: the same bits, half the bytes; a
    1 -> 64 channel conv on 32 32 x 32 images wrote and read 8 MiB of float32 on the way). Where
    anything else reads it (an elementwise statement), or the copy's result is itself a temporary,
    it stays float32. Either way each output cell is its float32 sum, rounded once."""
    from tilec.frontend import parse
    from tilec.ir.bounds import bind

    conv = sources.conv2d_source((1, 1), (1, 1), (1, 1), True)
    shapes = {"X": (4, 1, 32, 32), "F": (64, 1, 3, 3), "Bias": (64,)}
    dt = dict.fromkeys(shapes, "bfloat16")

    def dtypes(source: str) -> dict[str, str]:
        return bind(parse(source), shapes, dt).dtypes

    assert dtypes(conv)["Yb"] == "bfloat16" and dtypes(conv)["Y"] == "float32"
    also_read = conv.replace("-> (O)", "-> (O, P)").replace("\n}", "\n    P = Yb * 2.0;\n}")
    assert dtypes(also_read)["Yb"] == "float32"
    copied_on = conv.replace("    O[n, co", "    T[n, co").replace("\n}", "\n    O = exp(T);\n}")
    assert dtypes(copied_on)["Yb"] == "float32" and dtypes(copied_on)["T"] == "float32"
    summed = "function (X[N, M]) -> (O) { T = X * 2.0; O[i: N] = +(T[i, j]); }"  # a `+` that sums: T stays
    assert bind(parse(summed), {"X": (4, 8)}, {"X": "bfloat16"}).dtypes["T"] == "float32"
    permuted = "function (X[N, M]) -> (O) { T = X * 2.0; O[j, i: M, N] = +(T[i, j]); }"  # one tuple a cell
    assert bind(parse(permuted), {"X": (4, 8)}, {"X": "bfloat16"}).dtypes["T"] == "bfloat16"
    loop = tilec.explain(conv, shapes, dt, stage="loop").splitlines()[0]
    assert "Yb: bfloat16" in loop, loop  # the permute's source, materialized in bfloat16
    stride2 = tilec.grad(sources.conv2d_source((2, 2), (1, 1), (1, 1), True), wrt=["X"])  # DX = +(DI[n, h, w, c])
    grad_shapes = {"X": (2, 16, 8, 8), "F": (16, 16, 3, 3), "Bias": (16,), stride2.inputs[3]: (2, 16, 4, 4)}
    signature = stride2.explain(grad_shapes, dict.fromkeys(stride2.inputs, "bfloat16"), stage="loop").splitlines()[0]
    tensors = re.findall(r"([\w.]+): (\w+)\[", signature)  # (workspaces, named X.part, hold float32 on CPUs
    assert {t: d for t, d in tensors if "." not in t and d != "bfloat16"} == {}, signature  # without pairs)
    assert ("DI_2_phases", "bfloat16") in tensors  # the scattered phases are stored in bfloat16 too
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shapes["X"]).astype(BF16)
    w = rng.standard_normal(shapes["F"]).astype(BF16)
    bias = rng.standard_normal(64).astype(BF16)
    got = tilec.compile(conv)(x, w, bias)
    exact = torch.nn.functional.conv2d(*(torch.from_numpy(a.astype(np.float64)) for a in (x, w, bias)),
                                       padding=1).numpy()
    error = np.abs(got.astype(np.float64) - exact)
    assert np.all(error <= ULP * np.abs(exact) + 1e-6), float(error.max())
    rounded_once = bits(exact.astype(np.float32).astype(BF16))
    assert np.mean(bits(got) == rounded_once) > 0.999  # (a float32 sum may land across a rounding boundary)
