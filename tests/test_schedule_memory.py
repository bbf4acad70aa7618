"""Memory and structure schedule primitives (CacheWrite, CacheRead, ComputeInline, Partition,
Tensorize): values against the default schedule, JSON round trips, every ScheduleError,
structural before/expected checks, and random schedules that mix them with the loop primitives."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from compiled import load_func
from random_schedules import assert_legal_moves_compute_the_default, bound_f32, lowered_f32
from reference import CONV_NHWC_SAME, MATMUL, SOFTMAX, assert_matches, conv2d_nhwc, randn, rng, softmax_rows
from tilec import pipeline
from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.lower import lower
from tilec.ir.verify import verify
from tilec.runtime.function import _run
from tilec.schedule.primitives.apply import apply_primitive, apply_schedule
from tilec.schedule.primitives.records import (CacheRead, CacheWrite, ComputeInline, Fuse, Parallel, Partition, Reorder,
                                       Schedule, Split, Tensorize, Unroll, Vectorize, primitive_from_json)
from tilec.ir.rewrite import loops_in

# One row more than the product fills: the default lowering scatters, so the update nest (1)
# is the perfect nest i, j, k a register-blocked GEMM starts from.
SCATTER_MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[i, j: M + 1, N] = +(A[i, k] * B[k, j]); }"
CONV = CONV_NHWC_SAME
CHAIN = "function (A[N, C], B[N, C]) -> (O, P) { T = A * 2 + 1; U = tanh(T) * B; O = U - A; P = B * 3; }"


def _run_scheduled(src: str, schedule: Schedule, *inputs: np.ndarray):
    """Compile with the outputs known to apply_schedule (what ComputeInline needs) and run."""
    bound = bound_f32(src, {n: a.shape for n, a in zip(tilec.compile(src).inputs, inputs)})
    func = verify(apply_schedule(lower(bound), schedule, outputs=bound.program.outputs))
    loaded = load_func(func)
    kernel = pipeline.Kernel(bound, func.params, loaded, "test")
    return _run(kernel, list(inputs), len(bound.program.outputs))


# --------------------------------------------------------------------------- values


def _gemm_block_schedule() -> Schedule:
    s = Schedule()
    s.split("i", 4, nest=1)
    s.split("j", 16, nest=1)
    s.reorder("i.o", "j.o", "k", "i.i", "j.i", nest=1)
    s.parallel("i.o", nest=1)  # before the caches: the parallel check cannot see that their boxes are disjoint
    s.cache_write("j.o", nest=1)
    s.cache_read("B", "j.o", nest=1)
    s.tensorize("k", nest=1)
    return s


def test_register_blocked_gemm_matches_numpy_and_uses_fma():
    r = rng(10)
    a, b = randn(r, 12, 9), randn(r, 9, 48)
    f = tilec.compile(SCATTER_MATMUL).with_schedule(_gemm_block_schedule())
    out = f(a, b)
    assert_matches(out[:12], a.astype(np.float64) @ b, dtype=np.float32)
    assert_matches(out[12], np.zeros(48), dtype=np.float32)
    asm = f.explain({"A": (12, 9), "B": (9, 48)}, stage="asm")
    assert "vfmadd" in asm


def test_conv2d_partition_cache_read_cache_write():
    r = rng(11)
    img, ker = randn(r, 2, 7, 8, 3), randn(r, 3, 3, 3, 4)
    s = Schedule()
    assert s.partition("x") == ("x.pro", "x", "x.epi")
    s.partition("j")  # names the inner loop: its bounds depend on y alone, so y is partitioned
    s.parallel("x")  # before the caches: the parallel check cannot see that their boxes are disjoint
    s.cache_read("I", "y")
    s.cache_read("K", "y")
    s.cache_write("y")
    s.vectorize("f")
    out = tilec.compile(CONV).with_schedule(s)(img, ker)
    assert_matches(out, conv2d_nhwc(img, ker, pad=1), dtype=np.float32)


def test_matmul_cache_write_and_read_on_the_default_lowering():
    r = rng(12)
    a, b = randn(r, 10, 7), randn(r, 7, 12)
    s = Schedule()
    s.split("j", 4)
    s.cache_write("j.o")
    s.cache_read("A", "i")
    s.cache_read("B", "j.o")
    out = tilec.compile(MATMUL).with_schedule(s)(a, b)
    assert_matches(out, a.astype(np.float64) @ b, dtype=np.float32)


def test_softmax_cache_write_on_the_update_nests_and_inline():
    x = randn(rng(13), 9, 14) * 3
    s = Schedule()
    s.cache_write("i", nest=1)  # M[i, 0] and M.written[i, 0] live in registers over j
    s.cache_write("i", nest=5)
    s.cache_read("X", "i", nest=1)
    assert_matches(tilec.compile(SOFTMAX).with_schedule(s)(x), softmax_rows(x), dtype=np.float32,
                   rtol=1e-5, atol=1e-6)


def test_compute_inline_chain_matches_numpy():
    r = rng(14)
    a, b = randn(r, 5, 6), randn(r, 5, 6)
    s = Schedule()
    s.compute_inline(0)  # T into U
    s.compute_inline(1)  # U into O
    s.split("i1", 4, nest=2)
    o, p = _run_scheduled(CHAIN, s, a, b)
    assert_matches(o, np.tanh(a * 2 + 1) * b - a, dtype=np.float32, rtol=1e-5, atol=1e-5)
    assert_matches(p, b * 3, dtype=np.float32)


def test_compute_inline_into_a_contraction():
    src = "function (X[N, C]) -> (S) { E = exp(X); S[i: N] = +(E[i, j]); }"
    x = randn(rng(15), 4, 9)
    s = Schedule([ComputeInline(0)])
    assert_matches(_run_scheduled(src, s, x), np.exp(x.astype(np.float64)).sum(1), dtype=np.float32)
    func = apply_schedule(lowered_f32(src, {"X": (4, 9)}), s, outputs=("S",))
    assert func.body.stmts[0] == L.Seq(()) and "E" not in str(func.body)


# --------------------------------------------------------------------------- data


def test_json_round_trip_of_the_new_primitives():
    s = _gemm_block_schedule()
    s.partition("x", nest=0)
    s.compute_inline(2)
    s.tensorize("i.i", nest=1, intrinsic="outer_product")
    data = json.loads(json.dumps(s.to_json()))
    assert {d["kind"] for d in data} >= {"cachewrite", "cacheread", "tensorize", "partition", "computeinline"}
    assert Schedule.from_json(data) == s
    for p in s:
        assert primitive_from_json(p.to_json()) == p
    assert Schedule.from_json(json.dumps(data)).key() == s.key()


# --------------------------------------------------------------------------- errors


def _scatter_blocked() -> L.PrimFunc:
    func = lowered_f32(SCATTER_MATMUL, {"A": (8, 6), "B": (6, 32)})
    return apply_schedule(func, [Split("i", 4, 1), Split("j", 16, 1), Reorder(("i.o", "j.o", "k", "i.i", "j.i"), 1)])


@pytest.mark.parametrize("src, shapes, schedule, message", [
    # CacheWrite
    (MATMUL, {"A": (10, 7), "B": (7, 5)}, [Split("j", 4), CacheWrite("j.o")],
     "loop j.i around the accesses does not have constant bounds with at least one iteration, so the region "
     "is not a constant-size box"),
    (MATMUL, {"A": (10, 7), "B": (7, 5)}, [Fuse("i", "j"), Split("i.j.f", 5), CacheWrite("i.j.f.o")],
     "is not affine in the loops inside"),
    (SCATTER_MATMUL, {"A": (4, 3), "B": (3, 5)}, [CacheWrite("C.c1", nest=0), CacheWrite("C.c1", nest=0)],
     "another statement inside reads C at a cell no store there updates, so it would read a stale value"),
    (MATMUL, {"A": (30, 7), "B": (7, 30000)}, [CacheWrite("i")],
     r"the box \[1, 30000\] of C takes 120000 bytes, more than the 65536 bytes a local buffer may take"),
    # CacheRead
    (CONV, {"I": (1, 5, 5, 2), "K": (3, 3, 2, 2)}, [CacheRead("I", "y")],
     "loop i around the accesses does not have constant bounds"),
    (SCATTER_MATMUL, {"A": (4, 3), "B": (3, 5)}, [CacheRead("C", "i", nest=1)], "C is written inside nest 1"),
    (MATMUL, {"A": (4, 3), "B": (3, 5)}, [CacheRead("Z", "k")], "loop k does not read Z"),
    (MATMUL, {"A": (4, 300), "B": (300, 100)}, [CacheRead("B", "i")],
     r"the box \[300, 100\] of B takes 120000 bytes, more than the 65536 bytes a local buffer may take"),
    # Partition
    (MATMUL, {"A": (4, 3), "B": (3, 5)}, [Partition("i")], "nothing to partition: no max/min bound"),
    (CONV, {"I": (1, 5, 5, 2), "K": (3, 3, 2, 2)}, [Partition("n")], "nothing to partition"),
    # Tensorize
    (MATMUL, {"A": (4, 3), "B": (3, 5)}, [Tensorize("i")],
     r"from loop i there are 2 perfectly nested loop\(s\) around a Allocate"),
    (MATMUL, {"A": (4, 3), "B": (3, 5)}, [Tensorize("k", intrinsic="amx")], "unknown intrinsic 'amx'"),
    (SCATTER_MATMUL, {"A": (4, 3), "B": (3, 5)}, [Tensorize("i", nest=1)],
     "the product is not an outer product: one factor must not depend on k and the other not on j"),
    (SCATTER_MATMUL, {"A": (100, 3), "B": (3, 5)}, [Reorder(("k", "i", "j"), 1), Tensorize("k", nest=1)],
     "loop i has 100 iterations, more than the unroll limit 64"),
    (SCATTER_MATMUL, {"A": (4, 3), "B": (3, 5)}, [Reorder(("k", "i", "j"), 1), Vectorize("j", 1),
                                                  Tensorize("k", nest=1)], "loop j is already vectorized"),
    (SOFTMAX, {"X": (3, 4)}, [Tensorize("i", nest=1)], "around a Seq"),
    (SOFTMAX, {"X": (3, 4)}, [Tensorize("i", nest=5)], "the update of S does not add a product"),
    # ComputeInline
    (SOFTMAX, {"X": (3, 4)}, [ComputeInline(3)],
     r"E is read by more than one statement \(nests 5, 6\); inlining would compute it more than once"),
    (SOFTMAX, {"X": (3, 4)}, [ComputeInline(1)], "nest 1 is not an elementwise statement"),
    (SOFTMAX, {"X": (3, 4)}, [ComputeInline(5)], "nest 5 does not store every cell of S once in order"),
    (SOFTMAX, {"X": (3, 4)}, [ComputeInline(6)], "O is an output of the program"),
    (CHAIN, {"A": (2, 3), "B": (2, 3)}, [Split("i0", 2, nest=0), ComputeInline(0)], "already scheduled"),
])
def test_schedule_errors(src, shapes, schedule, message):
    bound = bound_f32(src, shapes)
    with pytest.raises(ScheduleError, match=message):
        apply_schedule(lower(bound), schedule, outputs=bound.program.outputs)


def test_compute_inline_needs_the_outputs_and_refuses_clobbered_inputs():
    func = lowered_f32(CHAIN, {"A": (2, 3), "B": (2, 3)})
    with pytest.raises(ScheduleError, match="outputs are unknown here"):
        apply_primitive(func, ComputeInline(0))
    x = L.Buffer("X", "float32", (3,))
    t = L.Buffer("T", "float32", (3,))
    o = L.Buffer("O", "float32", (3,))
    i = L.Var("i")
    loop = lambda store: L.For("i", L.const(0), L.const(3), store)  # noqa: E731
    body = L.seq(loop(L.Store("T", (i,), L.Load("X", (i,), "float32"))),
                 loop(L.Store("X", (i,), L.Const(0.0, "float32"))),
                 loop(L.Store("O", (i,), L.Load("T", (i,), "float32"))))
    with pytest.raises(ScheduleError, match="nest 1 writes X, which the statement reads"):
        apply_primitive(L.PrimFunc("k", (x, o, t), body), ComputeInline(0), outputs=("O",))


def test_cache_write_refuses_other_reads_and_guards():
    c = L.Buffer("C", "float32", (4, 4))
    i, j = L.Var("i"), L.Var("j")
    other = L.Store("C", (i, j), L.Load("C", (j, i), "float32"))
    func = L.PrimFunc("k", (c,), L.For("i", L.const(0), L.const(4), L.For("j", L.const(0), L.const(4), other)))
    with pytest.raises(ScheduleError, match="another statement inside reads C at a cell no store there updates"):
        apply_primitive(func, CacheWrite("i"))
    guarded = L.If(L.Cmp("lt", j, i), L.Store("C", (i, j), L.Const(1.0, "float32")))
    func = L.PrimFunc("k", (c,), L.For("i", L.const(0), L.const(4), L.For("j", L.const(0), L.const(4), guarded)))
    with pytest.raises(ScheduleError, match="accessed under a condition"):
        apply_primitive(func, CacheWrite("i"))


# --------------------------------------------------------------------------- structure


def test_cache_write_structure():
    c = L.Buffer("C", "float32", (4, 6))
    a = L.Buffer("A", "float32", (6,))
    i, j = L.Var("i"), L.Var("j")
    update = L.Store("C", (i, L.add(j, L.const(1))),
                     L.Bin("add", L.Load("C", (i, L.add(j, L.const(1))), "float32"), L.Load("A", (j,), "float32")))
    before = L.PrimFunc("k", (a, c), L.For("i", L.const(0), L.const(4), L.For("j", L.const(0), L.const(5), update)))
    after = verify(apply_primitive(before, CacheWrite("i")))
    alloc = after.body.body
    assert isinstance(alloc, L.Allocate) and alloc.buffer == L.Buffer("C.local", "float32", (1, 5), "local")
    init, body, back = alloc.body.stmts
    r0, r1 = L.Var("C.local.r0"), L.Var("C.local.r1")
    assert init == L.For("C.local.r0", L.const(0), L.const(1), L.For("C.local.r1", L.const(0), L.const(5), L.Store(
        "C.local", (r0, r1), L.Load("C", (L.add(i, r0), L.add(L.const(1), r1)), "float32"))))
    local = (L.const(0), j)
    assert body == L.For("j", L.const(0), L.const(5), L.Store(
        "C.local", local, L.Bin("add", L.Load("C.local", local, "float32"), L.Load("A", (j,), "float32"))))
    w0, w1 = L.Var("C.local.w0"), L.Var("C.local.w1")
    assert back == L.For("C.local.w0", L.const(0), L.const(1), L.For("C.local.w1", L.const(0), L.const(5), L.Store(
        "C", (L.add(i, w0), L.add(L.const(1), w1)), L.Load("C.local", (w0, w1), "float32"))))


def test_partition_structure():
    o = L.Buffer("O", "float32", (6,))
    x = L.Var("x")
    lo = L.Bin("max", L.const(0), L.sub(L.const(1), x))
    hi = L.add(L.Bin("min", L.const(2), L.sub(L.const(6), x)), L.const(1))

    def nest(var: str, inner: str, begin: L.Expr, end: L.Expr, a: int, b: int) -> L.For:
        v, w = L.Var(var), L.Var(inner)
        store = L.Store("O", (v,), L.Bin("add", L.Load("O", (v,), "float32"), L.Cast("float32", w)))
        return L.For(var, L.const(a), L.const(b), L.For(inner, begin, end, store))

    before = L.PrimFunc("k", (o,), nest("x", "i", lo, hi, 0, 6))
    sub = {"x": L.Var("x.pro")}
    from tilec.ir.rewrite import substitute_expr
    expected = L.PrimFunc("k", (o,), L.seq(
        nest("x.pro", "i.x.pro", substitute_expr(lo, sub), substitute_expr(hi, sub), 0, 1),
        nest("x", "i", L.const(0), L.const(3), 1, 5),
        nest("x.epi", "i.x.epi", substitute_expr(lo, {"x": L.Var("x.epi")}),
             substitute_expr(hi, {"x": L.Var("x.epi")}), 5, 6)))
    assert verify(apply_primitive(before, Partition("x"))) == expected
    assert apply_primitive(before, Partition("i")) == expected  # the loop its bounds depend on


def test_partition_removes_a_decided_guard():
    o = L.Buffer("O", "float32", (8,))
    x = L.Var("x")
    guarded = L.If(L.Cmp("ge", x, L.const(2)), L.Store("O", (x,), L.Const(1.0, "float32")),
                   L.Store("O", (x,), L.Const(2.0, "float32")))
    after = apply_primitive(L.PrimFunc("k", (o,), L.For("x", L.const(0), L.const(8), guarded)), Partition("x"))
    pro, interior = after.body.stmts
    assert pro == L.For("x.pro", L.const(0), L.const(2), L.If(
        L.Cmp("ge", L.Var("x.pro"), L.const(2)), L.Store("O", (L.Var("x.pro"),), L.Const(1.0, "float32")),
        L.Store("O", (L.Var("x.pro"),), L.Const(2.0, "float32"))))
    assert interior == L.For("x", L.const(2), L.const(8), L.Store("O", (x,), L.Const(1.0, "float32")))


def test_tensorize_structure():
    func = apply_primitive(_scatter_blocked(), Tensorize("i.i", nest=1))
    kinds = {f.var: f.kind for f in loops_in(func.body)}
    assert kinds["i.i"] == "unrolled" and kinds["j.i"] == "vectorized" and kinds["k"] == "serial"


# --------------------------------------------------------------------------- random schedules

KINDS = ["split", "reorder", "fuse", "unroll", "vectorize", "parallel", "cache_write", "cache_read", "partition",
         "tensorize"]


@st.composite
def scheduled_programs(draw):
    which = draw(st.sampled_from(["matmul", "scatter", "conv"]))
    if which == "conv":
        shapes = {"I": (1, draw(st.integers(1, 6)), draw(st.integers(1, 6)), draw(st.integers(1, 3))),
                  "K": (3, 3, 0, draw(st.integers(1, 4)))}
        shapes["K"] = (3, 3, shapes["I"][3], shapes["K"][3])
        src = CONV
    else:
        m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
        shapes = {"A": (m, k), "B": (k, n)}
        src = MATMUL if which == "matmul" else SCATTER_MATMUL
    moves = draw(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 99), st.integers(0, 99),
                                    st.sampled_from([1, 2, 3, 4, 8])), max_size=7))
    return src, shapes, moves


def _random_primitive(func: L.PrimFunc, move, nest: int, inputs: list[str]):
    kind, a, b, factor = move
    body = func.body.stmts[nest] if isinstance(func.body, L.Seq) else func.body
    loops = loops_in(body)
    if not loops:
        return None
    first, second = loops[a % len(loops)], loops[b % len(loops)]
    if b % 2 and isinstance(first.body, L.For):
        second = first.body
    if kind == "split":
        return Split(first.var, factor, nest)
    if kind == "reorder":
        return Reorder((second.var, first.var), nest)
    if kind == "fuse":
        return Fuse(first.var, second.var, nest)
    if kind == "cache_read":
        return CacheRead(inputs[b % len(inputs)], first.var, nest)
    cls = {"unroll": Unroll, "vectorize": Vectorize, "parallel": Parallel, "cache_write": CacheWrite,
           "partition": Partition, "tensorize": Tensorize}[kind]
    return cls(first.var, nest)


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled_programs(), st.integers(0, 2**32 - 1))
def test_random_schedules_with_memory_primitives_compute_the_default(case, seed):
    src, shapes, moves = case
    r = np.random.default_rng(seed)
    inputs = [r.uniform(-2, 2, shapes[n]).astype(np.float32) for n in shapes]
    nests = lowered_f32(src, shapes).body
    n_nests = len(nests.stmts) if isinstance(nests, L.Seq) else 1
    assert_legal_moves_compute_the_default(
        src, shapes, inputs, moves, lambda func, move: _random_primitive(func, move, move[2] % n_nests, list(shapes)))


# ------------------------------------------------------------------ ComputeAt

COMPUTE_AT_SRC = "function (X[N, K], B[K]) -> (O) { T = exp(X) * 2; O[i: N] = +(T[i, j] * B[j]); }"


def _compute_at_inputs():
    rng = np.random.default_rng(21)
    return rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)


def test_compute_at_computes_the_producer_per_row_of_the_consumer():
    x, b = _compute_at_inputs()
    s = tilec.Schedule()
    s.compute_at(0, "i", 1)
    fn = tilec.compile(COMPUTE_AT_SRC).with_schedule(s)
    loop = fn.explain({"X": x.shape, "B": b.shape}, stage="loop")
    assert "T.local" in loop and "T[" not in loop  # one row computed per i, never stored to T
    np.testing.assert_allclose(fn(x, b), (np.exp(x) * 2) @ b, rtol=1e-5)
    assert tilec.Schedule.from_json(s.to_json()).to_json() == s.to_json()


@pytest.mark.parametrize("args, match", [
    ((0, "i", 0), "read by nest 1, not by nest 0"),
    ((0, "zz", 1), "no loop 'zz'"),
    ((1, "i", 1), "not an elementwise statement"),
])
def test_compute_at_refusals(args, match):
    x, b = _compute_at_inputs()
    s = tilec.Schedule()
    s.compute_at(*args)
    with pytest.raises(tilec.ScheduleError, match=match):
        tilec.compile(COMPUTE_AT_SRC).with_schedule(s)(x, b)


def test_compute_at_an_output_is_refused():
    src = "function (X[N, K], B[K]) -> (T, O) { T = exp(X) * 2; O[i: N] = +(T[i, j] * B[j]); }"
    x, b = _compute_at_inputs()
    s = tilec.Schedule()
    s.compute_at(0, "i", 1)
    with pytest.raises(tilec.ScheduleError, match="output"):
        tilec.compile(src).with_schedule(s)(x, b)
