"""The implicit-GEMM template, epilogue fusion and explicit vector code, against numpy.

Knobs are forced small (tiny register blocks, several reduction blocks, many row
blocks) so that small, fast shapes still exercise every edge path and both
parallel modes.
"""

from __future__ import annotations

import re
from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tilec
from tilec import pipeline
from compiled import load_func
from tilec.ir import loop as L
from tilec.ir.bounds import bind
from tilec.ir.verify import verify
from tilec.ir.visitor import walk
from tilec.schedule import params
from tilec.schedule.cpu.implicit_gemm import IMPLICIT_GEMM, GemmKnobs
from tilec.schedule.cpu.implicit_gemm.knobs import most_rows
from tilec.schedule.templates.base import Context
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.pipeline import resolve_target

TARGET = resolve_target("llvm")
GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
rng = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def gemm_plan(bp, index: int = 0):
    """The implicit-GEMM template's plan of a statement (None where it does not apply)."""
    return IMPLICIT_GEMM.match(index, Context(bp, TARGET, params.current()))


def run_template(src: str, arrays: dict[str, np.ndarray], knobs: GemmKnobs):
    """Compile `src` with every matching contraction forced through the template with `knobs`."""
    program = tilec.parse(src)
    shapes, dtypes = {k: a.shape for k, a in arrays.items()}, {k: a.dtype.name for k, a in arrays.items()}
    bp = bind(program, shapes, dtypes)
    configs = tuple(TemplateConfig(i, "implicit_gemm", tuple(sorted(asdict(knobs).items())))
                    for i in range(len(bp.statements)) if gemm_plan(bp, i) is not None)
    assert configs, "the template did not apply"
    schedule = TemplateSchedule(configs)
    sig = pipeline.Signature(tuple((n, shapes[n]) for n in program.input_names),
                             tuple((n, dtypes[n]) for n in program.input_names), ())
    func = verify(pipeline.lower_program(program, sig, schedule, TARGET)[1])
    out = tilec.compile(src).with_schedule(schedule)(*[arrays[n] for n in program.input_names])
    return out, func


SMALL = GemmKnobs(mr=3, nr=16, kc=5, mc=6, threads=2)
SMALL_DIRECT = GemmKnobs(mr=3, nr=16, threads=2, pack_a=False)
BOTH = pytest.mark.parametrize("knobs", [SMALL, SMALL_DIRECT], ids=["packed", "direct"])


@BOTH
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 11, 17), (6, 5, 16), (13, 4, 33), (25, 12, 40)])
def test_gemm_every_edge(m, k, n, knobs):
    a, b = rand(m, k), rand(k, n)
    out, _ = run_template(GEMM, {"A": a, "B": b}, knobs)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


@BOTH
@pytest.mark.parametrize("src, make, ref", [
    ("C[i, j: M, N] = +(A[k, i] * B[k, j])", lambda: (rand(9, 10), rand(9, 20)), lambda a, b: a.T @ b),
    ("C[i, j: M, N] = +(A[i, k] * B[j, k])", lambda: (rand(10, 9), rand(20, 9)), lambda a, b: a @ b.T),
    ("C[b, i, j: B, M, N] = +(A[b, i, k] * B[b, k, j])", lambda: (rand(3, 7, 5), rand(3, 5, 18)), lambda a, b: a @ b),
    ("C[i, j: M, N] = +(A[i, k] * B[k, j])", lambda: (rand(8, 6).astype(np.float64), rand(6, 9)),
     lambda a, b: a @ b.astype(np.float64)),
])
def test_layouts_batches_and_mixed_dtypes(src, make, ref, knobs):
    a, b = make()
    out, _ = run_template(src, {"A": a, "B": b}, knobs)
    np.testing.assert_allclose(out, ref(a, b), rtol=1e-5, atol=1e-5)


def _conv_ref(i, k, stride, pad):
    n, h, w, c = i.shape
    kh, kw, _, co = k.shape
    ip = np.pad(i, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, oh, ow, co), np.float64)
    for p in range(kh):
        for q in range(kw):
            out += np.einsum("nhwc,co->nhwo", ip[:, p:p + stride * (oh - 1) + 1:stride,
                                                  q:q + stride * (ow - 1) + 1:stride], k[p, q])
    return out


@BOTH
@pytest.mark.parametrize("stride, pad", [(1, 1), (2, 1), (1, 0), (2, 0)])
def test_conv2d_nhwc_padding_in_the_packing(stride, pad, knobs):
    i, k = rand(2, 7, 6, 5), rand(3, 3, 5, 19)
    src = (f"function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {{ O[n, x, y, co: N, (H + {2 * pad} - KH) / {stride} + 1,"
           f" (W + {2 * pad} - KW) / {stride} + 1, CO] = +(I[n, {stride}x + i - {pad}, {stride}y + j - {pad}, c]"
           f" * K[i, j, c, co]); }}")
    out, _ = run_template(src, {"I": i, "K": k}, knobs)
    np.testing.assert_allclose(out, _conv_ref(i, k, stride, pad), rtol=1e-4, atol=1e-4)


@BOTH
def test_conv2d_nchw_parallel_over_the_batch_loop(knobs):
    i, k = rand(3, 5, 6, 7), rand(4, 5, 3, 3)  # N C H W, CO C KH KW
    src = ("function (I[N, C, H, W], K[CO, C, KH, KW]) -> (O) { O[n, co, x, y: N, CO, H, W] = "
           "+(I[n, c, x + i - 1, y + j - 1] * K[co, c, i, j]); }")
    out, func = run_template(src, {"I": i, "K": k}, knobs)
    ref = _conv_ref(i.transpose(0, 2, 3, 1), k.transpose(2, 3, 1, 0), 1, 1).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # the outer loop (n, x: 18 output rows, the border ones of 2 filter rows) shares out evenly
    assert any(b.name == "O.Bp" and b.shape[0] == 2 for b in func.params)  # one B panel per thread


@pytest.mark.parametrize("outer,per_thread", [(4, True), (5, True), (9, True), (3, False)])
def test_threads_share_the_outer_loop_where_it_shares_out_evenly(outer, per_thread):
    """3 iterations on 2 threads take as long as 4 (their rows are shared instead); 5 take 3
    rounds' time for 2.5 rounds' work, 9 take 5 for 4.5."""
    a, b = rand(outer, 7, 5), rand(outer, 5, 20)
    src = "function (A[Q, M, K], B[Q, K, N]) -> (C) { C[q, i, j: Q, M, N] = +(A[q, i, k] * B[q, k, j]); }"
    out, func = run_template(src, {"A": a, "B": b}, SMALL_DIRECT)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert {p.shape[0] for p in func.params if p.name == "C.Bp"} == ({2} if per_thread else {1})


def test_one_panel_of_b_is_packed_on_all_threads_across_its_rows():
    """Fewer column panels than threads (a weight gradient's 64 columns): the pack of B splits its
    reduction rows among the threads instead of running on one."""
    a, b = rand(7, 40), rand(40, 16)
    out, func = run_template(f"function (A[M, K], B[K, N]) -> (C) {{ {GEMM}; }}", {"A": a, "B": b}, SMALL_DIRECT)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    packs = [s for s in walk(func.body) if isinstance(s, L.For) and s.kind == "parallel"
             and any(isinstance(t, L.Store) and t.buffer == "C.Bp" for t in walk(s.body))]
    assert packs and all(s.var == "k" for s in packs)


def test_phases_of_unequal_work_share_their_rows_not_the_phases():
    """A stride-2 transposed convolution's four phases multiply 4, 2, 2 and 1 filter taps (the
    others are skipped as zeros of B): split by phase, one thread did 6 of the 9 parts."""
    d, k = rand(2, 4, 4, 3), rand(3, 3, 5, 3)  # the output gradient (N X Y CO), the filter (KH KW C CO)
    src = ("function (D[N, X, Y, CO], K[KH, KW, C, CO]) -> (P) { P[z0, z1, n, u0, u1, c: 2, 2, N, X + 1, Y + 1, C] = "
           "+(D[n, u0 - t0, u1 - t1, co] * K[2 * t0 + z0, 2 * t1 + z1, c, co]); }")
    out, func = run_template(src, {"D": d, "K": k}, SMALL_DIRECT)
    ref = np.zeros((2, 2, 2, 5, 5, 5), np.float32)
    for z0, z1, t0, t1 in np.ndindex(2, 2, 2, 2):
        if 2 * t0 + z0 < 3 and 2 * t1 + z1 < 3:
            ref[z0, z1, :, t0:t0 + 4, t1:t1 + 4] += d @ k[2 * t0 + z0, 2 * t1 + z1].T
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert {b.shape[0] for b in func.params if b.name == "P.Bp"} == {1}  # B shared: the threads split rows


@BOTH
def test_fused_bias_relu_never_materialises_the_product(knobs):
    a, b, bias = rand(13, 11), rand(11, 21), rand(21)
    src = ("function (A[M, K], B[K, N], Bias[N]) -> (O) { C[i, j: M, N] = +(A[i, k] * B[k, j]); "
           "R = C + Bias; O = R < 0 ? 0 : R; }")
    out, func = run_template(src, {"A": a, "B": b, "Bias": bias}, knobs)
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)
    names = {p.name for p in func.params}
    assert "C" not in names and "R" not in names


@BOTH
def test_epilogue_stops_at_a_tensor_read_twice(knobs):
    a, b = rand(5, 4), rand(4, 16)
    src = "function (A[M, K], B[K, N]) -> (O, P) { C[i, j: M, N] = +(A[i, k] * B[k, j]); O = C * 2; P = C + 1; }"
    (o, p), func = run_template(src, {"A": a, "B": b}, knobs)
    np.testing.assert_allclose(o, 2 * (a @ b), rtol=1e-5)
    np.testing.assert_allclose(p, a @ b + 1, rtol=1e-5)
    assert "C" in {x.name for x in func.params}


def test_contractions_that_are_not_gemms_do_not_match():
    for src, shapes in [("O[i: N] = +(A[i, j])", {"A": (4, 5)}),  # one operand
                        ("O[i: N] = >(A[i, j] * B[i, j])", {"A": (4, 5), "B": (4, 5)}),  # not a sum
                        ("O[i, j: N, M] = +(A[i, j] * B[i, j])", {"A": (4, 5), "B": (4, 5)})]:  # col in both
        bp = bind(tilec.parse(src, {"N": 4, "M": 5}), shapes, {n: "float32" for n in shapes}, {"N": 4, "M": 5})
        assert gemm_plan(bp) is None


def test_default_heuristic_packs_a_for_long_reductions_and_reads_it_in_place_otherwise():
    chosen = tilec.explain(GEMM, {"A": (256, 256), "B": (256, 256)}, stage="templates")
    nr = int(chosen.split(" nr=")[1].split()[0])  # 64 with AVX-512, 24 with AVX2
    assert "implicit_gemm[direct]" in chosen  # B's micro-panel over all of K fits half of L2: A read in place
    host = resolve_target("llvm").host
    assert host is not None
    k = 2 * host.l2_bytes // (nr * 4)  # a B micro-panel over all of K that would fill L2 twice over
    wide = tilec.explain(GEMM, {"A": (256, k), "B": (k, 1024)}, stage="loop")
    assert "vectorized" in wide and "parallel" in wide and "C.Ap" in wide
    narrow = tilec.explain(GEMM, {"A": (256, 256), "B": (256, 4 * nr)}, stage="loop")  # 4 column panels
    assert "vectorized" in narrow and "C.Bp" in narrow and "C.Ap" not in narrow
    conv = tilec.explain("function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) { O[n, x, y, co: N, H, W, CO] = "
                         "+(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]); }",
                         {"I": (2, 16, 16, 32), "K": (3, 3, 32, 64)}, stage="loop")
    assert "O.Apad" in conv  # padding became a zero-bordered copy, not a branch in the kernel
    asm = tilec.explain(GEMM, {"A": (256, 256), "B": (256, 256)}, stage="asm")
    assert "vfmadd231ps" in asm or "vfmadd213ps" in asm  # FMAs on vectors


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("m, k, n", [(8, 37, 96), (5, 64, 192)])
def test_few_rows_against_a_wide_b_share_its_panels_among_the_threads(m, k, n, threads):
    """The direct variant with B larger than A gives each thread its own column panels (and all of A):
    shared by row tiles, every thread would read all of B (tilec.schedule.cpu.implicit_gemm.direct.by_panels)."""
    a, b = rand(m, k), rand(k, n)
    knobs = GemmKnobs(mr=3, nr=16, threads=threads, pack_a=False)
    out, func = run_template("C[i, j: M, N] = +(A[i, k] * B[k, j])", {"A": a, "B": b}, knobs)
    panels = n // 16
    share = -(-panels // threads)
    assert f"for C.jr in [(C.t * {share}), min({panels}, ((C.t * {share}) + {share}))):" in str(func)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 20), n=st.integers(1, 40), k=st.integers(1, 12), transpose_a=st.booleans(),
       transpose_b=st.booleans(), pack_a=st.booleans(), mr=st.integers(1, 5), nr_vectors=st.integers(1, 2), kc=st.integers(1, 7),
       mc_blocks=st.integers(1, 3), threads=st.integers(1, 3))
def test_random_gemms_with_random_knobs(m, n, k, transpose_a, transpose_b, pack_a, mr, nr_vectors, kc, mc_blocks,
                                       threads):
    a_idx, a_shape = ("k, i", (k, m)) if transpose_a else ("i, k", (m, k))
    b_idx, b_shape = ("j, k", (n, k)) if transpose_b else ("k, j", (k, n))
    src = f"C[i, j: M, N] = +(A[{a_idx}] * B[{b_idx}])"
    a, b = rand(*a_shape), rand(*b_shape)
    knobs = GemmKnobs(mr=mr, nr=16 * nr_vectors, kc=kc, mc=mr * mc_blocks, threads=threads,
                                    pack_a=pack_a)
    out, _ = run_template(src, {"A": a, "B": b}, knobs)
    ref = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_whole_panels_of_a_row_major_b_are_packed_as_they_lie():
    # a partial panel reads B at min(column, N - 1), which the vectoriser loads one element at a time;
    # the whole panels before it read B's rows as they lie, in vectors
    a, b = rand(20, 24), rand(24, 40)
    knobs = GemmKnobs(mr=4, nr=16, kc=24, mc=8, threads=1, pack_a=False)
    out, func = run_template("C[i, j: M, N] = +(A[i, k] * B[k, j])", {"A": a, "B": b}, knobs)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    packs = [s for s in walk(func.body) if isinstance(s, L.Store) and s.buffer.endswith(".Bp")]
    clamped = [s for s in packs if any(isinstance(e, L.Bin) and e.op == "min" for e in walk(s.value))]
    assert len(packs) == 2 and len(clamped) == 1
    assert all(isinstance(s.value, L.Load) and s.value.buffer == "B" for s in packs if s not in clamped)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 70), k=st.integers(1, 70), transpose_a=st.booleans(),
       transpose_b=st.booleans(), mr=st.integers(1, 6), nr_vectors=st.integers(1, 3), kc=st.sampled_from([16, 23, 40, 80]),
       dtype=st.sampled_from(["float32", "float64"]), threads=st.integers(1, 2), pack_a=st.booleans())
def test_operands_contiguous_along_the_reduction_pack_through_register_transposes(
        m, n, k, transpose_a, transpose_b, mr, nr_vectors, kc, dtype, threads, pack_a):
    # A[i, k] and B[j, k] (a linear layer's x @ W^T) are read as vectors along k and transposed in
    # registers into their panels; partial panels, the last rows of a block and odd widths stay scalar
    a_idx, a_shape = ("k, i", (k, m)) if transpose_a else ("i, k", (m, k))
    b_idx, b_shape = ("j, k", (n, k)) if transpose_b else ("k, j", (k, n))
    src = f"C[i, j: M, N] = +(A[{a_idx}] * B[{b_idx}])"
    a, b = rand(*a_shape).astype(dtype), rand(*b_shape).astype(dtype)
    target = resolve_target("llvm")  # AVX2's 16 registers take fewer rows
    mr = min(mr, most_rows(16 * nr_vectors, target.lanes(dtype), target))
    knobs = GemmKnobs(mr=mr, nr=16 * nr_vectors, kc=kc, mc=mr * 2, threads=threads, pack_a=pack_a)
    out, func = run_template(src, {"A": a, "B": b}, knobs)
    ref = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    tiled = {node.var for node in walk(func.body) if isinstance(node, L.For)} & {"C.iib", "C.jjb"}
    # a transposing pack exactly where a source is contiguous along k (and A's panel is two rows or more)
    expected = {"C.iib"} if pack_a and not transpose_a and mr > 1 else set()  # (direct: A read in place)
    assert tiled == expected | ({"C.jjb"} if transpose_b else set())


def test_vector_codegen_gathers_strided_loads():
    # a vectorized loop reading a column (stride != 1) must gather, not load contiguously
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", "float32", (16, 3)), L.Buffer("O", "float32", (16,))),
                      L.For("i", L.const(0), L.const(16),
                            L.Store("O", (L.Var("i"),), L.Load("A", (L.Var("i"), L.const(1)), "float32")), "vectorized"))
    loaded = load_func(func)
    a = rand(16, 3)
    out = np.empty(16, np.float32)
    import ctypes
    loaded.function((ctypes.c_void_p * 2)(a.ctypes.data, out.ctypes.data))
    np.testing.assert_array_equal(out, a[:, 1])


@BOTH
def test_partial_coverage_zeroes_the_cells_no_tuple_writes(knobs):
    # a stride-2 transposed 1x1 conv: odd rows and columns of the output get no tuple
    do, f = rand(2, 5, 4, 3), rand(5, 6)
    src = ("function (DO[N, CO, X, Y], F[CO, C]) -> (O) { O[n, c, h, w: N, C, 2 * X, 2 * Y] = "
           "+(DO[n, co, h / 2, w / 2] * F[co, c]); }")
    out, func = run_template(src, {"DO": do, "F": f}, knobs)
    ref = np.zeros((2, 6, 8, 6), np.float64)
    ref[:, :, ::2, ::2] = np.einsum("nopq,oc->ncpq", do, f)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@BOTH
def test_trailing_unit_dimensions_no_operand_reads(knobs):
    # a 1x1 conv's weight gradient: the output ends in two size-1 kernel positions
    do, x = rand(2, 5, 3, 3), rand(2, 4, 6, 6)
    src = ("function (DO[N, CO, X, Y], I[N, C, H, W]) -> (DF) { DF[co, c, u, v: CO, C, 1, 1] = "
           "+(DO[n, co, x, y] * I[n, c, 2 * x, 2 * y]), u < 1, v < 1; }")
    out, _ = run_template(src, {"DO": do, "I": x}, knobs)
    ref = np.einsum("nopq,ncpq->oc", do, x[:, :, ::2, ::2])[:, :, None, None]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 12), h=st.integers(1, 6), co=st.sampled_from([3, 16, 24, 40, 64]),
       k=st.integers(1, 3), stride=st.integers(1, 2), pad=st.integers(0, 1), dtype=st.sampled_from(["float32", "float64"]))
def test_oihw_filters_pack_in_their_own_order_through_register_transposes(n, c, h, co, k, stride, pad, dtype):
    # torch's OIHW filter F[co, c, i, j] is contiguous along the reduction (c, i, j) taken as one
    # flat index: the direct variant packs B's rows in that order, as register transposes where a
    # panel is whole, and reads them back in the kernel's own (i, j, c) loop order
    import torch
    from tilec.ops.sources import conv2d_source

    if h + 2 * pad < k:
        return
    x, f = rand(n, c, h, h).astype(dtype), rand(co, c, k, k).astype(dtype)
    func = tilec.compile(conv2d_source((stride, stride), (pad, pad), (1, 1), False))
    out = func(x, f)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(f), stride=stride, padding=pad).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_an_oihw_filter_packs_through_register_transposes():
    from tilec.ops.sources import conv2d_source

    source = conv2d_source((1, 1), (1, 1), (1, 1), False)
    shapes = {"X": (2, 32, 4, 4), "F": (64, 32, 3, 3)}
    assert "implicit_gemm[direct]" in tilec.explain(source, shapes, stage="templates")
    loop = tilec.explain(source, shapes, stage="loop")
    # a transposing tile (unrolled across the panel, vectorized along F's flat reduction) reading F itself
    assert re.search(r"unrolled Y\.jj1 in \[0, \d+\):\n\s+for vectorized Y\.r1 in \[0, \d+\):\n\s+Y\.Bp\[[^\n]*= F\[", loop)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 3), hw=st.integers(2, 9), c=st.sampled_from([5, 16]), co=st.sampled_from([16, 40]),
       k=st.integers(1, 4), dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**31))
@example(n=3, hw=9, c=16, co=40, k=3, dtype="float32", seed=0)  # the direct variant, a 3x3 filter's phases
def test_direct_variant_skips_the_taps_a_phase_lacks(n, hw, c, co, k, dtype, seed):
    """A stride-2 transposed convolution split into output phases z (the input gradient of a
    stride-2 convolution): the filter tap 2 t + z passes the filter for some z, where B (the filter)
    is 0. The direct variant's reduction loops leave those taps out (bounds from B's guards on t and
    the outer z) instead of multiplying zeros; the sums are unchanged. Against numpy."""
    taps = (k + 1) // 2  # t in [0, taps): 2 t + z < k for z = 0 always, for z = 1 only when k is even
    src = (f"function (DY[N, OH, OW, CO], K[KH, KW, C, CO]) -> (P) {{\n"
           f"    P[z0, z1, n, u0, u1, c: 2, 2, N, OH + {taps - 1}, OW + {taps - 1}, C] = "
           f"+(DY[n, u0 - t0, u1 - t1, co] * K[2 * t0 + z0, 2 * t1 + z1, c, co]);\n}}")
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal((n, hw, hw, co)).astype(dtype)
    w = rng.standard_normal((k, k, c, co)).astype(dtype)
    f = tilec.compile(src)
    got = f(dy, w)
    size = hw + taps - 1
    want = np.zeros((2, 2, n, size, size, c), dtype)
    for z0 in range(2):
        for z1 in range(2):
            for t0 in range(taps):
                for t1 in range(taps):
                    if 2 * t0 + z0 >= k or 2 * t1 + z1 >= k:
                        continue
                    want[z0, z1, :, t0:t0 + hw, t1:t1 + hw] += np.einsum("nxyo,co->nxyc", dy, w[2 * t0 + z0, 2 * t1 + z1])
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-4 if dtype == "float32" else 1e-10)
    shapes, dtypes = {"DY": dy.shape, "K": w.shape}, {"DY": dtype, "K": dtype}
    lacking = taps > 1 and k % 2 == 1  # then phase z = 1 lacks its last tap: a guard on t0 and z0
    if "implicit_gemm[direct]" in f.explain(shapes, dtypes, stage="templates") and lacking:
        assert re.search(r"for t0 in \[0, min\(", f.explain(shapes, dtypes, stage="loop"))
