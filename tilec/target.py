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

Explicit CPUs (cross-compilation): `cpu_info` / `cpu_target` describe a CPU LLVM knows by name
(``haswell``, ``skylake-avx512``, ``x86-64-v3``, ...) plus LLVM feature changes (``+avx2``,
``-avx512f``), and `parse_target` reads the textual form ``llvm -mcpu=haswell -mattr=+fma,-avx512f``.
Requires: an x86-64 LLVM (llvmlite). Guarantees: names and features are checked against LLVM's
own lists before LLVM sees them (an unknown CPU name makes LLVM abort the process); the facts the
templates read (vector width, hence vector registers) come from what LLVM generates for that CPU
(tilec.llvm_cpus.cpu_isa: tiny functions compiled for it, each needing one instruction-set
extension); cores and cache sizes are the host's (the code runs here, and a named CPU has no one cache size: an
explicit CPU changes the instructions, not the blocking's idea of the caches). `missing_on_host`
says which of those extensions the host lacks: such code compiles (and `explain` shows it) but
must not run here.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tilec.errors import TilecError
from tilec.llvm_cpus import EXTENSIONS, LLVM_LOCK, cpu_isa, llvm_catalogue

KNOWN_TARGETS = ("llvm", "cuda", "cuda-sim")
TARGET_OPTIONS = ("-mcpu", "-mattr")  # what follows a CPU target's name: `llvm -mcpu=haswell -mattr=+fma`
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
    l2_fill_bytes: int = 32  # bytes per cycle the L2 cache can fill into L1 (32 on Zen 1-4, 64 on Intel since Haswell)
    l1d_ways: int = 8  # the L1 data cache's associativity (sysfs; 8 where it does not say: the fewest of x86-64 cores)

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
# The L2 -> L1 fill path in bytes per cycle by LLVM CPU name, where it is wider than the default 32
# (Zen 1 to 4, and any core this table does not know): a full 64-byte line per cycle on Intel cores
# since Haswell and on Zen 5. The GEMM heuristic keeps a register block's B reads within it.
_L2_FILL_BYTES = {name: 64 for name in (
    "haswell", "broadwell", "skylake", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
    "sapphirerapids", "emeraldrapids", "graniterapids", "znver5")}


def _core_timings(name: str) -> tuple[int, int]:
    """(fma_latency, l2_fill_bytes) of LLVM CPU `name`, from the tables above or CpuInfo's defaults."""
    return _FMA_LATENCY.get(name, CpuInfo.fma_latency), _L2_FILL_BYTES.get(name, CpuInfo.l2_fill_bytes)


_CACHE_FALLBACK = {1: 32 * 1024, 2: 1024 * 1024, 3: 8 * 1024 * 1024}


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def _data_caches(root: Path) -> dict[int, Path]:
    """sysfs's directory of the data (or unified) cache of each level under `root` (OSError,
    ValueError where sysfs cannot be read)."""
    found: dict[int, Path] = {}
    for index in sorted(root.glob("index*")):
        if (index / "type").read_text().strip() in ("Data", "Unified"):
            found[int((index / "level").read_text())] = index
    return found


def cache_sizes(root: Path = SYSFS_CACHES) -> dict[int, int]:
    """Data (or unified) cache bytes per level (1, 2, 3), from sysfs, else sysconf, else the fallbacks."""
    try:
        sizes = {level: _size((index / "size").read_text()) for level, index in _data_caches(root).items()}
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


def l1d_ways(root: Path = SYSFS_CACHES) -> int:
    """The level-1 data cache's associativity, from sysfs, else 8 (the fewest ways of x86-64 cores)."""
    try:
        index = _data_caches(root).get(1)
        ways = int((index / "ways_of_associativity").read_text()) if index is not None else 0
    except (OSError, ValueError):
        ways = 0
    return ways if ways > 0 else 8


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
                   caches[1], caches[2], caches[3], *_core_timings(name), l1d_ways=l1d_ways())


@functools.cache
def host_target() -> Target:
    return Target("llvm", host_cpu())


# ------------------------------------------------------------------ explicit CPUs

HOST_NAMES = ("native", "host")  # -mcpu values that mean the CPU this process runs on
# Features no CPU target may change: the execution mode (LLVM aborts the process on a 64-bit
# triple without 64-bit mode) and x86-64's baseline, which the calling convention needs.
_MODE_FEATURES = ("16bit-mode", "32bit-mode", "64bit-mode")
_BASELINE = ("64bit", "sse", "sse2", "cmov", "cx8", "fxsr", "x87")


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names)


def _check_cpu_name(name: str) -> None:
    cpus, _ = llvm_catalogue()
    if name in cpus:
        return
    close = difflib.get_close_matches(name, cpus, n=3)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise TilecError(f"unknown CPU '{name}' in -mcpu{hint}; LLVM knows: {_listing(cpus)}; "
                     f"or -mcpu={HOST_NAMES[0]} for this machine's CPU")


def feature_list(features: "str | Sequence[str]") -> tuple[str, ...]:
    """`features` (``"+avx2,-avx512f"`` or a sequence of such items) checked against LLVM's
    features, as a tuple of ``+name`` / ``-name``."""
    items = [f.strip() for f in (features.split(",") if isinstance(features, str) else features)]
    _, known = llvm_catalogue()
    out = []
    for item in items:
        if not item:
            continue
        sign, name = item[0], item[1:]
        if sign not in "+-" or not name:
            raise TilecError(f"CPU feature {item!r} in -mattr: expected +NAME to enable or -NAME to disable a "
                             f"feature, e.g. -mattr=+avx2,-avx512f")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise TilecError(f"unknown CPU feature '{name}' in -mattr{hint}; LLVM knows: {_listing(known)}")
        if name in _MODE_FEATURES or (sign == "-" and name in _BASELINE):
            raise TilecError(f"CPU feature {item!r} in -mattr cannot be changed: tilec compiles x86-64 code, which "
                             f"needs {', '.join(_BASELINE)} (and 64-bit mode)")
        out.append(sign + name)
    return tuple(out)


@functools.cache
def _cpu_info(mcpu: str | None, features: tuple[str, ...]) -> CpuInfo:
    host = host_cpu()
    if mcpu is None or mcpu in HOST_NAMES:
        name, flags = host.name, ",".join((host.features,) + features)
    else:
        _check_cpu_name(mcpu)
        # +64bit first: LLVM gives a 32-bit CPU's name 64-bit code instead of aborting
        name, flags = mcpu, ",".join(("+64bit",) + features)
    isa = cpu_isa(name, flags)
    vector_bits = 512 if "avx512f" in isa else 256 if "avx" in isa else 128
    return CpuInfo(name, flags, vector_bits, host.cores, _FMA_UNITS.get(name, 2) if vector_bits >= 512 else 2,
                   host.l1d_bytes, host.l2_bytes, host.l3_bytes, *_core_timings(name), l1d_ways=host.l1d_ways)


def has_pair_dot(cpu: CpuInfo) -> bool:
    """Whether code for `cpu` may use AVX512-BF16's pair dot product `vdpbf16ps` on 512-bit vectors
    (tilec.ir.loop.DOT2_BF16; elsewhere it is computed in float32)."""
    return cpu.vector_bits == 512 and "avx512bf16" in cpu_isa(cpu.name, cpu.features)


# LLVM's CPUs whose features include AMX-TILE and AMX-BF16 (Intel Xeons since Sapphire Rapids): LLVM
# aborts the process on a tile intrinsic for a CPU without them, so they cannot be probed as cpu_isa does
AMX_CPUS = frozenset({"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"})


def has_tiles(cpu: CpuInfo) -> bool:
    """Whether code for `cpu` may use AMX-BF16's tiles and their bfloat16 dot product
    (tilec.ir.loop.TileDot): its feature string's last mention of each feature decides
    ("+amx-tile,...,-amx-tile" has none); unmentioned, the CPU's name (AMX_CPUS)."""
    enabled: dict[str, bool] = {}
    for item in cpu.features.split(","):
        if item[:1] in "+-" and item[1:]:
            enabled[item[1:]] = item[0] == "+"
    default = cpu.name in AMX_CPUS
    return enabled.get("amx-tile", default) and enabled.get("amx-bf16", default)


def cpu_info(mcpu: str | None = None, features: "str | Sequence[str]" = ()) -> CpuInfo:
    """CPU `mcpu` as LLVM knows it (None, ``native`` or ``host``: this machine's), with LLVM
    feature changes `features` (``"+avx2,-avx512f"``). Cores and caches are the host's."""
    return _cpu_info(mcpu, feature_list(features))


def cpu_target(mcpu: str | None = None, features: "str | Sequence[str]" = ()) -> Target:
    """Target ``llvm`` for an explicit CPU, e.g. ``cpu_target("haswell")`` (AVX2, no AVX-512)."""
    return Target("llvm", cpu_info(mcpu, features))


def missing_on_host(cpu: CpuInfo) -> tuple[str, ...]:
    """The instruction-set extensions code for `cpu` may use that this machine lacks (empty: it runs here)."""
    host = host_cpu()
    if cpu == host:
        return ()
    have = cpu_isa(host.name, host.features)
    tiles = ("amx-bf16",) if has_tiles(cpu) and not has_tiles(host) else ()
    return tuple(f for f in EXTENSIONS if f in cpu_isa(cpu.name, cpu.features) and f not in have) + tiles


def parse_target(text: str) -> tuple[str, dict[str, str]]:
    """A target string, ``NAME [-mcpu=CPU] [-mattr=+F,-G]`` (``-opt VALUE`` also reads), as its name
    and options; an option given twice, or one outside TARGET_OPTIONS, is a TilecError."""
    words = text.split()
    if not words:
        raise TilecError("empty target: expected a name such as 'llvm' or 'llvm -mcpu=haswell'")
    name, rest, opts = words[0], words[1:], {}
    while rest:
        word = rest.pop(0)
        key, eq, value = word.partition("=")
        key = "-" + key.lstrip("-") if key.startswith("-") else key
        if key not in TARGET_OPTIONS:
            raise TilecError(f"unknown option {word!r} in target {text!r}; a CPU target accepts "
                             f"{' and '.join(o + '=...' for o in TARGET_OPTIONS)}, e.g. 'llvm -mcpu=haswell "
                             f"-mattr=+fma,-avx512f'")
        if not eq:
            if not rest:
                raise TilecError(f"option {key} in target {text!r} has no value: write {key}=VALUE")
            value = rest.pop(0)
        if key in opts:
            raise TilecError(f"option {key} given twice in target {text!r}")
        if not value and key != "-mattr":  # an empty feature list is a list
            raise TilecError(f"option {key} in target {text!r} has no value: write {key}=VALUE")
        opts[key] = value
    return name, opts


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


__all__ = ["AMX_CPUS", "CpuInfo", "GpuInfo", "Target", "KNOWN_TARGETS", "CUDA_STATIC_SHARED_BYTES", "DEFAULT_CUDA_ARCH", "HOST_NAMES",
           "LLVM_LOCK", "TARGET_OPTIONS", "cache_sizes", "cpu_info", "cpu_isa", "has_pair_dot", "has_tiles", "cpu_target", "cuda_sim_target",
           "cuda_target", "feature_list", "gpu_info", "host_cpu", "host_target", "llvm_catalogue", "missing_on_host",
           "parse_target"]
