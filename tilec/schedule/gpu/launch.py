"""GPU launches: every top-level nest of a GPU PrimFunc as blocks of threads.

Requires: a PrimFunc whose nests are the GPU templates' launches, default nests, or nests a
user's Schedule bound in part. Guarantees: a PrimFunc in the GPU conventions of
:mod:`tilec.ir.loop` computing what its input computes: its body is a sequence of launches, each
a band of block-bound loops around a band of thread-bound loops (begin 0, constant ends). Per
top-level nest:

* a nest with bound loops (a template's launch, or a user's binding) keeps its binding; a
  missing level is added with extent 1 (a nest with only thread loops runs in one block; a
  nest with only block loops runs one thread per block);
* otherwise the outer loops of the nest whose iterations write disjoint elements
  (:func:`tilec.ir.legality.check_parallel`) and whose bounds are constant are fused and split
  into blocks of `threads` threads (the lowering parameter `gpu_block_threads`; fewer when there
  is less work), consecutive threads taking consecutive innermost indices (coalesced accesses);
  a guard ``if f < N`` only when the thread count does not divide the work. Reductions stay
  serial per thread, in the local accumulator of the default lowering;
* a nest whose outermost loop is not parallel-safe (a scatter-form update whose writes may
  collide, ``O[i + j] = +(...)``) runs in one block of one thread: correct, but slow.

Workspaces and temporaries stay global buffers in the params, as on the CPU.
"""

from __future__ import annotations

import math

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.legality import check_parallel
from tilec.ir.rewrite import const_value, floordiv, substitute
from tilec.ir.visitor import child_stmts, walk


def bind_launches(func: L.PrimFunc, threads: int) -> L.PrimFunc:
    """Every top-level nest of `func` made a launch (see the module doc), unbound ones in blocks of
    `threads` threads; empty nests dropped."""
    nests = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    launches = [_complete(n, k) if _bound(n) else default_bind(n, threads)
                for k, n in enumerate(nests) if not (isinstance(n, L.Seq) and not n.stmts)]
    return L.PrimFunc(func.name, func.params, L.seq(*launches))


def _bound(s: L.Stmt) -> bool:
    return any(isinstance(n, L.For) and n.kind in L.GPU_AXES for n in walk(s))


def launch(body: L.Stmt, blocks: int = 1, threads: int = 1, block_var: str = "blockIdx.x",
           thread_var: str = "threadIdx.x") -> L.For:
    """``for block_var in blockIdx.x [0, blocks): for thread_var in threadIdx.x [0, threads): body``."""
    inner = L.For(thread_var, L.const(0), L.const(threads), body, "threadIdx.x")
    return L.For(block_var, L.const(0), L.const(blocks), inner, "blockIdx.x")


def default_bind(nest: L.Stmt, threads: int) -> L.Stmt:
    """Fuse the outer parallel-safe loops of `nest` and split them into blocks x threads."""
    band: list[L.For] = []
    s = nest
    while isinstance(s, L.For) and const_value(s.begin) is not None and const_value(s.end) is not None:
        try:
            check_parallel(s)
        except ScheduleError:
            break
        band.append(s)
        s = s.body
    extents = [max(int(const_value(f.end) - const_value(f.begin)), 0) for f in band]  # type: ignore[operator]
    total = math.prod(extents)
    if not band or total == 0:
        return launch(nest)  # one block of one thread (or nothing to do)
    t = min(threads, total)
    blocks = -(-total // t)
    flat: L.Expr = L.add(L.mul(L.Var("blockIdx.x"), L.const(t)), L.Var("threadIdx.x")) if blocks > 1 \
        else L.Var("threadIdx.x")
    mapping: dict[str, L.Expr] = {}
    stride = total
    for k, (f, n) in enumerate(zip(band, extents)):
        stride //= n
        index = floordiv(flat, stride)
        if k > 0 and n > 1:
            index = L.Bin("mod", index, L.const(n))
        elif n == 1:
            index = L.const(0)
        mapping[f.var] = L.add(f.begin, index)
    body = substitute(s, mapping)
    if total % t:
        body = L.If(L.Cmp("lt", flat, L.const(total)), body)
    return launch(body, blocks, t)


def _complete(nest: L.Stmt, k: int) -> L.Stmt:
    """A nest with user binds, checked and completed into a launch."""
    if isinstance(nest, L.For) and nest.kind in L.GPU_THREAD_AXES:
        nest = L.For("blockIdx.x", L.const(0), L.const(1), nest, "blockIdx.x")
    if not (isinstance(nest, L.For) and nest.kind in L.GPU_BLOCK_AXES):
        outer = _outermost_unbound(nest)
        raise ScheduleError(f"nest {k}: {outer} encloses the bound loops but is not bound itself; a GPU launch "
                            f"is block loops around thread loops, so bind it (e.g. to blockIdx.y) or reorder "
                            f"the bound loops outermost")
    s: L.Stmt = nest
    blocks: list[L.For] = []
    while isinstance(s, L.For) and s.kind in L.GPU_BLOCK_AXES:
        blocks.append(s)
        s = s.body
    if not any(isinstance(n, L.For) and n.kind in L.GPU_THREAD_AXES for n in walk(s)):
        s = L.For("threadIdx.x", L.const(0), L.const(1), s, "threadIdx.x")
    else:
        _check_block_body(s, k)
    for f in reversed(blocks):
        s = L.For(f.var, f.begin, f.end, s, f.kind)
    return s


def _check_block_body(s: L.Stmt, k: int) -> None:
    """Everything between the block loops and the thread loops runs once per block: only shared
    allocations, sequences and loops/ifs around thread loops may sit there, never a store."""
    if isinstance(s, L.For) and s.kind in L.GPU_THREAD_AXES:
        return
    if isinstance(s, L.For) and s.kind in L.GPU_BLOCK_AXES:
        raise ScheduleError(f"nest {k}: block loop {s.var} is not directly inside the other block loops; "
                            f"bind the loops around it too, or reorder the block loops outermost")
    if isinstance(s, L.Store):
        raise ScheduleError(f"nest {k}: a store to {s.buffer} sits outside every thread loop (each thread "
                            f"would run it); bind a loop around it to a threadIdx axis or none in this nest")
    if isinstance(s, L.WMMA_STMTS):
        raise ScheduleError(f"nest {k}: a warp-collective {type(s).__name__} sits outside every thread loop; "
                            f"the warps of a block run it, so put it inside the thread loops")
    if isinstance(s, L.Allocate) and s.buffer.scope == "local":
        raise ScheduleError(f"nest {k}: local buffer {s.buffer.name} is allocated outside the thread loops")
    for child in child_stmts(s):
        _check_block_body(child, k)


def _outermost_unbound(nest: L.Stmt) -> str:
    for n in walk(nest):
        if isinstance(n, L.For):
            return f"loop {n.var}"
    return f"a {type(nest).__name__.lower()} statement"


__all__ = ["bind_launches", "default_bind", "launch"]
