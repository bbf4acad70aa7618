"""Does the cost model earn its keep? Model-guided search vs random search on one space.

Both strategies tune the same task (GEMM 512^3 by default) over the same space with the same
measurer: candidates are measured once and cached, so a configuration has one time whichever
search proposes it, and measurement noise cannot favour either. For each of several seeds,
each strategy's best-so-far curve is recorded; the score is the number of trials it needs to
come within 5% of the best time any run found ("95% of the best"). Prints the numbers and
writes a PNG of the curves. Run: `python -m tilec.autotune.experiment [--trials 64] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tilec.autotune.measure import LocalMeasurer, Measurer, MeasureResult
from tilec.autotune.records import RecordDB
from tilec.autotune.task import Config, Task, tasks_for
from tilec.autotune.tuner import best_so_far, plot, tune
from tilec.bench.ops import gemm_source


class CachedMeasurer:
    """Measures each configuration once; later requests get the first measurement. With a
    `path`, the measurements are kept in a JSON file (read at start, rewritten after each new
    batch), so that experiments can be replayed on exactly the same times."""

    def __init__(self, inner: Measurer, path: str | Path | None = None) -> None:
        self.inner = inner
        self.path = Path(path) if path else None
        self.cache: dict[str, MeasureResult] = {}
        if self.path is not None and self.path.exists():
            for key, (time_s, error) in json.loads(self.path.read_text()).items():
                self.cache[key] = MeasureResult(dict(json.loads(key)), time_s, error)

    @staticmethod
    def _key(config: Config) -> str:
        return json.dumps(sorted(config.items()), default=str)

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        missing = [c for c in configs if self._key(c) not in self.cache]
        for config, result in zip(missing, self.inner.measure(task, missing) if missing else []):
            self.cache[self._key(config)] = result
        if missing and self.path is not None:
            self.path.write_text(json.dumps({k: (r.time_s, r.error) for k, r in self.cache.items()}))
        return [self.cache[self._key(c)] for c in configs]


def trials_to_reach(curve: Sequence[float], target: float) -> int | None:
    return next((k + 1 for k, t in enumerate(curve) if t <= target), None)


def run(trials: int = 64, seeds: Sequence[int] = (0, 1, 2), size: int = 512, out: str | None = None,
        cache: str | None = None) -> dict:
    shapes = {"A": (size, size), "B": (size, size)}
    (task,) = tasks_for(gemm_source({}), shapes, {"A": "float32", "B": "float32"}, label=f"gemm {size}^3")
    curves: dict[str, Sequence[float]] = {}
    with LocalMeasurer() as local, tempfile.TemporaryDirectory() as tmp:
        measurer = CachedMeasurer(local, cache)
        for strategy in ("model", "random"):
            for seed in seeds:
                with RecordDB(Path(tmp) / f"{strategy}-{seed}.sqlite") as db:
                    tune(task, trials, measurer, db, seed=seed, strategy=strategy)
                    records = sorted(db.records(task.key), key=lambda r: r.trial)
                curves[f"{strategy} seed {seed}"] = best_so_far(records)  # seconds
    best = min(curve[-1] for curve in curves.values())
    target = best / 0.95
    reached = {name: trials_to_reach(curve, target) for name, curve in curves.items()}
    summary = {"task": f"gemm {size}^3", "trials": trials, "best_ms": best * 1e3, "target_ms": target * 1e3,
               "trials_to_95pct": reached, "distinct_configs_measured": len(measurer.cache)}
    if out:
        plot(curves, out, title=f"best so far, gemm {size}^3 ({trials} trials per run)")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--out", default="tuning_curve.png")
    parser.add_argument("--cache", default=None, metavar="FILE.json",
                        help="keep the measurements in this file and reuse those it holds (replays an experiment "
                             "on the same times; default: measure afresh)")
    args = parser.parse_args()
    seeds = tuple(int(s) for s in args.seeds.split(","))
    summary = run(args.trials, seeds, size=args.size, out=args.out, cache=args.cache)
    print(json.dumps(summary, indent=2))
    for strategy in ("model", "random"):
        counts = [v for k, v in summary["trials_to_95pct"].items() if k.startswith(strategy)]
        print(f"{strategy}: trials to reach 95% of the best time, per seed: {counts}")
    reached = summary["trials_to_95pct"]
    for seed in seeds:  # the bar: at most half the trials random search needs (None: not within the run)
        m, r = reached[f"model seed {seed}"], reached[f"random seed {seed}"]
        holds = m is not None and (r is None or 2 * m <= r)
        print(f"seed {seed}: model {m}, random {r if r is not None else f'> {args.trials}'}: "
              f"{'holds' if holds else 'does not hold'}")


if __name__ == "__main__":
    main()
