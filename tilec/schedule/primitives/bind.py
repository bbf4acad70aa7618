"""`Bind`: run a loop's iterations as the blocks or threads of a GPU axis.

Requires: the nest the primitive names; a GPU target (apply_schedule refuses it on a CPU).
Guarantees: the same values, with the loop normalised to ``[0, extent)`` and its kind set to
the axis, or a ScheduleError saying why not:

* the axis is one of tilec.ir.loop.GPU_AXES and the loop is a plain serial loop;
* its extent is a compile-time constant (a launch extent is), or has a constant bound (the
  remainder loop of a split that does not divide): then the loop runs to the bound and a guard
  ``if var < extent`` skips the extra iterations;
* its iterations write disjoint elements (tilec.ir.legality.check_parallel): blocks and
  threads run at the same time;
* no axis is bound twice on one path through the nest;
* block loops stay outside thread loops.
"""

from __future__ import annotations

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.legality import check_parallel
from tilec.schedule.primitives.loops import describe, find_loop, replace_loop
from tilec.schedule.primitives.records import Bind
from tilec.ir.rewrite import constant_extent, extent, extent_bound, loops_in, mentions, substitute
from tilec.ir.visitor import map_child_stmts


def bind(p: Bind, nest: L.Stmt) -> L.Stmt:
    loop, outer = find_loop(nest, p.loop, p)
    what = describe(p)
    if p.axis not in L.GPU_AXES:
        raise ScheduleError(f"{what}: unknown GPU axis {p.axis!r}; axes are {', '.join(L.GPU_AXES)}")
    if loop.kind in L.GPU_AXES:
        raise ScheduleError(f"{what}: loop {p.loop} is already bound to {loop.kind}")
    if loop.kind != "serial":
        raise ScheduleError(f"{what}: loop {p.loop} is {loop.kind}; only a serial loop can be bound")
    inner = loops_in(loop.body)
    n = constant_extent(loop)
    bound = extent_bound(loop) if n is None else n
    if bound is None or (n is None and mentions((loop.begin, loop.end), {f.var for f in inner})):
        raise ScheduleError(f"{what}: the extent of loop {p.loop} has no compile-time bound (a launch "
                            f"extent must be constant); split it by a constant factor and bind the inner loop, "
                            f"or bind an outer loop")
    for f in outer + inner:
        if f.kind == p.axis:
            raise ScheduleError(f"{what}: loop {f.var} on the same path is already bound to {p.axis}; "
                                f"each axis can be bound once per path (fuse the loops first)")
    block = p.axis in L.GPU_BLOCK_AXES
    if block:
        for f in outer:
            if f.kind in L.GPU_THREAD_AXES:
                raise ScheduleError(f"{what}: loop {p.loop} is inside thread loop {f.var} ({f.kind}); "
                                    f"block loops must be outside thread loops")
    else:
        for f in inner:
            if f.kind in L.GPU_BLOCK_AXES:
                raise ScheduleError(f"{what}: loop {p.loop} contains block loop {f.var} ({f.kind}); "
                                    f"block loops must be outside thread loops")
    for f in outer + inner:
        if f.kind == "parallel":
            raise ScheduleError(f"{what}: loop {f.var} is a CPU parallel loop; on a GPU bind loops instead")
    try:
        check_parallel(loop)
    except ScheduleError as err:
        raise ScheduleError(f"{what}: {err} (blocks and threads run at the same time)") from None
    body = substitute(loop.body, {loop.var: L.add(loop.begin, L.Var(loop.var))})
    if n is None:  # a remainder loop (split by a factor that does not divide): the extra threads idle
        body = L.If(L.Cmp("lt", L.Var(loop.var), extent(loop)), body)
    return sink_guards(replace_loop(nest, loop, L.For(loop.var, L.const(0), L.const(max(bound, 0)), body, p.axis)))


def sink_guards(s: L.Stmt) -> L.Stmt:
    """``for a (bound): if c: for b (bound): body`` -> ``for a: for b: if c: body`` (c not using b), so
    bound loops stay one band however guards were added (the same work: extra threads idle)."""
    if isinstance(s, L.For) and s.kind in L.GPU_AXES and isinstance(s.body, L.If) and s.body.orelse is None:
        inner = s.body.then
        if isinstance(inner, L.For) and inner.kind in L.GPU_AXES and not mentions(s.body.cond, {inner.var}):
            moved = L.For(inner.var, inner.begin, inner.end, L.If(s.body.cond, inner.body), inner.kind)
            return L.For(s.var, s.begin, s.end, sink_guards(moved), s.kind)
    return map_child_stmts(s, sink_guards)


__all__ = ["bind", "sink_guards"]
