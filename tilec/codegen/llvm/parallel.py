"""How a parallel loop meets the runtime's worker pool (tilec.codegen.llvm.runtime, pool_ir).

A `parallel` loop over [begin, end) is split into `cores` chunks. Its iterations are outlined
into an always-inlined body ``void body(ptr buffers..., i64 variables..., i64 lo, i64 hi)``
(the emitter fills it in: tilec.codegen.llvm.body) and a chunk function
``void chunk(ptr ctx, i64 c)`` that the pool runs for every c in [0, cores), with
``ctx = {buffer pointers..., loop variables..., begin, chunk, end}``; chunk c runs iterations
[begin + c * chunk, min(end, begin + (c + 1) * chunk)).

Requires: llvmlite.ir. Guarantees: `captured_names` lists what the body needs from outside the
loop (the buffers and loop variables it uses that are in scope), the other functions build the
context's type, the chunk function and the call into the pool, which is passed the loop's
estimated work (tilec.codegen.llvm.work) so it can run small loops serially.
"""

from __future__ import annotations

from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.pool_ir import ENTRY as PARALLEL_FOR
from tilec.codegen.llvm.types import I64, PTR, i32
from tilec.ir import loop as L
from tilec.ir.visitor import walk


def captured_names(loop: L.For, pointers: dict[str, Any], variables: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The buffers and loop variables `loop` uses that are bound outside it (each once, in first-use order)."""
    buffers: dict[str, None] = {}
    used: dict[str, None] = {}
    for n in walk(loop):
        if isinstance(n, L.Var):
            used[n.name] = None
        elif isinstance(n, (L.Load, L.Store)):
            buffers[n.buffer] = None
        elif isinstance(n, L.TileDot):
            buffers.update(dict.fromkeys((n.acc, n.a, n.b)))
    return [b for b in buffers if b in pointers], [v for v in used if v in variables]


def context_type(buffers: int, variables: int) -> ir.LiteralStructType:
    return ir.LiteralStructType([PTR] * buffers + [I64] * (variables + 3))


def body_type(buffers: int, variables: int) -> ir.FunctionType:
    """The outlined body: (buffer pointers..., loop variables..., lo, hi)."""
    return ir.FunctionType(ir.VoidType(), [PTR] * buffers + [I64] * (variables + 2))


def chunk_function(module: ir.Module, name: str, ctx_type: ir.LiteralStructType, body: ir.Function) -> ir.Function:
    """The pool's entry point: unpack the context, compute chunk c's range, run `body` on it."""
    chunk_fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), name)
    chunk_fn.linkage = "internal"
    b = ir.IRBuilder(chunk_fn.append_basic_block("entry"))
    ctx, c = chunk_fn.args
    fields = [b.load(b.gep(ctx, [i32(0), i32(f)], inbounds=True, source_etype=ctx_type), typ=t)
              for f, t in enumerate(ctx_type.elements)]
    begin, chunk, end = fields[-3:]
    lo = b.add(begin, b.mul(c, chunk))
    hi_raw = b.add(lo, chunk)
    hi = b.select(b.icmp_signed("<", hi_raw, end), hi_raw, end)
    with b.if_then(b.icmp_signed("<", lo, hi)):
        b.call(body, fields[:-3] + [lo, hi])
    b.ret_void()
    return chunk_fn


def run_chunks(b: ir.IRBuilder, chunk_fn: ir.Function, ctx: ir.Value, captured: list[ir.Value], begin: ir.Value,
               end: ir.Value, cores: int, iteration_work: int | None, kernel_work: int = 0) -> None:
    """Fill the context `ctx` (an alloca of the context type) and run `chunk_fn` on `cores` chunks;
    the runtime is told the loop's work, its iterations times `iteration_work` (None: unknown), and
    the work of the kernel's largest parallel loop (`kernel_work`, -1: unknown)."""
    module = b.module
    n = ir.Constant(I64, cores)
    trips = b.sub(end, begin)
    chunk = b.sdiv(b.add(trips, ir.Constant(I64, cores - 1)), n)
    for k, value in enumerate(captured + [begin, chunk, end]):
        b.store(value, b.gep(ctx, [i32(0), i32(k)], inbounds=True))
    if iteration_work is None:
        work: ir.Value = ir.Constant(I64, -1)
    else:  # trips < 2^32 in practice and iteration_work < 2^31: no overflow to worry about
        work = b.mul(b.select(b.icmp_signed("<", trips, ir.Constant(I64, 0)), ir.Constant(I64, 0), trips),
                     ir.Constant(I64, iteration_work))
    run = module.globals.get(PARALLEL_FOR) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, I64]), PARALLEL_FOR)
    b.call(run, [chunk_fn, ctx, n, work, ir.Constant(I64, kernel_work)])


__all__ = ["body_type", "captured_names", "chunk_function", "context_type", "run_chunks"]
