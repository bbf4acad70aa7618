"""Loop-IR statements as LLVM IR: the kernel's body function, and the loops of every kind.

Requires: a PrimFunc for the CPU (GPU functions go through the emulator first); expressions are
emitted by the ScalarEmitter this extends. Guarantees: `emit_body` adds to the module an internal,
always-inlined function ``void NAME_body(ptr noalias params...)`` running the function's body.
Loops become, by kind:

* `unrolled` with constant bounds: the body once per iteration (a transposing tile when
  tilec.codegen.llvm.transpose.transposable says so);
* `parallel` (when the target has more than one core): chunks run by the runtime's worker pool
  (tilec.codegen.llvm.parallel), or serially when the loop's estimated work
  (tilec.codegen.llvm.work) is too small to pay for a parallel region;
* `vectorized` within what tilec.codegen.llvm.vector emits: explicit vector code, in pieces of
  power-of-two lengths;
* any other: a serial loop, those two kinds carrying LLVM's vectorise / full-unroll hints.

A store ``acc = acc + x`` (or ``*``) carries ``reassoc`` so LLVM may vectorise the reduction.
"""

from __future__ import annotations

import itertools
from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.amx import emit_tile_dot, emit_tile_region
from tilec.codegen.llvm.loop_metadata import loop_metadata
from tilec.codegen.llvm.parallel import body_type, captured_names, chunk_function, context_type, run_chunks
from tilec.codegen.llvm.scalar import ScalarEmitter
from tilec.codegen.llvm.transpose import emit_transposed, transposable
from tilec.codegen.llvm.types import I64, PTR, storage_type, value_name, value_type
from tilec.codegen.llvm.vector import VectorLoop, power_of_two_pieces, vectorizable
from tilec.codegen.llvm.work import iteration_work, largest_parallel_work
from tilec.errors import CodegenError
from tilec.ir import loop as L

_REASSOC = ("reassoc", "contract")


def emit_body(module: ir.Module, func: L.PrimFunc, cores: int, vector_bytes: int = 16,
              pair_dot: bool = False) -> ir.Function:
    """The body function of `func` in `module` (see the module doc); parallel loops use `cores`
    threads, and their work is estimated for vectors of `vector_bytes` (tilec.codegen.llvm.work);
    `pair_dot`: the CPU has vdpbf16ps (tilec.target.has_pair_dot)."""
    fn = _body_function(module, ir.FunctionType(ir.VoidType(), [PTR] * len(func.params)), f"{func.name}_body",
                        [b.name for b in func.params])
    em = BodyEmitter(module, func, cores, itertools.count(), fn, {b.name: b for b in func.params},
                     dict(zip((b.name for b in func.params), fn.args)), {}, vector_bytes, pair_dot)
    em.stmt(func.body)
    em.finish()
    return fn


def _body_function(module: ir.Module, fnty: ir.FunctionType, name: str, buffers: list[str]) -> ir.Function:
    """An internal, always-inlined function whose first arguments are the `buffers`' noalias pointers."""
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    for arg, buffer in zip(fn.args, buffers):
        arg.add_attribute("noalias")
        arg.name = value_name(buffer)
    return fn


class BodyEmitter(ScalarEmitter):
    """Emits statements into `fn`, whose arguments `pointers` and `variables` map to."""

    def __init__(self, module: ir.Module, func: L.PrimFunc, cores: int, ids: itertools.count, fn: ir.Function,
                 buffers: dict[str, L.Buffer], pointers: dict[str, ir.Value], variables: dict[str, ir.Value],
                 vector_bytes: int = 16, pair_dot: bool = False) -> None:
        self.module, self.func, self.cores, self.ids, self.pair_dot = module, func, cores, ids, pair_dot
        self.vector_bytes = vector_bytes  # for estimates of a parallel loop's work
        self.kernel_work = largest_parallel_work(func.body, vector_bytes)  # its largest parallel loop's
        self.fn, self.buffers, self.pointers, self.vars = fn, buffers, pointers, variables
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(fn.append_basic_block("start"))

    def finish(self) -> None:
        """Return at the end, and enter the code from the block of allocas."""
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])

    # ------------------------------------------------------------ statements

    def stmt(self, s: L.Stmt) -> None:
        method = getattr(self, f"_stmt_{type(s).__name__}", None)
        if method is None:
            raise CodegenError(f"the LLVM backend cannot compile {type(s).__name__} statements")
        method(s)

    def _stmt_Seq(self, s: L.Seq) -> None:
        for st in s.stmts:
            self.stmt(st)

    def _stmt_TileRegion(self, s: L.TileRegion) -> None:
        emit_tile_region(self, s)

    def _stmt_TileDot(self, s: L.TileDot) -> None:
        emit_tile_dot(self, s)  # (a CPU without AMX gets the loops of tilec.codegen.llvm.tile_loops instead)

    def _stmt_Barrier(self, s: L.Barrier) -> None:
        pass  # one thread per block on the CPU

    def _stmt_Allocate(self, s: L.Allocate) -> None:
        buf = s.buffer
        if buf.scope not in ("local", "shared"):
            raise CodegenError(f"buffer {buf.name}: scope {buf.scope} cannot be allocated inside a CPU kernel")
        entry = ir.IRBuilder(self.entry)
        mem = storage_type(buf)
        ptr = entry.alloca(mem, size=ir.Constant(I64, max(1, buf.size)) if buf.size != 1 else None,
                           name=value_name(buf.name))
        if buf.size >= 16:
            ptr.align = 64  # on a cache line: AMX tiles load and store an accumulator's rows whole
        saved = self.pointers.get(buf.name)
        self.pointers[buf.name] = ptr
        self.buffers[buf.name] = buf
        self.stmt(s.body)
        if saved is not None:
            self.pointers[buf.name] = saved

    def _stmt_Store(self, s: L.Store) -> None:
        buf = self.buffers[s.buffer]
        value = s.value
        flags: tuple[str, ...] = ()
        if isinstance(value, L.Bin) and value.op in ("add", "mul") and isinstance(value.a, L.Load) \
                and value.a.buffer == s.buffer and value.a.indices == s.indices:
            flags = _REASSOC  # a reduction update: let LLVM reorder it
        v = self.expr(value, flags)
        if v.type != value_type(buf.dtype):
            raise CodegenError(f"store of {value.dtype} into {buf.name} ({buf.dtype})")
        self.b.store(self.to_memory(buf, v), self.address(buf, s.indices))

    def _stmt_For(self, s: L.For) -> None:
        if s.kind == "unrolled" and transposable(s, self.buffers):
            emit_transposed(self, s)
        elif s.kind == "unrolled" and isinstance(s.begin, L.Const) and isinstance(s.end, L.Const):
            self._unrolled_loop(s)
        elif s.kind == "parallel" and self.cores > 1:
            self._parallel_loop(s)
        elif s.kind == "vectorized" and vectorizable(s, self.buffers):
            for piece in power_of_two_pieces(s):
                VectorLoop(self, piece).emit()
        else:
            loop_hints: dict[str, list[tuple[str, Any]]] = {
                "vectorized": [("llvm.loop.vectorize.enable", True)], "unrolled": [("llvm.loop.unroll.full", None)]}
            hints = loop_hints.get(s.kind, [])
            self._serial_loop(s, self.expr(s.begin), self.expr(s.end), hints)

    def _serial_loop(self, s: L.For, begin: ir.Value, end: ir.Value, hints: list[tuple[str, Any]]) -> None:
        pre = self.b.block
        header = self.fn.append_basic_block(f"for_{value_name(s.var)}")
        body = self.fn.append_basic_block(f"for_{value_name(s.var)}_body")
        exit_ = self.fn.append_basic_block(f"for_{value_name(s.var)}_end")
        self.b.branch(header)
        self.b.position_at_end(header)
        iv = self.b.phi(I64, name=value_name(s.var))
        iv.add_incoming(begin, pre)
        self.b.cbranch(self.b.icmp_signed("<", iv, end), body, exit_)
        self.b.position_at_end(body)
        saved = self.vars.get(s.var)
        self.vars[s.var] = iv
        self.stmt(s.body)
        nxt = self.b.add(iv, ir.Constant(I64, 1), flags=("nsw",))
        iv.add_incoming(nxt, self.b.block)
        back_edge = self.b.branch(header)
        if hints:
            back_edge.set_metadata("llvm.loop", loop_metadata(self.module, next(self.ids), hints))
        self.b.position_at_end(exit_)
        self.restore_var(s.var, saved)

    def _unrolled_loop(self, s: L.For) -> None:
        """The body once per iteration, with the loop variable a constant in each copy."""
        saved = self.vars.get(s.var)
        for value in range(int(s.begin.value), int(s.end.value)):  # type: ignore[union-attr]
            self.vars[s.var] = ir.Constant(I64, value)
            self.stmt(s.body)
        self.restore_var(s.var, saved)

    def _parallel_loop(self, s: L.For) -> None:
        """`s` split into `cores` chunks run by the worker pool (see tilec.codegen.llvm.parallel)."""
        k = next(self.ids)
        buffers, variables = captured_names(s, self.pointers, self.vars)
        ctx_type = context_type(len(buffers), len(variables))
        body = self._outlined(s, f"{self.func.name}_par{k}_body", buffers, variables)  # before code that uses self.vars
        chunk_fn = chunk_function(self.module, f"{self.func.name}_par{k}", ctx_type, body)
        ctx = ir.IRBuilder(self.entry).alloca(ctx_type, name="par_ctx")
        captured = [self.pointers[b] for b in buffers] + [self.vars[v] for v in variables]
        begin, end = self.expr(s.begin), self.expr(s.end)
        run_chunks(self.b, chunk_fn, ctx, captured, begin, end, self.cores, iteration_work(s.body, self.vector_bytes),
                   self.kernel_work)

    def _outlined(self, s: L.For, name: str, buffers: list[str], variables: list[str]) -> ir.Function:
        """The iterations [lo, hi) of `s` as a function of the buffers and variables it captures."""
        fn = _body_function(self.module, body_type(len(buffers), len(variables)), name, buffers)
        args = list(fn.args)
        inner = BodyEmitter(self.module, self.func, self.cores, self.ids, fn, dict(self.buffers),
                            dict(zip(buffers, args)), dict(zip(variables, args[len(buffers):])), self.vector_bytes,
                            self.pair_dot)
        inner._serial_loop(s, args[-2], args[-1], [])
        inner.finish()
        return fn

    def _stmt_If(self, s: L.If) -> None:
        self.emit_if(s, self.stmt)


__all__ = ["BodyEmitter", "emit_body"]
