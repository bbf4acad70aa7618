"""Bounds inference and lowering, checked structurally (expected IR built by hand)."""

from __future__ import annotations

import pytest

import tilec
from tilec.ir import loop as L
from tilec.ir.bounds import bind
from tilec.ir.lower import lower
from tilec.ir.verify import verify
from tilec.ir.visitor import walk


def _bound(src: str, shapes: dict, **sizes):
    program = tilec.parse(src, sizes)
    return bind(program, shapes, {n: "float32" for n in shapes}, sizes)


def test_matmul_lowers_to_a_register_accumulated_loop_nest():
    func = lower(_bound("C[i, j: M, N] = +(A[i, k] * B[k, j])", {"A": (4, 3), "B": (3, 5)}))
    acc = L.Buffer("C.acc", "float32", (), "local")
    i, j, k = L.Var("i"), L.Var("j"), L.Var("k")
    update = L.Store("C.acc", (), L.Bin("add", L.Load("C.acc", (), "float32"),
                                        L.Bin("mul", L.Load("A", (i, k), "float32"), L.Load("B", (k, j), "float32"))))
    cell = L.seq(L.Store("C.acc", (), L.Const(0.0, "float32")),
                 L.For("k", L.const(0), L.const(3), update),
                 L.Store("C", (i, j), L.Load("C.acc", (), "float32")))
    expected = L.PrimFunc("tilec_kernel", (L.Buffer("A", "float32", (4, 3)), L.Buffer("B", "float32", (3, 5)),
                                            L.Buffer("C", "float32", (4, 5))),
                          L.For("i", L.const(0), L.const(4), L.For("j", L.const(0), L.const(5), L.Allocate(acc, cell))))
    assert func == expected


def test_implied_guards_are_dropped():
    b = _bound("C[i, j: M, N] = +(A[i, k] * B[k, j])", {"A": (4, 3), "B": (3, 5)}).statements[0]
    assert b.guards == ()
    assert b.ranges == (("i", 0, 3), ("j", 0, 4), ("k", 0, 2))


def test_padding_guards_become_loop_bounds_not_branches():
    src = "function (I[H, W], K[KH, KW]) -> (O) { O[x, y: H, W] = +(I[x + i - 1, y + j - 1] * K[i, j]); }"
    bp = _bound(src, {"I": (6, 7), "K": (3, 3)})
    (stmt,) = bp.statements
    assert dict((v, (lo, hi)) for v, lo, hi in stmt.ranges) == {"x": (0, 5), "y": (0, 6), "i": (0, 2), "j": (0, 2)}
    assert len(stmt.guards) == 2  # x + i - 1 and y + j - 1 stay in bounds
    func = verify(lower(bp))
    assert not any(isinstance(n, L.If) for n in walk(func.body)), "guards left as branches"
    loops = {n.var: n for n in walk(func.body) if isinstance(n, L.For)}
    # i runs over [max(0, 1 - x), min(2, 6 - x) + 1)
    assert isinstance(loops["i"].begin, L.Bin) and loops["i"].begin.op == "max"


def test_triangular_domain_from_a_constraint():
    bp = _bound("function (I[N]) -> (O) { O[i: N] = +(I[k]), i - k < N; }", {"I": (5,)})
    func = verify(lower(bp))
    loops = {n.var: n for n in walk(func.body) if isinstance(n, L.For)}
    assert any(isinstance(n, L.Bin) and n.op == "min" for n in walk(loops["k"].end))  # k <= i
    assert not any(isinstance(n, L.If) for n in walk(func.body))


def test_divisibility_guard_stays_a_branch():
    bp = _bound("function (I[N]) -> (O) { O[i: 2 * N] = +(I[i / 2]); }", {"I": (3,)})
    (stmt,) = bp.statements
    assert any(g.expr.divisor == 2 for g in stmt.guards)
    assert any(isinstance(n, L.If) for n in walk(verify(lower(bp)).body))


def test_complex_left_hand_side_scatters_into_an_initialised_output():
    bp = _bound("function (I[X], K[KX]) -> (O) { O[x + i: X + KX - 1] = +(I[x] * K[i]); }", {"I": (6,), "K": (3,)})
    assert bp.shapes["O"] == (8,)
    func = verify(lower(bp))
    stores = [n for n in walk(func.body) if isinstance(n, L.Store) and n.buffer == "O"]
    assert len(stores) == 2  # initialise, then accumulate


def test_max_with_possibly_unwritten_cells_tracks_written_flags():
    bp = _bound("function (I[N]) -> (O) { O[i: N + 2] = >(I[i]); }", {"I": (3,)})
    func = verify(lower(bp))
    assert any(b.name == "O.written" for b in func.params)


def test_output_size_symbol_inferred_from_index_range():
    bp = _bound("O[i, j: P, Q] = +(A[i, k] * B[k, j])", {"A": (2, 3), "B": (3, 4)})
    assert bp.sizes == {"P": 2, "Q": 4}
    assert bp.shapes["O"] == (2, 4)


@pytest.mark.parametrize("src, shapes", [
    ("O[] = +(A[i, i])", {"A": (3, 3)}),
    ("function (X[N, K]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); O = exp(X - M); }", {"X": (3, 4)}),
    ("function (I[N, M]) -> (O) { O[2i, j: 2N, M] = =(I[i, j]); }", {"I": (3, 4)}),
    ("O[i: N] = +(A[i] == B[i] ? C[i])", {"A": (3,), "B": (3,), "C": (3,)}),
])
def test_lowered_programs_verify(src, shapes):
    sizes = {"N": 3} if "N]" in src and "function" not in src else {}
    verify(lower(_bound(src, shapes, **sizes)))


def test_verifier_rejects_ill_formed_ir():
    bad = L.PrimFunc("k", (L.Buffer("A", "float32", (2,)),), L.Store("A", (L.Var("i"),), L.Const(0.0, "float32")))
    with pytest.raises(AssertionError, match="outside its loop"):
        verify(bad)
    wrong_rank = L.PrimFunc("k", (L.Buffer("A", "float32", (2,)),),
                            L.For("i", L.const(0), L.const(2), L.Store("A", (L.Var("i"), L.Var("i")),
                                                                         L.Const(0.0, "float32"))))
    with pytest.raises(AssertionError, match="rank"):
        verify(wrong_rank)
