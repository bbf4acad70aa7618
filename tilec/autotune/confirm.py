"""Confirmation: the tuner's best is re-measured before it is trusted.

A tuning trial's time is the minimum of a few back-to-back runs of one candidate: quick enough to
rank hundreds of candidates, but the fastest of many noisy minima is luckier than its candidate
(the winner's curse), and back-to-back runs keep a kernel's data hot as a call in a program need
not. So after the search the tuner hands its few fastest candidates, the default schedule and the
previous confirmed best to `confirm`, which re-measures them together, interleaved round by round
(`remeasure` of tilec.autotune.measure.LocalMeasurer), and records each one's median and spread
as the task's next confirmation. RecordDB.best() serves the latest confirmation's fastest before
any single trial, and `tilec bench --records` then finds the time the tuner reported.

The default schedule is the null hypothesis: a candidate enters the confirmation only if it beat
the default in at least WIN_SHARE of the rounds (each round runs them side by side) and by its
median. Where one statement is a small part of its program (a whole model's fused kernel), the
program's time varies more than the statement's schedule moves it, and without this test the
confirmation would crown whichever candidate the noise favoured.
"""

from __future__ import annotations

import statistics
from typing import Protocol, Sequence

from tilec.autotune.task import Config, Task
from tilec.records import Record, RecordDB

TOP = 4  # the fastest trials a confirmation re-measures (besides the default and the previous best)
WIN_SHARE = 0.75  # of the rounds a candidate must win against the default to be kept


class Remeasurer(Protocol):
    def remeasure(self, task: Task, configs: Sequence[Config]) -> list[list[float] | None]: ...


def spread(samples: Sequence[float]) -> float:
    """(max - min) / median of one candidate's samples."""
    median = statistics.median(samples)
    return (max(samples) - min(samples)) / median if median > 0 else 0.0


def latest_round(task: Task, db: RecordDB, compiler: str) -> list[Record]:
    """The records of the task's latest confirmation on this target and compiler (empty if none)."""
    confirmed = [r for r in db.records(task.key, task.target.key, compiler) if r.confirmed > 0]
    last = max((r.confirmed for r in confirmed), default=0)
    return [r for r in confirmed if r.confirmed == last]


def default_record(task: Task, records: Sequence[Record]) -> Record | None:
    """The record of the task's default schedule among `records` (one confirmation's, say)."""
    default = task.schedule(task.default_config()).to_json()
    return next((r for r in records if r.schedule == default), None)


def beats(samples: Sequence[float], default: Sequence[float]) -> bool:
    """Whether a candidate's samples beat the default's, taken in the same rounds: faster in at
    least WIN_SHARE of them, and by the median."""
    rounds = list(zip(samples, default))
    wins = sum(1 for mine, theirs in rounds if mine < theirs)
    return bool(rounds) and wins >= WIN_SHARE * len(rounds) and statistics.median(samples) < statistics.median(default)


def confirm(task: Task, measurer: Remeasurer, db: RecordDB, configs: Sequence[Config], compiler: str, *,
            trial: int, seed: int | None = None, op: str = "", shape: str = "") -> list[Record]:
    """Re-measure `configs` interleaved and record, as the task's next confirmation (its time: the
    median of its samples), the default config and each candidate that `beats` it (every one that
    ran when the default is not among `configs` or failed); the records, fastest first."""
    number = max((r.confirmed for r in latest_round(task, db, compiler)), default=0) + 1
    measured = measurer.remeasure(task, configs)
    default = next((s for c, s in zip(configs, measured) if c == task.default_config() and s), None)
    out = []
    for config, samples in zip(configs, measured):
        if samples and (default is None or samples is default or beats(samples, default)):
            out.append(task.record(config, statistics.median(samples), trial=trial, seed=seed, op=op, shape=shape,
                                   confirmed=number, spread=spread(samples)))
    for record in out:
        db.add(record)
    return sorted(out, key=lambda r: r.time_s or 0.0)
