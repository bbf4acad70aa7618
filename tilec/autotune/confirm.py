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
the default in enough of the rounds (each round runs them side by side) that a one-sided sign
test rejects "no faster than the default" at level ALPHA shared among the candidates (Bonferroni),
and by its median. With the few rounds of a slow kernel that takes nearly every round (8 of 8 at
four candidates); with the ~200 rounds of a millisecond kernel, about 58% of them. Single calls
of a millisecond kernel on a shared 2-core machine vary by tens of percent, so a candidate whose
search-time minimum looked 10-20% faster usually wins about half the rounds: the test keeps the
default then, where the confirmation would otherwise crown whichever candidate the noise favoured.
"""

from __future__ import annotations

import math
import statistics
from typing import Protocol, Sequence

from tilec.autotune.task import Config, Task
from tilec.records import Record, RecordDB

TOP = 4  # the fastest trials a confirmation re-measures (besides the default and the previous best)
ALPHA = 0.05  # the chance that a confirmation keeps some candidate no faster than the default


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


def wins_needed(rounds: int, candidates: int = 1) -> int:
    """The fewest wins in `rounds` side-by-side rounds that a one-sided sign test takes as a real
    gain over the default, at level ALPHA / `candidates`: the smallest k with P(X >= k) <= level
    for X ~ Binomial(rounds, 1/2) (rounds + 1 when even winning them all is not enough)."""
    level, tail = ALPHA / max(1, candidates), 0.0
    for k in range(rounds, -1, -1):
        tail += math.comb(rounds, k) / 2.0 ** rounds
        if tail > level:
            return k + 1
    return 0


def beats(samples: Sequence[float], default: Sequence[float], candidates: int = 1) -> bool:
    """Whether a candidate's samples beat the default's, taken in the same rounds: faster in
    `wins_needed` of them (`candidates`: how many are tested against the default at once), and by
    the median."""
    rounds = list(zip(samples, default))
    wins = sum(1 for mine, theirs in rounds if mine < theirs)
    return (bool(rounds) and wins >= wins_needed(len(rounds), candidates)
            and statistics.median(samples) < statistics.median(default))


def confirm(task: Task, measurer: Remeasurer, db: RecordDB, configs: Sequence[Config], compiler: str, *,
            trial: int, seed: int | None = None, op: str = "", shape: str = "") -> list[Record]:
    """Re-measure `configs` interleaved and record, as the task's next confirmation (its time: the
    median of its samples), the default config and each candidate that `beats` it (every one that
    ran when the default is not among `configs` or failed); the records, fastest first."""
    number = max((r.confirmed for r in latest_round(task, db, compiler)), default=0) + 1
    measured = measurer.remeasure(task, configs)
    default = next((s for c, s in zip(configs, measured) if c == task.default_config() and s), None)
    rivals = max(1, len(configs) - 1)
    out = []
    for config, samples in zip(configs, measured):
        if samples and (default is None or samples is default or beats(samples, default, rivals)):
            out.append(task.record(config, statistics.median(samples), trial=trial, seed=seed, op=op, shape=shape,
                                   confirmed=number, spread=spread(samples)))
    for record in out:
        db.add(record)
    return sorted(out, key=lambda r: r.time_s or 0.0)
