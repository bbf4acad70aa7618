"""Schedule primitives: values against numpy, JSON round trips, every ScheduleError, structural
before/expected checks, and random legal schedules that must compute what the default computes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from random_schedules import assert_legal_moves_compute_the_default, lowered_f32
from reference import CONV_NHWC_SAME, MATMUL, SOFTMAX, assert_matches, conv2d_nhwc, randn, rng, softmax_rows
from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.verify import verify
from tilec.schedule.primitives.apply import apply_primitive, apply_schedule
from tilec.schedule.primitives.records import (Fuse, Parallel, Reorder, Schedule, Split, Unroll, Vectorize,
                                       primitive_from_json)
from tilec.ir.rewrite import loops_in

CONV = CONV_NHWC_SAME


def _schedule(*primitives) -> Schedule:
    return Schedule(primitives)


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("schedule", [
    _schedule(Split("i", 8), Split("j", 11), Reorder(("i.o", "j.o", "i.i", "j.i")), Parallel("i.o"),
              Vectorize("j.i")),
    _schedule(Split("j", 7), Parallel("j.o")),  # 7 does not divide 33: a clamped tail
    _schedule(Split("j", 11), Unroll("j.i"), Parallel("i")),
    _schedule(Fuse("i", "j"), Parallel("i.j.f")),
    _schedule(Split("k", 6), Unroll("k.i"), Reorder(("j", "i"))),
    _schedule(Split("i", 5), Fuse("i.o", "i.i"), Split("i.o.i.i.f", 3), Parallel("i.o.i.i.f.o")),
])
def test_matmul_schedules_match_numpy(schedule):
    r = rng(0)
    a, b = randn(r, 20, 18), randn(r, 18, 33)
    f = tilec.compile(MATMUL).with_schedule(schedule)
    assert_matches(f(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_conv2d_with_padding_split_reorder_parallel():
    r = rng(1)
    img, ker = randn(r, 2, 9, 10, 3), randn(r, 3, 3, 3, 4)
    s = tilec.Schedule()
    x_o, x_i = s.split("x", 4)
    s.split("i", 2)  # bounds max(0, 1 - x) .. min(...): an expression extent
    s.reorder("n", x_o, "y", x_i)
    s.parallel(x_o)
    s.vectorize("f")
    s.unroll("c")
    out = tilec.compile(CONV).with_schedule(s)(img, ker)
    assert_matches(out, conv2d_nhwc(img, ker, pad=1), dtype=np.float32)


def test_softmax_schedules_name_their_nest():
    x = randn(rng(2), 13, 21) * 3
    nests = lowered_f32(SOFTMAX, {"X": (13, 21)}).body.stmts
    assert [n.var for n in nests] == ["M.c0", "i", "M.c0", "i0", "S.c0", "i", "i0"]
    s = tilec.Schedule()
    for nest, loop in enumerate(nests):
        s.parallel(loop.var, nest=nest)  # the update nests (1, 5) too: row i owns M[i, 0]
    s.split("j", 4, nest=5)
    s.split("i1", 7, nest=6)
    s.vectorize("i1.i", nest=6)
    s.unroll("i1", nest=3)
    out = tilec.compile(SOFTMAX).with_schedule(s)(x)
    assert_matches(out, softmax_rows(x), dtype=np.float32, rtol=1e-5, atol=1e-6)


def test_explain_shows_the_scheduled_loop_ir():
    s = tilec.Schedule()
    s.split("i", 2)
    s.parallel("i.o")
    text = tilec.compile(MATMUL).with_schedule(s).explain({"A": (4, 3), "B": (3, 5)}, stage="loop")
    assert "for parallel i.o in [0, 2):" in text and "for i.i in [0, 2):" in text


def test_with_schedule_keeps_the_original_and_caches_separately():
    f = tilec.compile(MATMUL)
    s = tilec.Schedule()
    s.unroll("k")
    g = f.with_schedule(s)
    assert f.schedule is None and g.program is f.program  # None: the heuristic picks templates
    a, b = randn(rng(3), 3, 4), randn(rng(4), 4, 2)
    assert_matches(g(a, b), f(a, b), dtype=np.float32)
    sig = f._signature([a, b])
    assert f.kernel(sig).key != g.kernel(sig).key


def test_vectorize_and_unroll_reach_llvm():
    s = tilec.Schedule()
    s.split("j", 16)
    s.vectorize("j.i")
    s.unroll("k")
    text = tilec.compile(MATMUL).with_schedule(s).explain({"A": (4, 3), "B": (3, 32)}, stage="llvm-raw")
    assert "llvm.loop.vectorize.enable" in text and "distinct !{" in text
    assert "for_k" not in text  # fully unrolled by tilec itself


# --------------------------------------------------------------------------- data


def test_json_round_trip():
    s = tilec.Schedule()
    i_o, i_i = s.split("i", 8)
    s.reorder(i_o, "j", i_i)
    fused = s.fuse("j", i_i)
    s.unroll("k")
    s.vectorize(fused)
    s.parallel(i_o, nest=0)
    data = json.loads(json.dumps(s.to_json()))
    assert all("kind" in d for d in data)
    assert Schedule.from_json(data) == s
    assert Schedule.from_json(json.dumps(data)).key() == s.key()
    for p in s:
        assert primitive_from_json(p.to_json()) == p
    # an empty Schedule keeps the plain default nest: not the default, which picks templates
    assert Schedule().key() != "default" and s.key() != Schedule(s.primitives[:-1]).key()


def test_bad_json_is_a_schedule_error():
    with pytest.raises(ScheduleError, match="unknown schedule primitive kind 'tile'"):
        primitive_from_json({"kind": "tile", "loop": "i"})
    with pytest.raises(ScheduleError, match="unknown field"):
        primitive_from_json({"kind": "split", "loop": "i", "factor": 2, "size": 3})


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("primitive, message", [
    (Split("x", 2), r"no loop 'x' in nest 0; its loops are i, j, k"),
    (Split("i", 0), "factor must be a positive integer"),
    (Split("i", 2, nest=3), "no loop nest 3; the program has 1"),
    (Reorder(("i", "k")), "reorder needs perfectly nested loops"),
    (Reorder(("i", "i")), "named twice"),
    (Fuse("i", "k"), "fuse needs adjacent loops"),
    (Unroll("i"), "more than the unroll limit 64"),
    (Parallel("k"), "it is a reduction loop, every iteration updates C.acc"),
])
def test_schedule_errors(primitive, message):
    func = lowered_f32(MATMUL, {"A": (100, 7), "B": (7, 5)})
    with pytest.raises(ScheduleError, match=message):
        apply_primitive(func, primitive)


def test_unroll_and_vectorize_need_a_constant_extent():
    func = apply_primitive(lowered_f32(MATMUL, {"A": (10, 7), "B": (7, 5)}), Split("i", 4))
    for p in (Unroll("i.i"), Vectorize("i.i")):
        with pytest.raises(ScheduleError, match="not a compile-time constant"):
            apply_primitive(func, p)
    conv = lowered_f32(CONV, {"I": (1, 5, 5, 1), "K": (3, 3, 1, 1)})
    with pytest.raises(ScheduleError, match="extent of loop j is not a compile-time constant"):
        apply_primitive(conv, Fuse("i", "j"))


def test_reorder_refuses_bounds_that_depend_on_an_inner_loop():
    store = L.Store("C", (L.Var("x"), L.Var("i")), L.Const(1.0, "float32"))
    triangle = L.PrimFunc("k", (L.Buffer("C", "float32", (5, 5)),),
                          L.For("x", L.const(0), L.const(5), L.For("i", L.const(0), L.Var("x"), store)))
    with pytest.raises(ScheduleError, match="bounds of loop i depend on a loop that would move inside it"):
        apply_primitive(triangle, Reorder(("i", "x")))
    with pytest.raises(ScheduleError, match=r"bounds of loop i depend on x \(not a rectangle\)"):
        apply_primitive(triangle, Fuse("x", "i"))
    siblings = L.PrimFunc("k", triangle.params, L.For("x", L.const(0), L.const(5), L.seq(
        L.For("a", L.const(0), L.const(5), L.Store("C", (L.Var("x"), L.Var("a")), L.Const(1.0, "float32"))),
        L.For("b", L.const(0), L.const(5), L.Store("C", (L.Var("x"), L.Var("b")), L.Const(2.0, "float32"))))))
    with pytest.raises(ScheduleError, match="loops a and b are not nested one inside the other"):
        apply_primitive(siblings, Reorder(("a", "b")))


def test_parallel_errors():
    func = apply_primitive(lowered_f32(MATMUL, {"A": (4, 3), "B": (3, 5)}), Parallel("i"))
    with pytest.raises(ScheduleError, match="nested inside parallel loop i"):
        apply_primitive(func, Parallel("j"))
    with pytest.raises(ScheduleError, match="already parallel"):
        apply_primitive(func, Vectorize("i"))
    inner = apply_primitive(lowered_f32(MATMUL, {"A": (4, 3), "B": (3, 5)}), Parallel("j"))
    with pytest.raises(ScheduleError, match="contains parallel loop j"):
        apply_primitive(inner, Parallel("i"))
    scatter = lowered_f32("function (I[X], K[KX]) -> (O) { O[x + i: X + KX - 1] = +(I[x] * K[i]); }",
                       {"I": (6,), "K": (3,)})
    with pytest.raises(ScheduleError, match=r"different iterations may write the same element O\[\(x \+ i\)\]"):
        apply_primitive(scatter, Parallel("x", nest=1))
    softmax = lowered_f32(SOFTMAX, {"X": (3, 4)})
    with pytest.raises(ScheduleError, match=r"reduction loop, every iteration updates M\[i, 0\]"):
        apply_primitive(softmax, Parallel("j", nest=1))


def test_new_names_must_be_fresh():
    store = L.Store("C", (L.Var("i.o"), L.Var("i")), L.Const(1.0, "float32"))
    func = L.PrimFunc("k", (L.Buffer("C", "float32", (2, 2)),),
                      L.For("i.o", L.const(0), L.const(2), L.For("i", L.const(0), L.const(2), store)))
    with pytest.raises(ScheduleError, match="a loop named 'i.o' already exists"):
        apply_primitive(func, Split("i", 2))


# --------------------------------------------------------------------------- structure


def _copy(i: L.Expr) -> L.Stmt:
    return L.Store("B", (i,), L.Load("A", (i,), "float32"))


def _copy_func(body: L.Stmt) -> L.PrimFunc:
    return L.PrimFunc("k", (L.Buffer("A", "float32", (10,)), L.Buffer("B", "float32", (10,))), body)


def test_split_structure_with_a_tail():
    before = _copy_func(L.For("i", L.const(0), L.const(10), _copy(L.Var("i"))))
    o, i = L.Var("i.o"), L.Var("i.i")
    expected = _copy_func(L.For("i.o", L.const(0), L.const(3), L.For(
        "i.i", L.const(0), L.Bin("min", L.const(4), L.Bin("sub", L.const(10), L.Bin("mul", o, L.const(4)))),
        _copy(L.Bin("add", L.Bin("mul", o, L.const(4)), i)))))
    assert verify(apply_primitive(before, Split("i", 4))) == expected
    exact = apply_primitive(before, Split("i", 5))
    assert exact.body.end == L.const(2) and exact.body.body.end == L.const(5)


def test_split_of_an_expression_bound():
    x = L.Var("x")
    before = _copy_func(L.For("x", L.const(0), L.const(10), L.For(
        "i", L.Bin("max", L.const(0), L.sub(L.const(1), x)), L.const(3), _copy(L.add(x, L.Var("i"))))))
    after = verify(apply_primitive(before, Split("i", 2)))
    (outer,) = [f for f in loops_in(after.body) if f.var == "i.o"]
    n = L.sub(L.const(3), L.Bin("max", L.const(0), L.sub(L.const(1), x)))
    assert outer.end == L.Bin("div", L.add(n, L.const(1)), L.const(2))


def test_reorder_structure_and_sharing():
    body = L.Store("C", (L.Var("i"), L.Var("j")), L.Const(1.0, "float32"))
    inner = L.For("j", L.const(0), L.const(3), body)
    before = L.PrimFunc("k", (L.Buffer("C", "float32", (2, 3)),), L.For("i", L.const(0), L.const(2), inner))
    after = apply_primitive(before, Reorder(("j", "i")))
    assert after == L.PrimFunc("k", before.params, L.For("j", L.const(0), L.const(3),
                                                         L.For("i", L.const(0), L.const(2), body)))
    assert after.body.body.body is body  # unchanged subtrees are shared
    assert apply_schedule(before, Schedule()) is before


# --------------------------------------------------------------------------- random schedules


@st.composite
def scheduled_contractions(draw):
    letters = "ijkl"
    sizes = {c: draw(st.integers(1, 9)) for c in letters}
    acc_a = draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True))
    acc_b = draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True))
    used = list(dict.fromkeys(acc_a + acc_b))
    out = draw(st.permutations(used))[:draw(st.integers(1, len(used)))]
    moves = draw(st.lists(st.tuples(st.sampled_from(["split", "reorder", "fuse", "unroll", "vectorize", "parallel"]),
                                    st.integers(0, 99), st.integers(0, 99), st.integers(1, 9)), max_size=6))
    return sizes, acc_a, acc_b, out, moves


def _random_primitive(func: L.PrimFunc, move) -> object:
    kind, a, b, factor = move
    loops = loops_in(func.body)
    first, second = loops[a % len(loops)], loops[b % len(loops)]
    if b % 2 and isinstance(first.body, L.For):  # often pick a directly nested pair, to be legal
        second = first.body
    if kind == "split":
        return Split(first.var, factor)
    if kind == "reorder":
        return Reorder((second.var, first.var))
    if kind == "fuse":
        return Fuse(first.var, second.var)
    return {"unroll": Unroll, "vectorize": Vectorize, "parallel": Parallel}[kind](first.var)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled_contractions(), st.integers(0, 2**32 - 1))
def test_random_legal_schedules_compute_the_default(case, seed):
    sizes, acc_a, acc_b, out, moves = case
    src = f"O[{', '.join(out)}: {', '.join('N' + c for c in out)}] = " \
          f"+(A[{', '.join(acc_a)}] * B[{', '.join(acc_b)}])"
    r = np.random.default_rng(seed)
    a = r.uniform(-2, 2, [sizes[c] for c in acc_a]).astype(np.float32)
    b = r.uniform(-2, 2, [sizes[c] for c in acc_b]).astype(np.float32)
    assert_legal_moves_compute_the_default(src, {"A": a.shape, "B": b.shape}, [a, b], moves, _random_primitive)
