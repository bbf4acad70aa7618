"""The machine's peaks, measured: vector FMA throughput per dtype and width, memory bandwidth, clock.

A roofline needs two numbers per machine: how many floating-point operations a core (and all
cores) can issue per second, and how many bytes per second memory delivers. Tables of CPU names
are wrong as often as not (a 512-bit FMA is one instruction per cycle on Zen 4 and two on
Sapphire Rapids; a virtual machine's clock is whatever its host gives it), so this module
measures them with small LLVM IR loops, JIT-compiled for the host like tilec's kernels
(tilec.codegen.llvm.probes):

* FMA throughput: a loop of independent chains of vector FMAs (`ACCUMULATORS` accumulators,
  enough to hide any core's FMA latency), float32 and float64 at every vector width the host has
  (128, 256, 512 bits), with ``avx512bf16`` the bf16 dot product ``vdpbf16ps`` (64 flops per
  512-bit instruction) and with AMX-BF16 its tile dot product ``tdpbf16ps`` (kept as width
  probes.TILE_BITS); on one core, then on one thread per core at once, each pinned to its own
  CPU (ctypes calls release the GIL, so Python threads run them concurrently);
* memory bandwidth: a read-only vector sum over a buffer of at least four times the L3 cache,
  on one core, then split across one thread per core;
* the clock: a chain of dependent integer adds (one per cycle on every x86-64 core) in inline
  assembly, from which FLOP per cycle and the full-width FMAs per cycle (`fma_units`) follow.

Every figure is the best of `REPEATS` runs (a peak, not an average). The per-core figures (FMA,
clock, one core's bandwidth) divide by the thread's CPU time, so that a shared machine's other
processes, which take the core away now and then, do not lower them; the all-cores FMA figure is
the sum of the threads' per-core rates while they ran together (on a machine with SMT whose
sibling threads the scheduler never ran at once, that can exceed what the physical cores do);
the all-cores bandwidth, a shared resource, is all the bytes over the wall time.

`machine_peaks()` measures once per machine and keeps the result as JSON under the cache
directory (``<cache dir>/peaks/<hash of the target key>.json``, the key inside), or, with the
disk cache off, once per process. A measurement taken while other processes held a core
(load average above `QUIET_LOAD`) can come out low (one taken at load 1.14 on two cores found
the all-cores FMA rate of one core), so when the machine is quieter than it was then, the next
`machine_peaks()` measures again and keeps the higher of each figure (`merge_best`): the cached
peaks only ever rise towards the machine's.

Requires: llvmlite; an x86-64 host for the clock estimate (elsewhere `clock_ghz` is None).
Guarantees: every measured figure is positive; a probe that cannot compile or run raises a
`PeakProbeError` that says what failed; a damaged or foreign cache file is measured again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilec.codegen.llvm.probes import STREAM_VECTORS, PeakProbeError, ProbeKernel, ProbeKernels
from tilec.config import options
from tilec.target import CpuInfo, host_target

PROBE_VERSION = 3  # part of the cache file: a new probe measures again (2: register-operand clock chain, 3: AMX tiles)
REPEATS = 3  # best of this many runs per figure
DURATION_S = 0.02  # each timed run lasts about this long
MAX_STREAM_BYTES = 2 << 30
QUIET_LOAD = 0.5  # a 1-minute load average above this: some core was not all the probe's
QUIETER_BY = 0.5  # measure again when the load is this much below the cached measurement's
MIN_PLAUSIBLE_GHZ, MAX_PLAUSIBLE_GHZ = 0.2, 7.0  # no x86-64 core clocks outside; a faster add chain was shortcut, not timed


@dataclass(frozen=True)
class FmaPeak:
    """One vector width's FMA (or bf16 dot product) throughput."""

    dtype: str  # "float32", "float64" or "bfloat16" (bf16 products summed in float32)
    bits: int  # vector width
    single_gflops: float  # one core
    all_gflops: float  # one thread per core, at once
    flops_per_cycle: float | None = None  # one core, where the clock is known


@dataclass(frozen=True)
class MachinePeaks:
    """What this machine can do at best, as measured by this module."""

    key: str  # tilec.target.host_target().key when measured
    cpu: str  # LLVM CPU name
    cores: int  # threads the all-cores figures ran on
    fma: tuple[FmaPeak, ...]
    single_gbs: float  # streaming read bandwidth, one core (GB/s = 1e9 bytes/s)
    all_gbs: float  # all cores
    stream_bytes: int  # the buffer the bandwidth figures read
    clock_ghz: float | None  # the clock the add chain ran at (None off x86-64)
    seconds: float  # how long measuring took
    measured_at: str  # ISO 8601, UTC
    load_average: float  # the 1-minute load average when measured
    version: int = PROBE_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def peak(self, dtype: str, bits: int) -> FmaPeak | None:
        return next((p for p in self.fma if p.dtype == dtype and p.bits == bits), None)

    def gflops(self, dtype: str, all_cores: bool = True) -> float | None:
        """The best FMA throughput of `dtype` over the widths measured (None: not measured); all cores
        do at least what one does (a busy machine can make their measured figure lower)."""
        figures = [max(p.all_gflops, p.single_gflops) if all_cores else p.single_gflops
                   for p in self.fma if p.dtype == dtype]
        return max(figures) if figures else None

    def bandwidth_gbs(self, all_cores: bool = True) -> float:
        """Streaming read bandwidth (all cores: at least one core's)."""
        return max(self.all_gbs, self.single_gbs) if all_cores else self.single_gbs

    @property
    def widest_bits(self) -> int:
        return max(p.bits for p in self.fma if p.dtype == "float32")

    @property
    def fma_per_cycle(self) -> float | None:
        """Full-width float32 FMAs one core completes per cycle (None without a clock)."""
        widest = self.peak("float32", self.widest_bits)
        if widest is None or widest.flops_per_cycle is None:
            return None
        return widest.flops_per_cycle / (2 * widest.bits // 32)

    @property
    def fma_units(self) -> int | None:
        """`fma_per_cycle` rounded: 1 where the widest FMA runs as two halves (Zen 4's 512-bit), else 2."""
        per_cycle = self.fma_per_cycle
        return max(1, round(per_cycle)) if per_cycle is not None else None

    def width_gain(self, dtype: str = "float32") -> float | None:
        """Single-core throughput of the widest width over the next narrower one: about 2 where the
        wider vector is a real gain, about 1 where it is double-pumped."""
        widths = sorted(p.bits for p in self.fma if p.dtype == dtype)
        if len(widths) < 2:
            return None
        wide, narrow = self.peak(dtype, widths[-1]), self.peak(dtype, widths[-2])
        assert wide is not None and narrow is not None
        return wide.single_gflops / narrow.single_gflops

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fma"] = [asdict(p) for p in self.fma]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MachinePeaks":
        d = dict(d)
        d["fma"] = tuple(FmaPeak(**p) for p in d["fma"])
        return cls(**d)


# ------------------------------------------------------------------ timing


def _calibrate(kernel: ProbeKernel, duration: float, clock: Callable[[], float] = time.perf_counter) -> int:
    """Iterations for one run of about `duration` seconds (doubling from 1 until a run takes a tenth)."""
    n = 1
    while True:
        start = clock()
        kernel.call(n)
        took = clock() - start
        if took >= duration / 10 or n >= 1 << 40:
            return max(1, int(n * duration / max(took, 1e-9)))
        n *= 2


def _best_rate(kernel: ProbeKernel, n: int, repeats: int) -> float:
    """The best over `repeats` runs of n iterations of (work done / this thread's CPU seconds): the
    time the scheduler gives another process does not count against the core."""
    best = 0.0
    for _ in range(repeats):
        start = time.thread_time()
        kernel.call(n)
        best = max(best, kernel.work * n / max(time.thread_time() - start, 1e-9))
    return best


@dataclass(frozen=True)
class _Together:
    """One run of every kernel on its own thread at once."""

    per_core: float  # the sum of each thread's work / its CPU seconds
    overall: float  # all the work / the wall time from the first start to the last end


def _best_together(kernels: list[ProbeKernel], chunk: int, window: float, repeats: int) -> _Together:
    runs = [_together(kernels, chunk, window) for _ in range(repeats)]
    return _Together(max(r.per_core for r in runs), max(r.overall for r in runs))


def _together(kernels: list[ProbeKernel], chunk: int, window: float) -> _Together:
    """Each kernel on its own thread, pinned to its own CPU where it can be and started at a barrier,
    runs `chunk` iterations at a time until `window` seconds have passed since it started."""
    barrier = threading.Barrier(len(kernels))
    runs: list[tuple[float, float, float, float]] = []  # wall start, wall end, CPU seconds, work
    errors: list[BaseException] = []
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

    def run(k: int, kernel: ProbeKernel) -> None:
        try:
            if len(cpus) >= len(kernels):
                os.sched_setaffinity(0, {cpus[k]})  # this thread only (Linux): one thread per core
            barrier.wait()
            start = now = time.perf_counter()
            cpu = time.thread_time()
            done = 0
            while not done or now - start < window:
                kernel.call(chunk)
                done += 1
                now = time.perf_counter()
            runs.append((start, now, time.thread_time() - cpu, kernel.work * chunk * done))
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(k, kernel), daemon=True) for k, kernel in enumerate(kernels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise PeakProbeError(f"a peak probe thread failed: {errors[0]!r}")
    span = max(end for _, end, _, _ in runs) - min(start for start, _, _, _ in runs)
    return _Together(sum(work / max(cpu, 1e-9) for _, _, cpu, work in runs),
                     sum(work for _, _, _, work in runs) / max(span, 1e-9))


def _stream_buffer(nbytes: int) -> np.ndarray:
    """A float64 buffer of about `nbytes`, 64-byte aligned, its pages touched (no faults while timed)."""
    items = nbytes // 8
    raw = np.empty(items + 8, np.float64)
    offset = (-raw.ctypes.data % 64) // 8
    buffer = raw[offset:offset + items]
    buffer.fill(1.0)
    return buffer


def stream_bytes(cpu: CpuInfo) -> int:
    """The bandwidth buffer: four times the L3 cache, at least 64 MiB, at most MAX_STREAM_BYTES."""
    return min(max(4 * cpu.l3_bytes, 64 << 20), MAX_STREAM_BYTES)


def measure(cpu: CpuInfo | None = None, *, key: str | None = None, duration: float = DURATION_S,
            repeats: int = REPEATS, cores: int | None = None, stream_size: int | None = None) -> MachinePeaks:
    """Measure `cpu` (the host's, which it must be: the probe runs here). `duration` is each timed
    run's length; `cores` and `stream_size` override the all-cores thread count and the bandwidth
    buffer (the tests shrink them)."""
    global _MEASUREMENTS
    target = host_target()
    cpu = cpu or target.host
    assert cpu is not None
    cores = cores or cpu.cores
    started = time.perf_counter()
    probe = ProbeKernels(cpu)
    clock_ghz = None
    if probe.has_clock:
        clock = probe.clock_kernel()
        clock_ghz = _best_rate(clock, _calibrate(clock, duration), repeats) / 1e9
        if not MIN_PLAUSIBLE_GHZ <= clock_ghz <= MAX_PLAUSIBLE_GHZ:
            clock_ghz = None  # a chain some core shortcut: better no clock than FMAs per cycle that mislead
    fma = []
    for dtype, bits in probe.fma:
        kernel = probe.fma_kernel(dtype, bits)
        n = _calibrate(kernel, duration)
        single = _best_rate(kernel, n, repeats) / 1e9
        every = (_best_together([kernel] * cores, max(1, n // 4), 2 * duration, repeats).per_core / 1e9
                 if cores > 1 else single)
        fma.append(FmaPeak(dtype, bits, _round(single), _round(every),
                           _round(single / clock_ghz) if clock_ghz else None))
    size = stream_size or stream_bytes(cpu)
    block = STREAM_VECTORS * probe.stream_bits // 8
    buffer = _stream_buffer(max(block * cores, size // (block * cores) * block * cores))
    whole = probe.stream_kernel(buffer)
    single_gbs = _best_rate(whole, _calibrate(whole, duration), repeats) / 1e9
    slices = [probe.stream_kernel(part) for part in np.split(buffer, cores)]
    all_gbs = _best_together(slices, 1, 2 * duration, repeats).overall / 1e9 if cores > 1 else single_gbs
    _MEASUREMENTS += 1
    return MachinePeaks(key or target.key, cpu.name, cores, tuple(fma), _round(single_gbs), _round(all_gbs),
                        int(buffer.nbytes), _round(clock_ghz) if clock_ghz else None,
                        round(time.perf_counter() - started, 3),
                        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        round(_load_average(), 2))


def _round(x: float) -> float:
    return float(f"{x:.4g}")


# ------------------------------------------------------------------ measured once per machine

_MEASUREMENTS = 0  # measurements this process has run (the tests check the cache with it)
_IN_PROCESS: dict[str, MachinePeaks] = {}
_PROCESS_LOCK = threading.Lock()


def measurements() -> int:
    """How many times this process has run the probe."""
    return _MEASUREMENTS


def cache_path(key: str | None = None) -> Path | None:
    """Where `machine_peaks` keeps this machine's figures (None: the disk cache is off)."""
    if not options.disk_cache or options.cache_dir is None:
        return None
    key = key or host_target().key
    return options.cache_dir / "peaks" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _load(path: Path, key: str) -> MachinePeaks | None:
    try:
        data = json.loads(path.read_text())
        peaks = MachinePeaks.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if peaks.key != key or peaks.version != PROBE_VERSION or not peaks.fma:
        return None
    return peaks


def _store(path: Path, peaks: MachinePeaks) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(peaks.to_dict(), indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache directory only costs measuring again next time


def merge_best(old: MachinePeaks, new: MachinePeaks) -> MachinePeaks:
    """`new`, each of whose figures is the higher of its own and `old`'s (a measured peak can only
    fall short of the machine's); the load average is the lower of the two."""
    fma = []
    for p in new.fma:
        q = old.peak(p.dtype, p.bits)
        if q is None:
            fma.append(p)
            continue
        per_cycle = [x for x in (p.flops_per_cycle, q.flops_per_cycle) if x is not None]
        fma.append(FmaPeak(p.dtype, p.bits, max(p.single_gflops, q.single_gflops), max(p.all_gflops, q.all_gflops),
                           max(per_cycle) if per_cycle else None))
    clocks = [c for c in (old.clock_ghz, new.clock_ghz) if c is not None]
    return MachinePeaks(new.key, new.cpu, new.cores, tuple(fma), max(old.single_gbs, new.single_gbs),
                        max(old.all_gbs, new.all_gbs), new.stream_bytes, max(clocks) if clocks else None,
                        new.seconds, new.measured_at, min(old.load_average, new.load_average), new.version,
                        new.extra)


def _quieter_now(cached: MachinePeaks, load: Callable[[], float]) -> bool:
    """Whether `cached` was measured on a busy machine and this one is quieter now."""
    return cached.load_average > QUIET_LOAD and load() < cached.load_average - QUIETER_BY


def _load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def machine_peaks(refresh: bool = False, *, duration: float = DURATION_S,
                  load: Callable[[], float] = _load_average) -> MachinePeaks:
    """This machine's peaks: from this process's memory, else the cache file, else measured now
    (a second or two) and stored. A cache file measured under load is measured again, the two
    merged (`merge_best`), when `load()` says the machine is quieter now. `refresh` measures again
    and replaces both."""
    key = host_target().key
    with _PROCESS_LOCK:
        if not refresh and key in _IN_PROCESS:
            return _IN_PROCESS[key]
        path = cache_path(key)
        peaks = None if refresh or path is None else _load(path, key)
        if peaks is None or _quieter_now(peaks, load):
            fresh = measure(key=key, duration=duration)
            peaks = fresh if peaks is None else merge_best(peaks, fresh)
            if path is not None:
                _store(path, peaks)
        _IN_PROCESS[key] = peaks
        return peaks


def forget() -> None:
    """Drop this process's copy (the next `machine_peaks` reads the cache file again)."""
    with _PROCESS_LOCK:
        _IN_PROCESS.clear()


__all__ = ["FmaPeak", "MachinePeaks", "PeakProbeError", "QUIET_LOAD", "cache_path", "forget", "machine_peaks", "measure",
           "measurements", "merge_best", "stream_bytes"]
