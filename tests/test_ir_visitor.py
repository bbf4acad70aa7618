"""The loop-IR visitor/rewriter base (tilec.ir.visitor) and the passes built on it: structural
before/expected comparisons, every node kind reached, unchanged rewrites shared, WMMA statements
substituted into and verified."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tests.cuda_kernels import single_warp_mma, wmma_gemm
from tilec.config import options
from tilec.ir import loop as L
from tilec.ir.rewrite import map_expr, map_stmt_exprs, substitute, substitute_expr
from tilec.ir.verify import verify
from tilec.ir.visitor import (NODE_CLASSES, Rewriter, Visitor, child_stmts, children, map_child_stmts, map_children,
                              walk)
from tilec.pipeline import Signature, lower_program
from tilec.schedule.primitives.loops import accesses

V, c = L.Var, L.const
F16, F32 = "float16", "float32"


def every_kind() -> L.PrimFunc:
    """A (meaningless but well-formed) function holding one node of every class of tilec.ir.loop."""
    i, j = V("i"), V("j")
    value = L.Select(L.Not(L.Cmp("lt", i, j)), L.Cast(F32, L.Bin("add", i, j)),
                     L.Call("exp", (L.Load("X", (i,), F32),), F32))
    frags = L.Allocate(L.Buffer("acc", F32, (2, 16, 16), "wmma.accumulator"), L.Allocate(
        L.Buffer("fa", F16, (16, 16), "wmma.matrix_a"), L.Allocate(L.Buffer("fb", F16, (16, 16), "wmma.matrix_b"), L.seq(
            L.WmmaFill("acc", (j,), L.Const(0.0, F32)),
            L.WmmaLoad("fa", (), "A", (L.mul(i, c(16)), c(0))),
            L.WmmaLoad("fb", (), "B", (c(0), c(0))),
            L.WmmaMma("acc", (j,), "fa", (), "fb", ()),
            L.WmmaStore("C", (c(0), L.mul(j, c(16))), "acc", (j,))))))
    tiles = L.TileRegion(L.TileDot("C", (c(0), c(0)), "TA", (c(0), c(0), c(0)), "TB", (c(0), c(0), c(0)), L.mul(i, c(16)),
                                   L.Cmp("eq", j, c(0)), 16, 32))
    body = L.For("i", c(0), c(4), L.For("j", c(0), c(2), L.seq(
        L.If(L.Cmp("lt", i, c(2)), L.Store("Y", (i,), value), L.Barrier()), frags, tiles)))
    params = (L.Buffer("X", F32, (4,)), L.Buffer("Y", F32, (4,)), L.Buffer("A", F16, (64, 16)),
              L.Buffer("B", F16, (16, 16)), L.Buffer("C", F32, (16, 32)), L.Buffer("TA", "bfloat16", (4, 16, 32)),
              L.Buffer("TB", "bfloat16", (64, 32, 2)))
    return L.PrimFunc("every_kind", params, body)


# ------------------------------------------------------------------ traversal


def test_walk_reaches_every_node_class_of_the_loop_ir() -> None:
    defined = {v for v in vars(L).values()
               if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == L.__name__} - {L.Buffer}
    assert set(NODE_CLASSES) == defined, "a node class is missing from L.Expr / L.Stmt"
    func = verify(every_kind())
    assert {type(n) for n in walk(func)} == defined


def test_children_come_in_field_order_with_buffers_and_names_as_leaves() -> None:
    i = V("i")
    body = L.Store("Y", (i,), L.Load("X", (i,), F32))
    loop = L.For("i", c(0), c(4), body, "parallel")
    assert children(loop) == (c(0), c(4), body)
    assert child_stmts(loop) == (body,)
    alloc = L.Allocate(L.Buffer("t", F32, (4,), "local"), body)
    assert children(alloc) == (body,)
    assert children(L.If(L.Cmp("lt", i, c(2)), body)) == (L.Cmp("lt", i, c(2)), body)  # no orelse: left out
    load = L.WmmaLoad("fa", (i,), "A", (c(0), c(16)))
    assert children(load) == (i, c(0), c(16))
    assert children(L.Barrier()) == () and children("a name") == () and children(L.Buffer("X", F32, (1,))) == ()


def test_walk_is_pre_order() -> None:
    i = V("i")
    e = L.Bin("add", L.Bin("mul", i, c(2)), L.Load("X", (i,), F32))
    assert list(walk(e)) == [e, e.a, i, c(2), e.b, i]


def test_visitor_dispatches_on_the_class_then_on_the_kind_of_node() -> None:
    class Names(Visitor):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def visit_For(self, s: L.For) -> None:
            self.seen.append(f"loop {s.var}")
            self.generic_visit(s)

        def visit_Var(self, e: L.Var) -> None:
            self.seen.append(e.name)

        def visit_stmt(self, s: L.Stmt) -> None:
            self.seen.append(type(s).__name__)
            self.generic_visit(s)

    names = Names()
    names.visit(every_kind().body)
    assert names.seen[:4] == ["loop i", "loop j", "Seq", "If"]
    assert names.seen.count("WmmaMma") == 1 and "j" in names.seen


# ------------------------------------------------------------------ rewriting


class _Unchanged(Rewriter):
    def rewrite_Var(self, e: L.Var) -> L.Expr:
        return e


@pytest.mark.parametrize("func", [every_kind(), wmma_gemm(64, 64, 32), single_warp_mma().func],
                         ids=["every_kind", "wmma_gemm", "single_warp_mma"])
def test_rewrites_that_change_nothing_return_the_same_object(func: L.PrimFunc) -> None:
    assert _Unchanged().rewrite(func) is func
    assert substitute(func.body, {}) is func.body
    assert substitute(func.body, {"unused": c(3)}) is func.body
    assert map_stmt_exprs(func.body, lambda e: e) is func.body
    assert map_children(func.body, lambda n: n) is func.body
    assert map_child_stmts(func.body, lambda n: n) is func.body


def test_a_rewrite_rebuilds_only_the_path_to_the_change() -> None:
    i, j = V("i"), V("j")
    kept = L.Store("Y", (j,), c(1))
    changed = L.Store("Y", (i,), c(2))
    before = L.For("i", c(0), c(4), L.seq(kept, changed))
    after = substitute(before, {"i": L.add(j, c(1))})
    assert after == L.For("i", c(0), c(4), L.seq(kept, L.Store("Y", (L.add(j, c(1)),), c(2))))
    assert after.body.stmts[0] is kept  # type: ignore[union-attr]


def test_substitution_reaches_loop_bounds_conditions_and_values() -> None:
    n, i = V("n"), V("i")
    before = L.For("i", c(0), n, L.If(L.Cmp("lt", i, n), L.Store("Y", (i,), L.Cast(F32, n))))
    expected = L.For("i", c(0), c(8), L.If(L.Cmp("lt", i, c(8)), L.Store("Y", (i,), L.Cast(F32, c(8)))))
    assert substitute(before, {"n": c(8)}) == expected


def test_substitution_inside_wmma_statements() -> None:
    w, k = V("w"), V("k")
    before = L.seq(
        L.WmmaFill("acc", (w,), L.Cast(F32, L.Load("s", (w,), F16))),
        L.WmmaLoad("fa", (w,), "A", (L.mul(w, c(16)), L.mul(k, c(16)))),
        L.WmmaMma("acc", (w,), "fa", (w,), "fb", (k,)),
        L.WmmaStore("C", (L.mul(w, c(16)), c(0)), "acc", (w,)))
    two = c(2)
    expected = L.seq(
        L.WmmaFill("acc", (two,), L.Cast(F32, L.Load("s", (two,), F16))),
        L.WmmaLoad("fa", (two,), "A", (L.Bin("mul", two, c(16)), L.mul(k, c(16)))),
        L.WmmaMma("acc", (two,), "fa", (two,), "fb", (k,)),
        L.WmmaStore("C", (L.Bin("mul", two, c(16)), c(0)), "acc", (two,)))
    assert substitute(before, {"w": two}) == expected  # substitution does not fold: 2 * 16 stays


def test_map_stmt_exprs_is_bottom_up_and_reaches_every_statement() -> None:
    i = V("i")
    before = L.seq(L.Store("Y", (i,), L.Load("X", (L.add(i, c(1)),), F32)),
                   L.WmmaLoad("fa", (i,), "A", (L.add(i, c(1)), c(0))))

    def fold_plus_one(e: L.Expr) -> L.Expr:
        return V("i1") if e == L.Bin("add", i, c(1)) else e

    expected = L.seq(L.Store("Y", (i,), L.Load("X", (V("i1"),), F32)), L.WmmaLoad("fa", (i,), "A", (V("i1"), c(0))))
    assert map_stmt_exprs(before, fold_plus_one) == expected


def test_accesses_put_a_statements_own_expressions_outside_it() -> None:
    i, j = V("i"), V("j")
    bound = L.Load("N", (c(0),), L.INDEX)
    inner = L.For("j", c(0), bound, L.Store("Y", (j,), L.Load("X", (i, j), F32)))
    outer = L.For("i", c(0), c(4), inner)
    found = [(type(n).__name__, n.buffer, tuple(p.var for p in path))
             for n, path in accesses(outer)]
    assert found == [("Load", "N", ("i",)), ("Store", "Y", ("i", "j")), ("Load", "X", ("i", "j"))]


# ------------------------------------------------------------------ random expressions


def _leaf() -> st.SearchStrategy[L.Expr]:
    return st.one_of(st.integers(-6, 6).map(L.const), st.sampled_from("xyz").map(V))


def _node(kids: st.SearchStrategy[L.Expr]) -> st.SearchStrategy[L.Expr]:
    return st.one_of(
        st.builds(L.Bin, st.sampled_from(["add", "sub", "mul", "min", "max"]), kids, kids),
        st.builds(lambda op, a, b, x, y: L.Select(L.Cmp(op, a, b), x, y), st.sampled_from(["lt", "eq", "ge"]),
                  kids, kids, kids, kids),
        st.builds(lambda a, b: L.Load("T", (a, b), L.INDEX), kids, kids))


EXPRS = st.recursive(_leaf(), _node, max_leaves=16)
ENVS = st.fixed_dictionaries({k: st.integers(-9, 9) for k in "xyz"})


def evaluate(e: L.Expr, env: dict[str, int]) -> int:
    """A reference meaning of the generated expressions; T[a, b] reads 7a + b."""
    if isinstance(e, L.Const):
        return int(e.value)
    if isinstance(e, L.Var):
        return env[e.name]
    if isinstance(e, L.Load):
        a, b = (evaluate(x, env) for x in e.indices)
        return 7 * a + b
    if isinstance(e, L.Select):
        cond = e.cond
        assert isinstance(cond, L.Cmp)
        a, b = evaluate(cond.a, env), evaluate(cond.b, env)
        holds = {"lt": a < b, "eq": a == b, "ge": a >= b}[cond.op]
        return evaluate(e.a if holds else e.b, env)
    assert isinstance(e, L.Bin)
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}[e.op]


@settings(max_examples=150, deadline=None)
@given(EXPRS)
def test_random_expressions_rewritten_without_change_are_the_same_object(e: L.Expr) -> None:
    assert substitute_expr(e, {}) is e
    assert substitute_expr(e, {"w": c(1)}) is e
    assert _Unchanged().rewrite(e) is e
    assert map_expr(e, lambda n: n) is e
    assert substitute_expr(e, {"x": V("x")}) == e  # an equal variable: an equal tree


@settings(max_examples=150, deadline=None)
@given(EXPRS, EXPRS, ENVS)
def test_substituting_then_evaluating_is_evaluating_with_the_value_bound(e: L.Expr, r: L.Expr,
                                                                          env: dict[str, int]) -> None:
    assert evaluate(substitute_expr(e, {"x": r}), env) == evaluate(e, {**env, "x": evaluate(r, env)})


# ------------------------------------------------------------------ verify


def test_verify_accepts_the_hand_built_wmma_kernels() -> None:
    verify(wmma_gemm(64, 64, 32))
    verify(single_warp_mma().func)
    verify(every_kind())


def test_verify_accepts_the_tensor_core_template_in_debug_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "debug", True)  # the pipeline verifies every loop-IR stage
    fn = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])", target="cuda-sim")
    sig = Signature((("A", (64, 48)), ("B", (48, 64))), (("A", F16), ("B", F16)), ())
    func = lower_program(fn.program, sig, None, fn.target)[1]
    assert any(isinstance(n, L.WmmaMma) for n in walk(func.body)), "the tensor-core template was not used"
    verify(func)


def _replace_first(func: L.PrimFunc, cls: type, **changes: object) -> L.PrimFunc:
    class Once(Rewriter):
        done = False

        def rewrite_stmt(self, s: L.Stmt) -> L.Stmt:
            if isinstance(s, cls) and not self.done:
                self.done = True
                return dataclasses.replace(s, **changes)  # type: ignore[type-var]
            return self.rebuild(s)

    out = Once().rewrite(func)
    assert out is not func
    return out


@pytest.mark.parametrize("cls, changes, message", [
    (L.WmmaLoad, {"frag": "nowhere"}, "unknown fragment nowhere"),
    (L.WmmaLoad, {"buffer": "missing"}, "window into unknown buffer missing"),
    (L.WmmaLoad, {"origin": (c(0),)}, "needs 2 origin indices"),
    (L.WmmaLoad, {"index": ()}, "takes 1 indices, got 0"),
    (L.WmmaLoad, {"origin": (V("stranger"), c(0))}, "variable stranger used outside its loop"),
    (L.WmmaLoad, {"buffer": "C"}, "(float32) for fragment fa (float16)"),
    (L.WmmaMma, {"a": "fb"}, "fb has scope wmma.matrix_b, expected wmma.matrix_a"),
    (L.WmmaMma, {"b_index": (V("stranger"),)}, "variable stranger used outside its loop"),
    (L.WmmaFill, {"value": L.Const(0.0, F16)}, "with a float16 value"),
    (L.WmmaFill, {"frag": "fa"}, "expected wmma.accumulator"),
    (L.WmmaStore, {"buffer": "sA"}, "window into sA (float16) for fragment acc (float32)"),
    (L.WmmaStore, {"index": (c(0),)}, "takes 2 indices, got 1"),
], ids=lambda x: x.__name__ if isinstance(x, type) else None)
def test_verify_rejects_broken_wmma_statements(cls: type, changes: dict, message: str) -> None:
    broken = _replace_first(wmma_gemm(64, 64, 32), cls, **changes)
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify(broken)
