"""llvmlite's binding, initialised once, and the lock every use of LLVM's C API takes.

Requires: llvmlite. Guarantees: `initialise_llvm` returns llvmlite.binding with the native target,
asm printer and parser initialised; `target_machine` a fresh TargetMachine for a CPU (an execution
engine takes ownership of the one it is given, so each gets its own).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from tilec.llvm_cpus import LLVM_LOCK
from tilec.target import CpuInfo

LOCK = LLVM_LOCK  # LLVM's C API is not safe to drive from several threads at once (tilec.llvm_cpus asks LLVM too)
_INITIALISED: list[ModuleType] = []


def initialise_llvm() -> ModuleType:
    if _INITIALISED:
        return _INITIALISED[0]
    with LOCK:
        if not _INITIALISED:
            import llvmlite.binding as llvm

            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            _INITIALISED.append(llvm)
    return _INITIALISED[0]


def target_machine(cpu: CpuInfo) -> Any:
    """A fresh target machine for `cpu`."""
    return initialise_llvm().Target.from_default_triple().create_target_machine(
        cpu=cpu.name, features=cpu.features, opt=3, codemodel="jitdefault")


__all__ = ["LOCK", "initialise_llvm", "target_machine"]
