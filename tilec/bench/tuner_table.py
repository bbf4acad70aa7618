"""Measure a task's whole search space once into a table (JSON), so that search strategies can be
compared on exactly the same times with no measurement: `python -m tilec.bench.tuner_table --out FILE`.

Every legal point is measured (the minimum of `repeats` timed runs, tilec.autotune.measure); then
the `top` fastest are measured `rounds` more times, in a different order each round (interleaved,
so that a burst of load on the shared machine hits different points each time), and each keeps
the minimum of all its measurements: the best of the table is then not a lucky outlier.

The table is the CachedMeasurer's file format (tilec.bench.tuner_experiment): a JSON object from the
config (sorted knob items, as JSON) to [seconds or null, error kind].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tilec.autotune.measure import LocalMeasurer, MeasureOptions, MeasureResult, Measurer
from tilec.autotune.space import space_for
from tilec.autotune.task import Config, Task, tasks_for


def gemm_task(size: int | str = 512) -> Task:
    """The GEMM task of a table or an experiment: `size` is N (N^3) or "M,N,K"."""
    from tilec.bench.ops import gemm_source
    from tilec.errors import TilecError

    try:
        dims = [int(d) for d in str(size).split(",")]
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 1:
        raise TilecError(f"GEMM size '{size}': give N (for N^3) or M,N,K, positive integers")
    m, n, k = dims
    label = f"gemm {m}^3" if m == n == k else f"gemm M={m},N={n},K={k}"
    (task,) = tasks_for(gemm_source({}), {"A": (m, k), "B": (k, n)}, {"A": "float32", "B": "float32"}, label=label)
    return task


def config_key(config: Config) -> str:
    return json.dumps(sorted(config.items()), default=str)


def load_table(path: str | Path) -> dict[str, tuple[float | None, str]]:
    return {k: (t, e) for k, (t, e) in json.loads(Path(path).read_text()).items()}


def save_table(path: str | Path, table: dict[str, tuple[float | None, str]]) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(table, separators=(",", ":")))
    os.replace(tmp, path)


def measure_table(task: Task, out: str | Path, repeats: int = 5, min_repeat_s: float = 0.02, top: int = 50,
                  rounds: int = 2, batch: int = 32, limit: int | None = None, seed: int = 0,
                  log: Any = print, measurer: Measurer | None = None) -> dict[str, tuple[float | None, str]]:
    """Measure every point of the task's space (or `limit` random ones) into `out`, resuming from
    what `out` already holds; then re-measure the `top` fastest `rounds` times (min kept). The
    measurer is a LocalMeasurer with `repeats` and `min_repeat_s` unless one is given."""
    space = space_for(task)
    table = load_table(out) if Path(out).exists() else {}
    order = np.random.default_rng(seed).permutation(len(space))  # shuffled: load drifts over the run
    todo = [space.config(int(i)) for i in order if config_key(space.config(int(i))) not in table]
    if limit is not None:
        todo = todo[: max(0, limit - len(table))]
    start = time.monotonic()
    with contextlib.ExitStack() as stack:
        if measurer is None:
            measurer = stack.enter_context(LocalMeasurer(MeasureOptions(repeats=repeats, min_repeat_s=min_repeat_s)))
        for b in range(0, len(todo), batch):
            chunk = todo[b: b + batch]
            for r in measurer.measure(task, chunk):
                table[config_key(r.config)] = (r.time_s, r.error)
            save_table(out, table)
            log(f"{b + len(chunk)}/{len(todo)} measured in {time.monotonic() - start:.0f} s, "
                f"load {os.getloadavg()[0]:.2f}")
        ok = sorted((t, k) for k, (t, e) in table.items() if t is not None)
        best = [dict(json.loads(k)) for _, k in ok[:top]]
        rng = np.random.default_rng(seed + 1)
        for rnd in range(rounds):
            again = [best[int(i)] for i in rng.permutation(len(best))]
            for b in range(0, len(again), 8 * batch):
                results: list[MeasureResult] = measurer.measure(task, again[b: b + 8 * batch])
                for r in results:
                    key = config_key(r.config)
                    old = table[key][0]
                    if r.time_s is not None and (old is None or r.time_s < old):
                        table[key] = (r.time_s, "ok")
                save_table(out, table)
                log(f"re-measured {b + len(results)} of the top {len(best)} (round {rnd + 1}) at "
                    f"{time.monotonic() - start:.0f} s, load {os.getloadavg()[0]:.2f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="512", help="GEMM size: N (N^3) or M,N,K (default 512)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2, help="re-measurements of the top points")
    parser.add_argument("--limit", type=int, default=None, help="measure only this many points (random ones)")
    args = parser.parse_args()
    task = gemm_task(args.size)
    start = time.monotonic()
    table = measure_table(task, args.out, repeats=args.repeats, top=args.top, rounds=args.rounds, limit=args.limit,
                          log=lambda s: print(s, flush=True))
    print(f"{len(table)} points in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
