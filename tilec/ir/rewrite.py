"""Loop-IR helpers the schedule primitives share: substitution, constant folding, bounds.

Rewriters return the *same object* when nothing changes, so unchanged subtrees stay
shared and `is` tells a caller whether a rewrite did anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from tilec.ir import loop as L

# ------------------------------------------------------------------ substitution


def substitute_expr(e: L.Expr, mapping: dict[str, L.Expr]) -> L.Expr:
    """`e` with every variable named in `mapping` replaced by its expression."""
    if isinstance(e, L.Var):
        return mapping.get(e.name, e)
    if isinstance(e, L.Const):
        return e
    if isinstance(e, (L.Bin, L.Cmp)):
        a, b = substitute_expr(e.a, mapping), substitute_expr(e.b, mapping)
        return e if a is e.a and b is e.b else replace(e, a=a, b=b)
    if isinstance(e, (L.Not, L.Cast)):
        a = substitute_expr(e.a, mapping)
        return e if a is e.a else replace(e, a=a)
    if isinstance(e, L.Select):
        c, a, b = (substitute_expr(x, mapping) for x in (e.cond, e.a, e.b))
        return e if c is e.cond and a is e.a and b is e.b else L.Select(c, a, b)
    if isinstance(e, L.Call):
        args = _exprs(e.args, mapping)
        return e if args is e.args else replace(e, args=args)
    if isinstance(e, L.Load):
        indices = _exprs(e.indices, mapping)
        return e if indices is e.indices else replace(e, indices=indices)
    raise TypeError(f"not a loop-IR expression: {e!r}")


def _exprs(es: tuple[L.Expr, ...], mapping: dict[str, L.Expr]) -> tuple[L.Expr, ...]:
    new = tuple(substitute_expr(x, mapping) for x in es)
    return es if all(a is b for a, b in zip(new, es)) else new


def child_stmts(s: L.Stmt) -> tuple[L.Stmt, ...]:
    if isinstance(s, L.Seq):
        return s.stmts
    if isinstance(s, (L.For, L.Allocate)):
        return (s.body,)
    if isinstance(s, L.If):
        return (s.then,) if s.orelse is None else (s.then, s.orelse)
    return ()


def map_children(s: L.Stmt, fn: Callable[[L.Stmt], L.Stmt]) -> L.Stmt:
    """`s` with `fn` applied to each child statement (the same object if no child changed)."""
    if isinstance(s, L.Seq):
        stmts = tuple(fn(x) for x in s.stmts)
        return s if all(a is b for a, b in zip(stmts, s.stmts)) else L.Seq(stmts)
    if isinstance(s, (L.For, L.Allocate)):
        body = fn(s.body)
        return s if body is s.body else replace(s, body=body)
    if isinstance(s, L.If):
        then = fn(s.then)
        orelse = None if s.orelse is None else fn(s.orelse)
        return s if then is s.then and orelse is s.orelse else L.If(s.cond, then, orelse)
    return s


def substitute(s: L.Stmt, mapping: dict[str, L.Expr]) -> L.Stmt:
    """`s` with the variables in `mapping` replaced everywhere (loop bounds included)."""
    if isinstance(s, L.Store):
        indices = _exprs(s.indices, mapping)
        value = substitute_expr(s.value, mapping)
        return s if indices is s.indices and value is s.value else L.Store(s.buffer, indices, value)
    if isinstance(s, L.For):
        begin, end = substitute_expr(s.begin, mapping), substitute_expr(s.end, mapping)
        body = substitute(s.body, mapping)
        if begin is s.begin and end is s.end and body is s.body:
            return s
        return replace(s, begin=begin, end=end, body=body)
    if isinstance(s, L.If):
        cond = substitute_expr(s.cond, mapping)
        out = map_children(s, lambda x: substitute(x, mapping))
        return out if cond is s.cond else replace(out, cond=cond)  # type: ignore[arg-type]
    return map_children(s, lambda x: substitute(x, mapping))


# ------------------------------------------------------------------ queries


def walk(node: object) -> Iterator[object]:
    """Every loop-IR node under `node` (statements and expressions), pre-order."""
    yield node
    for value in getattr(node, "__dict__", {}).values():
        for item in value if isinstance(value, tuple) else (value,):
            if hasattr(item, "__dataclass_fields__") and not isinstance(item, L.Buffer):
                yield from walk(item)


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


__all__ = ["child_stmts", "substitute", "substitute_expr", "map_children", "walk", "mentions", "loops_in", "minimum", "floordiv",
           "const_value", "extent", "constant_extent", "upper_bound", "lower_bound", "extent_bound"]
