"""The CPU runtime kernels link against: a persistent worker pool that shares cores politely.

``void tilec_parallel_for(void (*chunk)(ptr ctx, i64 c), ptr ctx, i64 n, i64 work, i64 kernel_work)``
runs ``chunk(ctx, c)`` for every ``c`` in ``[0, n)`` and returns when all are done. ``work`` is the
loop's estimated work in units (iterations x a per-iteration estimate from the loop body,
tilec.codegen.llvm.work; < 0: unknown), ``kernel_work`` that of the calling kernel's largest
parallel loop. Three paths, decided at every call:

* serially on the calling thread when ``work`` is below the serial threshold: parallelism
  cannot pay for a small job (a 32^3 GEMM, a 16x16 attention);
* on torch's OpenMP team when torch is loaded (`adopt_openmp`) and the work, or the kernel's, is
  unknown or at least the OpenMP threshold (about OPENMP_ABOVE_US of work): a kernel's small loops
  run where its main one does (the gather and the filter's permutation before a convolution's
  product took 0.4 ms more on the own pool right after a torch op), or a region there ended less than
  OPENMP_WARM_US ago: right after a torch op torch's workers spin for milliseconds, and on its
  own team the spinning workers take tilec's chunks instead of competing with tilec's threads
  for the cores;
* else on the own pool: the caller and the pool's workers (one per core beyond the caller,
  created on first use) claim chunks; the caller runs whatever is left unclaimed, so a worker
  the OS has parked costs at most the chunk it holds. Between jobs a worker spins for at most
  SPIN_US (``pause``, with a ``sched_yield`` every YIELD_EVERY polls, so on a busy core others
  run), fewer after jobs it was late for (the bound halves each time the caller ran a whole
  job alone, and doubles back as workers take part), then polls with sleeps doubling from
  SLEEP_US to MAX_SLEEP_US (so a worker joins a new job at most that late) and exits after
  about a second asleep. The caller waits for claimed chunks the same way: spins politely for
  at most WAIT_SPIN_US, then sleep-polls, which frees its core for a parked worker.
  One job runs at a time (a mutex); jobs do not nest.

Thresholds come from measurements, once per process (`calibrate`): what a parallel region costs
on the pool when every thread takes part (the cheapest of 60 regions whose chunks wait for each
other; measured again at every kernel load, so a moment's load at start-up does not decide for
the process), and what a work unit costs (a scalar load, multiply-add and store). A job runs in
parallel when its estimated time saved is PAYOFF times a region's cost. `thresholds`,
`runs_in_parallel` and `runs_on_openmp` report the decision; `set_thresholds` overrides it.

The IR is built by tilec.codegen.llvm.pool_ir. Claiming is generation-tagged: the job counter holds ``generation << 32 | next chunk`` and
is advanced by compare-and-swap only while it belongs to the claimer's job, so a worker that
saw an old job can neither run a chunk of a new one with stale arguments nor use up one of
its chunk numbers.
The module is compiled once per process from LLVM IR and its entry point registered with
the JIT's symbol resolver, so kernels loaded from the disk cache link to it by name.
``TILEC_OWN_THREADS=1`` keeps every parallel job off torch's OpenMP team.

Requires: llvmlite, an x86-64 host (``pause``, the cycle counter), pthreads. Guarantees: every
chunk runs exactly once per call, on whichever path; `ensure_runtime` returns the calibrated
engine for a core count.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from tilec.codegen.llvm.binding import LOCK, initialise_llvm, target_machine
from tilec.codegen.llvm.pool_ir import (CALIBRATE, CYCLES, ENTRY, GENERATION, IDLE_POLLS, MEET, NOOP, OPENMP_ABOVE,
                                        OPENMP_WARM_CYCLES,
                                        OPENMP_SLOT, OPENMP_THREADS_SLOT, POOL_FOR, SERIAL_BELOW, SERIAL_FOR, SLEEP_US,
                                        SPIN_CYCLES, SPIN_NOW, SPIN_US, WAIT_CYCLES, WAIT_SPIN_US, build_module)

_ENGINES: dict[int, Any] = {}  # cores -> the runtime's engine, alive for the whole process
PAYOFF = 2.0  # run in parallel only where the time saved is this many times a region's measured cost
# With torch's OpenMP team adopted, jobs estimated to take at least this long run on it, smaller ones
# on the own pool: an OpenMP region waits for every team thread, and a thread the OS has parked
# (another process busy) costs a scheduler time slice, milliseconds, a hundred times a small job;
# the own pool's caller claims what late threads have not, and so never waits for them. Right after
# torch ops the team is the faster place (its spinning workers take the chunks): measured, a 14^2
# conv step after torch's took 17.7-18.1 ms with every job on the team, 19.3-19.8 with this
# threshold, 21.0-21.2 with 300 us and 21.4-21.6 with 1 ms (BENCHMARKS.md, issue 18).
OPENMP_ABOVE_US = 100
# ... and so does every parallel job that starts within this long of the end of a region on the team: its
# threads are still spinning then (libgomp spins for milliseconds), so the region costs little, while the own
# pool's workers would fight them for the cores. Measured on the training steps of `tilec bench model`'s
# models (Zen 4, two cores, with and without this rule alternating step by step in one process, medians of
# 30): BERT 46.5 -> 43.7 ms, GPT-2 51.4 -> 48.1, the MLP 1.52 -> 1.43, ResNet-18 44.3 -> 43.2 (its kernels
# are many small programs with Python between them: every job on the team gave it 39.7). A small call on
# its own, the case OPENMP_ABOVE_US is for, still stays off the team.
OPENMP_WARM_US = 100
MEET_LIMIT_US = 200  # longest a calibration chunk waits for the others
REMEASURE_CALLS = 10  # regions measured again at each kernel load


@dataclass(frozen=True)
class Calibration:
    """What this process measured of its runtime (`calibrate`): an empty parallel region's cost
    beyond a serial call, one work unit's time, the cycle counter's rate, and so the threshold."""

    region_ns: float
    unit_ns: float
    ticks_per_us: float
    serial_below: int  # work units
    openmp_above: int  # work units


_CALIBRATIONS: dict[int, Calibration] = {}  # engine id -> its calibration
_PINNED: set[int] = set()  # engines whose thresholds were set by hand (set_thresholds)


def ensure_runtime(cores: int) -> Any:
    """Compile the runtime once per process and register `tilec_parallel_for` for kernels to link;
    calibrate it, and measure its parallel regions again at each later call (each kernel load), so
    the threshold follows the cheapest region seen, not a moment's load at start-up; adopt torch's
    OpenMP team once torch is loaded."""
    from tilec.target import host_cpu

    with LOCK:  # one runtime, even when two threads compile their first kernels at once
        engine = _ENGINES.get(cores)
        if engine is None:
            llvm = initialise_llvm()
            module = llvm.parse_assembly(build_module(cores))
            module.verify()
            engine = llvm.create_mcjit_compiler(module, target_machine(host_cpu()))
            engine.finalize_object()
            _CALIBRATIONS[id(engine)] = calibrate(engine, cores)
            llvm.add_symbol(ENTRY, engine.get_function_address(ENTRY))
            _ENGINES[cores] = engine
        else:
            _remeasure(engine, cores)
        adopt_openmp(engine)
        return engine


def calibrate(engine: Any, cores: int) -> Calibration:
    """Measure the runtime on this machine, now, and set its spin bounds and thresholds: a job runs
    in parallel only where `cores` threads would save PAYOFF times what a parallel region costs,
    i.e. its work exceeds PAYOFF * region * cores / (cores - 1) in time (`_thresholds`)."""
    ticks = _ticks_per_us(engine)
    _slot(engine, SPIN_CYCLES).value = _slot(engine, SPIN_NOW).value = int(SPIN_US * ticks)
    _slot(engine, WAIT_CYCLES).value = int(WAIT_SPIN_US * ticks)
    _slot(engine, OPENMP_WARM_CYCLES).value = int(OPENMP_WARM_US * ticks)
    region, unit = _region_ns(engine, cores, ticks), _unit_ns(engine)
    return _thresholds(engine, cores, region, unit, ticks)


def _remeasure(engine: Any, cores: int) -> None:
    """A few more regions; the thresholds follow when one was cheaper than any before."""
    old = _CALIBRATIONS[id(engine)]
    region = _region_ns(engine, cores, old.ticks_per_us, calls=REMEASURE_CALLS)
    if region < old.region_ns and id(engine) not in _PINNED:
        _CALIBRATIONS[id(engine)] = _thresholds(engine, cores, region, old.unit_ns, old.ticks_per_us)


def _thresholds(engine: Any, cores: int, region: float, unit: float, ticks: float) -> Calibration:
    below = int(PAYOFF * region * cores / max(1, cores - 1) / unit) if cores > 1 else 0
    above = max(below, int(OPENMP_ABOVE_US * 1e3 / unit))
    _slot(engine, SERIAL_BELOW).value, _slot(engine, OPENMP_ABOVE).value = below, above
    return Calibration(region, unit, ticks, below, above)


def _slot(engine: Any, name: str) -> ctypes.c_int64:
    return ctypes.c_int64.from_address(engine.get_global_value_address(name))


def _ticks_per_us(engine: Any) -> float:
    """The cycle counter's ticks per microsecond (0 where the target has no counter: spinning
    threads then sleep-poll at once)."""
    cycles = ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address(CYCLES))
    c0, t0 = cycles(), time.perf_counter_ns()
    time.sleep(0.002)
    c1, t1 = cycles(), time.perf_counter_ns()
    return max(0.0, (c1 - c0) * 1e3 / max(1, t1 - t0))


def _region_ns(engine: Any, cores: int, ticks_per_us: float, calls: int = 60) -> float:
    """What a parallel region on the pool costs when every thread takes part: its `cores` chunks
    wait for each other (at most MEET_LIMIT_US), less the same chunks, empty, run serially (both
    called from Python, whose call overhead cancels). The cheapest of `calls` regions: the cost
    when the threads are on their cores; a moment's load (the machine may be shared) should not
    decide for the whole process, and the pool copes with late threads as they come (the caller
    claims the chunks they have not, so a late thread costs at most the chunk it holds)."""
    signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    pool, serial = (signature(engine.get_function_address(name)) for name in (POOL_FOR, SERIAL_FOR))
    noop, meet = engine.get_function_address(NOOP), engine.get_function_address(MEET)
    ctx = (ctypes.c_int64 * 3)(0, cores, int(MEET_LIMIT_US * ticks_per_us))

    def timed(run: Any, chunk: int) -> int:
        ctx[0] = 0
        t0 = time.perf_counter_ns()
        run(chunk, ctx, cores, 0)
        return time.perf_counter_ns() - t0

    timed(pool, meet)  # start the workers
    region = min(timed(pool, meet) for _ in range(calls))
    return max(1.0, region - min(timed(serial, noop) for _ in range(calls)))


def _unit_ns(engine: Any, units: int = 100_000, rounds: int = 5) -> float:
    """The time of one work unit (tilec.codegen.llvm.work): the fastest of `rounds` runs of the
    calibration loop."""
    work = ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address(CALIBRATE))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        work(units)
        best = min(best, time.perf_counter_ns() - t0)
    return max(1e-3, best / units)


def _engine(cores: int | None) -> Any:
    """The runtime for `cores` (default: the host's), built if need be (not measured again)."""
    from tilec.target import host_cpu

    cores = cores or host_cpu().cores
    return _ENGINES.get(cores) or ensure_runtime(cores)


def thresholds(cores: int | None = None) -> tuple[int, int]:
    """(serial below, OpenMP from) in work units (tilec.codegen.llvm.work), in the runtime for
    `cores` (default: the host's): a parallel loop with less estimated work than the first runs
    on the calling thread; with torch's OpenMP team adopted, one with at least the second (or
    unknown work) runs on that team, the others on the own pool."""
    engine = _engine(cores)
    return int(_slot(engine, SERIAL_BELOW).value), int(_slot(engine, OPENMP_ABOVE).value)


def set_thresholds(serial_below: int | None = None, openmp_above: int | None = None,
                   cores: int | None = None) -> tuple[int, int]:
    """Set either threshold (None: keep it; serial_below 0: every parallel loop runs in parallel),
    for the rest of the process; returns the previous pair."""
    engine = _engine(cores)
    previous = thresholds(cores)
    _PINNED.add(id(engine))  # measurements no longer move them
    for name, value in ((SERIAL_BELOW, serial_below), (OPENMP_ABOVE, openmp_above)):
        if value is not None:
            _slot(engine, name).value = int(value)
    return previous


def openmp_warm_us(window_us: float | None = None, cores: int | None = None) -> float:
    """How long after one of tilec's regions on torch's OpenMP team ends every parallel job still
    goes to the team (OPENMP_WARM_US by default); `window_us` sets it for the rest of the process.
    Returns the window in force before the call."""
    engine = _engine(cores)
    slot = _slot(engine, OPENMP_WARM_CYCLES)
    ticks = _CALIBRATIONS[id(engine)].ticks_per_us
    previous = slot.value / ticks
    if window_us is not None:
        slot.value = int(window_us * ticks)
    return previous


def runs_in_parallel(work: int, cores: int | None = None) -> bool:
    """Whether a parallel loop of estimated `work` units (< 0: unknown) runs in parallel: the
    runtime's own decision, made again at every call."""
    return work < 0 or work >= thresholds(cores)[0]


def runs_on_openmp(work: int, cores: int | None = None) -> bool:
    """Whether a parallel loop of estimated `work` units runs on torch's OpenMP team (adopted, and
    the work unknown or at least the OpenMP threshold) rather than serially or on the own pool."""
    big = work < 0 or work >= thresholds(cores)[1]
    return id(_engine(cores)) in _ADOPTED and big and runs_in_parallel(work, cores)


def pool_jobs(cores: int | None = None) -> int:
    """How many jobs the own pool has run in this process (jobs run serially or on OpenMP are not counted)."""
    return int(_slot(_engine(cores), GENERATION).value)


def calibration(cores: int | None = None) -> Calibration:
    """The runtime's current calibration (see `calibrate`)."""
    return _CALIBRATIONS[id(_engine(cores))]


_ADOPTED: set[int] = set()  # engines running their parallel loops on torch's OpenMP team


def adopt_openmp(engine: Any) -> bool:
    """Run long parallel loops on torch's OpenMP threads when torch is loaded in this process.

    torch's OpenMP workers spin for milliseconds after every torch op; a tilec kernel that runs its
    own threads meanwhile shares the cores with them (measured: a 3x3 conv gradient at 14^2 right
    after a torch op took 16-18 ms instead of 8.6; on torch's team the spinning workers take
    tilec's chunks). But an OpenMP region waits for every thread of the team, and a sleeping team
    thread that must wait for a core (another process busy) cost a tiny attention call 8 ms
    instead of 0.01: so only jobs with at least OPENMP_ABOVE_US of estimated work (or unknown
    work) run there; smaller ones on the own pool or serially (`tilec_parallel_for`). The team size
    is torch's (torch.set_num_threads). Returns whether the runtime uses OpenMP; checked again at
    each kernel load until torch shows up."""
    if id(engine) in _ADOPTED:
        return True
    addresses = _torch_openmp()
    if addresses is None:
        return False
    for slot, address in zip((OPENMP_SLOT, OPENMP_THREADS_SLOT), addresses):
        ctypes.c_int64.from_address(engine.get_global_value_address(slot)).value = address
    _ADOPTED.add(id(engine))
    return True


def _torch_openmp() -> tuple[int, int] | None:
    """The addresses of GOMP_parallel and omp_get_max_threads in the OpenMP runtime torch loaded
    (every parallel loop runs serially while torch allows one thread), or None."""
    from tilec.config import options

    if "torch" not in sys.modules or options.own_threads:
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/torch/lib/lib" in line and "omp" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if not os.path.basename(path).startswith(("libgomp", "libiomp5")):
            continue
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
            parallel, threads = (ctypes.cast(f, ctypes.c_void_p).value for f in (lib.GOMP_parallel, lib.omp_get_max_threads))
            if parallel and threads:
                return parallel, threads
        except (OSError, AttributeError):
            continue
    return None


__all__ = ["ENTRY", "IDLE_POLLS", "OPENMP_ABOVE_US", "OPENMP_WARM_US", "PAYOFF", "SLEEP_US", "Calibration", "adopt_openmp", "calibrate",
           "calibration", "ensure_runtime", "openmp_warm_us", "pool_jobs", "runs_in_parallel", "runs_on_openmp", "set_thresholds",
           "thresholds"]
