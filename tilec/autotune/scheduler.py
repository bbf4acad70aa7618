"""Tuning many tasks under one time budget: a whole model's kernels.

A model's training step runs many kernels, and a budget spent evenly on them is mostly wasted:
most of the step's time sits in a few of them, and most of a task's gain comes in its first
trials. `tune_tasks` follows Ansor's task scheduler in spirit. Each task is (Task, weight), the
weight being how many times the step runs it. Every task first gets one round (`Effort.round`
trials, the default schedule first), which measures its default time; the task's share of the
step is weight x default time over the sum (a task is one statement of a program, and the time is the
whole program's, so a program's statements share its share). Then, while the budget lasts, the next round goes to
the task whose expected gain per second of tuning is largest:

    gain = weight x max(last round's improvement, best x EXPLORE / rounds so far)

(the improvement a round of trials bought last time, or while that is small a share of the
task's time that shrinks as its rounds grow), divided by the wall time its last round took. A
task whose space is exhausted is done. Before the budget ends, the tuned tasks are confirmed
(tilec.autotune.confirm), and each row of the result says what the task got.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from tilec.autotune.measure import Measurer
from tilec.autotune.task import Task
from tilec.autotune.tuner import default_time, measured_configs, tune
from tilec.errors import TilecError
from tilec.records import RecordDB

EXPLORE = 0.05  # the share of a task's time a round is expected to gain before it has shown any
CONFIRM_SHARE = 0.2  # of its last round, a task's confirmation takes (GPT-2: 3 s against 30 s rounds)


@dataclass(frozen=True)
class Effort:
    round: int  # trials per round
    confirm: int  # candidates each task's confirmation re-measures
    confirm_s: float  # seconds set aside per task for it


EFFORTS = dict(quick=Effort(4, 2, 1.5), default=Effort(8, 4, 2.5), full=Effort(16, 4, 4.0))  # --effort


@dataclass
class TaskRow:
    """What one task got: its weight (runs per step), its program's share of the step's (default)
    time, default and tuned seconds per call (of the whole program: a task is one of its
    statements), and trials measured in this run."""

    task: Task
    weight: int
    default_s: float | None = None
    best_s: float | None = None
    trials: int = 0
    rounds: int = 0
    last_gain_s: float = 0.0  # the last round's improvement of the best, seconds per call
    last_round_s: float = 1.0  # the last round's wall time
    done: bool = False  # its space is exhausted (or every candidate failed)
    share: float = 0.0
    history: list[tuple[float, float | None]] = field(default_factory=list)  # (elapsed s, best s) per round

    def expected_gain(self) -> float:
        """Seconds of step time per second of tuning a next round is expected to buy."""
        if self.done or self.best_s is None:
            return 0.0
        hope = max(self.last_gain_s, self.best_s * EXPLORE / max(1, self.rounds))
        return self.weight * hope / max(self.last_round_s, 1e-3)


def parse_budget(text: str) -> float:
    """Seconds from "90", "90s", "10m" or "1h"; a TilecError for anything else."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(value) * units[unit]
    except ValueError:
        raise TilecError(f"budget {text!r}: expected seconds or a duration like 90s, 10m or 1h") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise TilecError(f"budget {text!r}: must be a positive duration")
    return seconds


def tune_tasks(tasks: Sequence[tuple[Task, int]], measurer: Measurer, db: RecordDB, budget_s: float, *,
               effort: str = "default", seed: int = 0, op: str = "",
               progress: Callable[[TaskRow, float], None] | None = None,
               clock: Callable[[], float] = time.monotonic) -> list[TaskRow]:
    """Spend about `budget_s` seconds tuning `tasks` ((task, runs per step) pairs), largest expected
    gain first, then confirm each tuned task's best; one row per task, in the given order.
    `progress(row, elapsed_s)` is called after each round."""
    if effort not in EFFORTS:
        raise TilecError(f"effort {effort!r}: expected one of {', '.join(EFFORTS)}")
    plan = EFFORTS[effort]
    rows = [TaskRow(task, max(1, int(weight))) for task, weight in tasks]
    start = clock()

    def reserve() -> float:  # for the confirmations of the tasks tuned so far, and of one more: each
        # a share of a round (a measurement process started, candidates loaded, a second of samples)
        if plan.confirm <= 0:
            return 0.0
        return plan.confirm_s + sum(max(plan.confirm_s, CONFIRM_SHARE * r.last_round_s) for r in rows if r.trials)

    def spend(row: TaskRow) -> None:
        before, began = row.best_s, clock()
        measured_before = len(measured_configs(row.task, db))
        best = tune(row.task, plan.round, measurer, db, seed=seed, op=op, shape=row.task.label, confirm=0)
        measured = len(measured_configs(row.task, db)) - measured_before
        row.trials += measured
        row.rounds += 1
        row.last_round_s = max(clock() - began, 1e-3)
        row.best_s = None if best is None else best.time_s
        row.done = measured < plan.round or best is None
        if row.default_s is None:
            row.default_s = default_time(row.task, db)
        if before is not None and row.best_s is not None:
            row.last_gain_s = max(0.0, before - row.best_s)
        row.history.append((clock() - start, row.best_s))
        if progress is not None:
            progress(row, clock() - start)

    estimate = 0.0  # the last first round's wall time: what the next one is expected to take
    for row in rows:  # a first round each: the default's time, and so the task's share
        if row is not rows[0] and clock() - start + estimate > budget_s - reserve():
            break
        spend(row)
        estimate = row.last_round_s
    while True:
        left = budget_s - reserve() - (clock() - start)
        ranked = sorted((r for r in rows if r.rounds > 0 and not r.done), key=TaskRow.expected_gain, reverse=True)
        if not ranked or left < ranked[0].last_round_s:
            break
        spend(ranked[0])
    remeasure = getattr(measurer, "remeasure", None)
    for row in rows:
        if row.trials and plan.confirm > 0 and remeasure is not None:
            best = tune(row.task, 0, measurer, db, seed=seed, op=op, shape=row.task.label, confirm=plan.confirm)
            row.best_s = None if best is None else best.time_s
            row.default_s = default_time(row.task, db)
    programs = _program_times(rows)
    total = sum(programs.values())
    for row in rows:
        row.share = programs[program_of(row.task)] / total if total > 0 else 0.0
    return rows


def program_of(task: Task) -> tuple:
    """A task is one statement of a program; its time is the whole program's."""
    return task.source, task.shapes, task.dtypes, task.sizes


def _program_times(rows: Sequence[TaskRow]) -> dict[tuple, float]:
    """Per program: runs per step x its default seconds per call (the largest its tasks measured)."""
    out: dict[tuple, float] = {}
    for r in rows:
        key = program_of(r.task)
        out[key] = max(out.get(key, 0.0), r.weight * (r.default_s or 0.0))
    return out


def revert_to_defaults(rows: Sequence[TaskRow], db: RecordDB) -> int:
    """Put every tuned task whose best is not its default schedule back on the default: a new
    confirmation round holding only the default's latest confirmed measurement (records are
    append-only; best() serves the latest round). For when the step itself did not get faster.
    Returns how many tasks it reverted."""
    from tilec.autotune.confirm import default_record, latest_round
    from tilec.pipeline import compiler_fingerprint

    reverted = 0
    for row in rows:
        latest = latest_round(row.task, db, compiler_fingerprint())
        default = default_record(row.task, latest)
        if default is None or min(latest, key=lambda r: r.time_s or 0.0) is default:
            continue
        db.add(replace(default, confirmed=default.confirmed + 1, created=0.0))
        row.best_s = default.time_s
        reverted += 1
    return reverted


def format_table(rows: Sequence[TaskRow]) -> str:
    """The final table: task, runs per step, share of the step, default and tuned ms, trials."""
    lines = [("task", "runs/step", "program's share", "default ms", "tuned ms", "speedup", "trials")]
    for r in sorted(rows, key=lambda r: -r.share):
        speedup = f"{r.default_s / r.best_s:.2f}x" if r.default_s and r.best_s else "-"
        lines.append((r.task.label, str(r.weight), f"{100 * r.share:.1f}%", _ms(r.default_s), _ms(r.best_s), speedup,
                      str(r.trials)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def step_estimate(rows: Sequence[TaskRow]) -> tuple[float, float]:
    """The tuned programs' seconds per step before and after: each program's runs x default time,
    less each task's gain (runs x (default - tuned); a first-order estimate where several
    statements of one program were tuned, each measured with the others at their defaults)."""
    before = sum(_program_times(rows).values())
    gain = sum(r.weight * max(0.0, r.default_s - r.best_s) for r in rows
               if r.default_s is not None and r.best_s is not None)
    return before, before - gain


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


__all__ = ["EFFORTS", "Effort", "TaskRow", "format_table", "parse_budget", "revert_to_defaults", "step_estimate",
           "tune_tasks"]
