"""Loop IR straight to a loaded kernel on the host CPU, for tests that build PrimFuncs by hand."""

from __future__ import annotations

from tilec.codegen.llvm.jit import LoadedKernel, emit_object, load_object, optimise
from tilec.codegen.llvm.module import emit_module
from tilec.ir import loop as L
from tilec.ir.lower import KERNEL_NAME
from tilec.target import host_cpu


def load_func(func: L.PrimFunc, name: str = KERNEL_NAME) -> LoadedKernel:
    cpu = host_cpu()
    return load_object(emit_object(optimise(emit_module(func, cpu), cpu), cpu), name, cpu)


def llvm_text(func: L.PrimFunc) -> str:
    return emit_module(func, host_cpu())
