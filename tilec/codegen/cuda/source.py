"""Loop IR (GPU conventions, tilec/ir/loop.py) -> one CUDA C translation unit.

Requires a PrimFunc whose body follows the GPU conventions: each top-level statement is a
launch; loops bound to ``blockIdx.*`` / ``threadIdx.*`` run over ``[0, constant)``.
Guarantees: `render_cuda` returns source that nvcc (or NVRTC) compiles as it stands, with
one ``extern "C" __global__`` kernel per launch taking the parameters it uses, in
parameter order, as ``__restrict__`` pointers (``const`` where only read). The kernels
run the loop IR's semantics (the CPU backend, tilec/codegen/llvm/scalar.py, is the reference):

- a block or thread loop becomes its index; where its extent is smaller than the launch
  extent of its axis, a guard skips the excess blocks or threads;
- statements outside every thread loop of a kernel that has threads run on thread 0 only
  (one execution per block, as the loop nest means), and ``Barrier`` is ``__syncthreads()``;
  a barrier that not every thread of the block would reach is a CodegenError;
- shared buffers live in the launch's dynamic shared memory (32-byte aligned offsets, so
  kernels may use more than 48 KB; `Launch.shared_bytes` says how much), local buffers
  are per-thread arrays;
- index arithmetic is 32-bit where the ranges of all index expressions provably fit, else
  64-bit; float16 values are computed in float32 and rounded where a global or shared buffer
  stores them (tilec.codegen.cuda.expr);
- a ``vectorized`` loop of 4 float32 lanes whose accesses are unit-stride and provably
  16-byte aligned uses ``float4`` loads and stores (`CudaSource.aligned_params` lists the
  parameters whose base addresses must then be 16-byte aligned); any other is a scalar loop;
- the WMMA statements become ``nvcuda::wmma`` calls (tilec/codegen/cuda/wmma.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tilec.codegen.cuda import analysis as A
from tilec.codegen.cuda.expr import ExprRenderer, ctype, identifier, value_ctype
from tilec.codegen.cuda.prelude import PRELUDE
from tilec.codegen.cuda.wmma import fragment_declaration, render_wmma
from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.dtypes import bit_width
from tilec.ir.launch import gpu_extent
from tilec.ir.visitor import children, is_stmt, walk


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory per block
    args: tuple[str, ...]  # the PrimFunc parameters the kernel takes, in order
    writes: tuple[str, ...] = ()  # those of `args` it may write


@dataclass(frozen=True)
class CudaSource:
    text: str
    launches: tuple[Launch, ...]
    params: tuple[L.Buffer, ...]
    aligned_params: tuple[str, ...] = ()  # parameters whose base must be 16-byte aligned (float4)
    wmma_params: tuple[str, ...] = ()  # parameters whose base must be 32-byte aligned (WMMA windows)

    def __str__(self) -> str:
        return self.text


def render_cuda(func: L.PrimFunc) -> CudaSource:
    """The CUDA C of `func`: one kernel per top-level statement (see the module docstring)."""
    stmts = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    base = identifier(func.name, set())
    parts = [PRELUDE]
    launches = []
    aligned: set[str] = set()
    wmma: set[str] = set()
    for k, stmt in enumerate(stmts):
        kernel = _Kernel(func, stmt, f"{base}_k{k}")
        parts.append(kernel.render())
        launches.append(kernel.launch)
        aligned |= kernel.exprs.aligned
        wmma |= kernel.exprs.wmma
    order = tuple(b.name for b in func.params if b.name in aligned)
    return CudaSource("\n".join(parts), tuple(launches), func.params, order,
                      tuple(b.name for b in func.params if b.name in wmma))


_SHARED_ALIGN = 32  # what WMMA windows need (float4 needs 16)


class _Kernel:
    """Renders one launch: its signature, shared memory layout, and body."""

    def __init__(self, func: L.PrimFunc, stmt: L.Stmt, name: str) -> None:
        self.func = func
        self.stmt = stmt
        self.name = name
        self.grid, self.block = A.launch_shape(stmt)
        self.threaded = self.block != (1, 1, 1)
        self.params = {b.name: b for b in func.params}
        self.shared_offsets, shared_bytes = self._layout_shared()
        used, written = _buffers_used(stmt)
        self.args = tuple(b.name for b in func.params if b.name in used)
        self.written = written
        self.exprs = ExprRenderer(dict(self.params), wide=_needs_wide_index(stmt, self.params))
        self.launch = Launch(name, self.grid, self.block, shared_bytes, self.args,
                             tuple(a for a in self.args if a in written))
        self.lines: list[str] = []
        self.depth = 1
        self.varying: set[str] = set()  # loop variables that may differ between the threads of a block

    # ------------------------------------------------------------ structure

    def render(self) -> str:
        names = self.exprs.names
        sig = []
        for arg in self.args:
            buf = self.params[arg]
            const = "" if arg in self.written else "const "
            sig.append(f"{const}{ctype(buf.dtype)}* __restrict__ {names.buffer(arg)}")
        threads = self.block[0] * self.block[1] * self.block[2]
        head = f'extern "C" __global__ void __launch_bounds__({threads}) {self.name}({", ".join(sig)}) {{'
        if self.shared_offsets:
            self.emit("extern __shared__ __align__(128) unsigned char tilec_smem[];")
        if self.threaded:
            self.emit("const bool tilec_thread0 = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;")
        self.stmt_(self.stmt, in_threads=not self.threaded, divergent=False)
        return "\n".join([head] + self.lines + ["}", ""])

    def _layout_shared(self) -> tuple[dict[str, int], int]:
        offsets: dict[str, int] = {}
        total = 0
        for node in walk(self.stmt):
            if isinstance(node, L.Allocate) and node.buffer.scope == "shared":
                if node.buffer.name in offsets:
                    raise CodegenError(f"shared buffer {node.buffer.name} is allocated twice in kernel {self.name}")
                offsets[node.buffer.name] = total
                nbytes = node.buffer.size * _itemsize(node.buffer.dtype)
                total += -(-nbytes // _SHARED_ALIGN) * _SHARED_ALIGN
        return offsets, total

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def block_(self, head: str, body: L.Stmt, in_threads: bool, divergent: bool) -> None:
        self.emit(head + " {")
        self.depth += 1
        self.stmt_(body, in_threads, divergent)
        self.depth -= 1
        self.emit("}")

    # ------------------------------------------------------------ statements

    def stmt_(self, s: L.Stmt, in_threads: bool, divergent: bool) -> None:
        """Emit `s`; `in_threads`: every thread runs its own copy; `divergent`: not all threads get here."""
        if not in_threads and _single_thread(s):
            self.block_("if (tilec_thread0)", s, in_threads=True, divergent=True)  # once per block
            return
        if isinstance(s, L.Seq):
            run: list[L.Stmt] = []  # consecutive statements for thread 0 share one guard
            for st in s.stmts:
                if not in_threads and _single_thread(st):
                    run.append(st)
                    continue
                if run:
                    self.stmt_(L.seq(*run), in_threads, divergent)
                    run = []
                self.stmt_(st, in_threads, divergent)
            if run:
                self.stmt_(L.seq(*run), in_threads, divergent)
        elif isinstance(s, L.Barrier):
            if divergent:
                raise CodegenError(f"kernel {self.name}: a Barrier under a thread-dependent condition or guard; "
                                   "every thread of the block must reach it (move it out of the guarded code)")
            self.emit("__syncthreads();")
        elif isinstance(s, L.For):
            self.for_(s, in_threads, divergent)
        elif isinstance(s, L.If):
            cond = self.exprs.expr(s.cond)
            branch_divergent = divergent or (in_threads and self.threaded and self._varies(s.cond))
            self.block_(f"if ({cond})", s.then, in_threads, branch_divergent)
            if s.orelse is not None:
                self.block_("else", s.orelse, in_threads, branch_divergent)
        elif isinstance(s, L.Allocate):
            self.allocate(s, in_threads, divergent)
        elif isinstance(s, L.Store):
            self.store(s)
        elif isinstance(s, L.WMMA_STMTS):
            if not in_threads or divergent or (self.block[0] * self.block[1] * self.block[2]) % 32:
                raise CodegenError(f"kernel {self.name}: {type(s).__name__} is warp-collective; it must be inside "
                                   "the thread loops, reached by every thread, in blocks of whole warps")
            self.emit(render_wmma(s, self.exprs))
        else:
            raise CodegenError(f"the CUDA backend cannot compile {type(s).__name__} statements")

    def allocate(self, s: L.Allocate, in_threads: bool, divergent: bool) -> None:
        buf = s.buffer
        names = self.exprs.names
        self.exprs.buffers[buf.name] = buf
        self.emit("{")
        self.depth += 1
        if buf.scope == "shared":
            if in_threads and self.threaded:
                raise CodegenError(f"shared buffer {buf.name} is allocated inside a thread loop; "
                                   "allocate it inside the block loops, outside the thread loops")
            t = ctype(buf.dtype)
            self.emit(f"{t}* {names.buffer(buf.name)} = reinterpret_cast<{t}*>(tilec_smem + "
                      f"{self.shared_offsets[buf.name]});")
        elif buf.scope == "local":
            if not in_threads and A.has_thread_loop(s.body):
                raise CodegenError(f"local buffer {buf.name} is allocated outside the thread loops that use it; "
                                   "allocate it inside them (one per thread) or give it scope 'shared'")
            self.emit(f"{value_ctype(buf.dtype)} {names.buffer(buf.name)}[{max(1, buf.size)}];")
        elif buf.scope in L.FRAGMENT_SCOPES:
            if not in_threads:
                raise CodegenError(f"fragment {buf.name} must be allocated inside the thread loops")
            self.emit(fragment_declaration(buf, names.buffer(buf.name)))
        else:
            raise CodegenError(f"buffer {buf.name}: scope {buf.scope} cannot be allocated inside a CUDA kernel")
        self.stmt_(s.body, in_threads, divergent)
        self.depth -= 1
        self.emit("}")

    def store(self, s: L.Store) -> None:
        buf = self.exprs.buffers[s.buffer]
        if s.value.dtype != buf.dtype:
            raise CodegenError(f"store of {s.value.dtype} into {buf.name} ({buf.dtype})")
        self.emit(f"{self.exprs.access(s.buffer, s.indices)} = {self.exprs.stored(buf, s.value)};")

    def for_(self, s: L.For, in_threads: bool, divergent: bool) -> None:
        names = self.exprs.names
        var = names.var(s.var)
        idx = self.exprs.index_type
        if s.kind in L.GPU_AXES:
            extent = gpu_extent(s)
            axis = s.kind.split(".")[1]
            is_thread = s.kind in L.GPU_THREAD_AXES
            launch = (self.block if is_thread else self.grid)["xyz".index(axis)]
            self.emit("{")
            self.depth += 1
            self.emit(f"const {idx} {var} = ({idx}){s.kind};")
            inner_threads = in_threads or is_thread
            if is_thread:
                self.varying.add(s.var)
            with self._in_loop(s.var, (0, extent - 1)):
                if extent < launch:
                    self.block_(f"if ({var} < {extent})", s.body, inner_threads, divergent or is_thread)
                else:
                    self.stmt_(s.body, inner_threads, divergent)
            self.varying.discard(s.var)
            self.depth -= 1
            self.emit("}")
            return
        if s.kind == "vectorized" and self.exprs.try_float4(s, self.emit):
            return
        begin, end = self.exprs.expr(s.begin), self.exprs.expr(s.end)
        varies = self._varies(s.begin) or self._varies(s.end)
        loop_divergent = divergent or (in_threads and self.threaded and varies)
        if s.kind in ("unrolled", "vectorized"):
            self.emit("#pragma unroll")
        end_var = names.fresh(f"{s.var}_end")
        if varies:
            self.varying.add(s.var)
        with self._in_loop(s.var, A.loop_range(s, self.exprs.ranges)):
            self.block_(f"for ({idx} {var} = {begin}, {end_var} = {end}; {var} < {end_var}; ++{var})",
                        s.body, in_threads, loop_divergent)
        self.varying.discard(s.var)

    def _varies(self, e: L.Expr) -> bool:
        """Whether `e` may differ between the threads of a block (loads count as varying)."""
        return any(isinstance(n, L.Load) for n in walk(e)) or A.uses_vars(e, self.varying)

    @contextmanager
    def _in_loop(self, var: str, r: A.Interval | None) -> Iterator[None]:
        ranges = self.exprs.ranges
        saved = ranges.get(var)
        if r is None:
            ranges.pop(var, None)
        else:
            ranges[var] = r
        try:
            yield
        finally:
            if saved is None:
                ranges.pop(var, None)
            else:
                ranges[var] = saved


def _single_thread(s: L.Stmt) -> bool:
    """Whether `s`, outside the thread loops, is work for one thread (no thread loops, no barriers)."""
    return not isinstance(s, L.Barrier) and not A.has_thread_loop(s) and not A.has_barrier(s)


def _itemsize(dtype: str) -> int:
    return 1 if dtype == "bool" else bit_width(dtype) // 8


def _buffers_used(stmt: L.Stmt) -> tuple[set[str], set[str]]:
    used: set[str] = set()
    written: set[str] = set()
    for node in walk(stmt):
        if isinstance(node, (L.Load, L.Store)):
            used.add(node.buffer)
        if isinstance(node, L.Store):
            written.add(node.buffer)
        for ref in getattr(node, "buffer_refs", lambda: ())():
            used.add(ref[0])
            if ref[1]:
                written.add(ref[0])
    return used, written


def _needs_wide_index(stmt: L.Stmt, params: dict[str, L.Buffer]) -> bool:
    """Whether some index expression of `stmt` may leave the int32 range (or has unknown range)."""
    buffers = dict(params)
    wide = False

    def check(e: L.Expr, ranges: dict[str, A.Interval]) -> None:
        nonlocal wide
        for node in walk(e):
            if isinstance(node, L.Load):
                check_access(node.buffer, node.indices, ranges)
            elif node.dtype == L.INDEX and A.pure_index(node) and not A.fits_int32(A.interval(node, ranges)):
                wide = True

    def check_access(name: str, indices: tuple[L.Expr, ...], ranges: dict[str, A.Interval]) -> None:
        nonlocal wide
        buf = buffers.get(name)
        if buf is None or buf.size > A.INT32_MAX:
            wide = True
            return
        lo = hi = 0
        stride = 1
        for i, n in zip(reversed(indices), reversed(buf.shape)):
            iv = A.interval(i, ranges)
            if iv is None:
                wide = True
                return
            lo, hi = lo + min(iv[0] * stride, iv[1] * stride), hi + max(iv[0] * stride, iv[1] * stride)
            if not A.fits_int32((lo, hi)):
                wide = True
            stride *= n

    def visit(s: L.Stmt, ranges: dict[str, A.Interval]) -> None:
        if isinstance(s, L.For):
            check(s.begin, ranges)
            check(s.end, ranges)
            r = A.loop_range(s, ranges)
            inner = dict(ranges)
            if r is None:
                inner.pop(s.var, None)
            else:
                inner[s.var] = r
            visit(s.body, inner)
            return
        if isinstance(s, L.Allocate):
            buffers[s.buffer.name] = s.buffer
        if isinstance(s, L.Store):
            check_access(s.buffer, s.indices, ranges)
        for c in children(s):
            if is_stmt(c):
                visit(c, ranges)
            else:
                check(c, ranges)

    visit(stmt, {})
    return wide


def translation_unit(sources: list[CudaSource]) -> str:
    """One .cu holding the kernels of several sources (the prelude once): one nvcc call checks them all.

    The kernels' names must differ (they do when the PrimFuncs' names differ)."""
    names = [la.kernel for s in sources for la in s.launches]
    if len(set(names)) != len(names):
        raise CodegenError("kernels of the same name in one translation unit; give the PrimFuncs distinct names")
    return PRELUDE + "".join(s.text[len(PRELUDE):] for s in sources)
