"""The machine's peaks, measured: vector FMA throughput per dtype and width, memory bandwidth, clock.

A roofline needs two numbers per machine: how many floating-point operations a core (and all
cores) can issue per second, and how many bytes per second memory delivers. Tables of CPU names
are wrong as often as not (a 512-bit FMA is one instruction per cycle on Zen 4 and two on
Sapphire Rapids; a virtual machine's clock is whatever its host gives it), so this module
measures them with small LLVM IR loops, JIT-compiled for the host like tilec's kernels:

* FMA throughput: a loop of independent chains of vector FMAs (`ACCUMULATORS` accumulators,
  enough to hide any core's FMA latency), float32 and float64 at every vector width the host has
  (128, 256, 512 bits), and with ``avx512bf16`` the bf16 dot product ``vdpbf16ps`` (64 flops per
  512-bit instruction); on one core, then on one thread per core at once, each pinned to its own
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
the all-cores bandwidth, a shared resource, is all the bytes over the wall time. `machine_peaks()` measures
once per machine and keeps the result as JSON under the cache directory
(``<cache dir>/peaks/<hash of the target key>.json``, the key inside), or, with the disk cache
off, once per process.

Requires: llvmlite; an x86-64 host for the clock estimate (elsewhere `clock_ghz` is None).
Guarantees: every measured figure is positive; a probe that cannot compile or run raises a
`PeakProbeError` that says what failed; a damaged or foreign cache file is measured again.
"""

from __future__ import annotations

import ctypes
import datetime
import hashlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine
from tilec.config import options
from tilec.errors import TilecError
from tilec.target import CpuInfo, host_target

PROBE_VERSION = 1  # part of the cache file: a new probe measures again
ACCUMULATORS = 12  # independent FMA chains: latency (4-6 cycles) x issue width (up to 2) fits with room
UNROLL = 4  # FMAs per accumulator per loop iteration
REPEATS = 3  # best of this many runs per figure
DURATION_S = 0.02  # each timed run lasts about this long
CLOCK_ADDS = 64  # dependent adds per inline-assembly block
MAX_STREAM_BYTES = 2 << 30


class PeakProbeError(TilecError):
    """The peak probe could not compile or run on this machine."""


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


# ------------------------------------------------------------------ the kernels, as LLVM IR text


_LLVM_TYPES = {"float32": "float", "float64": "double"}


def _splat(name: str, vec: str, elem: str, lanes: int, value: str) -> str:
    return (f"  %{name}.0 = insertelement {vec} poison, {elem} {value}, i32 0\n"
            f"  %{name} = shufflevector {vec} %{name}.0, {vec} poison, <{lanes} x i32> zeroinitializer\n")


def fma_kernel_ir(name: str, dtype: str, bits: int, fused: bool = True) -> str:
    """`double name(i64 n, double seed)`: n iterations of UNROLL x ACCUMULATORS independent vector
    FMAs acc = acc * x + y (x = 0.5: the chains converge, no overflow or denormals); returns lane 0
    of the accumulators' sum so that nothing is dead."""
    elem = _LLVM_TYPES[dtype]
    lanes = bits // (32 if dtype == "float32" else 64)
    vec = f"<{lanes} x {elem}>"
    head = f"define double @{name}(i64 %n, double %seed) {{\nentry:\n"
    seed = "%seed"
    if elem == "float":
        head += "  %s32 = fptrunc double %seed to float\n"
        seed = "%s32"
    head += _splat("x", vec, elem, lanes, "0.5") + _splat("y", vec, elem, lanes, seed)
    head += "".join(_distinct_start(a, vec, elem) for a in range(ACCUMULATORS))
    head += "  br label %loop\nloop:\n  %i = phi i64 [0, %entry], [%i.next, %loop]\n"
    body = ""
    for a in range(ACCUMULATORS):
        head += f"  %acc{a} = phi {vec} [%init{a}, %entry], [%acc{a}.{UNROLL}, %loop]\n"
        body += f"  %acc{a}.0 = bitcast {vec} %acc{a} to {vec}\n"
    for u in range(1, UNROLL + 1):
        for a in range(ACCUMULATORS):
            prev, cur = f"%acc{a}.{u - 1}", f"%acc{a}.{u}"
            if fused:
                body += f"  {cur} = call {vec} @llvm.fma.v{lanes}{_suffix(elem)}({vec} {prev}, {vec} %x, {vec} %y)\n"
            else:
                body += f"  {cur}.m = fmul {vec} {prev}, %x\n  {cur} = fadd {vec} {cur}.m, %y\n"
    tail = "  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n  br i1 %more, label %loop, label %exit\nexit:\n"
    total = f"%acc0.{UNROLL}"
    for a in range(1, ACCUMULATORS):
        tail += f"  %sum{a} = fadd {vec} {total}, %acc{a}.{UNROLL}\n"
        total = f"%sum{a}"
    tail += f"  %lane = extractelement {vec} {total}, i32 0\n"
    tail += "  %r = fpext float %lane to double\n  ret double %r\n}\n" if elem == "float" else "  ret double %lane\n}\n"
    decl = f"declare {vec} @llvm.fma.v{lanes}{_suffix(elem)}({vec}, {vec}, {vec})\n" if fused else ""
    return decl + head + body + tail


def _distinct_start(a: int, vec: str, elem: str) -> str:
    """%init<a> = %y + a: every chain starts elsewhere (identical chains would be merged by the code
    generator, leaving one chain's worth of instructions)."""
    return f"  %init{a} = fadd {vec} %y, {_splat_constant(vec, elem, float(a))}\n"


def _splat_constant(vec: str, elem: str, value: float) -> str:
    lanes = int(vec[1:].split()[0])
    return "<" + ", ".join([f"{elem} {value!r}"] * lanes) + ">"


def _suffix(elem: str) -> str:
    return "f32" if elem == "float" else "f64"


def bf16_kernel_ir(name: str) -> str:
    """`double name(i64 n, double seed)`: vdpbf16ps chains (16 float32 lanes, each adding two bf16
    products: 64 flops per instruction). The operands are bf16 pairs reinterpreted from a float32
    splat of 0.5 (0.5 and 0.0: the accumulators stay finite)."""
    vec, bvec = "<16 x float>", "<32 x bfloat>"
    ir = f"declare {vec} @llvm.x86.avx512bf16.dpbf16ps.512({vec}, {bvec}, {bvec})\n"
    ir += f"define double @{name}(i64 %n, double %seed) {{\nentry:\n  %s32 = fptrunc double %seed to float\n"
    ir += _splat("y", vec, "float", 16, "%s32") + _splat("h", vec, "float", 16, "0.5")
    ir += "".join(_distinct_start(a, vec, "float") for a in range(ACCUMULATORS))
    ir += f"  %b = bitcast {vec} %h to {bvec}\n  br label %loop\nloop:\n  %i = phi i64 [0, %entry], [%i.next, %loop]\n"
    body = ""
    for a in range(ACCUMULATORS):
        ir += f"  %acc{a} = phi {vec} [%init{a}, %entry], [%acc{a}.{UNROLL}, %loop]\n"
        body += f"  %acc{a}.0 = bitcast {vec} %acc{a} to {vec}\n"
    for u in range(1, UNROLL + 1):
        for a in range(ACCUMULATORS):
            body += (f"  %acc{a}.{u} = call {vec} @llvm.x86.avx512bf16.dpbf16ps.512({vec} %acc{a}.{u - 1}, "
                     f"{bvec} %b, {bvec} %b)\n")
    ir += body + "  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n"
    ir += "  br i1 %more, label %loop, label %exit\nexit:\n"
    total = f"%acc0.{UNROLL}"
    for a in range(1, ACCUMULATORS):
        ir += f"  %sum{a} = fadd {vec} {total}, %acc{a}.{UNROLL}\n"
        total = f"%sum{a}"
    ir += f"  %lane = extractelement {vec} {total}, i32 0\n  %r = fpext float %lane to double\n  ret double %r\n}}\n"
    return ir


STREAM_VECTORS = 8  # independent sums, one vector each, per loop iteration


def stream_kernel_ir(name: str, bits: int) -> str:
    """`double name(ptr p, i64 n)`: the sum of n blocks of STREAM_VECTORS vectors of doubles at p
    (a read-only stream: every byte crosses the memory bus once)."""
    lanes = bits // 64
    vec = f"<{lanes} x double>"
    ir = f"define double @{name}(ptr %p, i64 %n) {{\nentry:\n  br label %loop\nloop:\n"
    ir += "  %i = phi i64 [0, %entry], [%i.next, %loop]\n"
    body = f"  %base = mul i64 %i, {STREAM_VECTORS * lanes}\n"
    for a in range(STREAM_VECTORS):
        ir += f"  %acc{a} = phi {vec} [zeroinitializer, %entry], [%acc{a}.next, %loop]\n"
        body += (f"  %off{a} = add i64 %base, {a * lanes}\n  %q{a} = getelementptr double, ptr %p, i64 %off{a}\n"
                 f"  %v{a} = load {vec}, ptr %q{a}, align 8\n  %acc{a}.next = fadd {vec} %acc{a}, %v{a}\n")
    ir += body + "  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n"
    ir += "  br i1 %more, label %loop, label %exit\nexit:\n"
    total = "%acc0.next"
    for a in range(1, STREAM_VECTORS):
        ir += f"  %sum{a} = fadd {vec} {total}, %acc{a}.next\n"
        total = f"%sum{a}"
    return ir + f"  %lane = extractelement {vec} {total}, i32 0\n  ret double %lane\n}}\n"


def clock_kernel_ir(name: str) -> str:
    """`i64 name(i64 n)`: n blocks of CLOCK_ADDS dependent register adds (x86-64 assembly, one
    cycle each): the time of a call is n * CLOCK_ADDS cycles."""
    adds = "\\0A".join(["addq $$1, $0"] * CLOCK_ADDS)
    return (f"define i64 @{name}(i64 %n) {{\nentry:\n  br label %loop\nloop:\n"
            f"  %i = phi i64 [0, %entry], [%i.next, %loop]\n  %v = phi i64 [0, %entry], [%v.next, %loop]\n"
            f"  %v.next = call i64 asm sideeffect \"{adds}\", \"=r,0\"(i64 %v)\n"
            f"  %i.next = add i64 %i, 1\n  %more = icmp ult i64 %i.next, %n\n"
            f"  br i1 %more, label %loop, label %exit\nexit:\n  ret i64 %v.next\n}}\n")


# ------------------------------------------------------------------ compiling and timing


@dataclass(frozen=True)
class _Kernel:
    """A compiled probe: call(n) runs n loop iterations; `work` is the flops (or bytes) of one."""

    name: str
    call: Callable[[int], Any]
    work: float


def _features(cpu: CpuInfo) -> set[str]:
    return {f[1:] for f in cpu.features.split(",") if f.startswith("+")}


def _widths(cpu: CpuInfo) -> list[int]:
    return [b for b in (128, 256, 512) if b <= cpu.vector_bits]


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


class _Probe:
    """The probe kernels of one CPU, compiled into one execution engine (kept alive with it)."""

    def __init__(self, cpu: CpuInfo) -> None:
        features = _features(cpu)
        fused = "fma" in features or "avx512f" in features
        self.fma: dict[tuple[str, int], int] = {}  # (dtype, bits) -> flops per iteration
        parts = []
        for dtype in ("float32", "float64"):
            for bits in _widths(cpu):
                lanes = bits // (32 if dtype == "float32" else 64)
                parts.append(fma_kernel_ir(f"fma_{dtype}_{bits}", dtype, bits, fused))
                self.fma[dtype, bits] = 2 * lanes * ACCUMULATORS * UNROLL
        if "avx512bf16" in features:
            parts.append(bf16_kernel_ir("fma_bfloat16_512"))
            self.fma["bfloat16", 512] = 64 * ACCUMULATORS * UNROLL
        self.stream_bits = max(_widths(cpu))
        parts.append(stream_kernel_ir("stream", self.stream_bits))
        self.has_clock = _is_x86()
        if self.has_clock:
            parts.append(clock_kernel_ir("clock"))
        llvm = initialise_llvm()
        with LOCK:
            try:
                module = llvm.parse_assembly("\n".join(parts))
                module.verify()
                self.engine = llvm.create_mcjit_compiler(module, target_machine(cpu))
                self.engine.finalize_object()
            except RuntimeError as err:
                raise PeakProbeError(f"the peak probe's kernels do not compile for CPU {cpu.name} ({err}); "
                                     f"this is a tilec bug: report it with `tilec info --json`'s versions") from None
            self.addresses = {name: self.engine.get_function_address(name)
                              for name in [f"fma_{d}_{b}" for d, b in self.fma] + ["stream"]
                              + (["clock"] if self.has_clock else [])}

    def fma_kernel(self, dtype: str, bits: int) -> _Kernel:
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64, ctypes.c_double)(self.addresses[f"fma_{dtype}_{bits}"])
        return _Kernel(f"fma_{dtype}_{bits}", lambda n: fn(n, 0.5), self.fma[dtype, bits])

    def stream_kernel(self, buffer: np.ndarray) -> _Kernel:
        """Reads all of `buffer` (float64, its length a multiple of a block) once per iteration."""
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(self.addresses["stream"])
        blocks = buffer.size // (STREAM_VECTORS * self.stream_bits // 64)
        pointer = buffer.ctypes.data

        def call(n: int) -> None:
            for _ in range(n):
                fn(pointer, blocks)
        return _Kernel("stream", call, float(buffer.nbytes))

    def clock_kernel(self) -> _Kernel:
        fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(self.addresses["clock"])
        return _Kernel("clock", fn, float(CLOCK_ADDS))


def _calibrate(kernel: _Kernel, duration: float, clock: Callable[[], float] = time.perf_counter) -> int:
    """Iterations for one run of about `duration` seconds (doubling from 1 until a run takes a tenth)."""
    n = 1
    while True:
        start = clock()
        kernel.call(n)
        took = clock() - start
        if took >= duration / 10 or n >= 1 << 40:
            return max(1, int(n * duration / max(took, 1e-9)))
        n *= 2


def _best_rate(kernel: _Kernel, n: int, repeats: int) -> float:
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


def _best_together(kernels: list[_Kernel], chunk: int, window: float, repeats: int) -> _Together:
    runs = [_together(kernels, chunk, window) for _ in range(repeats)]
    return _Together(max(r.per_core for r in runs), max(r.overall for r in runs))


def _together(kernels: list[_Kernel], chunk: int, window: float) -> _Together:
    """Each kernel on its own thread, pinned to its own CPU where it can be and started at a barrier,
    runs `chunk` iterations at a time until `window` seconds have passed since it started."""
    barrier = threading.Barrier(len(kernels))
    runs: list[tuple[float, float, float, float]] = []  # wall start, wall end, CPU seconds, work
    errors: list[BaseException] = []
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

    def run(k: int, kernel: _Kernel) -> None:
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
    probe = _Probe(cpu)
    clock_ghz = None
    if probe.has_clock:
        clock = probe.clock_kernel()
        clock_ghz = _best_rate(clock, _calibrate(clock, duration), repeats) / 1e9
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
                        round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0)


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


def machine_peaks(refresh: bool = False, *, duration: float = DURATION_S) -> MachinePeaks:
    """This machine's peaks: from this process's memory, else the cache file, else measured now
    (a second or two) and stored. `refresh` measures again and replaces both."""
    key = host_target().key
    with _PROCESS_LOCK:
        if not refresh and key in _IN_PROCESS:
            return _IN_PROCESS[key]
        path = cache_path(key)
        peaks = None if refresh or path is None else _load(path, key)
        if peaks is None:
            peaks = measure(key=key, duration=duration)
            if path is not None:
                _store(path, peaks)
        _IN_PROCESS[key] = peaks
        return peaks


def forget() -> None:
    """Drop this process's copy (the next `machine_peaks` reads the cache file again)."""
    with _PROCESS_LOCK:
        _IN_PROCESS.clear()


__all__ = ["FmaPeak", "MachinePeaks", "PeakProbeError", "cache_path", "forget", "machine_peaks", "measure",
           "measurements", "stream_bytes"]
