"""The tuning loop: search proposes, the measurer measures, the records remember.

`tune(task, trials, measurer, db)` measures `trials` new candidates of the task's space in
batches (fewer only when the space runs out). Every result is written to the RecordDB as soon as
its batch is measured, so a tuner killed with SIGKILL loses at most the batch in flight; a rerun
resumes: the task's existing records (same target and compiler) inform the search and are never
measured again, and `trials` more are measured.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from tilec.autotune.features import Featurizer
from tilec.autotune.measure import MeasureResult, Measurer
from tilec.autotune.model import CostModel
from tilec.pipeline import compiler_fingerprint
from tilec.records import Record, RecordDB
from tilec.autotune.search import ModelSearch, RandomSearch
from tilec.autotune.space import Space, space_for
from tilec.autotune.task import Config, Task
from tilec.schedule.template_schedule import TemplateSchedule


@dataclass(frozen=True)
class Progress:
    measured: int  # new trials this run has measured
    total: int  # the new trials it was asked for
    best_s: float | None
    elapsed_s: float  # this run's wall time
    eta_s: float | None
    last: MeasureResult | None


def _records_of(task: Task, db: RecordDB, compiler: str) -> list[Record]:
    return [r for r in db.records(task.key) if r.target == task.target.key and r.compiler == compiler]


def measured_configs(task: Task, db: RecordDB) -> list[tuple[Config, float | None]]:
    """The task's recorded (config, seconds or None) for this target and compiler, oldest first."""
    out = []
    for r in _records_of(task, db, compiler_fingerprint()):
        try:
            config = task.config_of(TemplateSchedule.from_json(r.schedule))
        except Exception:  # noqa: BLE001 - a record this tilec cannot read is not ours to resume
            continue
        if config is not None:
            out.append((config, r.time_s if r.error == "ok" else None))
    return out


def tune(task: Task, trials: int, measurer: Measurer, db: RecordDB, seed: int = 0,
         progress: Callable[[Progress], None] | None = None, *, batch_size: int = 8, patience: int = 0,
         strategy: str = "model", space: Space | None = None, model: CostModel | None = None,
         transfer: Sequence[Task] = (), op: str = "", shape: str = "") -> Record | None:
    """Measure `trials` new candidates (the task's earlier records guide the search, and count as
    measured); the best record, or None if every candidate failed. strategy: "model"
    (XGBoost-guided annealing) or "random"."""
    compiler = compiler_fingerprint()
    space = space or space_for(task)
    default = space.index(task.default_config())
    first = [default] if default is not None else []
    search: RandomSearch
    if strategy == "random":
        search = RandomSearch(space, seed, patience, first)
    else:
        featurizer = Featurizer(task, with_ir=True)
        model = model or CostModel(seed)
        for other in transfer:  # earlier tunings of other shapes of this template: the model's prior
            if other.key != task.key and other.template == task.template:
                done = measured_configs(other, db)
                model.add_prior(Featurizer(other, with_ir=True).matrix([c for c, _ in done]), [t for _, t in done])
        model.fit(featurizer.matrix([]), [])  # with a prior, the first batch is already the model's choice
        search = ModelSearch(space, featurizer, model, seed, patience, first)
    resumed = [(i, t) for i, t in ((space.index(c), t) for c, t in measured_configs(task, db)) if i is not None]
    if resumed:
        search.update(resumed)
    count, start = len({i for i, _ in resumed}), time.monotonic()
    started_at = count
    best = min((t for _, t in resumed if t is not None), default=None)
    while count - started_at < trials and not search.done:
        batch = search.next_batch(min(batch_size, trials - (count - started_at)))
        if not batch:
            break
        results = measurer.measure(task, [space.config(i) for i in batch])
        for result in results:
            count += 1
            db.add(Record(task.key, task.target.key, compiler, task.schedule(result.config).to_json(),
                          result.time_s, result.error, trial=count, seed=seed, op=op, shape=shape))
            if result.time_s is not None and (best is None or result.time_s < best):
                best = result.time_s
            if progress is not None:
                elapsed = time.monotonic() - start
                new = count - started_at
                progress(Progress(new, trials, best, elapsed, elapsed / new * (trials - new), result))
        search.update([(i, r.time_s) for i, r in zip(batch, results)])
    return db.best(task.key, task.target.key, compiler)


def default_time(task: Task, db: RecordDB) -> float | None:
    """The recorded time of the task's default config (the heuristic's), if measured."""
    default = task.default_config()
    times = [t for c, t in measured_configs(task, db) if c == default and t is not None]
    return min(times) if times else None


def best_so_far(records: Sequence[Record]) -> list[float]:
    """The best time after each trial (records in trial order; inf until a first success)."""
    out, best = [], math.inf
    for r in sorted(records, key=lambda r: (r.trial, r.created)):
        if r.time_s is not None and r.error == "ok":
            best = min(best, r.time_s)
        out.append(best)
    return out


def plot(curves: Mapping[str, Sequence[float]], out: str, title: str = "") -> None:
    """A PNG of best-so-far time (ms) versus trials, one step line per named curve (many-seed
    experiments have their own summary plot: tilec.bench.tuner_experiment.plot_seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, ys in curves.items():
        ax.step(range(1, len(ys) + 1), [y * 1e3 if math.isfinite(y) else math.nan for y in ys], where="post",
                label=name)
    ax.set_xlabel("trials")
    ax.set_ylabel("best time so far (ms)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def describe(record: Record, default_s: float | None) -> dict[str, Any]:
    speedup = None if default_s is None or record.time_s is None else default_s / record.time_s
    return {"schedule": record.schedule, "time_ms": None if record.time_s is None else record.time_s * 1e3,
            "default_ms": None if default_s is None else default_s * 1e3, "speedup": speedup}
