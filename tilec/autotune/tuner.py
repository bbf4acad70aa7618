"""The tuning loop: search proposes, the measurer measures, the records remember.

`tune(task, trials, measurer, db)` measures `trials` new candidates of the task's space in
batches (fewer only when the space runs out). Every result is written to the RecordDB as soon as
its batch is measured, so a tuner killed with SIGKILL loses at most the batch in flight; a rerun
resumes: the task's existing records (same target and compiler) inform the search and are never
measured again, and `trials` more are measured. After the search, the fastest few, the default
and the previous confirmed best are re-measured together (tilec.autotune.confirm), and the
fastest of that confirmation is the task's best.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tilec.autotune import confirm as confirmation
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


def _config_of(task: Task, record: Record) -> Config | None:
    try:
        return task.config_of(TemplateSchedule.from_json(record.schedule))
    except Exception:  # noqa: BLE001 - a record this tilec cannot read is not ours to resume
        return None


def measured_configs(task: Task, db: RecordDB) -> list[tuple[Config, float | None]]:
    """The task's trials (config, seconds or None) for this target and compiler, oldest first."""
    out = []
    for r in db.records(task.key, task.target.key, compiler_fingerprint()):
        config = _config_of(task, r) if r.confirmed == 0 else None
        if config is not None:
            out.append((config, r.time_s if r.error == "ok" else None))
    return out


def confirmation_candidates(task: Task, db: RecordDB, top: int = confirmation.TOP) -> list[Config]:
    """The `top` fastest distinct trials, the default config and the latest confirmation's best."""
    trials = [(t, k, c) for k, (c, t) in enumerate(measured_configs(task, db)) if t is not None]
    out: list[Config] = []
    for _, _, config in sorted(trials, key=lambda x: x[:2]):
        if len(out) == top:
            break
        if config not in out:
            out.append(config)
    previous = confirmation.latest_round(task, db, compiler_fingerprint())
    previous_best = _config_of(task, min(previous, key=lambda r: r.time_s or 0.0)) if previous else None
    for extra in (task.default_config(), previous_best):
        if extra is not None and extra not in out:
            out.append(extra)
    return out


def tune(task: Task, trials: int, measurer: Measurer, db: RecordDB, seed: int = 0,
         progress: Callable[[Progress], None] | None = None, *, batch_size: int = 8, patience: int = 0,
         strategy: str = "model", space: Space | None = None, model: CostModel | None = None,
         transfer: Sequence[Task] = (), op: str = "", shape: str = "",
         confirm: int = confirmation.TOP) -> Record | None:
    """Measure `trials` new candidates (the task's earlier records guide the search, and count as
    measured), then confirm the `confirm` fastest (0: do not; nor with a measurer that cannot
    re-measure); the best record, or None if every candidate failed. strategy: "model"
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
            db.add(task.record(result.config, result.time_s, result.error, trial=count, seed=seed, op=op, shape=shape))
            if result.time_s is not None and (best is None or result.time_s < best):
                best = result.time_s
            if progress is not None:
                elapsed = time.monotonic() - start
                new = count - started_at
                progress(Progress(new, trials, best, elapsed, elapsed / new * (trials - new), result))
        search.update([(i, r.time_s) for i, r in zip(batch, results)])
    remeasure = getattr(measurer, "remeasure", None)
    fresh = count > started_at or not confirmation.latest_round(task, db, compiler)
    if confirm > 0 and remeasure is not None and fresh and best is not None:
        confirmation.confirm(task, measurer, db, confirmation_candidates(task, db, confirm),  # type: ignore[arg-type]
                             compiler, trial=count, seed=seed, op=op, shape=shape)
    return db.best(task.key, task.target.key, compiler)


def default_time(task: Task, db: RecordDB) -> float | None:
    """The recorded time of the task's default config (the heuristic's), if measured: the latest
    confirmation's, measured beside the best, else its trial's."""
    confirmed = confirmation.default_record(task, confirmation.latest_round(task, db, compiler_fingerprint()))
    if confirmed is not None and confirmed.time_s is not None:
        return confirmed.time_s
    default = task.default_config()
    times = [t for c, t in measured_configs(task, db) if c == default and t is not None]
    return min(times) if times else None


def best_so_far(records: Sequence[Record]) -> list[float]:
    """The best time after each trial (records in trial order; inf until a first success);
    confirmations are left out."""
    out, best = [], math.inf
    for r in sorted((r for r in records if r.confirmed == 0), key=lambda r: (r.trial, r.created)):
        if r.time_s is not None and r.error == "ok":
            best = min(best, r.time_s)
        out.append(best)
    return out


def plot_run(records: Sequence[Record], out: str, baseline: tuple[str, float] | None = None) -> float | None:
    """A PNG of one task's tuning run: every trial's time as a point, the best so far as a step
    line, the default schedule's time (the tuner measures it first: trial 1) and, when given, a
    baseline's (name, seconds) as horizontal lines, on a time axis from 0; the series is named by
    op and shape and the title gives the speedup of the best over the default, which it returns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted((r for r in records if r.confirmed == 0), key=lambda r: (r.trial, r.created))
    confirmed = max((r for r in records if r.confirmed > 0 and r.time_s is not None),
                    key=lambda r: (r.confirmed, -(r.time_s or 0.0)), default=None)
    name = f"{ordered[0].op} {ordered[0].shape}".strip() or ordered[0].task[:12]
    ok = [(r.trial, r.time_s * 1e3) for r in ordered if r.error == "ok" and r.time_s is not None]
    best = best_so_far(ordered)
    default = next((r.time_s for r in ordered if r.trial == 1 and r.error == "ok" and r.time_s is not None), None)
    speedup = default / min(best) if default is not None and math.isfinite(min(best)) else None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([t for t, _ in ok], [ms for _, ms in ok], "o", ms=3, alpha=0.5, label=f"{name}: each trial")
    ax.step([r.trial for r in ordered], [b * 1e3 if math.isfinite(b) else math.nan for b in best], where="post",
            label=f"{name}: best so far")
    if default is not None:
        ax.axhline(default * 1e3, color="gray", ls="--", label=f"default schedule {default * 1e3:.3g} ms")
    if confirmed is not None and confirmed.time_s is not None:
        ms, above = confirmed.time_s * 1e3, (confirmed.spread or 0.0) * confirmed.time_s * 1e3
        ax.errorbar([confirmed.trial], [ms], yerr=[[0.0], [above]], fmt="D", color="C3",
                    label=f"confirmed best {ms:.3g} ms (median re-measured, spread above)")
    if baseline is not None:
        ax.axhline(baseline[1] * 1e3, color="black", ls=":", label=f"{baseline[0]} {baseline[1] * 1e3:.3g} ms")
    ax.set_xlabel("trial")
    ax.set_ylabel("time per call (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(name + (f": best {min(best) * 1e3:.3g} ms, {speedup:.2f}x the default" if speedup else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return speedup


def describe(record: Record, default_s: float | None) -> dict[str, Any]:
    """The summary of a tuning: the best's schedule and time, the default's, the speedup, and
    whether the best was confirmed (re-measured interleaved; then its time is a median, and its
    spread the samples' (max - min) / median)."""
    speedup = None if default_s is None or record.time_s is None else default_s / record.time_s
    return {"schedule": record.schedule, "time_ms": None if record.time_s is None else record.time_s * 1e3,
            "default_ms": None if default_s is None else default_s * 1e3, "speedup": speedup,
            "confirmed": record.confirmed > 0, "spread": record.spread}
