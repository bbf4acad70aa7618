"""`Partition`: split a loop into prologue, guard-free interior and epilogue.

Requires: the named loop `x` has constant bounds, and inside it some ``max(a, b)``,
``min(a, b)`` or comparison ``a < b`` (``<= > >=``) has ``a - b`` affine in `x` alone
(the bounds the default lowering gives padded windows: ``i in [max(0, 1 - x), min(2, 6 - x) + 1)``,
and ``if`` guards). If the named loop has none but its own bounds have such expressions of
one enclosing loop, that enclosing loop is partitioned instead.

Guarantees: the same iterations in the same order. Each such expression is decided (one
operand wins, the comparison is constant) on a half-line of `x`; per expression the half-line
covering more of the range is taken, and their intersection is the interior, where the
expressions are replaced by the winner and constants folded (so inner bounds become
constants and decided ``if``s disappear). The prologue and epilogue keep the original body;
their loops are renamed ``x.pro`` / ``x.epi`` and ``i.x.pro`` / ``i.x.epi`` for a loop `i` inside
(unique through repeated partitions); the interior keeps the names.
"""

from __future__ import annotations

from dataclasses import replace

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.printer import format_expr
from tilec.ir.legality import affine
from tilec.schedule.primitives.loops import check_fresh, describe, find_loop, replace_loop
from tilec.schedule.primitives.records import Partition
from tilec.ir.rewrite import const_value, loops_in, map_stmt_exprs, substitute
from tilec.ir.visitor import map_child_stmts, walk

Interval = tuple["int | None", "int | None"]  # [lo, hi), None: unbounded


def partition(p: Partition, nest: L.Stmt, func: L.PrimFunc) -> L.Stmt:
    loop, outer = find_loop(nest, p.loop, p)
    target, nodes = loop, _decidable(loop.body, loop.var)
    if not nodes:
        in_bounds = [f for f in outer if _decidable(L.For(loop.var, loop.begin, loop.end, L.Seq(())), f.var)]
        if in_bounds:
            target = in_bounds[-1]
            nodes = _decidable(target.body, target.var)
    if not nodes:
        raise ScheduleError(f"{describe(p)}: nothing to partition: no max/min bound or comparison inside loop "
                            f"{p.loop} (or in its bounds) depends on one loop variable alone")
    begin, end = const_value(target.begin), const_value(target.end)
    if begin is None or end is None:
        raise ScheduleError(f"{describe(p)}: loop {target.var} has bounds [{format_expr(target.begin)}, "
                            f"{format_expr(target.end)}) that are not constants; partition an outer loop first")
    lo, hi = begin, end
    decisions: dict[L.Expr, L.Expr] = {}
    for node, options in nodes.items():
        best = max(options, key=lambda o: _size(_meet(o[0], (begin, end))))
        decisions[node] = best[1]
        lo, hi = _meet(best[0], (lo, hi))  # type: ignore[assignment]
    if hi <= lo:
        raise ScheduleError(f"{describe(p)}: nothing to partition: no iteration of loop {target.var} in "
                            f"[{begin}, {end}) decides every max/min inside it")
    renamed = [_renamed(f.var, target.var, part) for f in loops_in(target) for part in ("pro", "epi")]
    check_fresh(nest, renamed, p)
    interior = replace(target, begin=L.const(lo), end=L.const(hi), body=fold(_decide(target.body, decisions)))
    pro = _rename(replace(target, end=L.const(lo)), "pro") if lo > begin else None
    epi = _rename(replace(target, begin=L.const(hi)), "epi") if hi < end else None
    return replace_loop(nest, target, L.seq(pro, interior, epi))


# ------------------------------------------------------------------ deciding


def _decidable(body: L.Stmt, var: str) -> dict[L.Expr, list[tuple[Interval, L.Expr]]]:
    """The max/min/comparisons under `body` decided on half-lines of `var`, with their options."""
    out: dict[L.Expr, list[tuple[Interval, L.Expr]]] = {}
    for node in walk(body):
        if not (isinstance(node, L.Bin) and node.op in ("max", "min") and node.dtype == L.INDEX
                or isinstance(node, L.Cmp) and node.op in ("lt", "le", "gt", "ge") and node.a.dtype == L.INDEX):
            continue
        fa, fb = affine(node.a), affine(node.b)
        if fa is None or fb is None:
            continue
        f = dict(fa)
        for k, v in fb.items():
            f[k] = f.get(k, 0) - v
        if any(k not in (var, 1) for k, v in f.items() if v) or not f.get(var):
            continue
        c, d = f[var], f.get(1, 0)
        true, false = L.Const(True, "bool"), L.Const(False, "bool")
        if isinstance(node, L.Bin):
            a_wins = _at_least(c, d, 0) if node.op == "max" else _at_most(c, d, 0)
            b_wins = _at_most(c, d, 0) if node.op == "max" else _at_least(c, d, 0)
            out[node] = [(a_wins, node.a), (b_wins, node.b)]
        else:
            holds = {"lt": _at_most(c, d, -1), "le": _at_most(c, d, 0), "gt": _at_least(c, d, 1),
                     "ge": _at_least(c, d, 0)}[node.op]
            fails = {"lt": _at_least(c, d, 0), "le": _at_least(c, d, 1), "gt": _at_most(c, d, 0),
                     "ge": _at_most(c, d, -1)}[node.op]
            out[node] = [(holds, true), (fails, false)]
    return out


def _at_least(c: int, d: int, k: int) -> Interval:
    """The x with c*x + d >= k."""
    return (-((d - k) // c), None) if c > 0 else (None, (k - d) // c + 1)


def _at_most(c: int, d: int, k: int) -> Interval:
    """The x with c*x + d <= k."""
    return (None, (k - d) // c + 1) if c > 0 else (-((d - k) // c), None)


def _meet(a: Interval, b: Interval) -> Interval:
    los = [x for x in (a[0], b[0]) if x is not None]
    his = [x for x in (a[1], b[1]) if x is not None]
    return (max(los) if los else None, min(his) if his else None)


def _size(r: Interval) -> int:
    assert r[0] is not None and r[1] is not None
    return max(r[1] - r[0], 0)


def _decide(s: L.Stmt, decisions: dict[L.Expr, L.Expr]) -> L.Stmt:
    return map_stmt_exprs(s, lambda e: decisions.get(e, e))


# ------------------------------------------------------------------ folding and renaming


def _fold_expr(e: L.Expr) -> L.Expr:
    if isinstance(e, L.Bin) and e.dtype == L.INDEX and not isinstance(e, L.Const):
        v = const_value(e)
        return e if v is None else L.const(v)
    if isinstance(e, L.Cmp) and isinstance(e.a, L.Const) and isinstance(e.b, L.Const):
        a, b = e.a.value, e.b.value
        ops = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}
        return L.Const(bool(ops[e.op]), "bool")
    if isinstance(e, L.Bin) and e.op in ("and", "or") and e.dtype == "bool":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(x, L.Const):
                if e.op == "and":
                    return y if x.value else x
                return x if x.value else y
    if isinstance(e, L.Not) and isinstance(e.a, L.Const):
        return L.Const(not e.a.value, "bool")
    if isinstance(e, L.Select) and isinstance(e.cond, L.Const):
        return e.a if e.cond.value else e.b
    return e


def fold(s: L.Stmt) -> L.Stmt:
    """`s` with constant index arithmetic and comparisons folded and decided ``if``s removed."""
    s = map_stmt_exprs(s, _fold_expr)
    return _drop_decided(s)


def _drop_decided(s: L.Stmt) -> L.Stmt:
    if isinstance(s, L.If) and isinstance(s.cond, L.Const):
        chosen = s.then if s.cond.value else s.orelse
        return L.Seq(()) if chosen is None else _drop_decided(chosen)
    return map_child_stmts(s, _drop_decided)


def _renamed(var: str, outer: str, part: str) -> str:
    """Loop `var` of the `part` (pro/epi) copy of loop `outer`: ``x.pro`` for x, ``i.x.pro`` inside it."""
    return f"{var}.{part}" if var == outer else f"{var}.{outer}.{part}"


def _rename(target: L.For, part: str) -> L.Stmt:
    names = {f.var for f in loops_in(target)}
    new = {n: _renamed(n, target.var, part) for n in names}
    renamed = substitute(target, {n: L.Var(m) for n, m in new.items()})

    def loops(s: L.Stmt) -> L.Stmt:
        s = map_child_stmts(s, loops)
        return replace(s, var=new[s.var]) if isinstance(s, L.For) and s.var in names else s

    return loops(renamed)


__all__ = ["partition", "fold"]
