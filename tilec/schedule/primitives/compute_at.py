"""`ComputeAt`: compute an elementwise producer inside its consumer's loop, just for the cells used there.

Requires: nest `nest` passes the same checks as ComputeInline (a pure elementwise statement on
a temporary T with one consumer, `consumer`), and inside loop `loop` of the consumer every read
of T falls in a constant-size box (the CacheRead conditions).

Guarantees: at each iteration of `loop`, a local buffer holds f(cell) for the box of T read
inside it, computed there, and those reads use it; the producer nest becomes an empty
statement. Unlike ComputeInline, each value is computed once per iteration of `loop` rather
than at every read, and T is never written to memory.
"""

from __future__ import annotations

from typing import Collection

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.primitives.cache import _check_path, _stage
from tilec.schedule.primitives.inline import producer
from tilec.schedule.primitives.loops import accesses, describe, find_loop, replace_loop
from tilec.schedule.primitives.records import ComputeAt
from tilec.ir.rewrite import loops_in, substitute_expr


def compute_at(p: ComputeAt, nests: tuple[L.Stmt, ...], func: L.PrimFunc,
               outputs: "Collection[str] | None") -> tuple[L.Stmt, ...]:
    what = describe(p)
    store, names, consumer = producer(what, p.nest, nests, func, outputs)
    if p.consumer != consumer:
        raise ScheduleError(f"{what}: {store.buffer} is read by nest {consumer}, not by nest {p.consumer}")
    nest = nests[consumer]
    loop, _ = find_loop(nest, p.loop, p)
    loads = [(n, path) for n, path in accesses(loop.body) if isinstance(n, L.Load) and n.buffer == store.buffer]
    if not loads:
        raise ScheduleError(f"{what}: loop {p.loop} of nest {consumer} does not read {store.buffer}; compute it "
                            f"at a loop that does")
    cells = f"{what}: the cells of {store.buffer} read inside loop {p.loop}"
    for _, path in loads:
        _check_path(path, cells, store.buffer)
    inner = {f.var: f for f in loops_in(loop.body)}
    idxs = list(dict.fromkeys(n.indices for n, _ in loads))

    def compute(cell: tuple[L.Expr, ...]) -> L.Expr:
        return substitute_expr(store.value, dict(zip(names, cell)))

    body = _stage(loop.body, store.buffer, store.value.dtype, idxs, inner, cells, func, nest, p,
                  write_back=False, fill=compute)
    new = replace_loop(nest, loop, L.For(loop.var, loop.begin, loop.end, body, loop.kind))
    return tuple(L.Seq(()) if k == p.nest else new if k == consumer else n for k, n in enumerate(nests))


__all__ = ["compute_at"]
