"""Targets: what a backend compiles for, as capability records.

A :class:`Target` names its backend (``llvm``, ``cuda-sim``, ``cuda``) and carries the
capabilities the templates and code generators read, instead of constants scattered through
them:

* :class:`CpuInfo` (targets ``llvm`` and ``cuda-sim``, whose code runs on the host): the LLVM
  CPU name and features, vector width, cores, full-width FMA units, FMA latency and data-cache
  sizes;
* :class:`GpuInfo` (targets ``cuda`` and ``cuda-sim``, whose programs are lowered to GPU
  kernels): the architecture, SM count and the per-block limits on threads, shared memory and
  registers.

`host_target` reads the host: LLVM's description of the CPU (llvmlite), the cores this process
may run on, the cache sizes from sysfs (falling back to ``sysconf``, then to the sizes every
x86-64 core of the last decade has at least). Which backend serves a target name, and how a
GPU target learns its device, is the pipeline's business (``tilec.pipeline.resolve_target``);
this module imports no backend.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tilec.errors import TilecError

KNOWN_TARGETS = ("llvm", "cuda", "cuda-sim")
DEFAULT_CUDA_ARCH = "sm_90"
CUDA_STATIC_SHARED_BYTES = 48 * 1024  # static shared memory of a block on every CUDA GPU (more needs an opt-in)


@dataclass(frozen=True)
class CpuInfo:
    """A CPU as code generation and the CPU templates see it."""

    name: str  # LLVM CPU name, e.g. "znver4"
    features: str  # LLVM feature string, e.g. "+avx2,+avx512f,..."
    vector_bits: int  # widest vector register in bits
    cores: int  # cores this process may run on
    fma_units: int  # full-width vector FMAs issued per cycle (1 where a 512-bit FMA runs as two halves)
    l1d_bytes: int  # data cache per core
    l2_bytes: int  # per core
    l3_bytes: int  # shared
    fma_latency: int = 5  # cycles from a vector FMA's inputs to its result (the longest of x86-64 cores)

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` in the widest vector register."""
        return self.vector_bits // (8 * np.dtype(dtype).itemsize)

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 (zmm0-31), else 16."""
        return 32 if self.vector_bits >= 512 else 16


@dataclass(frozen=True)
class GpuInfo:
    """A CUDA GPU as the GPU templates see it (per-block limits without opt-ins)."""

    arch: str  # "sm_90"
    sms: int  # streaming multiprocessors: the heuristics want a few blocks per SM
    shared_bytes: int = CUDA_STATIC_SHARED_BYTES  # shared memory a block may use
    max_threads: int = 1024  # threads per block
    registers_per_thread: int = 255
    max_grid_yz: int = 65535  # blocks along gridDim.y and gridDim.z


@dataclass(frozen=True)
class Target:
    name: str  # the backend: "llvm" | "cuda" | "cuda-sim"
    host: CpuInfo | None  # the CPU the generated code runs on (llvm, cuda-sim)
    gpu: GpuInfo | None = None  # the GPU programs are lowered for (cuda, cuda-sim)

    def __post_init__(self) -> None:
        if self.name not in KNOWN_TARGETS:
            raise TilecError(f"unknown target '{self.name}'; known targets: {', '.join(KNOWN_TARGETS)}")
        if self.name != "cuda" and self.host is None:
            raise TilecError(f"target '{self.name}' runs on the host CPU and needs its CpuInfo")
        if self.name != "llvm" and self.gpu is None:
            raise TilecError(f"target '{self.name}' lowers programs for a GPU and needs its GpuInfo")

    @property
    def is_gpu(self) -> bool:
        """Whether programs are lowered to GPU kernels (block and thread loops)."""
        return self.gpu is not None

    @property
    def kind(self) -> str:
        """The kind of templates that lower its programs: "gpu" or "cpu"."""
        return "gpu" if self.gpu is not None else "cpu"

    @property
    def key(self) -> str:
        """Which compiled code and tuning records fit: the backend and the machine's identity."""
        if self.host is None:
            assert self.gpu is not None
            return f"{self.name}:{self.gpu.arch}:"
        return f"{self.name}:{self.host.name}:{self.host.features}"

    def _cpu(self) -> CpuInfo:
        if self.host is None:
            raise TilecError(f"target '{self.name}' describes no CPU: its kernels run on the GPU")
        return self.host

    @property
    def cores(self) -> int:
        return self._cpu().cores

    @property
    def vector_bits(self) -> int:
        return self._cpu().vector_bits

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` in the host's widest vector register."""
        return self._cpu().lanes(dtype)

    def with_cores(self, cores: int) -> "Target":
        """The same target, its host restricted to (or pretending to have) `cores` cores."""
        return replace(self, host=replace(self._cpu(), cores=cores))


# ------------------------------------------------------------------ the host CPU

# Full-width vector FMA units by LLVM CPU name, where they differ from two: Zen 4 executes a
# 512-bit FMA as two 256-bit halves (one per cycle at full width).
_FMA_UNITS = {"znver4": 1}
# Vector FMA latency in cycles by LLVM CPU name, where it is below the default of five (Haswell,
# Broadwell, Zen 1 and 2, and any core this table does not know): four on Skylake and its successors
# and on Zen 3 and later. The GEMM heuristic needs latency x units independent accumulators
# (tilec.schedule.cpu.implicit_gemm.knobs); a latency too long only asks for more of them.
_FMA_LATENCY = {name: 4 for name in (
    "skylake", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "tigerlake", "rocketlake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "sapphirerapids",
    "emeraldrapids", "graniterapids", "znver3", "znver4", "znver5")}
_CACHE_FALLBACK = {1: 32 * 1024, 2: 1024 * 1024, 3: 8 * 1024 * 1024}


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def cache_sizes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[int, int]:
    """Data (or unified) cache bytes per level (1, 2, 3), from sysfs, else sysconf, else the fallbacks."""
    sizes: dict[int, int] = {}
    try:
        for index in sorted(root.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind in ("Data", "Unified"):
                sizes[int((index / "level").read_text())] = _size((index / "size").read_text())
    except (OSError, ValueError):
        sizes = {}
    names = {1: "SC_LEVEL1_DCACHE_SIZE", 2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}
    for level, name in names.items():
        if sizes.get(level, 0) <= 0:
            try:
                value = os.sysconf(name)
            except (ValueError, OSError):
                value = 0
            sizes[level] = value if value > 0 else _CACHE_FALLBACK[level]
    return sizes


def _host_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.cache
def host_cpu() -> CpuInfo:
    """The CPU this process runs on, as LLVM and the operating system describe it."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    vector_bits = 512 if features.get("avx512f") else 256 if features.get("avx2") or features.get("avx") else 128
    name = llvm.get_host_cpu_name()
    caches = cache_sizes()
    return CpuInfo(name, features.flatten(), vector_bits, _host_cores(), _FMA_UNITS.get(name, 2),
                   caches[1], caches[2], caches[3], _FMA_LATENCY.get(name, CpuInfo.fma_latency))


@functools.cache
def host_target() -> Target:
    return Target("llvm", host_cpu())


# ------------------------------------------------------------------ GPUs

# Streaming multiprocessors of the flagship part of each architecture, for a GPU nobody asked.
_SMS = {"sm_70": 80, "sm_75": 72, "sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132}


def gpu_info(arch: str = DEFAULT_CUDA_ARCH, sms: int | None = None) -> GpuInfo:
    """A GPU of architecture `arch`; its SM count as the device reports it, else its flagship's."""
    return GpuInfo(arch, sms if sms else _SMS.get(arch, _SMS[DEFAULT_CUDA_ARCH]))


def cuda_target(arch: str = DEFAULT_CUDA_ARCH, sms: int | None = None) -> Target:
    return Target("cuda", None, gpu_info(arch, sms))


def cuda_sim_target(gpu: GpuInfo | None = None) -> Target:
    """The emulated GPU: GPU lowering for `gpu` (by default an sm_90 part), run on the host CPU."""
    return Target("cuda-sim", host_cpu(), gpu or gpu_info())


__all__ = ["CpuInfo", "GpuInfo", "Target", "KNOWN_TARGETS", "CUDA_STATIC_SHARED_BYTES", "DEFAULT_CUDA_ARCH", "cache_sizes", "cuda_sim_target",
           "cuda_target", "gpu_info", "host_cpu", "host_target"]
