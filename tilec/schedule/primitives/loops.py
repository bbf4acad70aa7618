"""Helpers every schedule primitive shares: naming a primitive in errors, finding a loop by
name, replacing it, checking new names are fresh, and the constant-size box of cells a set
of accesses touches inside a loop (what `CacheWrite` and `CacheRead` allocate).
"""

from __future__ import annotations

import math

from typing import Any, Callable, Iterable

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.printer import format_expr
from tilec.ir.legality import affine
from tilec.ir.rewrite import const_value, loops_in, mentions
from tilec.ir.visitor import Rewriter, Visitor, children, is_stmt, map_child_stmts, walk


def describe(p: Any) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in p.to_json().items() if k != "kind")
    return f"{type(p).__name__}({fields})"


def find_loop(nest: L.Stmt, name: str, p: Any) -> tuple[L.For, list[L.For]]:
    """The loop called `name` in `nest` and its enclosing loops (outermost first)."""
    finder = _FindLoop(name)
    finder.visit(nest)
    found = finder.found
    if not found:
        names = ", ".join(f.var for f in loops_in(nest)) or "(none)"
        raise ScheduleError(f"{describe(p)}: no loop '{name}' in nest {p.nest}; its loops are {names}")
    if len(found) > 1:
        raise ScheduleError(f"{describe(p)}: loop name '{name}' is ambiguous in nest {p.nest}")
    return found[0]


class _FindLoop(Visitor):
    """The loops called `name`, each with the loops around it (outermost first)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.outer: list[L.For] = []
        self.found: list[tuple[L.For, list[L.For]]] = []

    def visit_For(self, s: L.For) -> None:
        if s.var == self.name:
            self.found.append((s, list(self.outer)))
        self.outer.append(s)
        self.visit(s.body)
        self.outer.pop()

    def visit_expr(self, e: L.Expr) -> None:
        pass  # loops sit in statements only


def replace_loop(nest: L.Stmt, old: L.Stmt, new: L.Stmt) -> L.Stmt:
    if nest is old:
        return new
    return map_child_stmts(nest, lambda c: replace_loop(c, old, new))


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
    """Every Store and Load under `body` with the For/If/Allocate statements enclosing it (outermost
    first), in pre-order; the loads in a statement's own expressions (a loop's bounds, an if's
    condition, a WMMA statement's indices) are outside that statement."""
    found = _Accesses()
    found.visit(body)
    return found.out


class _Accesses(Visitor):
    def __init__(self) -> None:
        self.out: list[tuple[L.Store | L.Load, tuple[L.Stmt, ...]]] = []
        self.path: tuple[L.Stmt, ...] = ()

    def visit_Load(self, e: L.Load) -> None:
        self.out.append((e, self.path))
        self.generic_visit(e)

    def visit_Store(self, s: L.Store) -> None:
        self.out.append((s, self.path))
        self.generic_visit(s)

    def visit_stmt(self, s: L.Stmt) -> None:
        outer = self.path
        inner = outer + (s,) if isinstance(s, (L.For, L.If, L.Allocate)) else outer
        for c in children(s):
            self.path = inner if is_stmt(c) else outer
            self.visit(c)
        self.path = outer


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




def redirect(s: L.Stmt, buffer: str, new: str, relative: dict[tuple[L.Expr, ...], tuple[L.Expr, ...]]) -> L.Stmt:
    """`s` with every access ``buffer[idx]`` (idx a key of `relative`) made ``new[relative[idx]]``."""
    return _Redirect(buffer, new, relative).rewrite(s)


class _Redirect(Rewriter):
    def __init__(self, buffer: str, new: str, relative: dict[tuple[L.Expr, ...], tuple[L.Expr, ...]]) -> None:
        self.buffer, self.new, self.relative = buffer, new, relative

    def rewrite_Load(self, e: L.Load) -> L.Expr:
        e = self.rebuild(e)  # bottom-up: the loads inside the indices first
        if e.buffer == self.buffer and e.indices in self.relative:
            return L.Load(self.new, self.relative[e.indices], e.dtype)
        return e

    def rewrite_Store(self, st: L.Store) -> L.Stmt:
        # a store is matched by its own indices as written, which keep their loads; its value is rewritten
        moved = st
        if st.buffer == self.buffer and st.indices in self.relative:
            moved = L.Store(self.new, self.relative[st.indices], st.value)
        value = self.rewrite(st.value)
        return moved if value is st.value else L.Store(moved.buffer, moved.indices, value)


__all__ = ["describe", "find_loop", "replace_loop", "check_fresh", "allocated_in", "fresh_buffer", "accesses",
           "Box", "box_of", "box_nest", "redirect"]
