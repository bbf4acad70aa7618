"""Loop-IR helpers the schedule primitives and passes share: substitution, mapping a function
over expressions, constant folding, bounds.

Substitution and `map_expr` / `map_stmt_exprs` are :class:`tilec.ir.visitor.Rewriter`s: they
reach every node kind (the WMMA statements' expressions included), and return the *same object*
when nothing changes, so unchanged subtrees stay shared and `is` tells a caller whether a
rewrite did anything.
"""

from __future__ import annotations

from typing import Callable

from tilec.ir import loop as L
from tilec.ir.visitor import Rewriter, walk

# ------------------------------------------------------------------ substitution


class _Substitute(Rewriter):
    def __init__(self, mapping: dict[str, L.Expr]) -> None:
        self.mapping = mapping

    def rewrite_Var(self, e: L.Var) -> L.Expr:
        return self.mapping.get(e.name, e)

    def rewrite_Const(self, e: L.Const) -> L.Expr:
        return e


def substitute_expr(e: L.Expr, mapping: dict[str, L.Expr]) -> L.Expr:
    """`e` with every variable named in `mapping` replaced by its expression."""
    return _Substitute(mapping).rewrite(e)


def substitute(s: L.Stmt, mapping: dict[str, L.Expr]) -> L.Stmt:
    """`s` with the variables in `mapping` replaced everywhere: loop bounds, conditions, indices and
    values, and the WMMA statements' indices, window origins and fill values."""
    return _Substitute(mapping).rewrite(s)


def map_expr(e: L.Expr, fn: Callable[[L.Expr], L.Expr]) -> L.Expr:
    """`e` rebuilt bottom-up with `fn` applied to every node (the same object if nothing changed)."""
    return _MapExprs(fn).rewrite(e)


def map_stmt_exprs(s: L.Stmt, fn: Callable[[L.Expr], L.Expr],
                   store: Callable[[L.Store], L.Stmt] | None = None) -> L.Stmt:
    """`s` with :func:`map_expr` applied to every expression (those of WMMA statements included),
    and `store` (if given) to every Store after."""
    return _MapExprs(fn, store).rewrite(s)


class _MapExprs(Rewriter):
    def __init__(self, fn: Callable[[L.Expr], L.Expr], store: Callable[[L.Store], L.Stmt] | None = None) -> None:
        self.fn, self.store = fn, store

    def rewrite_expr(self, e: L.Expr) -> L.Expr:
        return self.fn(self.rebuild(e))

    def rewrite_Store(self, s: L.Store) -> L.Stmt:
        out = self.rebuild(s)
        return self.store(out) if self.store is not None else out


# ------------------------------------------------------------------ queries


def mentions(e: object, names: "set[str] | frozenset[str]") -> bool:
    """Whether a node (or a tuple of nodes) uses a variable in `names`."""
    if isinstance(e, tuple):
        return any(mentions(x, names) for x in e)
    return any(isinstance(n, L.Var) and n.name in names for n in walk(e))


def loops_in(s: L.Stmt) -> list[L.For]:
    return [n for n in walk(s) if isinstance(n, L.For)]


# ------------------------------------------------------------------ folding and bounds


def minimum(a: L.Expr, b: L.Expr) -> L.Expr:
    if isinstance(a, L.Const) and isinstance(b, L.Const):
        return L.const(min(a.value, b.value))  # type: ignore[type-var]
    return L.Bin("min", a, b)


def floordiv(a: L.Expr, b: int) -> L.Expr:
    if b == 1:
        return a
    if isinstance(a, L.Const):
        return L.const(int(a.value) // b)
    return L.Bin("div", a, L.const(b))


def const_value(e: L.Expr) -> int | None:
    """The value of an int64 expression made only of constants, else None."""
    if isinstance(e, L.Const):
        return int(e.value)
    if isinstance(e, L.Bin):
        a, b = const_value(e.a), const_value(e.b)
        if a is None or b is None:
            return None
        ops: dict[str, Callable[[int, int], int]] = {
            "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
            "min": min, "max": max, "div": lambda x, y: x // y if y else 0}
        return ops[e.op](a, b) if e.op in ops else None
    return None


def extent(loop: L.For) -> L.Expr:
    """The number of iterations, as an expression (may be negative for an empty loop)."""
    if isinstance(loop.end, L.Bin) and loop.end.op == "add" and loop.end.a == loop.begin:
        return loop.end.b  # [b, b + n)
    begin, end = const_value(loop.begin), const_value(loop.end)
    if begin is not None and end is not None:
        return L.const(end - begin)
    return L.sub(loop.end, loop.begin)


def constant_extent(loop: L.For) -> int | None:
    return const_value(extent(loop))


def upper_bound(e: L.Expr) -> int | None:
    """A constant >= every value `e` can take (None when unknown)."""
    if isinstance(e, L.Const):
        return int(e.value)
    if isinstance(e, L.Bin):
        if e.op == "min":
            bounds = [x for x in (upper_bound(e.a), upper_bound(e.b)) if x is not None]
            return min(bounds) if bounds else None
        if e.op in ("max", "add"):
            a, b = upper_bound(e.a), upper_bound(e.b)
            if a is None or b is None:
                return None
            return max(a, b) if e.op == "max" else a + b
        if e.op == "sub":
            a, b = upper_bound(e.a), lower_bound(e.b)
            return None if a is None or b is None else a - b
    return None


def lower_bound(e: L.Expr) -> int | None:
    """A constant <= every value `e` can take (None when unknown)."""
    if isinstance(e, L.Const):
        return int(e.value)
    if isinstance(e, L.Bin):
        if e.op == "max":
            bounds = [x for x in (lower_bound(e.a), lower_bound(e.b)) if x is not None]
            return max(bounds) if bounds else None
        if e.op in ("min", "add"):
            a, b = lower_bound(e.a), lower_bound(e.b)
            if a is None or b is None:
                return None
            return min(a, b) if e.op == "min" else a + b
        if e.op == "sub":
            a, b = lower_bound(e.a), upper_bound(e.b)
            return None if a is None or b is None else a - b
    return None


def extent_bound(loop: L.For) -> int | None:
    """A constant >= the loop's number of iterations (None when unknown)."""
    n = constant_extent(loop)
    if n is not None:
        return max(n, 0)
    hi, lo = upper_bound(loop.end), lower_bound(loop.begin)
    return None if hi is None or lo is None else max(hi - lo, 0)


__all__ = ["substitute", "substitute_expr", "map_expr", "map_stmt_exprs", "mentions", "loops_in", "minimum", "floordiv",
           "const_value", "extent", "constant_extent", "upper_bound", "lower_bound", "extent_bound"]
