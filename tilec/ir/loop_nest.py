"""Loop nests from Tile's index arithmetic: affine indices and guards as loop IR expressions, and
the nest of loops over given ranges with each guard turned into the bounds of the innermost loop it
mentions (``max``/``min`` of affine expressions) where it can, an ``if`` where it cannot.

Requires: IntAffine indices and Conditions of a bound statement (tilec.ir.bounds), whose numerators
tilec.ir.index_width has proved free of int64 overflow. Guarantees: expressions that evaluate those
indices in that proven order; nests whose iterations are exactly the points of the ranges that
satisfy every guard.
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import Condition
from tilec.ir.index_width import INT64_MAX


def affine_expr(e: IntAffine) -> L.Expr:
    """The integer numerator of `e` as an int64 expression: the constant plus each term in turn, or
    with g > 1 the gcd of the coefficients, ``g * (sum of (c/g) * v) + const``. That is the order
    tilec.ir.index_width proves free of overflow (keep the two in step)."""
    g = e.content or 1
    out: L.Expr = L.const(e.const if g == 1 else 0)
    for v, c in e.coeffs:
        term = L.mul(L.const(c // g), L.Var(v))
        out = L.add(term, out) if not (isinstance(out, L.Const) and out.value == 0) else term
    if g == 1:
        return out
    return L.add(L.mul(L.const(g), out), L.const(e.const))


def index_expr(e: IntAffine) -> L.Expr:
    """The index `e` (exact where its condition holds). A divisor beyond int64 exceeds every
    numerator there (index_width proves them below 2**63), so the index is 0 where it is valid."""
    num = affine_expr(e)
    if e.divisor == 1:
        return num
    return L.const(0) if e.divisor > INT64_MAX else L.Bin("div", num, L.const(e.divisor))


def condition_expr(c: Condition) -> L.Expr:
    num = affine_expr(c.expr)
    parts: list[L.Expr] = []
    if c.lo is not None:
        parts.append(L.Cmp("ge", num, L.const(c.lo)))
    if c.hi is not None:
        parts.append(L.Cmp("le", num, L.const(c.hi)))
    if c.expr.divisor > INT64_MAX:  # divides a numerator below 2**63 only when it is 0
        parts.append(L.Cmp("eq", num, L.const(0)))
    elif c.expr.divisor != 1:
        parts.append(L.Cmp("eq", L.Bin("mod", num, L.const(c.expr.divisor)), L.const(0)))
    return L.logical_and(parts) or L.Const(True, "bool")


def broadcast_indices(shape: tuple[int, ...], out_shape: tuple[int, ...], out_vars: list[L.Expr]) -> tuple[L.Expr, ...]:
    """Indices into a tensor of `shape` broadcast (numpy rules) against `out_shape`."""
    offset = len(out_shape) - len(shape)
    return tuple(L.const(0) if n == 1 and out_shape[offset + k] != 1 else out_vars[offset + k]
                 for k, n in enumerate(shape))


def loop_nest(variables: list[tuple[str, int, int]], body: L.Stmt, guards: list[Condition]) -> L.Stmt:
    """Nest loops (outermost first) around `body`, turning guards into loop bounds where possible."""
    order = [v for v, _, _ in variables]
    lower: dict[str, list[L.Expr]] = {v: [] for v in order}
    upper: dict[str, list[L.Expr]] = {v: [] for v in order}
    ifs: dict[str | None, list[L.Expr]] = {}
    for g in guards:
        inner = max((v for v in g.expr.vars if v in order), key=order.index, default=None)
        if inner is None or g.expr.divisor != 1:
            ifs.setdefault(inner, []).append(condition_expr(g))
            continue
        c = dict(g.expr.coeffs)[inner]
        rest = IntAffine(tuple(t for t in g.expr.coeffs if t[0] != inner), g.expr.const)
        rest_expr, lo, hi = affine_expr(rest), g.lo, g.hi
        if c < 0:  # normalise to a positive coefficient: -|c| v + r in [lo, hi]  <=>  |c| v - r in [-hi, -lo]
            c, rest_expr = -c, L.neg(rest_expr)
            lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
        if lo is not None:  # v >= ceil((lo - r) / c) == -floor((r - lo) / c)
            num = L.sub(L.const(lo), rest_expr)
            lower[inner].append(num if c == 1 else L.neg(L.Bin("div", L.neg(num), L.const(c))))
        if hi is not None:  # v <= floor((hi - r) / c)
            num = L.sub(L.const(hi), rest_expr)
            upper[inner].append(num if c == 1 else L.Bin("div", num, L.const(c)))
    stmt = body
    if None in ifs:
        stmt = L.If(L.logical_and(ifs[None]), stmt)  # type: ignore[arg-type]
    for v, lo, hi in reversed(variables):
        if v in ifs:
            stmt = L.If(L.logical_and(ifs[v]), stmt)  # type: ignore[arg-type]
        begin: L.Expr = L.const(lo)
        for e in lower[v]:
            begin = L.Bin("max", begin, e)
        end: L.Expr = L.const(hi)
        for e in upper[v]:
            end = L.Bin("min", end, e)
        stmt = L.For(v, begin, L.add(end, L.const(1)), stmt)
    return stmt


def cell_loops(shape: tuple[int, ...], prefix: str) -> tuple[list[tuple[str, int, int]], list[L.Expr]]:
    names = [f"{prefix}{k}" for k in range(len(shape))]
    return [(n, 0, d - 1) for n, d in zip(names, shape)], [L.Var(n) for n in names]
