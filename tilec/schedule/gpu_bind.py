"""`Bind`: run a loop's iterations as the blocks or threads of a GPU axis.

Requires: the nest the primitive names; a GPU target (apply_schedule refuses it on a CPU).
Guarantees: the same values, with the loop normalised to ``[0, extent)`` and its kind set to
the axis, or a ScheduleError saying why not:

* the axis is one of tilec.ir.loop.GPU_AXES and the loop is a plain serial loop;
* its extent is a compile-time constant (a launch extent is);
* its iterations write disjoint elements (tilec.schedule.legality.check_parallel): blocks and
  threads run at the same time;
* no axis is bound twice on one path through the nest;
* block loops stay outside thread loops.
"""

from __future__ import annotations

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.legality import check_parallel
from tilec.schedule.loops import describe, find_loop, replace_loop
from tilec.schedule.primitives import Bind
from tilec.schedule.rewrite import constant_extent, loops_in, substitute


def bind(p: Bind, nest: L.Stmt) -> L.Stmt:
    loop, outer = find_loop(nest, p.loop, p)
    what = describe(p)
    if p.axis not in L.GPU_AXES:
        raise ScheduleError(f"{what}: unknown GPU axis {p.axis!r}; axes are {', '.join(L.GPU_AXES)}")
    if loop.kind in L.GPU_AXES:
        raise ScheduleError(f"{what}: loop {p.loop} is already bound to {loop.kind}")
    if loop.kind != "serial":
        raise ScheduleError(f"{what}: loop {p.loop} is {loop.kind}; only a serial loop can be bound")
    n = constant_extent(loop)
    if n is None:
        raise ScheduleError(f"{what}: the extent of loop {p.loop} is not a compile-time constant (a launch "
                            f"extent must be); split it by a constant factor and bind the inner loop, or "
                            f"bind an outer loop")
    inner = loops_in(loop.body)
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
    return replace_loop(nest, loop, L.For(loop.var, L.const(0), L.const(max(n, 0)), body, p.axis))


__all__ = ["bind"]
