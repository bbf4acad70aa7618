"""LLVM IR text -> optimised object code -> a callable address (llvmlite MCJIT).

Object code is what the disk cache stores: loading it skips parsing, optimisation
and code generation entirely.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tilec.errors import CodegenError
from tilec.target import Target

_LOCK = threading.RLock()  # LLVM's C API is not safe to drive from several threads at once
_INITIALISED: list[ModuleType] = []


def initialise_llvm() -> ModuleType:
    if _INITIALISED:
        return _INITIALISED[0]
    with _LOCK:
        if not _INITIALISED:
            import llvmlite.binding as llvm

            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            _INITIALISED.append(llvm)
    return _INITIALISED[0]


_MACHINES: dict[Target, Any] = {}


def _target_machine(target: Target) -> Any:
    """The shared target machine for optimising and emitting code (never given to an engine)."""
    with _LOCK:
        machine = _MACHINES.get(target)
        if machine is None:
            machine = _MACHINES[target] = _target_machine_for_engine(target)
        return machine


def optimise(llvm_ir: str, target: Target) -> Any:
    """Parse, verify and run the O3 pipeline; returns the llvmlite ModuleRef."""
    llvm = initialise_llvm()
    with _LOCK:
        try:
            module = llvm.parse_assembly(llvm_ir)
            module.verify()
        except RuntimeError as err:
            raise CodegenError(f"tilec generated invalid LLVM IR ({err}); this is a tilec bug. "
                               f"Reproduce with `tilec explain SRC --stage llvm-raw`") from None
        tm = _target_machine(target)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
        return module


def emit_object(module: Any, target: Target) -> bytes:
    with _LOCK:
        return _target_machine(target).emit_object(module)


def emit_assembly(module: Any, target: Target) -> str:
    with _LOCK:
        return _target_machine(target).emit_assembly(module)


@dataclass
class LoadedKernel:
    """Object code loaded into its own execution engine; keeps the engine alive."""

    engine: Any
    address: int
    function: Any  # ctypes function: void(void**)


def _target_machine_for_engine(target: Target) -> Any:
    """A fresh target machine: an execution engine takes ownership of the one it is given."""
    return initialise_llvm().Target.from_default_triple().create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, codemodel="jitdefault")


def load_object(obj: bytes, name: str, target: Target) -> LoadedKernel:
    from tilec.codegen.llvm.runtime import ensure_runtime

    llvm = initialise_llvm()
    ensure_runtime(target.cores)  # kernels with parallel loops link to its tilec_parallel_for
    with _LOCK:
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine_for_engine(target))
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(name)
    if not address:
        raise CodegenError(f"compiled kernel has no symbol '{name}'")
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
    return LoadedKernel(engine, address, function)
