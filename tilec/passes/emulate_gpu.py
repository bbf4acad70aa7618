"""The GPU emulator: a GPU PrimFunc -> a CPU PrimFunc that the LLVM backend compiles (target cuda-sim).

Requires: a PrimFunc following the GPU conventions of :mod:`tilec.ir.loop` (each top-level
statement a launch: block-bound loops around thread-bound loops; "shared" buffers allocated
inside the block loops, "local" ones inside the thread loops; Barriers inside the thread loops)
and no WMMA statements (:func:`tilec.passes.lower_wmma.lower_wmma` gives them their CPU meaning first).
Guarantees: a PrimFunc with no GPU-bound loops, no Barrier and no "shared" buffer that computes
what the GPU kernels compute when every block runs its threads to each barrier in turn:

* block loops become serial loops (the outermost one of a launch with many blocks and threads
  a parallel loop: blocks never synchronise with each other);
* inside a block, the band of thread loops is split at every Barrier (loop fission): each
  barrier-free segment runs for all threads before the next one starts. A Barrier may sit inside
  loops whose bounds and inside ``if``s whose conditions are the same for every thread (those are
  hoisted out of the thread loops); under thread-dependent control flow it is refused with a
  CodegenError, as CUDA would deadlock or be undefined there;
* a "local" buffer (scalars included) allocated around a Barrier lives across it, so it is
  expanded by the thread count and indexed by the linear thread id; locals that do not span a
  barrier stay per-thread scalars/arrays;
* a "shared" buffer becomes one local buffer per block iteration (allocated once per block).
"""

from __future__ import annotations

import math
from dataclasses import replace

from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.printer import format_expr
from tilec.ir.rewrite import const_value, map_stmt_exprs, mentions
from tilec.ir.visitor import map_child_stmts, walk

PARALLEL_MIN_WORK = 1 << 15  # blocks x threads below which a launch's blocks run serially


def emulate(func: L.PrimFunc) -> L.PrimFunc:
    """The CPU PrimFunc that computes what the GPU PrimFunc `func` computes (see the module doc)."""
    wmma = next((n for n in walk(func.body) if isinstance(n, L.WMMA_STMTS)), None)
    if wmma is not None:
        raise CodegenError(f"the GPU emulator got a {type(wmma).__name__} statement; lower the WMMA statements "
                           f"first (tilec.passes.lower_wmma.lower_wmma)")
    launches = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    body = L.seq(*(_launch(s, k) for k, s in enumerate(launches)))
    return replace(func, body=body)


def has_gpu_loops(s: L.Stmt) -> bool:
    return any(isinstance(n, L.For) and n.kind in L.GPU_AXES for n in walk(s))


def _launch(s: L.Stmt, index: int) -> L.Stmt:
    """One kernel launch: block loops become CPU loops; each thread band inside is emulated."""
    blocks, threads = _launch_extent(s)
    parallel = [blocks > 1 and blocks * threads >= PARALLEL_MIN_WORK]

    def visit(st: L.Stmt) -> L.Stmt:
        if isinstance(st, L.For) and st.kind in L.GPU_BLOCK_AXES:
            kind = "parallel" if parallel[0] else "serial"
            parallel[0] = False  # one level of parallel loops
            return L.For(st.var, st.begin, st.end, visit(st.body), kind)
        if isinstance(st, L.For) and st.kind in L.GPU_THREAD_AXES:
            return _thread_band(st, index)
        if isinstance(st, L.Allocate) and st.buffer.scope == "shared":
            return L.Allocate(replace(st.buffer, scope="local"), visit(st.body))
        if isinstance(st, L.Barrier):
            return L.seq()  # outside thread loops there is one "thread": nothing to wait for
        return map_child_stmts(st, visit)

    return visit(s)


def _launch_extent(s: L.Stmt) -> tuple[int, int]:
    blocks = threads = 1
    for n in walk(s):
        if isinstance(n, L.For) and n.kind in L.GPU_AXES:
            e = const_value(L.sub(n.end, n.begin))
            if e is None:
                raise CodegenError(f"GPU loop {n.var} ({n.kind}) has bounds [{format_expr(n.begin)}, "
                                   f"{format_expr(n.end)}) that are not constants; a launch extent must be")
            if n.kind in L.GPU_BLOCK_AXES:
                blocks *= max(e, 0)
            else:
                threads = max(threads, e)
    return blocks, threads


# ------------------------------------------------------------------ inside one block


def _thread_band(top: L.For, index: int) -> L.Stmt:
    """Emulate the thread loops starting at `top` (a perfect band of thread-bound loops)."""
    band: list[L.For] = [top]
    while isinstance(band[-1].body, L.For) and band[-1].body.kind in L.GPU_THREAD_AXES:
        band.append(band[-1].body)
    body = band[-1].body
    for n in walk(body):
        if isinstance(n, L.For) and n.kind in L.GPU_AXES:
            raise CodegenError(f"launch {index}: GPU loop {n.var} ({n.kind}) is nested inside thread loop "
                               f"{band[-1].var} but not directly; thread loops must form one band "
                               f"(each the whole body of the one outside it) and block loops must be outside them")
    for f in band:
        if const_value(f.begin) is None or const_value(f.end) is None:
            raise CodegenError(f"launch {index}: thread loop {f.var} has non-constant bounds")
    return _Fission(band, index).run(body)


class _Fission:
    """Split the body of a thread band at its barriers (see the module doc)."""

    def __init__(self, band: list[L.For], index: int) -> None:
        self.band = band
        self.index = index
        self.thread_vars = {f.var for f in band}
        extents = [int(const_value(f.end) - const_value(f.begin)) for f in band]  # type: ignore[operator]
        self.count = max(math.prod(extents), 1)
        tid: L.Expr = L.const(0)
        for f, n in zip(band, extents):
            tid = L.add(L.mul(tid, L.const(n)), L.sub(L.Var(f.var), f.begin))
        self.tid = tid
        self.per_thread: set[str] = set()  # local buffers expanded by the thread count

    def run(self, body: L.Stmt) -> L.Stmt:
        return self._split(body)

    def _threads(self, s: L.Stmt) -> L.Stmt:
        """`s` (barrier-free) run for every thread of the band."""
        if isinstance(s, L.Seq) and not s.stmts:
            return s
        s = self._index_expanded(s)
        for f in reversed(self.band):
            s = L.For(f.var, f.begin, f.end, s, "serial")
        return s

    def _split(self, s: L.Stmt) -> L.Stmt:
        if not _has_barrier(s):
            return self._threads(s)
        if isinstance(s, L.Barrier):
            return L.seq()
        if isinstance(s, L.Seq):
            out: list[L.Stmt] = []
            run: list[L.Stmt] = []
            for st in s.stmts:
                if _has_barrier(st):
                    out.append(self._threads(L.seq(*run)))
                    run = []
                    out.append(self._split(st))
                else:
                    run.append(st)
            out.append(self._threads(L.seq(*run)))
            return L.seq(*out)
        if isinstance(s, L.For):
            self._uniform((s.begin, s.end), f"the bounds of loop {s.var}")
            return L.For(s.var, s.begin, s.end, self._split(s.body), "serial")
        if isinstance(s, L.If):
            self._uniform(s.cond, "the condition of an if")
            return L.If(s.cond, self._split(s.then), None if s.orelse is None else self._split(s.orelse))
        if isinstance(s, L.Allocate):
            if s.buffer.scope == "shared":
                raise CodegenError(f"launch {self.index}: shared buffer {s.buffer.name} is allocated inside thread "
                                   f"loops; allocate it inside the block loops, outside the thread loops")
            self.per_thread.add(s.buffer.name)
            expanded = replace(s.buffer, shape=(self.count,) + s.buffer.shape, scope="local")
            return L.Allocate(expanded, self._split(s.body))
        raise CodegenError(f"launch {self.index}: cannot emulate a Barrier inside {type(s).__name__}")

    def _uniform(self, e: object, what: str) -> None:
        """Refuse a barrier under control flow that may differ between the threads of a block."""
        locals_ = {n.buffer for n in walk(e) if isinstance(n, L.Load)} & self.per_thread
        if mentions(e, self.thread_vars) or locals_:
            raise CodegenError(f"launch {self.index}: a Barrier is under thread-dependent control flow "
                               f"({what} depends on the thread); every thread of a block must reach each "
                               f"barrier, so move the barrier out of it or make the condition the same "
                               f"for all threads")

    def _index_expanded(self, s: L.Stmt) -> L.Stmt:
        """Accesses to expanded locals get the linear thread id as their first index."""
        if not self.per_thread:
            return s
        names, tid = self.per_thread, self.tid

        def load(e: L.Expr) -> L.Expr:
            if isinstance(e, L.Load) and e.buffer in names:
                return L.Load(e.buffer, (tid,) + e.indices, e.dtype)
            return e

        def store(st: L.Store) -> L.Stmt:
            return L.Store(st.buffer, (tid,) + st.indices, st.value) if st.buffer in names else st

        return map_stmt_exprs(s, load, store)


def _has_barrier(s: L.Stmt) -> bool:
    return any(isinstance(n, L.Barrier) for n in walk(s))


__all__ = ["emulate", "has_gpu_loops", "PARALLEL_MIN_WORK"]
