"""Targets: what a backend compiles for (one frozen description per machine kind).

* ``llvm`` (aliases ``cpu``, ``host``): the host CPU, through LLVM.
* ``cuda``: an NVIDIA GPU; `cpu` holds the GPU architecture (``sm_90``). Building the Target
  needs no GPU (explain and source rendering work anywhere): the arch is the device's when
  :func:`tilec.runtime.cuda_runtime.device_arch` answers, else :data:`DEFAULT_CUDA_ARCH`.
* ``cuda-sim``: GPU lowering run on the host CPU by the GPU emulator
  (:mod:`tilec.passes.emulate_gpu`) and LLVM; `cpu`/`features` are the host's.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

import numpy as np

from tilec.errors import TilecError

KNOWN_TARGETS = ("llvm", "cuda", "cuda-sim")
GPU_TARGETS = ("cuda", "cuda-sim")
DEFAULT_CUDA_ARCH = "sm_90"


@dataclass(frozen=True)
class Target:
    name: str  # "llvm" | "cuda" | "cuda-sim"
    cpu: str  # LLVM CPU name; for "cuda" the GPU architecture, e.g. "sm_90"
    features: str  # LLVM feature string, e.g. "+avx2,+avx512f,..."
    vector_bits: int  # widest vector register in bits
    cores: int

    @property
    def key(self) -> str:
        """Identifies compiled code compatibility (part of every cache key)."""
        return f"{self.name}:{self.cpu}:{self.features}"

    @property
    def is_gpu(self) -> bool:
        """Whether programs are lowered to GPU kernels (block and thread loops)."""
        return self.name in GPU_TARGETS

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` in the widest vector register."""
        return self.vector_bits // (8 * np.dtype(dtype).itemsize)


@functools.cache
def host_target() -> Target:
    from tilec.codegen.llvm.jit import initialise_llvm

    llvm = initialise_llvm()
    features = llvm.get_host_cpu_features()
    flags = features.flatten()
    vector_bits = 512 if features.get("avx512f") else 256 if features.get("avx2") or features.get("avx") else 128
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Target("llvm", llvm.get_host_cpu_name(), flags, vector_bits, cores)


def cuda_sim_target() -> Target:
    """The emulated GPU: GPU lowering, compiled for the host CPU."""
    return replace(host_target(), name="cuda-sim")


def cuda_arch() -> str:
    """The GPU's architecture (``sm_XY``) when a CUDA runtime and a GPU answer, else DEFAULT_CUDA_ARCH."""
    try:
        from tilec.runtime.cuda_runtime import device_arch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return DEFAULT_CUDA_ARCH
    try:
        arch = device_arch()
    except Exception:  # no driver, no device: a Target is still useful for explain and nvcc checks
        return DEFAULT_CUDA_ARCH
    return str(arch) if arch else DEFAULT_CUDA_ARCH


@functools.cache
def cuda_target() -> Target:
    return Target("cuda", cuda_arch(), "", 32, 1)


def resolve_target(target: "str | Target") -> Target:
    if isinstance(target, Target):
        return target
    if target in ("llvm", "cpu", "host"):
        return host_target()
    if target == "cuda":
        return cuda_target()
    if target == "cuda-sim":
        return cuda_sim_target()
    raise TilecError(f"unknown target '{target}'; known targets: {', '.join(KNOWN_TARGETS)}")
