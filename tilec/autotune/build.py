"""Building candidates in parallel: a pool of builder processes (DESIGN §8: locally, a process pool).

`BuildPool(workers, cache_dir)` keeps `workers` processes (multiprocessing, spawn context). Each
lowers a candidate and compiles it with LLVM to object code (`Task.compile_object`), which it
stores in the disk cache at `cache_dir`; the measurement process, pointed at the same cache,
then only loads the object code. `build(task, configs, timeout_s)` hands the candidates out to
idle workers and returns one `BuildResult` per candidate, in order.

Guarantees: a candidate whose compilation raises is "build_error" with the exception's text;
one that kills its worker (a segfault in LLVM, say) is "build_error" naming the signal; one
still compiling after `timeout_s` is "timeout" and its worker is killed. A dead or killed worker
is replaced, and the other candidates are built as if nothing happened. If the pool cannot
start at all (a worker does not come up within `startup_timeout_s`), the candidates it could not
build come back as None: the measurement process builds those itself.

Builds never overlap measurement: `build` returns only when every candidate of the batch is
built or failed, and the workers sit idle (blocked on their pipe) while the measurer times.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Sequence

from tilec.autotune.task import Config, Task


@dataclass(frozen=True)
class BuildResult:
    error: str = "ok"  # "ok", "build_error" or "timeout"
    message: str = ""
    seconds: float = 0.0  # the builder's time on the candidate


def default_workers() -> int:
    """One builder per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------- the builder process


def _builder(conn: Any, cache_dir: str) -> None:
    from tilec.config import options

    options.cache_dir, options.disk_cache, options.use_records = Path(cache_dir), True, False
    import numpy as np

    from tilec.entry import compile_source

    # Warm up (imports, LLVM's initialisation, the parser) before saying "ready", so that a
    # candidate's timeout covers its own compilation only.
    compile_source("function (A[N]) -> (B) { B = A + 1; }")(np.zeros(4, np.float32))
    conn.send(("ready", "", 0.0))
    task: Task | None = None
    while True:
        message = conn.recv()
        if message is None:
            return
        new_task, config = message
        task = new_task or task
        assert task is not None
        start = time.perf_counter()
        try:
            task.compile_object(config)
        except Exception as err:  # noqa: BLE001 - any failure to build is the candidate's
            conn.send(("build_error", f"{type(err).__name__}: {err}", time.perf_counter() - start))
            continue
        conn.send(("ok", "", time.perf_counter() - start))


# ---------------------------------------------------------------- the tuner's side


class _Worker:
    def __init__(self, ctx: Any, cache_dir: Path) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_builder, args=(child, str(cache_dir)), daemon=True, name="tilec-build")
        self.proc.start()
        child.close()
        self.ready = False
        self.task: Task | None = None  # the task this worker holds
        self.job: int | None = None  # the candidate it is building
        self.deadline = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(2.0)
        self.kill()

    def died(self) -> str:
        self.kill()
        code = self.proc.exitcode or 0
        return f"the builder process died ({f'signal {-code}' if code < 0 else f'exit status {code}'}) while compiling"


class BuildPool:
    def __init__(self, workers: int, cache_dir: Path, startup_timeout_s: float = 120.0) -> None:
        self.size = max(1, workers)
        self.cache_dir = Path(cache_dir)
        self.startup_timeout_s = startup_timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def __enter__(self) -> "BuildPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []

    def build(self, task: Task, configs: Sequence[Config], timeout_s: float) -> list[BuildResult | None]:
        results: list[BuildResult | None] = [None] * len(configs)
        queue = deque(range(len(configs)))
        started = time.monotonic()
        while len(self._workers) < min(self.size, len(configs)):
            self._workers.append(_Worker(self._ctx, self.cache_dir))
        while queue or any(w.job is not None for w in self._workers):
            now = time.monotonic()
            for w in self._workers:  # hand out work to the idle, ready workers
                if w.ready and w.job is None and queue:
                    w.job, w.deadline = queue.popleft(), now + timeout_s
                    w.conn.send((task if w.task != task else None, dict(configs[w.job])))
                    w.task = task
            starting = [w for w in self._workers if not w.ready]
            if starting and not any(w.ready for w in self._workers) and now - started > self.startup_timeout_s:
                for w in starting:  # no worker came up: let the measurement process build
                    w.kill()
                self._workers = []
                return results
            busy = [w for w in self._workers if w.job is not None or not w.ready]
            deadlines = [w.deadline for w in busy if w.job is not None]
            limit = min(deadlines, default=started + self.startup_timeout_s) - now
            wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=max(0.0, limit))
            now = time.monotonic()
            for w in list(self._workers):
                message = self._poll(w)
                if message is None:
                    if w.job is not None and now >= w.deadline:  # hung: kill it
                        w.kill()
                        results[w.job] = BuildResult("timeout", f"compilation killed after {timeout_s:.3g} s",
                                                     timeout_s)
                        self._replace(w)
                elif message[0] == "ready":
                    w.ready = True
                elif message[0] in ("ok", "build_error") and w.job is not None:
                    results[w.job] = BuildResult(*message)
                    w.job = None
                else:  # died (a segfault while compiling, or while starting)
                    if w.job is not None:
                        results[w.job] = BuildResult("build_error", message[1], timeout_s - (w.deadline - now))
                    self._replace(w)
        return results

    def _replace(self, w: _Worker) -> None:
        self._workers[self._workers.index(w)] = _Worker(self._ctx, self.cache_dir)

    @staticmethod
    def _poll(w: _Worker) -> tuple[str, str, float] | None:
        """The worker's message, ("died", why) if it is gone, or None if it has nothing to say yet."""
        try:
            if w.conn.poll():
                message: tuple[str, str, float] = w.conn.recv()
                return message
        except (EOFError, OSError):
            return ("died", w.died(), 0.0)
        if not w.proc.is_alive():
            return ("died", w.died(), 0.0)
        return None
