"""Helpers every schedule primitive shares: naming a primitive in errors, finding a loop by
name, replacing it, checking new names are fresh, and the constant-size box of cells a set
of accesses touches inside a loop (what `CacheWrite` and `CacheRead` allocate).
"""

from __future__ import annotations

import math

from dataclasses import replace
from typing import Any, Callable, Iterable

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.printer import format_expr
from tilec.ir.legality import affine
from tilec.ir.rewrite import child_stmts, const_value, loops_in, map_children, mentions, walk


def describe(p: Any) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in p.to_json().items() if k != "kind")
    return f"{type(p).__name__}({fields})"


def find_loop(nest: L.Stmt, name: str, p: Any) -> tuple[L.For, list[L.For]]:
    """The loop called `name` in `nest` and its enclosing loops (outermost first)."""
    found: list[tuple[L.For, list[L.For]]] = []

    def visit(s: L.Stmt, outer: list[L.For]) -> None:
        if isinstance(s, L.For):
            if s.var == name:
                found.append((s, outer))
            visit(s.body, outer + [s])
        else:
            for c in child_stmts(s):
                visit(c, outer)

    visit(nest, [])
    if not found:
        names = ", ".join(f.var for f in loops_in(nest)) or "(none)"
        raise ScheduleError(f"{describe(p)}: no loop '{name}' in nest {p.nest}; its loops are {names}")
    if len(found) > 1:
        raise ScheduleError(f"{describe(p)}: loop name '{name}' is ambiguous in nest {p.nest}")
    return found[0]


def replace_loop(nest: L.Stmt, old: L.Stmt, new: L.Stmt) -> L.Stmt:
    if nest is old:
        return new
    return map_children(nest, lambda c: replace_loop(c, old, new))


def check_fresh(nest: L.Stmt, names: Iterable[str], p: Any) -> None:
    existing = {f.var for f in loops_in(nest)}
    for n in names:
        if n in existing:
            raise ScheduleError(f"{describe(p)}: a loop named '{n}' already exists in nest {p.nest}")


def allocated_in(s: L.Stmt) -> set[str]:
    return {a.buffer.name for a in walk(s) if isinstance(a, L.Allocate)}


def fresh_buffer(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return name


def accesses(body: L.Stmt) -> list[tuple[L.Store | L.Load, tuple[L.Stmt, ...]]]:
    """Every Store and Load under `body` with the For/If/Allocate statements enclosing it (outermost first)."""
    out: list[tuple[L.Store | L.Load, tuple[L.Stmt, ...]]] = []

    def exprs(e: object, path: tuple[L.Stmt, ...]) -> None:
        out.extend((n, path) for n in walk(e) if isinstance(n, L.Load))

    def visit(s: L.Stmt, path: tuple[L.Stmt, ...]) -> None:
        if isinstance(s, L.Store):
            out.append((s, path))
            for i in s.indices:
                exprs(i, path)
            exprs(s.value, path)
            return
        if isinstance(s, L.For):
            exprs(s.begin, path)
            exprs(s.end, path)
        if isinstance(s, L.If):
            exprs(s.cond, path)
        for c in child_stmts(s):
            visit(c, path + ((s,) if isinstance(s, (L.For, L.If, L.Allocate)) else ()))

    visit(body, ())
    return out


# ------------------------------------------------------------------ boxes


class Box:
    """The cells `accesses` (index tuples) touch while the loops `inner` run, as
    ``origin + [0, shape)`` per dimension; `origin` is invariant in those loops."""

    def __init__(self, origin: tuple[L.Expr, ...], shape: tuple[int, ...],
                 relative: dict[tuple[L.Expr, ...], tuple[L.Expr, ...]]) -> None:
        self.origin, self.shape, self.relative = origin, shape, relative

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def box_of(accesses: list[tuple[L.Expr, ...]], inner: dict[str, L.For], what: str) -> Box:
    """The box of cells `accesses` touch; ScheduleError (saying why, after `what`) unless it is
    a constant-size box: every index affine in the inner loops, those loops of constant
    bounds, and the part that does not vary in them the same for every access."""
    rank = len(accesses[0])
    keys: list[frozenset | None] = [None] * rank
    lows, highs = [0] * rank, [0] * rank
    forms: dict[tuple[L.Expr, ...], list[tuple[dict[str, int], int]]] = {}
    for k, indices in enumerate(accesses):
        per_dim = []
        for d, e in enumerate(indices):
            form = affine(e)
            if form is None:
                raise ScheduleError(f"{what}: index {format_expr(e)} is not affine")
            varying: dict[str, int] = {}
            rest: dict[object, int] = {}
            for atom, c in form.items():
                if c == 0:
                    continue
                if isinstance(atom, str) and atom in inner:
                    varying[atom] = c
                elif atom != 1 and mentions(atom if not isinstance(atom, str) else L.Var(atom), set(inner)):
                    raise ScheduleError(f"{what}: index {format_expr(e)} is not affine in the loops inside "
                                        f"(it divides or multiplies a loop variable), so the region is not a box")
                elif atom != 1:
                    rest[atom] = c
            const = form.get(1, 0)
            lo = hi = const
            for v, c in varying.items():
                loop = inner[v]
                b, n = const_value(loop.begin), const_value(loop.end)
                if b is None or n is None:
                    raise ScheduleError(f"{what}: loop {v} has bounds [{format_expr(loop.begin)}, "
                                        f"{format_expr(loop.end)}) that are not constants, so the region is not a "
                                        f"constant-size box (partition or split the loops first)")
                if n <= b:
                    raise ScheduleError(f"{what}: loop {v} never runs")
                lo += c * (b if c > 0 else n - 1)
                hi += c * (n - 1 if c > 0 else b)
            key = frozenset(rest.items())
            if k == 0:
                keys[d], lows[d], highs[d] = key, lo, hi
            elif keys[d] != key:
                raise ScheduleError(f"{what}: the accesses are at different offsets in dimension {d} "
                                    f"({format_expr(accesses[0][d])} and {format_expr(e)}), so the region "
                                    f"is not a constant-size box")
            else:
                lows[d], highs[d] = min(lows[d], lo), max(highs[d], hi)
            per_dim.append((varying, const))
        forms[indices] = per_dim
    origin = tuple(L.add(_build(dict(keys[d] or ())), L.const(lows[d])) for d in range(rank))
    shape = tuple(highs[d] - lows[d] + 1 for d in range(rank))
    relative = {idx: tuple(L.add(_build(varying), L.const(const - lows[d])) for d, (varying, const) in enumerate(pd))
                for idx, pd in forms.items()}
    return Box(origin, shape, relative)


def _build(form: dict) -> L.Expr:
    out: L.Expr = L.const(0)
    for atom, c in sorted(form.items(), key=lambda kv: str(kv[0])):
        term = L.Var(atom) if isinstance(atom, str) else atom
        out = L.add(out, L.mul(term, L.const(c)) if c != 1 else term)
    return out


def box_nest(prefix: str, shape: tuple[int, ...], body: Callable[[tuple[L.Expr, ...]], L.Stmt]) -> L.Stmt:
    """``for prefix0 in [0, shape[0]): ...: body(indices)`` over a box."""
    names = [f"{prefix}{d}" for d in range(len(shape))]
    stmt: L.Stmt = body(tuple(L.Var(n) for n in names))
    for name, n in reversed(list(zip(names, shape))):
        stmt = L.For(name, L.const(0), L.const(n), stmt)
    return stmt




def map_expr(e: L.Expr, fn: Callable[[L.Expr], L.Expr]) -> L.Expr:
    """`e` rebuilt bottom-up with `fn` applied to every node (the same object if nothing changed)."""
    if isinstance(e, (L.Bin, L.Cmp)):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        e = e if a is e.a and b is e.b else replace(e, a=a, b=b)
    elif isinstance(e, (L.Not, L.Cast)):
        a = map_expr(e.a, fn)
        e = e if a is e.a else replace(e, a=a)
    elif isinstance(e, L.Select):
        c, a, b = (map_expr(x, fn) for x in (e.cond, e.a, e.b))
        e = e if c is e.cond and a is e.a and b is e.b else L.Select(c, a, b)
    elif isinstance(e, L.Call):
        args = tuple(map_expr(x, fn) for x in e.args)
        e = e if all(x is y for x, y in zip(args, e.args)) else replace(e, args=args)
    elif isinstance(e, L.Load):
        indices = tuple(map_expr(x, fn) for x in e.indices)
        e = e if all(x is y for x, y in zip(indices, e.indices)) else replace(e, indices=indices)
    return fn(e)


def map_stmt_exprs(s: L.Stmt, fn: Callable[[L.Expr], L.Expr],
                   store: Callable[[L.Store], L.Stmt] | None = None) -> L.Stmt:
    """`s` with :func:`map_expr` applied to every expression, and `store` (if given) to every Store after."""
    if isinstance(s, L.Store):
        indices = tuple(map_expr(i, fn) for i in s.indices)
        value = map_expr(s.value, fn)
        same = value is s.value and all(a is b for a, b in zip(indices, s.indices))
        out = s if same else L.Store(s.buffer, indices, value)
        return store(out) if store is not None else out
    if isinstance(s, L.For):
        begin, end = map_expr(s.begin, fn), map_expr(s.end, fn)
        body = map_stmt_exprs(s.body, fn, store)
        return s if begin is s.begin and end is s.end and body is s.body else replace(s, begin=begin, end=end, body=body)
    if isinstance(s, L.If):
        cond = map_expr(s.cond, fn)
        kept = map_children(s, lambda c: map_stmt_exprs(c, fn, store))
        assert isinstance(kept, L.If)
        return kept if cond is s.cond else replace(kept, cond=cond)
    return map_children(s, lambda c: map_stmt_exprs(c, fn, store))


def redirect(s: L.Stmt, buffer: str, new: str, relative: dict[tuple[L.Expr, ...], tuple[L.Expr, ...]]) -> L.Stmt:
    """`s` with every access ``buffer[idx]`` (idx a key of `relative`) made ``new[relative[idx]]``."""
    def load(e: L.Expr) -> L.Expr:
        if isinstance(e, L.Load) and e.buffer == buffer and e.indices in relative:
            return L.Load(new, relative[e.indices], e.dtype)
        return e

    def store(st: L.Store) -> L.Store:
        if st.buffer == buffer and st.indices in relative:
            return L.Store(new, relative[st.indices], st.value)
        return st

    # loads are rewritten bottom-up, so a store's own indices are matched before its loads change them
    def visit(st: L.Stmt) -> L.Stmt:
        if isinstance(st, L.Store):
            moved = store(st)
            value = map_expr(st.value, load)
            return moved if value is st.value else L.Store(moved.buffer, moved.indices, value)
        return map_stmt_exprs(st, load) if not isinstance(st, (L.Seq, L.For, L.If, L.Allocate)) else \
            _redirect_children(st, visit, load)

    return visit(s)


def _redirect_children(s: L.Stmt, visit: Callable[[L.Stmt], L.Stmt], load: Callable[[L.Expr], L.Expr]) -> L.Stmt:
    if isinstance(s, L.For):
        begin, end = map_expr(s.begin, load), map_expr(s.end, load)
        body = visit(s.body)
        return s if begin is s.begin and end is s.end and body is s.body else replace(s, begin=begin, end=end, body=body)
    if isinstance(s, L.If):
        cond = map_expr(s.cond, load)
        out = map_children(s, visit)
        return out if cond is s.cond else replace(out, cond=cond)  # type: ignore[arg-type]
    return map_children(s, visit)


__all__ = ["describe", "find_loop", "replace_loop", "check_fresh", "allocated_in", "fresh_buffer", "accesses",
           "Box", "box_of", "box_nest", "map_expr", "map_stmt_exprs", "redirect"]
