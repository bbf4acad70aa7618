"""Layout copies: the permutation nest (tilec/schedule/cpu/permute.py) and copies folded into the GEMM
template's packing (tilec/schedule/cpu/copy_fold.py), against numpy and torch."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tilec
from reference import conv2d_grad_shapes, torch_conv2d_grads
from tilec.bench.ops import conv2d_source
from tilec.ir.bounds import bind
from tilec.schedule.cpu import permute
from tilec.schedule.params import LoweringParams
from tilec.pipeline import resolve_target

MAX_CELLS = LoweringParams().permute_max_cells

rng = np.random.default_rng(11)
TARGET = resolve_target("llvm")


def kernel_params(src: str, shapes: dict[str, tuple[int, ...]]) -> str:
    """The loop IR's parameter line: which tensors the kernel materialises."""
    return tilec.explain(src, shapes, stage="loop").splitlines()[0]


@pytest.mark.parametrize("shape,perm", [((3, 40, 5), (2, 0, 1)), ((2, 3, 17, 33), (0, 3, 1, 2)),
                                        ((33, 7, 3, 3), (2, 3, 1, 0)), ((5, 16, 9, 2), (1, 3, 0, 2)),
                                        ((300, 130), (1, 0)), ((2, 24, 3, 40), (0, 2, 3, 1)),
                                        ((2, 40, 3, 24), (0, 3, 1, 2))])
@pytest.mark.parametrize("agg,dtype", [("=", "float32"), ("+", "float64"), ("=", "int32")])
def test_permutations_match_numpy(shape, perm, agg, dtype):
    names = "abcd"[:len(shape)]
    out = ", ".join(names[p] for p in perm)
    sizes = ", ".join(f"N{p}" for p in perm)
    src = (f"function (X[{', '.join(f'N{k}' for k in range(len(shape)))}]) -> (Y) {{\n"
           f"    Y[{out}: {sizes}] = {agg}(X[{', '.join(names)}]);\n}}")
    bp = bind(tilec.parse(src), {"X": shape}, {"X": dtype})
    plan, _ = permute.coalesce(permute.PermutePlan(tuple(names[p] for p in perm), tuple(names), tuple(zip(names, shape))))
    line = 64 // np.dtype(dtype).itemsize
    _, split = permute.loop_order(plan, line)
    ragged = split is not None and dict(plan.extents)[split] % line != 0
    # transposed in registers at any size; else ragged line blocks keep the default nest
    assert (permute.match(bp.statements[0], bp, MAX_CELLS) is None) == (ragged and not permute.transposing(plan, line))
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    np.testing.assert_array_equal(tilec.compile(src)(x), x.transpose(perm))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=2, max_size=5).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.permutations(range(len(shape))))),
    st.sampled_from(["float32", "float64", "int32"]))
def test_random_permutations_with_coalesced_runs_match_numpy(shape_perm, dtype):
    # runs of axes adjacent in both layouts are merged (their digits recombine in the vector code)
    shape, perm = shape_perm
    names = "abcde"[:len(shape)]
    src = (f"function (X[{', '.join(f'N{k}' for k in range(len(shape)))}]) -> (Y) {{\n"
           f"    Y[{', '.join(names[p] for p in perm)}: {', '.join(f'N{p}' for p in perm)}] = =(X[{', '.join(names)}]);\n}}")
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    np.testing.assert_array_equal(tilec.compile(src)(x), x.transpose(perm))


def test_the_3x3_weight_gradient_permutation_transposes_in_tiles():
    # OIHW <- HWIO: (i, j) adjacent on both sides merge into one 9-wide axis, long enough for tiles
    src = "function (DK[KH, KW, C, CO]) -> (DF) { DF[co, c, i, j: CO, C, KH, KW] = +(DK[i, j, c, co]); }"
    bp = bind(tilec.parse(src), {"DK": (3, 3, 512, 512)}, {"DK": "float32"})
    plan = permute.match(bp.statements[0], bp, MAX_CELLS)
    assert plan is not None  # 2.4M cells: beyond the line order's limit, yet tiles
    merged, _ = permute.coalesce(plan)
    assert merged.out_vars == ("co", "c", "i.j") and dict(merged.extents)["i.j"] == 9
    assert permute.transposing(merged, 16)
    x = rng.standard_normal((3, 3, 40, 24)).astype(np.float32)
    np.testing.assert_array_equal(tilec.compile(src)(x), x.transpose(3, 2, 0, 1))


def test_a_copy_that_keeps_the_innermost_axis_is_left_to_the_default_nest():
    src = "function (X[A, B, C]) -> (Y) { Y[b, a, c: B, A, C] = =(X[a, b, c]); }"
    bp = bind(tilec.parse(src), {"X": (3, 4, 5)}, {"X": "float32"})
    assert permute.match(bp.statements[0], bp, MAX_CELLS) is None


def test_loop_order_reads_a_source_line_innermost():
    plan = permute.PermutePlan(("co", "c", "i", "j"), ("i", "j", "c", "co"),
                               (("co", 40), ("c", 8), ("i", 3), ("j", 3)))
    loops, split = permute.loop_order(plan, 16)
    assert split == "co" and [v for v, _ in loops] == ["co.o", "c", "i", "j", "co.i"]
    assert dict(loops)["co.o"] == 3
    plan = permute.PermutePlan(("i", "j", "c", "co"), ("co", "c", "i", "j"),
                               (("i", 3), ("j", 3), ("c", 8), ("co", 40)))
    loops, split = permute.loop_order(plan, 16)
    assert split is None and [v for v, _ in loops] == ["c", "co", "i", "j"]


CASES = [dict(N=1, C=20, H=9, W=11, CO=70, KH=3, KW=3, stride=1, pad=1),
         dict(N=3, C=13, H=10, W=7, CO=40, KH=3, KW=2, stride=2, pad=1),
         dict(N=2, C=33, H=8, W=8, CO=17, KH=3, KW=3, stride=1, pad=0),
         dict(N=2, C=24, H=12, W=9, CO=150, KH=5, KW=3, stride=1, pad=2)]


@pytest.mark.parametrize("shape", CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_conv2d_forward_and_gradients_with_folded_copies_match_torch(shape):
    x, f, dy = (rng.standard_normal(dims).astype(np.float32) for dims in conv2d_grad_shapes(shape).values())
    y_ref, dx_ref, df_ref = torch_conv2d_grads(x, f, dy, shape["stride"], shape["pad"])
    src = conv2d_source(shape)
    np.testing.assert_allclose(tilec.compile(src)(x, f), y_ref, rtol=1e-4, atol=1e-3)
    grad = tilec.grad(src, wrt=["X", "F"])
    dx, df = grad(x, f, dy)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(df, df_ref, rtol=1e-4, atol=1e-3)


def test_conv2d_gradient_never_materialises_the_input_layout_copies():
    shape = CASES[0]
    shapes = {"X": (1, 20, 9, 11), "F": (70, 20, 3, 3), "DO": (1, 70, 9, 11)}
    params = kernel_params(tilec.grad(conv2d_source(shape), wrt=["X", "F"]).source, shapes)
    for copy in ("I", "K", "DY_0"):  # read through by the products' packing instead
        assert f" {copy}: " not in params
    # the input gradient's tiles are stored straight into DX through the copy back to NCHW (the
    # direct variant: DI_1's packed B, no DI_1); the weight gradient's product stays
    assert " DI_1: " not in params and " DI_1.Bp: " in params and " DK_2: " in params


def test_a_copy_read_outside_a_gemm_is_materialised():
    src = """function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O, S) {
        I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]);
        K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]);
        O[n, x, y, co: N, H - KH + 1, W - KW + 1, CO] = +(I[n, x + i, y + j, c] * K[i, j, c, co]);
        S = I * 2;
    }"""
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    f = rng.standard_normal((40, 16, 3, 3)).astype(np.float32)
    params = kernel_params(src, {"X": x.shape, "F": f.shape})
    assert " I: " in params and " K: " not in params
    o, s = tilec.compile(src)(x, f)
    i_ = x.transpose(0, 2, 3, 1)
    ref = sum(np.einsum("nxyc,cd->nxyd", i_[:, a:a + 7, b:b + 7, :], f[:, :, a, b].T)
              for a, b in itertools.product(range(3), range(3)))
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(s, i_ * 2)


SUM_AND_PRODUCT = """function (X[N, C, H, W], A[N, H, W, K]) -> (S, G) {
    T[n, h, w, c: N, H, W, C] = +(X[n, c, h, w]);
    S[c: C] = +(T[n, h, w, c]);
    G[k, c: K, C] = +(A[n, h, w, k] * T[n, h, w, c]);
}"""


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 4), c=st.integers(1, 40), h=st.integers(1, 9), w=st.integers(1, 9), k=st.sampled_from([16, 64]),
       dtype=st.sampled_from(["float32", "bfloat16"]))
@example(n=2, c=40, h=9, w=9, k=64, dtype="float32")
@example(n=3, c=32, h=3, w=2, k=64, dtype="bfloat16")  # pairs along w: T stays, and so does its sum
def test_a_sum_of_a_copy_a_gemm_packs_reads_the_copys_source(n, c, h, w, k, dtype):
    """A layout copy read by a GEMM's packing and by a plain sum (a convolution's bias gradient
    beside its weight gradient): the sum reads the copy's source, so the copy is never made. The
    same values as numpy's, and a channel of negative zeros sums to +0 as through the copy."""
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    a = rng.standard_normal((n, h, w, k)).astype(np.float32)
    x[:, 0] = -0.0
    if dtype == "bfloat16":
        import ml_dtypes
        x, a = x.astype(ml_dtypes.bfloat16), a.astype(ml_dtypes.bfloat16)
    f = tilec.compile(SUM_AND_PRODUCT)
    s, g = f(x, a)
    x32, a32 = x.astype(np.float32), a.astype(np.float32)
    tol = 1e-2 if dtype == "bfloat16" else 1e-5
    np.testing.assert_allclose(s.astype(np.float32), x32.sum(axis=(0, 2, 3)), rtol=tol, atol=tol * n * h * w)
    np.testing.assert_allclose(g.astype(np.float32), np.einsum("nhwk,nchw->kc", a32, x32), rtol=tol,
                               atol=tol * n * h * w)
    assert not np.signbit(s[0].astype(np.float32))
    shapes, dtypes = {"X": x.shape, "A": a.shape}, {"X": dtype, "A": dtype}
    templates = f.explain(shapes, dtypes, stage="templates")
    folded = "folded_copy    # T" in templates  # (not where the GEMM cannot pack T through its copy)
    assert ("S[c: C] = +(X[n, c, h, w])" in templates) == folded
    assert (" T: " not in f.explain(shapes, dtypes, stage="loop").splitlines()[0]) == folded
    if (n, c, h, w, k, dtype) == (2, 40, 9, 9, 64, "float32"):
        assert folded


def test_the_bias_gradient_sums_the_output_gradient_beside_the_weight_gradient(without_tiles):
    """conv2d's bias and weight gradients (bfloat16, the product on pairs where the CPU has them):
    the NCHW -> NHWC copy of the output gradient is never made; the bias sums DO itself and the
    weight gradient's packing reads DO as vectors along its pixels. Against torch."""
    torch = pytest.importorskip("torch")
    from tilec.ops import sources
    from tilec.ops.kernels import grad_fn

    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 3, 12, 12, generator=gen), torch.randn(64, 3, 3, 3, generator=gen)
    bias, dy = torch.randn(64, generator=gen), torch.randn(4, 64, 12, 12, generator=gen)
    x, w, bias, dy = (t.to(torch.bfloat16) for t in (x, w, bias, dy))
    fn = grad_fn(sources.conv2d_source((1, 1), (1, 1), (1, 1), True, 1), ("F", "Bias"))
    df, dbias = fn(X=x, F=w, Bias=bias, DO=dy)
    ref = torch.ops.aten.convolution_backward(dy.float(), x.float(), w.float(), [64], [1, 1], [1, 1], [1, 1], False,
                                              [0, 0], 1, [False, True, True])
    for got, want in ((df, ref[1]), (dbias, ref[2])):
        got = np.asarray(got).astype(np.float32)
        assert np.abs(got - want.numpy()).max() <= 1e-2 * np.abs(want.numpy()).max()
    shapes = {"X": (4, 3, 12, 12), "F": (64, 3, 3, 3), "Bias": (64,), "DO": (4, 64, 12, 12)}
    dtypes = {k: "bfloat16" for k in shapes}
    templates = fn.explain(shapes, dtypes, stage="templates")
    assert "DBias[x0: CO] = +(DO[" in templates
    assert "folded_copy    # DYb_0" in templates
    loop = fn.explain(shapes, dtypes, stage="loop")
    assert " DYb_0: " not in loop.splitlines()[0]
    from tilec.schedule.cpu.implicit_gemm.packed import bf16_dot

    if bf16_dot(TARGET):  # the pairs' rows (column, pair element) read from DO as vectors along its pixels
        assert "DK_4.pr.i" in loop and "dot2_bf16" in loop


def test_large_permutations_transpose_in_tiles_and_large_copies_still_fold():
    """Permutations whose two innermost dimensions are long run as transposing tiles at any size;
    above 2^20 cells the line-order nest does not apply (measured slower on the 56^2 conv
    gradient's NHWC -> NCHW of dX); folding a copy into the packing applies at any size."""
    shape = dict(N=8, C=64, H=56, W=56, CO=16, KH=3, KW=3, stride=1, pad=1)  # X: 1.6M cells
    shapes = {"X": (8, 64, 56, 56), "F": (16, 64, 3, 3)}
    src = conv2d_source(shape)
    bp = bind(tilec.parse(src), shapes, {"X": "float32", "F": "float32"})
    assert math.prod(bp.shapes["X"]) > MAX_CELLS
    even = "function (X[N, C, H, W]) -> (Y) { Y[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]); }"
    short = "function (X[N, C, H, W]) -> (Y) { Y[n, w, h, c: N, W, H, C] = =(X[n, c, h, w]); }"
    for text, dims, applies in ((even, (2, 64, 64, 64), True), (even, (8, 64, 64, 64), True),  # 0.5M, 2.1M cells
                                (short, (2, 64, 1024, 4), True), (short, (8, 64, 1024, 4), False)):
        big = bind(tilec.parse(text), {"X": dims}, {"X": "float32"})
        assert (permute.match(big.statements[0], big, MAX_CELLS) is not None) == applies, (text, dims)
        x = rng.standard_normal(dims).astype(np.float32)
        np.testing.assert_array_equal(tilec.compile(text)(x), x.transpose((0, 2, 3, 1) if text == even else (0, 3, 2, 1)))
    params = kernel_params(src, shapes)
    assert " I: " not in params and " K: " not in params  # both read through by the GEMM's packing
    x = rng.standard_normal(shapes["X"]).astype(np.float32)
    f = rng.standard_normal(shapes["F"]).astype(np.float32)
    y_ref, _, _ = torch_conv2d_grads(x, f, np.zeros((8, 16, 56, 56), np.float32), 1, 1)
    np.testing.assert_allclose(tilec.compile(src)(x, f), y_ref, rtol=1e-4, atol=1e-3)


def test_a_large_zero_padded_operand_is_filled_in_parallel():
    """A's zero-padded copy (direct_gemm, A an input read in place) fills with the cores when big."""
    src = """function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {
        O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]);
    }"""
    i_ = rng.standard_normal((4, 20, 20, 32)).astype(np.float32)  # 4 x 22 x 22 x 32 padded: 62k cells
    k = rng.standard_normal((3, 3, 32, 64)).astype(np.float32)
    loops = tilec.explain(src, {"I": i_.shape, "K": k.shape}, stage="loop")
    assert "for parallel O.Apad.p0 in [0, 4)" in loops
    padded = np.pad(i_.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = sum(np.einsum("nxyc,cd->nxyd", padded[:, a:a + 20, b:b + 20, :], k[a, b]) for a in range(3) for b in range(3))
    np.testing.assert_allclose(tilec.compile(src)(i_, k), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n,c,hw,co,stride", [(3, 6, (9, 7), 20, 1), (2, 16, (13, 11), 32, 2), (2, 32, (5, 5), 64, 1)])
def test_a_direct_convolution_stores_its_tiles_through_the_copy_back_to_nchw(dtype, n, c, hw, co, stride, without_tiles):
    """The channels-last product and its bias are stored straight into the NCHW output: no NHWC
    temporary, the copy lowered with the product (stored_copy). Each tile stays within one image's
    pixels (63, 35 and 25 of them here: the last tile of each image is partial), so the results
    match torch in every image."""
    import ml_dtypes
    import torch

    from tilec.ops.sources import conv2d_source as op_conv2d_source

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    src = op_conv2d_source((stride, stride), (1, 1), (1, 1), True)
    x = rng.standard_normal((n, c, *hw)).astype(np_dtype)
    f = rng.standard_normal((co, c, 3, 3)).astype(np_dtype)
    bias = rng.standard_normal(co).astype(np_dtype)
    fn = tilec.compile(src)
    shapes = dict(zip(fn.inputs, (x.shape, f.shape, bias.shape)))
    dtypes = dict.fromkeys(fn.inputs, dtype)
    assert "stored_copy" in fn.explain(shapes, dtypes, stage="templates")
    params = fn.explain(shapes, dtypes, stage="loop").splitlines()[0]
    assert " Y: " not in params and " Yb: " not in params
    got = fn(x, f, bias).astype(np.float32)
    want = torch.nn.functional.conv2d(*(torch.from_numpy(a.astype(np.float32)) for a in (x, f, bias)),
                                      stride=stride, padding=1).numpy()
    tol = 2e-2 if dtype == "bfloat16" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n,c,hw,co,stored", [(4, 1, 32, 64, False), (2, 8, 16, 64, False), (2, 3, 28, 64, True),
                                              (2, 3, 56, 64, True)])
def test_tiles_whose_columns_share_a_few_l1_sets_go_through_a_transposing_copy(dtype, n, c, hw, co, stored, pairs_target):
    """NCHW planes of 32 x 32 or 16 x 16 pixels lie a multiple of the L1 cache's way apart (2-4 KiB):
    a tile's 64 columns (on AVX-512) stored there fall into a few sets, and each tile fetched its
    lines from L2 again (a 1 -> 64 channel conv, batch 32, bfloat16: 1.8 ms, against 0.23 ms now).
    Such a product stays channels-last and a transposing copy (permute, rounding a bfloat16 result
    held in float32) moves it back; 28 x 28 and 56 x 56 planes keep storing their tiles. Either way,
    torch's result on this CPU."""
    import ml_dtypes
    import torch

    from tilec.ops.sources import conv2d_source as op_conv2d_source

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    src = op_conv2d_source((1, 1), (1, 1), (1, 1), True)
    x = rng.standard_normal((n, c, hw, hw)).astype(np_dtype)
    f = rng.standard_normal((co, c, 3, 3)).astype(np_dtype)
    bias = rng.standard_normal(co).astype(np_dtype)
    fn, avx512 = tilec.compile(src), tilec.compile(src, target=pairs_target)
    shapes = dict(zip(fn.inputs, (x.shape, f.shape, bias.shape)))
    templates = avx512.explain(shapes, dict.fromkeys(fn.inputs, dtype), stage="templates")
    assert ("stored_copy" in templates) == stored and ("permute" in templates) != stored, templates
    got = fn(x, f, bias).astype(np.float32)
    want = torch.nn.functional.conv2d(*(torch.from_numpy(a.astype(np.float32)) for a in (x, f, bias)), padding=1)
    if dtype == "bfloat16":  # rounded once, to the nearest: as torch rounds its float32 result
        want = want.to(torch.bfloat16).float()
    tol = 1e-2 if dtype == "bfloat16" else 1e-5
    np.testing.assert_allclose(got, want.numpy(), rtol=tol, atol=tol * np.abs(want.numpy()).max())


def test_columns_alias_counts_the_l1_sets_a_tiles_columns_fall_into():
    from dataclasses import replace

    from tilec.frontend import parse
    from tilec.ir.bounds import bind
    from tilec.ops.sources import conv2d_source as op_conv2d_source
    from tilec.pipeline import resolve_target
    from tilec.schedule.cpu.implicit_gemm.stored_tiles import columns_alias
    from tilec.schedule.patterns.gemm import match as gemm_match
    from tilec.schedule.patterns.layout_copy import match_copy

    cpu = replace(resolve_target("llvm").host, l1d_bytes=48 * 1024, l1d_ways=12)  # 64 sets of 64-byte lines
    src = op_conv2d_source((1, 1), (1, 1), (1, 1), False)

    def aliases(hw: int, dtype: str, nr: int) -> bool:
        bp = bind(parse(src, {}), {"X": (2, 3, hw, hw), "F": (64, 3, 3, 3)}, {"X": dtype, "F": dtype})
        b, copy_stmt = bp.statements[2], bp.statements[3]
        plan = gemm_match(b, (dtype, "float32"))
        copy = match_copy(copy_stmt, bp, rounding=True)
        assert plan is not None and copy is not None
        dest = copy.dest_cell(tuple(e.lone_var for e in b.out_indices))
        return columns_alias(plan, dest, copy, nr, bp, cpu)

    assert aliases(32, "float32", 64)  # planes 4 KiB apart: one set for all 64 columns
    assert aliases(32, "bfloat16", 64)  # 2 KiB: two sets, 32 columns each
    assert not aliases(32, "bfloat16", 8)  # 8 columns in two sets: 4 each, within half of 12 ways
    assert not aliases(28, "float32", 64)  # 3136 bytes = 49 lines: every set once
    assert not aliases(30, "float32", 64)  # 3600 bytes: not whole lines
    assert aliases(16, "float32", 64) and not aliases(16, "float32", 8)  # 1 KiB: 4 sets; 16 or 2 columns each
