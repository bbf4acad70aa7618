"""`CacheWrite` and `CacheRead`: stage a constant-size box of a tensor in a local buffer.

Requires: the nest the primitive names. Guarantees: the same values, with the accesses
inside the named loop redirected to a buffer of scope "local" allocated inside it:

* ``CacheWrite(loop)``: for each buffer stored inside `loop`'s body, the cells one
  iteration of `loop` writes form a box; the body becomes ``allocate Out.local;
  Out.local = Out[box]; body on Out.local; Out[box] = Out.local`` (the accumulators of a
  register block). Every read of Out inside must be of a cell the same statement or
  another store writes (read-modify-write), so the local copy is the only one read.
* ``CacheRead(T, loop)``: the cells of input `T` that one iteration of `loop` reads are
  copied into ``T.local`` first and the reads redirected (packing a panel).

Both refuse, with the reason, anything but a constant-size box whose every cell the
original would have touched in bounds: indices affine in the inner loops, those loops
of constant bounds, no access under a condition, and at most LOCAL_LIMIT bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.primitives.loops import (accesses, allocated_in, box_nest, box_of, check_fresh, describe, find_loop,
                                  fresh_buffer, redirect, replace_loop)
from tilec.schedule.primitives.records import CacheRead, CacheWrite
from tilec.ir.rewrite import const_value, loops_in
from tilec.ir.visitor import walk

LOCAL_LIMIT = 64 * 1024  # bytes: a local buffer lives on the stack (or in registers)


def _itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize


def _taken(func: L.PrimFunc) -> set[str]:
    return {b.name for b in func.params} | allocated_in(func.body)


def _stage(body: L.Stmt, buffer: str, dtype: str, idxs: list[tuple[L.Expr, ...]], inner: dict[str, L.For],
           what: str, func: L.PrimFunc, nest: L.Stmt, p: object, write_back: bool,
           fill: "Callable[[tuple[L.Expr, ...]], L.Expr] | None" = None) -> L.Stmt:
    """Stage the box of `buffer` read or written in `body` in a local buffer. `fill` gives the value
    of a cell (its indices into `buffer`) to load in: by default the cell of `buffer` itself."""
    box = box_of(idxs, inner, what)
    nbytes = box.size * _itemsize(dtype)
    if nbytes > LOCAL_LIMIT:
        raise ScheduleError(f"{what}: the box {list(box.shape)} of {buffer} takes {nbytes} bytes, more than the "
                            f"{LOCAL_LIMIT} bytes a local buffer may take (a global workspace cannot be made by a "
                            f"primitive); cache inside an inner loop")
    name = fresh_buffer(f"{buffer}.local", _taken(func))
    check_fresh(nest, [f"{name}.r{d}" for d in range(len(box.shape))] + [f"{name}.w{d}" for d in range(len(box.shape))], p)

    def cell(t: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        return tuple(L.add(o, x) for o, x in zip(box.origin, t))

    value = fill or (lambda c: L.Load(buffer, c, dtype))
    load_in = box_nest(f"{name}.r", box.shape, lambda t: L.Store(name, t, value(cell(t))))
    out = box_nest(f"{name}.w", box.shape, lambda t: L.Store(buffer, cell(t), L.Load(name, t, dtype))) \
        if write_back else None
    staged = redirect(body, buffer, name, box.relative)
    return L.Allocate(L.Buffer(name, dtype, box.shape, "local"), L.seq(load_in, staged, out))


def _check_path(path: tuple[L.Stmt, ...], what: str, buffer: str) -> None:
    """Every cell of the box must be one the original touches: no guard, no loop that may not run."""
    for s in path:
        if isinstance(s, L.If):
            raise ScheduleError(f"{what} are accessed under a condition, so the box may leave {buffer}; "
                                f"partition the loop first")
        if isinstance(s, L.For):
            b, e = const_value(s.begin), const_value(s.end)
            if b is None or e is None or e <= b:
                raise ScheduleError(f"{what}: loop {s.var} around the accesses does not have constant bounds "
                                    f"with at least one iteration, so the region is not a constant-size box "
                                    f"(partition or split the loops first)")


def cache_write(p: CacheWrite, nest: L.Stmt, func: L.PrimFunc) -> L.Stmt:
    loop, _ = find_loop(nest, p.loop, p)
    inner = {f.var: f for f in loops_in(loop.body)}
    here = allocated_in(loop.body)
    found = accesses(loop.body)
    stores = [(s, path) for s, path in found if isinstance(s, L.Store) and s.buffer not in here]
    if not stores:
        raise ScheduleError(f"{describe(p)}: loop {p.loop} stores to no buffer outside it; nothing to cache")
    body = loop.body
    for buffer in dict.fromkeys(s.buffer for s, _ in stores):
        what = f"{describe(p)}: the cells of {buffer} written inside loop {p.loop}"
        mine = [(s, path) for s, path in stores if s.buffer == buffer]
        for _, path in mine:
            _check_path(path, what, buffer)
        idxs = list(dict.fromkeys(s.indices for s, _ in mine))
        for n, _ in found:
            if isinstance(n, L.Load) and n.buffer == buffer and n.indices not in idxs:
                raise ScheduleError(f"{what}: another statement inside reads {buffer} at a cell no store there "
                                    f"updates, so it would read a stale value")
        body = _stage(body, buffer, mine[0][0].value.dtype, idxs, inner, what, func, nest, p, write_back=True)
    return replace_loop(nest, loop, L.For(loop.var, loop.begin, loop.end, body, loop.kind))


def cache_read(p: CacheRead, nest: L.Stmt, func: L.PrimFunc) -> L.Stmt:
    """Scope "local" (scope "shared" is tilec.schedule.primitives.shared's)."""
    if p.scope != "local":
        raise ScheduleError(f"{describe(p)}: unknown scope {p.scope!r}; scopes are 'local' and 'shared' (GPU)")
    loop, _ = find_loop(nest, p.loop, p)
    what = f"{describe(p)}: the cells of {p.tensor} read inside loop {p.loop}"
    if any(isinstance(s, L.Store) and s.buffer == p.tensor for s in walk(nest)):
        raise ScheduleError(f"{describe(p)}: {p.tensor} is written inside nest {p.nest}; only tensors the nest "
                            f"does not write can be cached for reading")
    if p.tensor in allocated_in(loop.body):
        raise ScheduleError(f"{describe(p)}: {p.tensor} is allocated inside loop {p.loop}")
    loads = [(n, path) for n, path in accesses(loop.body) if isinstance(n, L.Load) and n.buffer == p.tensor]
    if not loads:
        raise ScheduleError(f"{describe(p)}: loop {p.loop} does not read {p.tensor}")
    for _, path in loads:
        _check_path(path, what, p.tensor)
    inner = {f.var: f for f in loops_in(loop.body)}
    idxs = list(dict.fromkeys(n.indices for n, _ in loads))
    body = _stage(loop.body, p.tensor, loads[0][0].dtype, idxs, inner, what, func, nest, p, write_back=False)
    return replace_loop(nest, loop, L.For(loop.var, loop.begin, loop.end, body, loop.kind))


__all__ = ["cache_write", "cache_read", "LOCAL_LIMIT"]
