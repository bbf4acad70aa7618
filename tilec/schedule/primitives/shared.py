"""`CacheRead(T, loop, scope="shared")`: stage a tile of `T` in GPU shared memory, per block.

Requires: the nest the primitive names, on a GPU target; `loop` lies inside the thread loops
(a perfect band of thread-bound loops) and inside at least one block loop, on a path from the
innermost thread loop with no ``if`` and no loop whose bounds depend on the thread (every thread
must reach the barriers the same number of times).
Guarantees: the same values. The cells of `T` that all threads of a block read in one iteration
of `loop` form a constant-size box (as for the local CacheRead, with the thread loops counted
as inner loops). A buffer ``T.shared`` of that box, scope "shared", is allocated around the
thread loops (one per block), and each iteration of `loop` becomes::

    cooperative load: thread tid copies cells tid, tid + threads, ... of the box
    Barrier          (the tile is complete before anyone reads it)
    the body, reading T.shared
    Barrier          (nobody overwrites the tile while another thread still reads it)

Refused with the reason otherwise, and when the box exceeds the shared memory a block of the
target's GPU may use.
"""

from __future__ import annotations

import math

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.primitives.cache import _check_path, _itemsize, _taken
from tilec.schedule.primitives.loops import accesses, allocated_in, box_of, describe, find_loop, fresh_buffer, redirect, \
    replace_loop
from tilec.schedule.primitives.records import CacheRead
from tilec.ir.rewrite import const_value, floordiv, loops_in, mentions
from tilec.ir.visitor import child_stmts, walk

def cache_read_shared(p: CacheRead, nest: L.Stmt, func: L.PrimFunc, shared_bytes: int) -> L.Stmt:
    """The tile in shared memory; `shared_bytes`: what a block may use on the target's GPU."""
    what = f"{describe(p)}: the cells of {p.tensor} read inside loop {p.loop}"
    loop, outer = find_loop(nest, p.loop, p)
    threads = [f for f in outer if f.kind in L.GPU_THREAD_AXES]
    if not threads:
        raise ScheduleError(f"{describe(p)}: loop {p.loop} is not inside a thread loop; a shared tile is loaded "
                            f"by the threads of a block together, so bind the loops around it to threadIdx axes "
                            f"first (or use scope 'local')")
    if not any(f.kind in L.GPU_BLOCK_AXES for f in outer):
        raise ScheduleError(f"{describe(p)}: no block loop around loop {p.loop}; a shared buffer lives per "
                            f"block, so bind an outer loop to a blockIdx axis first")
    for a, b in zip(threads, threads[1:]):
        if a.body is not b:
            raise ScheduleError(f"{describe(p)}: thread loops {a.var} and {b.var} are not directly nested; "
                                f"the thread loops must form one band")
    if any(isinstance(s, L.Store) and s.buffer == p.tensor for s in walk(nest)):
        raise ScheduleError(f"{describe(p)}: {p.tensor} is written inside nest {p.nest}; only tensors the nest "
                            f"does not write can be cached for reading")
    _check_uniform_path(threads[-1], loop, {f.var for f in threads}, p)
    loads = [(n, path) for n, path in accesses(loop.body) if isinstance(n, L.Load) and n.buffer == p.tensor]
    if not loads:
        raise ScheduleError(f"{describe(p)}: loop {p.loop} does not read {p.tensor}")
    for _, path in loads:
        _check_path(path, what, p.tensor)
    inner = {f.var: f for f in loops_in(loop.body)} | {f.var: f for f in threads}
    box = box_of(list(dict.fromkeys(n.indices for n, _ in loads)), inner, what)
    dtype = loads[0][0].dtype
    nbytes = box.size * _itemsize(dtype)
    if nbytes > shared_bytes:
        raise ScheduleError(f"{what}: the tile {list(box.shape)} takes {nbytes} bytes, more than the {shared_bytes} "
                            f"bytes of shared memory a block may use; cache inside an inner loop or use smaller tiles")
    name = fresh_buffer(f"{p.tensor}.shared", _taken(func) | allocated_in(nest))
    load = _cooperative_load(name, p.tensor, dtype, box.origin, box.shape, threads)
    body = redirect(loop.body, p.tensor, name, box.relative)
    # a tile staged at this loop already: load this one beside it, between the same barriers
    staged = L.seq(load, body) if _staged(body) else L.seq(load, L.Barrier(), body, L.Barrier())
    nest = replace_loop(nest, loop, L.For(loop.var, loop.begin, loop.end, staged, loop.kind))
    top, _ = find_loop(nest, threads[0].var, p)
    return replace_loop(nest, top, L.Allocate(L.Buffer(name, dtype, box.shape, "shared"), top))


def _staged(body: L.Stmt) -> bool:
    """Whether `body` is ``loads; Barrier; ...; Barrier`` as made by an earlier shared CacheRead."""
    if not (isinstance(body, L.Seq) and isinstance(body.stmts[-1], L.Barrier)):
        return False
    for s in body.stmts[:-1]:
        if isinstance(s, L.Barrier):
            return True
        if not (isinstance(s, L.For) and s.var.endswith(".shared.l")):
            return False
    return False


def _check_uniform_path(band_end: L.For, loop: L.For, thread_vars: set[str], p: CacheRead) -> None:
    """Between the thread loops and `loop`: only loops of thread-independent bounds and allocations."""
    def path(s: L.Stmt) -> list[L.Stmt] | None:
        if s is loop:
            return [s]
        for c in child_stmts(s):
            found = path(c)
            if found is not None:
                return [s] + found
        return None

    for s in path(band_end.body) or []:
        if isinstance(s, L.If):
            raise ScheduleError(f"{describe(p)}: loop {p.loop} is under a condition inside the thread loops, so "
                                f"the block's threads might not all reach the barriers around the shared tile; "
                                f"bind loops whose extents the tiles divide (no guard), or partition first")
        if isinstance(s, L.For) and mentions((s.begin, s.end), thread_vars):
            raise ScheduleError(f"{describe(p)}: the bounds of loop {s.var} depend on the thread, so the "
                                f"block's threads might not all reach the barriers around the shared tile")


def _cooperative_load(name: str, tensor: str, dtype: str, origin: tuple[L.Expr, ...], shape: tuple[int, ...],
                      threads: list[L.For]) -> L.Stmt:
    extents = [int(const_value(f.end) - const_value(f.begin)) for f in threads]  # type: ignore[operator]
    count = max(math.prod(extents), 1)
    tid: L.Expr = L.const(0)
    for f, n in zip(threads, extents):
        tid = L.add(L.mul(tid, L.const(n)), L.sub(L.Var(f.var), f.begin))
    size = math.prod(shape)
    var = f"{name}.l"
    cell = L.add(L.mul(L.Var(var), L.const(count)), tid)
    coords: list[L.Expr] = []
    stride = size
    for d, n in enumerate(shape):
        stride //= n
        c = floordiv(cell, stride)
        coords.append(L.const(0) if n == 1 else c if d == 0 else L.Bin("mod", c, L.const(n)))
    copy: L.Stmt = L.Store(name, tuple(coords), L.Load(tensor, tuple(L.add(o, c) for o, c in zip(origin, coords)),
                                                        dtype))
    if size % count:
        copy = L.If(L.Cmp("lt", cell, L.const(size)), copy)
    return L.For(var, L.const(0), L.const(-(-size // count)), copy)


__all__ = ["cache_read_shared"]
