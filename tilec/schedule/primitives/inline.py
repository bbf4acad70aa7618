"""`ComputeInline`: substitute an elementwise statement into its single consumer and drop it.

Requires: nest `nest` is a pure elementwise nest ``for i0 in [0, n0): ...: T[i0, ..] = f(i0, ..)``
over the whole of a temporary `T` (not an output, not yet scheduled, f does not read T);
exactly one later nest reads T, no other nest writes it, and no nest from the producer to
the consumer (the consumer included) writes a buffer f reads.

Guarantees: the consumer reads ``f(e0, ..)`` where it read ``T[e0, ..]``; the producer nest
becomes an empty statement (nest numbers stay valid). T stays a parameter (now unused), so
the kernel's calling convention does not change.
"""

from __future__ import annotations

from typing import Collection

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.primitives.loops import describe
from tilec.schedule.primitives.records import ComputeInline
from tilec.ir.rewrite import const_value, map_stmt_exprs, substitute_expr
from tilec.ir.visitor import walk


def producer(what: str, index: int, nests: tuple[L.Stmt, ...], func: L.PrimFunc,
             outputs: "Collection[str] | None") -> tuple[L.Store, list[str], int]:
    """Check nest `index` is an elementwise statement that may be moved into its consumer;
    returns its store, its loop variables (in index order) and the consumer's nest index."""
    if outputs is None:
        raise ScheduleError(f"{what}: the program's outputs are unknown here (pass outputs= to apply_schedule), "
                            f"and an output must not be inlined")
    loops, store = _pure_nest(nests[index])
    if store is None:
        raise ScheduleError(f"{what}: nest {index} is not an elementwise statement (one store in a perfect "
                            f"loop nest); contractions cannot be inlined")
    t = store.buffer
    if t in outputs:
        raise ScheduleError(f"{what}: {t} is an output of the program; only temporaries can be inlined")
    params = {b.name: b for b in func.params}
    if t not in params:
        raise ScheduleError(f"{what}: {t} is not a tensor of the program")
    shape = params[t].shape
    whole = len(loops) == len(shape) and all(
        const_value(f.begin) == 0 and const_value(f.end) == n and f.kind == "serial"
        for f, n in zip(loops, shape)) and store.indices == tuple(L.Var(f.var) for f in loops)
    if not whole:
        raise ScheduleError(f"{what}: nest {index} does not store every cell of {t} once in order, at "
                            f"{t}[{', '.join(f.var for f in loops)}] (a contraction, or already scheduled); "
                            f"only a pure elementwise statement can be inlined")
    reads = {n.buffer for n in walk(store.value) if isinstance(n, L.Load)}
    if t in reads:
        raise ScheduleError(f"{what}: the statement reads {t}, the tensor it writes")
    readers, writers = [], []
    for k, n in enumerate(nests):
        if k == index:
            continue
        if any(isinstance(x, L.Load) and x.buffer == t for x in walk(n)):
            readers.append(k)
        if any(isinstance(x, L.Store) and x.buffer == t for x in walk(n)):
            writers.append(k)
    if writers:
        raise ScheduleError(f"{what}: {t} is also written by nest(s) {', '.join(map(str, writers))}; not elementwise")
    if not readers:
        raise ScheduleError(f"{what}: no statement reads {t}; nothing to inline it into")
    if len(readers) > 1 or readers[0] < index:
        raise ScheduleError(f"{what}: {t} is read by more than one statement (nests "
                            f"{', '.join(map(str, readers))}); inlining would compute it more than once")
    consumer = readers[0]
    for k in range(index + 1, consumer + 1):
        clobbered = sorted(reads & {x.buffer for x in walk(nests[k]) if isinstance(x, L.Store)})
        if clobbered:
            raise ScheduleError(f"{what}: nest {k} writes {', '.join(clobbered)}, which the statement reads, "
                                f"before or while its consumer (nest {consumer}) runs")
    return store, [f.var for f in loops], consumer


def compute_inline(p: ComputeInline, nests: tuple[L.Stmt, ...], func: L.PrimFunc,
                   outputs: "Collection[str] | None") -> tuple[L.Stmt, ...]:
    store, names, consumer = producer(describe(p), p.nest, nests, func, outputs)

    def inline(e: L.Expr) -> L.Expr:
        if isinstance(e, L.Load) and e.buffer == store.buffer:
            return substitute_expr(store.value, dict(zip(names, e.indices)))
        return e

    new = map_stmt_exprs(nests[consumer], inline)
    return tuple(L.Seq(()) if k == p.nest else new if k == consumer else n for k, n in enumerate(nests))


def _pure_nest(s: L.Stmt) -> tuple[list[L.For], L.Store | None]:
    loops: list[L.For] = []
    while isinstance(s, L.For):
        loops.append(s)
        s = s.body
    return loops, s if isinstance(s, L.Store) else None


__all__ = ["compute_inline", "producer"]
