"""Loop IR -> LLVM IR text (llvmlite.ir), for the CPU backend: the module around the kernel.

The module exports one function ``void NAME(ptr args)`` taking an array of buffer
pointers in PrimFunc parameter order; it unpacks them and calls an always-inlined
body (tilec.codegen.llvm.body) whose pointer arguments are ``noalias`` (tilec allocates
every output and workspace itself, so buffers never overlap where one is written).
Reductions of the form ``acc = acc op x`` carry ``reassoc`` so LLVM may vectorise them;
every other float operation keeps IEEE semantics. Integer division is floor division
with ``x // 0 == 0`` (never a trap).

Requires: a CPU PrimFunc (GPU functions go through tilec.passes.lower_wmma and the emulator
first). Guarantees: `emit_module` returns the module's text for the process's target triple,
with the CPU's name, features and preferred vector width as function attributes; TileDot
statements as AMX code where the CPU has AMX-BF16 (tilec.codegen.llvm.amx), else as the loops of
tilec.codegen.llvm.tile_loops.
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilec.codegen.llvm.binding import initialise_llvm
from tilec.codegen.llvm.body import emit_body
from tilec.codegen.llvm.loop_metadata import patch_loop_ids
from tilec.codegen.llvm.tile_loops import lower_tiles
from tilec.codegen.llvm.types import I64, PTR
from tilec.ir import loop as L
from tilec.target import CpuInfo, has_pair_dot, has_tiles


def emit_module(func: L.PrimFunc, cpu: CpuInfo) -> str:
    """The LLVM IR text of `func`, with the CPU's name, features and vector width as function attributes."""
    if not has_tiles(cpu):
        func = lower_tiles(func)
    module = ir.Module(name=func.name)
    module.triple = _triple()
    body = emit_body(module, func, cpu.cores, cpu.vector_bits // 8, has_pair_dot(cpu))
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), func.name)
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))
    args = []
    for k, _ in enumerate(func.params):
        slot = b.gep(wrapper.args[0], [ir.Constant(I64, k)], source_etype=PTR)
        args.append(b.load(slot, typ=PTR))
    b.call(body, args)
    b.ret_void()
    return _add_function_attributes(patch_loop_ids(str(module)), cpu)


def _triple() -> str:
    return initialise_llvm().get_process_triple()


def _add_function_attributes(text: str, cpu: CpuInfo) -> str:
    """llvmlite.ir cannot spell string attributes; add them as an attribute group."""
    attrs = f'"target-cpu"="{cpu.name}" "target-features"="{cpu.features}" ' \
            f'"prefer-vector-width"="{cpu.vector_bits}" "min-legal-vector-width"="0" nounwind'
    lines = []
    for line in text.splitlines():
        if line.startswith("define "):
            line = line + " #0" if not line.rstrip().endswith("{") else line.rstrip()[:-1].rstrip() + " #0 {"
        lines.append(line)
    lines.append(f"attributes #0 = {{ {attrs} }}")
    return "\n".join(lines) + "\n"


__all__ = ["emit_module"]
