"""LLVM IR text -> optimised object code -> a callable address (llvmlite MCJIT).

Object code is what the disk cache stores: loading it skips parsing, optimisation
and code generation entirely.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tilec.errors import CodegenError
from tilec.target import Target

_LOCK = threading.Lock()  # LLVM's C API is not safe to drive from several threads at once


@functools.lru_cache(maxsize=1)
def initialise_llvm() -> ModuleType:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    return llvm


@functools.lru_cache(maxsize=None)
def _target_machine(target: Target) -> Any:
    llvm = initialise_llvm()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, codemodel="jitdefault")


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


def load_object(obj: bytes, name: str, target: Target) -> LoadedKernel:
    llvm = initialise_llvm()
    with _LOCK:
        # The engine takes ownership of its target machine: give it its own, never the cached one.
        machine = llvm.Target.from_default_triple().create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, codemodel="jitdefault")
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(name)
    if not address:
        raise CodegenError(f"compiled kernel has no symbol '{name}'")
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
    return LoadedKernel(engine, address, function)
