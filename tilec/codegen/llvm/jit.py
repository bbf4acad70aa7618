"""LLVM IR text -> optimised object code -> a callable address (llvmlite MCJIT).

Object code is what the disk cache stores: loading it skips parsing, optimisation
and code generation entirely.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from tilec.codegen.llvm.amx import enable_tiles
from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine
from tilec.codegen.llvm.runtime import ensure_runtime
from tilec.errors import CodegenError, TargetError
from tilec.target import CpuInfo, has_tiles, missing_on_host

_MACHINES: dict[CpuInfo, Any] = {}


def _target_machine(cpu: CpuInfo) -> Any:
    """The shared target machine for optimising and emitting code (never given to an engine)."""
    with LOCK:
        machine = _MACHINES.get(cpu)
        if machine is None:
            machine = _MACHINES[cpu] = target_machine(cpu)
        return machine


def optimise(llvm_ir: str, cpu: CpuInfo, unroll: bool = True) -> Any:
    """Parse, verify and run the O3 pipeline; returns the llvmlite ModuleRef. Without `unroll`,
    LLVM unrolls only the loops whose metadata asks for it (tilec.codegen.llvm.work.unrolling_pays
    says where its own unrolling is worth its compile time).

    Each call leaks ~0.15 MiB inside llvmlite 0.50 (every pass builder allocates instrumentation
    callbacks it never frees, and a builder cannot be reused safely across runs); the disk cache
    is what keeps a long-lived process from paying it again for kernels it has seen.
    """
    llvm = initialise_llvm()
    with LOCK:
        try:
            module = llvm.parse_assembly(llvm_ir)
            module.verify()
        except RuntimeError as err:
            raise CodegenError(f"tilec generated invalid LLVM IR ({err}); this is a tilec bug. "
                               f"Reproduce with `tilec explain SRC --stage llvm-raw`") from None
        tm = _target_machine(cpu)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_unrolling = unroll
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
        return module


def emit_object(module: Any, cpu: CpuInfo) -> bytes:
    with LOCK:
        return _target_machine(cpu).emit_object(module)


def emit_assembly(module: Any, cpu: CpuInfo) -> str:
    with LOCK:
        return _target_machine(cpu).emit_assembly(module)


@dataclass
class LoadedKernel:
    """Object code loaded into its own execution engine; keeps the engine alive."""

    engine: Any
    address: int
    function: Any  # ctypes function: void(void**)


def check_runs_here(cpu: CpuInfo) -> None:
    """Code for `cpu` may run on this machine: a TargetError, before anything runs, where it needs an
    instruction-set extension this CPU lacks (compiling for it, and explaining it, stay legal)."""
    missing = missing_on_host(cpu)
    if missing:
        raise TargetError(f"kernels compiled for CPU '{cpu.name}' use {', '.join(missing)}, which this machine's CPU "
                          f"lacks; they cannot run here. Compile for this machine (target 'llvm', or -mcpu=native), "
                          f"disable those features (-mattr={','.join('-' + f for f in missing)}), or run them on "
                          f"a {cpu.name}")


def load_object(obj: bytes, name: str, cpu: CpuInfo) -> LoadedKernel:
    check_runs_here(cpu)
    if has_tiles(cpu):
        enable_tiles()  # (the kernel may use AMX: Linux grants its state only on request)
    llvm = initialise_llvm()
    ensure_runtime(cpu.cores)  # kernels with parallel loops link to its tilec_parallel_for
    with LOCK:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine(cpu))
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(name)
    if not address:
        raise CodegenError(f"compiled kernel has no symbol '{name}'")
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
    return LoadedKernel(engine, address, function)
