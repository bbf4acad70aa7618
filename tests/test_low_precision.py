"""bfloat16 and float16: conversions bit-exact against ml_dtypes/numpy, float32 computation and
accumulation (rounded once per stored value), the GEMM template's float32 packing, torch tensors
through tilec.nn.functional, odd shapes included. References are float32 computations rounded to
the 16-bit type; results must agree within the type's tolerance (relative 1e-2 for bfloat16)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import tilec
from tilec.ir.dtypes import accumulator_dtype, promote
from tilec.pipeline import resolve_target
from tilec.schedule.cpu.implicit_gemm.knobs import most_rows

BF16 = ml_dtypes.bfloat16
LOW = [BF16, np.float16]
GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def special_floats(rng: np.random.Generator, n: int, dtype: type) -> np.ndarray:
    """Random values over many magnitudes, plus the cases rounding gets wrong: ties, the largest
    finite values, subnormals, infinities, NaN and signed zeros."""
    x = rng.standard_normal(n) * np.exp2(rng.integers(-140, 128, n))
    ties = (rng.integers(1, 1 << 8, 64) * 2 + 1).astype(np.float64) * 2.0 ** -9  # halfway between bfloat16 values
    extra = [0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895313892515355e38, -3.4e38, 1e-40, -1e-45, 65504.0, 65520.0]
    return np.concatenate([x, ties, -ties, extra]).astype(dtype)


def test_promotion_and_accumulation_types():
    assert promote("bfloat16", "float16") == promote("float16", "bfloat16") == "float32"
    assert promote("bfloat16", "float32") == "float32" and promote("int64", "bfloat16") == "bfloat16"
    assert promote("bfloat16", "float64") == "float64"
    assert accumulator_dtype("bfloat16") == accumulator_dtype("float16") == "float32"
    assert accumulator_dtype("float64") == "float64"


@pytest.mark.parametrize("source_dtype", [np.float32, np.float64, np.int32, np.int64, np.float16])
def test_conversion_to_bfloat16_rounds_like_ml_dtypes(source_dtype):
    rng = np.random.default_rng(1)
    if np.dtype(source_dtype).kind == "i":
        x = rng.integers(-(1 << 30), 1 << 30, 4099).astype(source_dtype)
    else:
        with np.errstate(over="ignore"):
            x = special_floats(rng, 4000, source_dtype)
    f = tilec.compile("Y = as_bfloat16(X)")
    got = f(x)
    assert got.dtype == BF16
    with np.errstate(over="ignore"):
        ref = x.astype(np.float64).astype(BF16) if source_dtype == np.float64 else x.astype(BF16)
    nan = np.isnan(ref.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert np.array_equal(bits(got)[~nan], bits(ref)[~nan])


@pytest.mark.parametrize("source_dtype", [np.float32, np.float64, np.int32, np.int64, BF16])
@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_conversion_to_float16_rounds_like_numpy(source_dtype, target):
    """as_float(X, 16): one correct rounding from any type (float64 through float32 rounded to odd,
    so no double rounding), overflow to infinity, NaN kept; float16 is held in float32 in registers,
    so the conversion is a rounding of its own, not a change of register type."""
    rng = np.random.default_rng(5)
    if np.dtype(source_dtype).kind == "i":
        x = rng.integers(-70000, 70000, 4099).astype(source_dtype)
    else:
        with np.errstate(over="ignore"):
            x = special_floats(rng, 4000, np.float64)
            x = np.concatenate([x, 1.0 + (2 * rng.integers(0, 1 << 10, 64) + 1) * 2.0 ** -11]).astype(source_dtype)
    got = tilec.compile("Y = as_float(X, 16)", target=target)(x)
    assert got.dtype == np.float16
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16) if source_dtype != BF16 else x.astype(np.float32).astype(np.float16)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(ref)[~nan])


def test_conversion_from_bfloat16_is_exact():
    rng = np.random.default_rng(2)
    x = special_floats(rng, 3000, np.float32).astype(BF16)
    for spelling, dtype in [("as_float(X, 32)", np.float32), ("as_float(X, 64)", np.float64),
                            ("as_float(X, 16)", np.float16), ("as_int(X, 32)", np.int32)]:
        sample = x if dtype != np.int32 else np.clip(np.nan_to_num(x.astype(np.float32)), -1e9, 1e9).astype(BF16)
        with np.errstate(all="ignore"):
            got, ref = tilec.compile(f"Y = {spelling}")(sample), sample.astype(dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, ref)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**31), dtype=st.sampled_from(LOW))
def test_elementwise_is_computed_in_float32_and_rounded_once(n, seed, dtype):
    """a * b + c - a / 3 in float32, one rounding at the store: equal to the interpreter and to numpy
    computing in float32, bit for bit (no intermediate rounding, no fused multiply-add)."""
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    src = "function (A[N], B[N], C[N]) -> (Y) { Y = A * B + C - A / 3.0; }"
    got, interp = tilec.compile(src)(a, b, c), tilec.compile(src, target="interp")(a, b, c)
    assert got.dtype == interp.dtype == dtype
    a32, b32, c32 = (v.astype(np.float32) for v in (a, b, c))
    ref = (a32 * b32 + c32 - a32 / np.float32(3.0)).astype(dtype)
    np.testing.assert_array_equal(bits(got), bits(ref))
    np.testing.assert_array_equal(bits(interp), bits(ref))


@pytest.mark.parametrize("dtype", LOW, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_sums_accumulate_in_float32(dtype, target):
    """4096 ones: a 16-bit accumulator stops at 256 (bfloat16) or 2048 (float16)."""
    f = tilec.compile("function (A[N], B[M, N]) -> (S, R) { S[] = +(A[i]); R[i: M] = +(B[i, j]); }", target=target)
    s, r = f(np.ones(4096, dtype), np.ones((3, 4096), dtype))
    assert s.dtype == r.dtype == dtype
    assert float(s) == 4096.0 and np.all(r.astype(np.float32) == 4096.0)


@pytest.mark.parametrize("dtype", LOW, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (37, 53, 29), (67, 129, 45), (256, 200, 1000), (130, 257, 2101), (96, 64, 777)])
def test_gemm_matches_a_float32_reference(dtype, m, n, k):
    """Large shapes take the packed GEMM template (float32 panels; K over the reduction block keeps
    its partial sums in a float32 workspace), small ones the default loops."""
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    got = tilec.compile(GEMM)(a, b)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    assert got.dtype == dtype and got.shape == (m, n)
    # one rounding of a float32 result: within half an ulp of the type, plus float32 reordering
    assert rel_error(got, ref) < (4e-3 if dtype == BF16 else 5e-4)


def test_bfloat16_gemm_uses_the_pair_dot_product_where_the_cpu_has_it(without_tiles):
    """On AVX512-BF16 CPUs the micro-kernel multiplies bfloat16 pairs (vdpbf16ps) on packed pairs."""
    from tilec.pipeline import resolve_target
    from tilec.target import cpu_isa

    cpu = resolve_target("llvm").host  # the host, or the CPU pytest --cpu names
    assert cpu is not None
    if cpu.vector_bits < 512 or "avx512bf16" not in cpu_isa(cpu.name, cpu.features):
        pytest.skip(f"the target CPU {cpu.name} lacks AVX512-BF16 (the float32 micro-kernel is tested above)")
    f = tilec.compile(GEMM)
    shapes, dtypes = {"A": (256, 999), "B": (999, 256)}, {"A": "bfloat16", "B": "bfloat16"}
    assert "dot2_bf16" in f.explain(shapes, dtypes, stage="loop")
    assert "vdpbf16ps" in f.explain(shapes, dtypes, stage="asm")


def test_gemm_with_fused_epilogue_in_bfloat16():
    rng = np.random.default_rng(5)
    src = "function (A[M, K], B[K, N], Bias[N]) -> (Y) { C[i, j: M, N] = +(A[i, k] * B[k, j]); Y = relu(C + Bias); }"
    a, b = rng.standard_normal((200, 600)).astype(BF16), rng.standard_normal((600, 136)).astype(BF16)
    bias = rng.standard_normal(136).astype(BF16)
    got = tilec.compile(src)(a, b, bias)
    c = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16).astype(np.float32)
    ref = np.maximum(c + bias.astype(np.float32), 0)
    assert got.dtype == BF16 and rel_error(got, ref) < 1e-2


def test_mixed_bfloat16_and_float16_compute_in_float32():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal(100).astype(BF16), rng.standard_normal(100).astype(np.float16)
    got = tilec.compile("Y = A * B")(a, b)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, a.astype(np.float32) * b.astype(np.float32))


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_a_function_takes_torch_low_precision_tensors(name):
    """tilec.Function reads a torch bfloat16 tensor (which numpy cannot convert) through its bits,
    a non-contiguous one included, and returns the 16-bit numpy result."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    dtype = getattr(torch, name)
    a, b = torch.randn(5, 7, dtype=dtype), torch.randn(9, 7, dtype=dtype).t()  # b: a transposed view
    got = tilec.compile(GEMM)(a, b)
    assert got.dtype.name == name
    ref = (a.float() @ b.float()).numpy()
    assert rel_error(got.astype(np.float32), ref) < 1e-2


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_torch_low_precision_tensors_through_the_modules(name):
    torch = pytest.importorskip("torch")
    import tilec.nn.functional as F

    dtype = getattr(torch, name)
    torch.manual_seed(0)
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    x = torch.randn(3, 37, 48, dtype=dtype, requires_grad=True)
    w, bias = torch.randn(40, 48, dtype=dtype, requires_grad=True), torch.randn(40, dtype=dtype, requires_grad=True)
    x32, w32, b32 = (t.detach().float().requires_grad_() for t in (x, w, bias))
    y, y32 = F.linear(x, w, bias), torch.nn.functional.linear(x32, w32, b32)
    assert y.dtype == dtype and rel_error(y.detach().float(), y32.detach()) < tol
    (y.float() ** 2).sum().backward()
    (y32 ** 2).sum().backward()
    for got, ref in [(x.grad, x32.grad), (w.grad, w32.grad), (bias.grad, b32.grad)]:
        assert got.dtype == dtype and rel_error(got.float(), ref) < 3 * tol
    img, kernel = torch.randn(2, 3, 17, 19, dtype=dtype), torch.randn(8, 3, 3, 3, dtype=dtype)
    conv = F.conv2d(img, kernel, padding=1)
    assert conv.dtype == dtype
    assert rel_error(conv.float(), torch.nn.functional.conv2d(img.float(), kernel.float(), padding=1)) < tol
    q = torch.randn(2, 4, 33, 16, dtype=dtype)
    for causal in (False, True):
        out = F.scaled_dot_product_attention(q, q, q, is_causal=causal)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=causal)
        assert out.dtype == dtype and rel_error(out.float(), ref) < tol
    for ours, theirs in [(F.softmax(q, -1), torch.softmax(q.float(), -1)),
                         (F.layer_norm(q, (16,)), torch.nn.functional.layer_norm(q.float(), (16,))),
                         (F.gelu(q), torch.nn.functional.gelu(q.float()))]:
        assert ours.dtype == dtype and rel_error(ours.float(), theirs) < tol


@pytest.mark.parametrize("heads,causal", [(1, False), (1, True), (4, True)])
def test_bfloat16_attention_gradients_match_float32(heads, causal):
    """The fused attention-backward template reads bfloat16 Q, K, V and dO into float32 (one head: the
    split variant with dQ partial sums; four: one head per thread)."""
    torch = pytest.importorskip("torch")
    import tilec.nn.functional as F

    torch.manual_seed(heads)
    q, k, v = (torch.randn(2 if heads > 1 else 1, heads, 77, 32, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_out = torch.nn.functional.scaled_dot_product_attention(*ref_inputs, is_causal=causal)
    want = torch.autograd.grad(ref_out, ref_inputs, grad.float())
    assert out.dtype == torch.bfloat16 and rel_error(out.detach().float(), ref_out.detach()) < 1e-2
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16 and rel_error(g.float(), w) < 2e-2


@pytest.mark.parametrize("shape", [(2, 64, 20, 48, 3, 1, 1), (2, 96, 16, 64, 1, 2, 0)])
def test_bfloat16_convolutions_through_tilec_nn_with_gradients(shape):
    """Implicit-GEMM convolutions in bfloat16 through tilec.nn.functional (the direct variant: A read
    in place, as channel pairs on AVX512-BF16 CPUs) against a float32 reference, with their gradients."""
    torch = pytest.importorskip("torch")
    import tilec.nn.functional as F

    n, c, hw, co, k, stride, pad = shape
    torch.manual_seed(c)
    x = torch.randn(n, c, hw, hw, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(co, c, k, k, dtype=torch.bfloat16, requires_grad=True)
    y = F.conv2d(x, w, stride=stride, padding=pad)
    x32, w32 = (t.detach().float().requires_grad_() for t in (x, w))
    ref = torch.nn.functional.conv2d(x32, w32, stride=stride, padding=pad)
    assert y.dtype == torch.bfloat16 and rel_error(y.detach().float(), ref.detach()) < 1e-2
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(y, (x, w), grad.bfloat16())
    want = torch.autograd.grad(ref, (x32, w32), grad.bfloat16().float())
    for g, e in zip(got, want):
        assert rel_error(g.float(), e) < 2e-2


def _has_pair_dot() -> bool:
    from tilec.pipeline import resolve_target
    from tilec.target import has_pair_dot

    cpu = resolve_target("llvm").host
    return cpu is not None and has_pair_dot(cpu)


def _conv_nhwc(stride: int, pad: int) -> str:
    """A convolution on torch's NCHW/OIHW tensors through NHWC/HWIO copies (as `tilec bench` writes it)."""
    oh = f"(H + {2 * pad} - KH) / {stride} + 1"
    ow = f"(W + {2 * pad} - KW) / {stride} + 1"
    return (f"function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {{\n"
            f"    I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]);\n"
            f"    K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]);\n"
            f"    Y[n, x, y, co: N, {oh}, {ow}, CO] = +(I[n, {stride}*x + i - {pad}, {stride}*y + j - {pad}, c] * K[i, j, c, co]);\n"
            f"    O[n, co, x, y: N, CO, {oh}, {ow}] = =(Y[n, x, y, co]);\n}}")


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(w.astype(np.float32)),
                                      stride=stride, padding=pad).numpy()


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 40), hw=st.integers(3, 17), co=st.sampled_from([16, 32, 48, 70]),
       k=st.sampled_from([1, 2, 3]), stride=st.integers(1, 2), pad=st.integers(0, 1), seed=st.integers(0, 2**31))
def test_bfloat16_convolutions_match_float32_with_and_without_pairs(n, c, hw, co, k, stride, pad, seed):
    """The implicit GEMM's direct variant reads A (the NHWC input, zero-bordered) in place: with an
    even channel count on an AVX512-BF16 CPU as bfloat16 pairs (vdpbf16ps on a 32-bit broadcast of
    two neighbouring channels), otherwise from an interleaved copy or widened to float32; every
    variant agrees with a float32 reference within bfloat16's tolerance, on odd sizes, strides and
    borders."""
    if hw + 2 * pad < k:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, hw, hw)).astype(BF16)
    w = rng.standard_normal((co, c, k, k)).astype(BF16)
    f = tilec.compile(_conv_nhwc(stride, pad))
    got = f(x, w)
    assert got.dtype == BF16
    assert rel_error(got, _conv_reference(x, w, stride, pad)) < 1e-2
    shapes, dtypes = {"X": x.shape, "F": w.shape}, {"X": "bfloat16", "F": "bfloat16"}
    if _has_pair_dot() and c % 2 == 0 and "implicit_gemm[direct]" in f.explain(shapes, dtypes, stage="templates"):
        assert "dot2_bf16" in f.explain(shapes, dtypes, stage="loop")


@pytest.mark.parametrize("c", [64, 63])
def test_bfloat16_one_by_one_strided_convolution_on_nchw(c, without_tiles):
    """A 1x1 filter read in place, F[co, c, 0, 0]: its channel pairs are adjacent although the index
    that steps is not the last (the dimensions after it have size 1). With an odd channel count the
    direct variant could not take pairs, so on an AVX512-BF16 CPU the packed one (which pads the last
    pair) runs instead."""
    rng = np.random.default_rng(c)
    x, w = rng.standard_normal((2, c, 28, 28)).astype(BF16), rng.standard_normal((96, c, 1, 1)).astype(BF16)
    src = ("function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {\n"
           "    O[n, co, x, y: N, CO, (H - KH) / 2 + 1, (W - KW) / 2 + 1] = +(X[n, c, 2*x, 2*y] * F[co, c, 0, 0]);\n}")
    f = tilec.compile(src)
    assert rel_error(f(x, w), _conv_reference(x, w, 2, 0)) < 1e-2
    shapes, dtypes = {"X": x.shape, "F": w.shape}, {"X": "bfloat16", "F": "bfloat16"}
    variant = "direct" if c % 2 == 0 or not _has_pair_dot() else "packed"
    assert f"implicit_gemm[{variant}]" in f.explain(shapes, dtypes, stage="templates")
    if variant == "direct":  # its panels of B (14 columns) are partial: packed as vectors, through a select
        loops = f.explain(shapes, dtypes, stage="loop")
        assert "select(" in loops and "= 0.0:bfloat16" not in loops
    if _has_pair_dot():
        assert "vdpbf16ps" in f.explain(shapes, dtypes, stage="asm")


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 2), pairs=st.integers(1, 20), h=st.integers(1, 9), w=st.integers(1, 70),
       co=st.sampled_from([8, 24, 40]), seed=st.integers(0, 2**31))
@example(n=1, pairs=13, h=2, w=65, co=40, seed=0)  # 33 columns in a 48-wide tile: a masked store keeping one lane
def test_bfloat16_pairs_pack_a_partial_panel_of_columns(n, pairs, h, w, co, seed):
    """An NCHW 1x1 strided convolution's columns are one output row's pixels (W / 2 of them), so
    every panel of B may be partial: its pairs are packed as vectors whose columns past the row
    read the row's last column and store 0. Any width, the panel's width and beyond, gives the
    float32 reference within bfloat16's tolerance."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2 * pairs, 2 * h, w)).astype(BF16)
    f = rng.standard_normal((co, 2 * pairs, 1, 1)).astype(BF16)
    src = ("function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {\n"
           "    O[n, co, x, y: N, CO, (H - KH) / 2 + 1, (W - KW) / 2 + 1] = +(X[n, c, 2*x, 2*y] * F[co, c, 0, 0]);\n}")
    got = tilec.compile(src)(x, f)
    assert got.shape == (n, co, h, (w + 1) // 2)
    assert rel_error(got, _conv_reference(x, f, 2, 0)) < 1e-2


@settings(max_examples=8, deadline=None)
@given(dims=st.lists(st.integers(1, 40), min_size=4, max_size=4), seed=st.integers(0, 2**31))
def test_bfloat16_layout_permutations_are_exact(dims, seed):
    """NCHW <-> NHWC copies of bfloat16 (transposing tiles in registers: float32 lanes, narrowed to
    store) move every value bit for bit, infinities and signed zeros included."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(dims))
    x = rng.standard_normal(size) * np.exp2(rng.integers(-126, 120, size))
    x[rng.integers(0, size, 4)] = [np.inf, -np.inf, 0.0, -0.0]
    x = x.reshape(dims).astype(BF16)
    to_nhwc = tilec.compile("O[n, h, w, c: N, H, W, C] = =(X[n, c, h, w])")
    to_nchw = tilec.compile("O[n, c, h, w: N, C, H, W] = =(X[n, h, w, c])")
    assert np.array_equal(bits(to_nhwc(x)), bits(x.transpose(0, 2, 3, 1)))
    assert np.array_equal(bits(to_nchw(x)), bits(x.transpose(0, 3, 1, 2)))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 4), c=st.sampled_from([1, 3, 16, 64]), hw=st.integers(4, 20), co=st.sampled_from([16, 64]),
       stride=st.integers(1, 2), pad=st.integers(0, 1), seed=st.integers(0, 2**31))
@example(n=2, c=16, hw=20, co=64, stride=2, pad=1, seed=0)  # the interleaved copy on AVX512-BF16 CPUs
def test_bfloat16_weight_gradients_interleave_their_input(n, c, hw, co, stride, pad, seed):
    """A convolution's weight gradient, DK[i, j, c, co] = sum over n, x, y of DY[n, x, y, co] *
    I[n, s x + i - p, s y + j - p, c]: its A (the input) holds a reduction step's two values s
    channels-rows apart, so on AVX512-BF16 CPUs an interleaved, zero-bordered copy puts them side by
    side for the pair dot product. Against a float32 reference (numpy), odd sizes, strides, borders."""
    o = (hw + 2 * pad - 3) // stride + 1
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((n, o, o, co)).astype(BF16)
    x = rng.standard_normal((n, hw, hw, c)).astype(BF16)
    f = tilec.compile(f"function (DY[N, OH, OW, CO], I[N, H, W, C]) -> (DK) {{\n"
                      f"    DK[i, j, c, co: 3, 3, C, CO] = +(DY[n, x, y, co] * I[n, {stride}*x + i - {pad}, {stride}*y + j - {pad}, c]);\n}}")
    got = f(dy, x)
    xp = np.pad(x.astype(np.float32), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ref = np.zeros((3, 3, c, co), np.float32)
    for i in range(3):
        for j in range(3):
            window = xp[:, i:i + stride * (o - 1) + 1:stride, j:j + stride * (o - 1) + 1:stride, :]
            ref[i, j] = np.einsum("nxyc,nxyo->co", window, dy.astype(np.float32))
    assert got.dtype == BF16 and rel_error(got, ref) < 1e-2
    shapes, dtypes = {"DY": dy.shape, "I": x.shape}, {"DY": "bfloat16", "I": "bfloat16"}
    from tilec.schedule.cpu.implicit_gemm.pairs import INTERLEAVE_MIN_REUSE

    # a reduction variable (n, x, y) of even extent, and products enough per element of the bordered
    # input (its size bounded by n (hw + 2 pad + 2)^2 c) for the interleaved copy
    pairable = (n % 2 == 0 or o % 2 == 0) and 9 * co * o * o >= INTERLEAVE_MIN_REUSE * (hw + 2 * pad + 2) ** 2
    if _has_pair_dot() and pairable and "implicit_gemm[direct]" in f.explain(shapes, dtypes, stage="templates"):
        assert "dot2_bf16" in f.explain(shapes, dtypes, stage="loop")


@settings(max_examples=12, deadline=None)
@given(k=st.integers(1, 13), m=st.integers(1, 40), n=st.sampled_from([32, 48, 64]), seed=st.integers(0, 2**31))
@example(k=8, m=37, n=64, seed=0)
def test_bfloat16_pairs_of_a_lone_reduction_dimension_are_halved(k, m, n, seed):
    """C[i, j] = sum over b of A[b, i] * B[b, j] (a linear layer's weight gradient) in the direct
    variant: A's pairs along b lie a row apart, so on AVX512-BF16 CPUs a copy of A's own size with
    b halved holds them side by side (A[2 q + e, i] at [q, i, e]) where b's extent is even (one
    column of A holds them side by side as it lies; an odd extent has no pairs). Against a float32
    reference."""
    from tilec.pipeline import resolve_target
    from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule

    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((k, m)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    nr = n // 16 * 16 if n % 64 else 64
    target = resolve_target("llvm")  # 6 rows, fewer where the host's registers do not hold them
    mr = min(6, most_rows(nr, target.lanes("float32"), target))
    direct = TemplateSchedule((TemplateConfig(0, "implicit_gemm", (("mr", mr), ("nr", nr), ("pack_a", False))),))
    f = tilec.compile("C[i, j: M, N] = +(A[b, i] * B[b, j])").with_schedule(direct)
    got = f(a, b)
    assert got.dtype == BF16 and rel_error(got, a.astype(np.float32).T @ b.astype(np.float32)) < 1e-2
    loop = f.explain({"A": a.shape, "B": b.shape}, {"A": "bfloat16", "B": "bfloat16"}, stage="loop")
    if _has_pair_dot() and n * k * m >= 32 * k * m:  # enough products per element of A for a copy
        assert ("dot2_bf16" in loop) == (k % 2 == 0)
        assert (f"C.Apair: bfloat16[{k // 2}, {m}, 2]" in loop) == (k % 2 == 0 and m > 1)


@pytest.mark.parametrize("k, m, n", [(32, 4, 256), (64, 48, 320), (30, 8, 160)])
def test_untuned_bfloat16_weight_gradients_take_the_direct_variants_pairs(k, m, n, pairs_target):
    """A linear layer's weight gradient C[i, j] = sum over b of A[b, i] * B[b, j], untuned, on a CPU
    with the pair dot product: the direct variant takes b's pairs from a halved copy of A, so the
    heuristic no longer keeps the packed variant for its pairs (which ran 1.4-5x slower on Zen 4 at
    these shapes). Against a float32 reference on this CPU."""
    rng = np.random.default_rng(k * m * n)
    a, b = rng.standard_normal((k, m)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    source = "C[i, j: M, N] = +(A[b, i] * B[b, j])"
    got = tilec.compile(source)(a, b)
    assert got.dtype == BF16 and rel_error(got, a.astype(np.float32).T @ b.astype(np.float32)) < 1e-2
    f = tilec.compile(source, target=pairs_target)
    shapes, dtypes = {"A": a.shape, "B": b.shape}, {"A": "bfloat16", "B": "bfloat16"}
    assert "implicit_gemm[direct]" in f.explain(shapes, dtypes, stage="templates")
    assert ("dot2_bf16" in f.explain(shapes, dtypes, stage="loop")) == (k % 2 == 0)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 6), c=st.sampled_from([1, 3, 16, 64]), hw=st.integers(4, 19), co=st.sampled_from([16, 64]),
       stride=st.integers(1, 2), pad=st.integers(0, 1), seed=st.integers(0, 2**31))
@example(n=4, c=64, hw=16, co=64, stride=2, pad=1, seed=0)
@example(n=2, c=3, hw=19, co=16, stride=1, pad=1, seed=1)
def test_bfloat16_nchw_weight_gradients_pair_their_images(n, c, hw, co, stride, pad, seed):
    """The weight gradient of conv2d (NCHW, the program tilec.ops runs): on AVX512-BF16 CPUs with an
    even number of images, the input's pairs are images 2 q and 2 q + 1, gathered straight from NCHW
    into a zero-bordered [N / 2, H + borders, W + borders, C, 2] copy as transposing tiles (no padded
    NHWC copy before it). Against torch's float32 convolution_backward, odd sizes included."""
    torch = pytest.importorskip("torch")
    from tilec.ops import sources
    from tilec.ops.kernels import grad_fn

    gen = torch.Generator().manual_seed(seed)
    o = (hw + 2 * pad - 3) // stride + 1
    x, w = torch.randn(n, c, hw, hw, generator=gen), torch.randn(co, c, 3, 3, generator=gen)
    bias, dy = torch.randn(co, generator=gen), torch.randn(n, co, o, o, generator=gen)
    x, w, bias, dy = (t.to(torch.bfloat16) for t in (x, w, bias, dy))
    fn = grad_fn(sources.conv2d_source((stride, stride), (pad, pad), (1, 1), True, 1), ("F",))
    df = fn(X=x, F=w, Bias=bias, DO=dy)  # one gradient: the array itself
    ref = torch.ops.aten.convolution_backward(dy.float(), x.float(), w.float(), [co], [stride, stride], [pad, pad],
                                              [1, 1], False, [0, 0], 1, [False, True, False])[1]
    assert df.dtype == BF16 and rel_error(df, ref.numpy()) < 1e-2
    shapes = dict(zip(fn.inputs, (x.shape, w.shape, bias.shape, dy.shape)))
    loop = fn.explain({k: tuple(v) for k, v in shapes.items()}, {k: "bfloat16" for k in fn.inputs}, stage="loop")
    from tilec.schedule.cpu.implicit_gemm.pairs import INTERLEAVE_MIN_REUSE

    pairable = n % 2 == 0 and 9 * co * o * o >= INTERLEAVE_MIN_REUSE * (hw + 2 * pad + 2) ** 2
    if _has_pair_dot() and pairable and "implicit_gemm[direct]" in fn.explain(
            {k: tuple(v) for k, v in shapes.items()}, {k: "bfloat16" for k in fn.inputs}, stage="templates"):
        assert f".Apair: bfloat16[{n // 2}, " in loop and ".Apad" not in loop


@settings(max_examples=12, deadline=None)
@given(stride=st.integers(1, 3), phases=st.integers(1, 3), n=st.integers(1, 9), shift=st.integers(-2, 2),
       agg=st.sampled_from(["+", ">", "<"]), seed=st.integers(0, 2**31))
@example(stride=1, phases=1, n=2, shift=0, agg="+", seed=0)  # a lone phase listed after u: still one tuple a cell
@example(stride=1, phases=2, n=1, shift=0, agg="+", seed=0)  # a lone u: phases never meet
@example(stride=2, phases=3, n=1, shift=0, agg="+", seed=0)  # a lone u of a larger coefficient than z's span
def test_bfloat16_scatters_round_once_whether_or_not_cells_meet(stride, phases, n, shift, agg, seed):
    """O[s u + z + shift] = agg(P[z, u]): with phases <= stride (or one u) no two tuples meet in a cell (the
    lowering then writes each once, straight into the bfloat16 output), with more they add up in a
    float32 workspace. Either way bit for bit the interpreter's result, signed zeros included, and
    within bfloat16's rounding of a float32 reference."""
    size = stride * n + 2
    src = f"O[{stride} * u + z + {shift}: {size}] = {agg}(P[z, u])" if shift >= 0 else \
        f"O[{stride} * u + z - {-shift}: {size}] = {agg}(P[z, u])"
    rng = np.random.default_rng(seed)
    p = rng.standard_normal((phases, n)).astype(BF16)
    p[0, 0] = -0.0
    f = tilec.compile(src)
    got, want = f(p), tilec.compile(src, target="interp")(p)
    assert got.dtype == want.dtype == BF16
    np.testing.assert_array_equal(bits(got), bits(want))
    ref = np.zeros(size, np.float32) if agg == "+" else np.full(size, 0.0, np.float32)
    hits = np.zeros(size, int)
    for z in range(phases):
        for u in range(n):
            o = stride * u + z + shift
            if 0 <= o < size:
                x = np.float32(p[z, u])
                ref[o] = ref[o] + x if agg == "+" else (x if not hits[o] else (max if agg == ">" else min)(ref[o], x))
                hits[o] += 1
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    workspace = "O.acc" in f.explain({"P": p.shape}, {"P": "bfloat16"}, stage="loop")
    if agg == "+":  # '>' and '<' keep a workspace beside their written flags where they scatter
        # (tuples meet in a cell with phases > stride and n > 1, unless the shift moves the cells where
        # they meet out of the output: bounds inference drops those tuples)
        assert workspace == bool((hits > 1).any())


def test_bfloat16_pairs_pack_the_filter_from_its_channels_last_copy(without_tiles):
    """Packing B as pairs reads it along its column (the output channels): from the OIHW filter that
    was a gather per element, so where pairs are used the HWIO copy K is made on its own (a
    transposing permutation) and packed from; without pairs it is read through (never made)."""
    src = _conv_nhwc(1, 1)
    shapes = {"X": (2, 64, 12, 12), "F": (64, 64, 3, 3)}
    dtypes = {"X": "bfloat16", "F": "bfloat16"}
    loop = tilec.explain(src, shapes, dtypes, stage="loop")
    assert (" K: " in loop.splitlines()[0]) == _has_pair_dot()
    assert (("dot2_bf16" in loop) == _has_pair_dot())
    x = np.random.default_rng(3).standard_normal(shapes["X"]).astype(BF16)
    f = np.random.default_rng(4).standard_normal(shapes["F"]).astype(BF16)
    got = tilec.compile(src)(x, f).astype(np.float32)
    want = tilec.compile(src)(x.astype(np.float32), f.astype(np.float32))
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


def test_float16_operands_are_converted_once_not_at_every_use():
    """Without a float16 multiply (no AVX512-FP16 on the CPUs tilec meets), a float16 GEMM packs A
    into float32 panels instead of converting it at every use (1024^3 on Zen 5: 9.1 -> 4.6 ms), and
    a float16 convolution's zero-bordered input copy is float32 (64->64 3x3 on 56x56 maps: 7.6 ->
    4.2 ms); float32 keeps A read in place. Results within a float32 computation's rounding."""
    from tilec.bench.ops import get_op

    rng = np.random.default_rng(8)
    for dtype, packed in ((np.float16, True), (np.float32, False)):
        a, b = rng.standard_normal((512, 512)).astype(dtype), rng.standard_normal((512, 512)).astype(dtype)
        dt = np.dtype(dtype).name
        templates = tilec.explain(GEMM, {"A": a.shape, "B": b.shape}, {"A": dt, "B": dt}, stage="templates")
        assert f"pack_a={packed}" in templates, templates
        got = tilec.compile(GEMM)(a, b)
        assert rel_error(got, a.astype(np.float32) @ b.astype(np.float32)) < 5e-4
    conv = get_op("conv2d").source(dict(N=2, C=16, H=12, W=12, CO=32, KH=3, KW=3, stride=1, pad=1))
    x, f = rng.standard_normal((2, 16, 12, 12)).astype(np.float16), rng.standard_normal((32, 16, 3, 3)).astype(np.float16)
    loop = tilec.explain(conv, {"X": x.shape, "F": f.shape}, {"X": "float16", "F": "float16"}, stage="loop")
    assert "Apad: float32[" in loop.splitlines()[0], loop.splitlines()[0]
    got = tilec.compile(conv)(x, f)
    want = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(f.astype(np.float32)),
                                      padding=1).numpy()
    assert got.dtype == np.float16 and rel_error(got, want) < 1e-3


def test_bfloat16_pairs_read_in_place_rather_than_packed():
    """Where the direct variant multiplies bfloat16 pairs it is the default, however many column
    panels (the packed one ran at 40-80% of its speed on Zen 5: GEMM 512 x 1024 x 4096, 3x3
    convolutions of 512 columns); float32 keeps the packed variant there where B's panel over all
    of K exceeds half of L2 (the host's caches: 1 MiB on Zen 4 and 5). On an AVX512-BF16 target
    without AMX whatever the host; the results against float32 on the host's path."""
    shapes = {"A": (512, 4096), "B": (4096, 1024)}
    for dtype in ("bfloat16", "float32"):
        templates = tilec.explain(GEMM, shapes, {"A": dtype, "B": dtype}, stage="templates", target="llvm -mcpu=znver4")
        nr = int(templates.split(" nr=")[1].split()[0])
        packed = dtype == "float32" and 2 * 4096 * nr * 4 > resolve_target("llvm -mcpu=znver4").host.l2_bytes
        assert f"pack_a={packed}" in templates, templates
    from tilec.ops.sources import conv_source

    conv = conv_source((1, 1), ((1, 1), (1, 1)), (1, 1), True, 1, False, False)
    shapes = {"X": (2, 512, 7, 7), "F": (512, 512, 3, 3), "Bias": (512,)}
    templates = tilec.explain(conv, shapes, {k: "bfloat16" for k in shapes}, stage="templates", target="llvm -mcpu=znver4")
    assert "implicit_gemm[direct]" in templates and "pack_a=False" in templates, templates
    rng = np.random.default_rng(9)
    x, f, bias = (rng.standard_normal(shapes[k]).astype(BF16) for k in ("X", "F", "Bias"))
    got = tilec.compile(conv)(x, f, bias).astype(np.float32)
    want = torch.nn.functional.conv2d(*(torch.from_numpy(t.astype(np.float32)) for t in (x, f, bias)), padding=1).numpy()
    assert got.shape == want.shape and rel_error(got, want) < 1e-2
