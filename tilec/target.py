"""Targets: what a backend compiles for (one frozen description per machine kind)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from tilec.errors import TilecError

KNOWN_TARGETS = ("llvm",)


@dataclass(frozen=True)
class Target:
    name: str  # "llvm"
    cpu: str  # LLVM CPU name
    features: str  # LLVM feature string, e.g. "+avx2,+avx512f,..."
    vector_bits: int  # widest vector register in bits
    cores: int

    @property
    def key(self) -> str:
        """Identifies compiled code compatibility (part of every cache key)."""
        return f"{self.name}:{self.cpu}:{self.features}"


@functools.cache
def host_target() -> Target:
    from tilec.codegen.llvm_jit import initialise_llvm

    llvm = initialise_llvm()
    features = llvm.get_host_cpu_features()
    flags = features.flatten()
    vector_bits = 512 if features.get("avx512f") else 256 if features.get("avx2") or features.get("avx") else 128
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Target("llvm", llvm.get_host_cpu_name(), flags, vector_bits, cores)


def resolve_target(target: "str | Target") -> Target:
    if isinstance(target, Target):
        return target
    if target in ("llvm", "cpu", "host"):
        return host_target()
    if target in ("cuda", "cuda-sim"):
        raise TilecError(f"target '{target}' is not available yet in this build of tilec; use target='llvm'")
    raise TilecError(f"unknown target '{target}'; known targets: {', '.join(KNOWN_TARGETS)}")
