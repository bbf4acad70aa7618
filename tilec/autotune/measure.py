"""Measurement: build and time candidates away from the tuner process, with typed errors.

`LocalMeasurer` first builds a batch's candidates in parallel in a pool of builder processes
(tilec.autotune.build: lowering and LLVM compilation to object code, stored in a disk cache the
measurer shares with them), then measures them one at a time, after every build of the batch has
finished, so that timing never overlaps compilation (the measurement process starts up while the
first batch builds, but times the default schedule only after). Measuring happens in one worker process
(multiprocessing, spawn context) per task: it makes the inputs and the reference output (the
default schedule's) once, then for each candidate loads it (the object code from the cache;
it compiles a candidate itself only when no builder did), runs it once, compares with the
reference, and times it (warm-up, then the minimum of `repeats` timed runs, each long enough for
the clock: other processes on a shared machine only ever add time, so the minimum is the
estimate they disturb least). A build that raises, kills its builder or outlasts `timeout_s` is "build_error" or
"timeout" without reaching the measurement process. A candidate that hangs is killed
after `timeout_s` ("timeout"); one that kills the worker (a segfault) is "runtime_error", or
"build_error" if it died while compiling; an exception while compiling is "build_error"; a
result off the reference is "wrong_answer". A dead worker is replaced for the next candidate.

`FakeMeasurer` is a deterministic synthetic cost of the knobs, for testing tuner logic without
compiling anything; it can inject every error kind.
"""

from __future__ import annotations

import math
import multiprocessing
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from tilec.autotune.build import BuildPool, BuildResult, default_workers
from tilec.autotune.gpu import time_gpu
from tilec.autotune.task import Task
from tilec.schedule.templates.space import Config
from tilec.errors import TilecError

ERRORS = ("ok", "build_error", "timeout", "runtime_error", "wrong_answer")


@dataclass(frozen=True)
class MeasureResult:
    config: Config
    time_s: float | None  # seconds per call, None unless error == "ok"
    error: str = "ok"
    message: str = ""


class Measurer(Protocol):
    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]: ...


@dataclass(frozen=True)
class MeasureOptions:
    timeout_s: float = 20.0  # per candidate: compile, check and time
    startup_timeout_s: float = 120.0  # the worker's start: imports, inputs, the reference
    repeats: int = 5
    min_repeat_s: float = 0.01  # each timed repeat calls the kernel enough times to last this long
    rtol: float = 1e-3
    seed: int = 0  # of the inputs
    build_workers: int | None = None  # builder processes; None: one per core; below 2: the measurer builds
    remeasure_s: float = 1.0  # the confirmation's re-measurement of the top candidates, in all (about)
    min_sample_s: float = 1e-4  # each of its samples calls a kernel enough times to last this long


# ---------------------------------------------------------------- the worker process


def _time(call: Callable[[], Any], opts: MeasureOptions) -> float:
    start = time.perf_counter()
    call()  # warm-up (the checked call before it was the first)
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, math.ceil(opts.min_repeat_s / once))
    samples = []
    for _ in range(opts.repeats):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    return min(samples)


def _outputs(value: Any) -> list[np.ndarray]:
    return [np.asarray(v) for v in value] if isinstance(value, (tuple, list)) else [np.asarray(value)]


def _mismatch(got: list[np.ndarray], expected: list[np.ndarray], rtol: float) -> str | None:
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return f"output {k} has shape {g.shape}, the default schedule's {e.shape}"
        scale = float(np.max(np.abs(e))) if e.size else 0.0
        bad = ~np.isclose(g, e, rtol=rtol, atol=rtol * max(scale, 1e-6))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"output {k} differs from the default schedule's at {int(bad.sum())} of {bad.size} elements; "
                    f"first at {first}: {g[first]!r} vs {e[first]!r}")
    return None


def _time_candidate(task: Task, fn: Callable[[list[np.ndarray]], Any], inputs: list[np.ndarray],
                    opts: MeasureOptions) -> float:
    """GPU tasks by CUDA events on the device call (tilec.autotune.gpu); CPU ones by wall clock."""
    if task.target.is_gpu:
        return _time_on_device(task, fn, inputs, opts.repeats, opts.min_repeat_s)
    return _time(lambda: fn(inputs), opts)


def _time_on_device(task: Task, fn: Callable[[list[np.ndarray]], Any], inputs: list[np.ndarray], repeats: int,
                    min_repeat_s: float) -> float:
    device_call = getattr(fn, "device_call", fn)
    return float(time_gpu(task.target, lambda: device_call(inputs), repeats, min_repeat_s))


def _sample(task: Task, fn: Callable[[list[np.ndarray]], Any], inputs: list[np.ndarray], number: int) -> float:
    """Seconds per call of `number` calls in a row, without warm-up (a GPU task's: on the device)."""
    if task.target.is_gpu:
        return _time_on_device(task, fn, inputs, 1, 0.0)
    start = time.perf_counter()
    for _ in range(number):
        fn(inputs)
    return (time.perf_counter() - start) / number


MIN_ROUNDS, MAX_ROUNDS = 8, 200  # (8: a sign test over five candidates can still keep one, tilec.autotune.confirm)


def _interleaved_samples(task: Task, configs: list[Config], inputs: list[np.ndarray],
                         opts: MeasureOptions) -> list[list[float] | None]:
    """Per config, its samples from rounds in which every config runs once, in an order rotating
    from round to round, so that all of them see the same machine state and each runs after
    another one's calls, as a kernel in a program does; None for one that fails to build or run.
    The rounds last `opts.remeasure_s` in all, at least MIN_ROUNDS of them."""
    fns: list[Any] = []
    for config in configs:
        try:
            fn = task.build(config)
            fn(inputs)  # loaded, and its pages touched
            fns.append(fn)
        except Exception:  # noqa: BLE001 - a candidate that no longer builds or runs is left out
            fns.append(None)
    live = [k for k, fn in enumerate(fns) if fn is not None]
    once = {k: max(_sample(task, fns[k], inputs, 1), 1e-7) for k in live}
    number = {k: max(1, math.ceil(opts.min_sample_s / once[k])) for k in live}
    per_round = sum(once[k] * number[k] for k in live) or 1e-7
    rounds = min(MAX_ROUNDS, max(MIN_ROUNDS, math.ceil(opts.remeasure_s / per_round)))
    samples: list[list[float] | None] = [[] if fn is not None else None for fn in fns]
    for r in range(rounds if live else 0):
        shift = r % len(live)
        for k in live[shift:] + live[:shift]:
            samples[k].append(_sample(task, fns[k], inputs, number[k]))  # type: ignore[union-attr]
    return samples


def _worker(conn: Any, task: Task, opts: MeasureOptions, cache_dir: str) -> None:
    from tilec.config import options

    options.cache_dir, options.disk_cache, options.use_records = Path(cache_dir), True, False
    inputs = task.make_inputs(opts.seed)
    reference = task.build(None)
    expected = _outputs(reference(inputs))
    conn.send(("loaded", None, ""))
    if conn.recv() is None:  # the go-ahead: time the default once no build runs beside it
        return
    default_time = _time_candidate(task, reference, inputs, opts)
    conn.send(("ready", default_time, ""))
    while True:
        config = conn.recv()
        if config is None:
            return
        if isinstance(config, list):  # the confirmation: these configs, re-measured interleaved
            conn.send(("samples", _interleaved_samples(task, config, inputs, opts), ""))
            continue
        try:
            fn = task.build(config)
        except Exception as err:  # noqa: BLE001 - any failure to build is the candidate's
            conn.send(("build_error", None, f"{type(err).__name__}: {err}"))
            continue
        conn.send(("built", None, ""))
        try:
            why = _mismatch(_outputs(fn(inputs)), expected, opts.rtol)
            if why is not None:
                conn.send(("wrong_answer", None, why))
                continue
            conn.send(("ok", _time_candidate(task, fn, inputs, opts), ""))
        except Exception as err:  # noqa: BLE001
            conn.send(("runtime_error", None, f"{type(err).__name__}: {err}"))


# ---------------------------------------------------------------- the tuner's side


@dataclass
class LocalMeasurer:
    options: MeasureOptions = field(default_factory=MeasureOptions)
    default_time: float | None = None  # of the current task's default schedule, measured by the worker
    _proc: Any = None
    _conn: Any = None
    _task: Task | None = None
    _pool: BuildPool | None = None
    _cache_dir: Path | None = None
    _tmp: Any = None
    _loading: bool = False  # spawned, but not yet past its start-up

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        configs = [dict(c) for c in configs]
        if self._proc is None or self._task != task:
            self._spawn(task)  # it starts up (imports, inputs, the reference) while the pool builds
        built = self._build(task, configs)
        return [self._one(task, c) if b is None or b.error == "ok" else MeasureResult(c, None, b.error, b.message)
                for c, b in zip(configs, built)]

    def remeasure(self, task: Task, configs: Sequence[Config]) -> list[list[float] | None]:
        """Per config, its seconds per call in each round of an interleaved re-measurement of all
        of them (`MeasureOptions.remeasure_s` long); None for one that failed, or all None when
        the measurement process died or hung."""
        configs = [dict(c) for c in configs]
        self._start(task)
        self._conn.send(configs)
        limit = self.options.timeout_s * len(configs) + 10 * self.options.remeasure_s
        kind, value, _ = self._receive(limit)
        if kind != "samples":
            self._close_worker()
            return [None] * len(configs)
        return value

    def _build(self, task: Task, configs: list[Config]) -> list[BuildResult | None]:
        """Every candidate compiled by the pool first (None: left to the measurement process)."""
        workers = default_workers() if self.options.build_workers is None else self.options.build_workers
        if workers < 2 or len(configs) < 2 or not task.pool_builds:
            return [None] * len(configs)
        if self._pool is None:
            self._pool = BuildPool(workers, self.cache_dir, self.options.startup_timeout_s)
        return self._pool.build(task, configs, self.options.timeout_s)

    @property
    def cache_dir(self) -> Path:
        """Where builders leave object code for the measurement process: the disk cache, or a
        directory of this measurer's own when the disk cache is off."""
        if self._cache_dir is None:
            from tilec.config import options

            if options.disk_cache and options.cache_dir is not None:
                self._cache_dir = options.cache_dir
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="tilec-build-")
                self._cache_dir = Path(self._tmp.name)
        return self._cache_dir

    def close(self) -> None:
        self._close_worker()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = self._cache_dir = None

    def _close_worker(self) -> None:
        if self._proc is not None:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = self._task = None
        self._loading = False

    def __enter__(self) -> "LocalMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, task: Task) -> None:
        self._close_worker()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, task, self.options, str(self.cache_dir)), daemon=True,
                           name="tilec-measure")
        try:
            proc.start()  # (a process that cannot start leaves no worker behind to close)
        finally:
            child.close()
        self._proc, self._conn, self._task, self._loading = proc, parent, task, True

    def _start(self, task: Task) -> None:
        """Have the worker ready to measure: spawned, loaded, and the default timed."""
        if self._proc is None or self._task != task:
            self._spawn(task)
        if not self._loading:
            return
        self._loading = False
        kind, value, _ = self._receive(self.options.startup_timeout_s)
        if kind == "loaded":
            self._conn.send("go")
            kind, value, _ = self._receive(self.options.startup_timeout_s)
        if kind != "ready":
            self._close_worker()
            raise TilecError(f"cannot measure {task.label or 'the task'}: the default schedule fails in the "
                             f"measurement process ({kind}: {value})")
        self.default_time = value

    def _receive(self, timeout: float) -> tuple[str, Any, str]:
        """The worker's next message, or ("timeout"|"died", ...) after killing/reaping it."""
        if self._conn.poll(timeout):
            try:
                return self._conn.recv()
            except (EOFError, OSError):
                pass
        else:
            self._proc.kill()
            self._proc.join()
            return ("timeout", None, f"killed after {timeout:.3g} s")
        self._proc.join()
        code = self._proc.exitcode or 0
        signal = f"signal {-code}" if code < 0 else f"exit status {code}"
        return ("died", None, f"the measurement process died ({signal})")

    def _one(self, task: Task, config: Config) -> MeasureResult:
        if self._proc is None or self._task != task or self._loading:
            self._start(task)
        self._conn.send(config)
        deadline = time.monotonic() + self.options.timeout_s
        kind, value, message = self._receive(self.options.timeout_s)
        if kind == "died":
            self._close_worker()
            return MeasureResult(config, None, "build_error", message + " while compiling")
        if kind == "timeout":
            self._close_worker()
            return MeasureResult(config, None, "timeout", message)
        if kind == "built":
            kind, value, message = self._receive(max(0.1, deadline - time.monotonic()))
            if kind in ("died", "timeout"):
                self._close_worker()
                return MeasureResult(config, None, "runtime_error" if kind == "died" else "timeout", message)
        return MeasureResult(config, value if kind == "ok" else None, kind, message)


# ---------------------------------------------------------------- for tests


def synthetic_cost(config: Mapping[str, Any]) -> float:
    """Seconds: smooth in the log of each block size, with its optimum at mr=4, nr=32, kc=256,
    mc=96 (GEMM) or bq=4, bk=64 (attention); reading A in place costs 10% more."""
    best = {"mr": 4, "nr": 32, "kc": 256, "mc": 96, "bq": 4, "bk": 64}
    cost = 1e-3
    for name, target in best.items():
        if name in config:
            cost *= 1 + 0.15 * (math.log2(config[name]) - math.log2(target)) ** 2
    return cost * (1.1 if config.get("pack_a") is False else 1.0)


@dataclass
class FakeMeasurer:
    """`faults`: error kind -> predicate on configs; a matching config fails with that kind."""

    cost: Callable[[Mapping[str, Any]], float] = synthetic_cost
    faults: Mapping[str, Callable[[Mapping[str, Any]], bool]] = field(default_factory=dict)
    calls: list[Config] = field(default_factory=list)
    remeasured: list[list[Config]] = field(default_factory=list)  # the configs of each remeasure call

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        self.calls.extend(dict(c) for c in configs)
        return [self._result(c) for c in configs]

    def remeasure(self, task: Task, configs: Sequence[Config]) -> list[list[float] | None]:
        """MIN_ROUNDS rounds of the noiseless cost (None for a faulty config)."""
        self.remeasured.append([dict(c) for c in configs])
        return [None if r.time_s is None else [r.time_s] * MIN_ROUNDS for r in map(self._result, configs)]

    def _result(self, config: Config) -> MeasureResult:
        kind = next((k for k, hit in self.faults.items() if hit(config)), None)
        if kind is not None:
            return MeasureResult(dict(config), None, kind, f"injected {kind}")
        return MeasureResult(dict(config), self.cost(config))
