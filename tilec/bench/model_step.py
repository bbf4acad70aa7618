"""`tilec bench model`: one training step of whole models under eager torch, Inductor and tilec.

The models are tilec.bench.models' (mlp, gpt2, bert, resnet18). Per model, three copies from the
same weights, one per side: eager (no compilation), torch.compile's default backend (Inductor) and
`torch.compile(model, backend="tilec")`. A step is forward, backward and the SGD update. The sides
run interleaved in this process, so that they share the machine's state (clock, other load):
`warmup` rounds of one step each first (the first compiles), then timed rounds until each side has
`steps` timed steps; the report gives each side's median. In a timed round each side runs
`consecutive` steps back to back, as a training loop does, and the first of them, the one that
follows another side's step, is not timed (with `consecutive` 1 every step is timed and follows
another side's). No training loop has such a switch-over step: it starts with the other model's
weights in the caches and torch's thread team in the state the other side's kernels left it
(measured on the mlp: 1.73 ms for tilec's step there against 1.32-1.39 ms for the steps after
it, eager's 1.69 against 1.44-1.50). Around the timed rounds, tilec.torch_backend's coverage
counts say which share of the ATen calls tilec's kernels ran and how many kernels a step launched.

With tuning records (`records`, `tilec bench model --records PATH`), the tilec side's kernels take
their schedules from them, and a fourth side, "untuned", runs the same backend with none (the
heuristic's schedules: tilec.records.using), interleaved with the others like any side. Its ratio
to the tilec side is what tuning bought; each round's pair of medians gives one ratio, and their
quartiles say how far the ratio moved from round to round. The two run next to each other, in
turns first: a side's steps run slower after some sides' than after others' (on the mlp, with
identical kernels and empty records, the side after Inductor's ran 0.95-0.97x the one after it),
so each follows the other as often as it follows the side before them.

Requires: torch; transformers for gpt2, bert and resnet18. Guarantees: a side that fails (Inductor
cannot compile here, tilec.torch_backend is missing, a step raises) is reported with the first line
of its error and left out of the later rounds; the other sides go on, and so do the other models.
A result carries the load average before and after its rounds and a warning when it says other
processes competed for the cores (tilec.bench.roofline).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilec.bench import models, roofline
from tilec.errors import TilecError
from tilec.records import using

#: the sides in the order each round runs them, and the torch.compile backend of each (None: eager)
SIDES: dict[str, str | None] = {"eager": None, "inductor": "inductor", "tilec": models.BACKEND}
UNTUNED = "untuned"  # the side added with tuning records: the tilec side's backend without them


@dataclass
class ModelResult:
    model: str
    times_ms: dict[str, list[float]] = field(default_factory=dict)  # side -> its timed steps
    round_ms: dict[str, list[float]] = field(default_factory=dict)  # side -> the median of its timed steps per round
    errors: dict[str, str] = field(default_factory=dict)  # side -> why it stopped
    coverage: dict[str, Any] | None = None  # tilec.torch_backend.coverage() over the timed rounds
    rounds: int = 0  # timed rounds run
    steps_run: int = 0  # steps each side ran in the timed rounds (the untimed switch-over steps included)
    consecutive: int = 1  # steps each side ran back to back per timed round
    loads: tuple[float | None, float | None] = (None, None)  # the 1-minute load average before and after
    cores: int = 1
    tilec_sides: int = 1  # sides that ran tilec.torch_backend (2 with tuning records: "tilec" and "untuned")

    @property
    def warnings(self) -> list[str]:
        """A busy machine before or after the model's rounds: its speed-ups are unreliable."""
        found = (roofline.load_warning(load, self.cores, when) for load, when in zip(
            self.loads, (f"before {self.model}'s rounds", f"after {self.model}'s rounds")))
        return [w for w in found if w is not None]

    def median_ms(self, side: str) -> float | None:
        times = self.times_ms.get(side)
        return statistics.median(times) if times and side not in self.errors else None

    def speedup(self, side: str, over: str) -> float | None:
        """How many times faster `side` is than `over` (median against median)."""
        mine, theirs = self.median_ms(side), self.median_ms(over)
        return theirs / mine if mine and theirs else None

    def round_ratios(self, side: str, over: str) -> list[float]:
        """Per timed round, how many times faster `side` ran than `over` (the rounds' medians)."""
        if side in self.errors or over in self.errors:
            return []
        return [theirs / mine for mine, theirs in zip(self.round_ms.get(side, []), self.round_ms.get(over, []))]

    def tuned_gain(self) -> tuple[float, float, float] | None:
        """With tuning records: the untuned side's time over the tilec side's per round, as its
        quartiles (first, median, third); None without records or with fewer than two rounds."""
        ratios = self.round_ratios("tilec", UNTUNED)
        if len(ratios) < 2:
            return None
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        return q1, median, q3

    def to_dict(self) -> dict[str, Any]:
        """The JSON line of `tilec bench model --json`."""
        extra: dict[str, Any] = {}
        if UNTUNED in self.times_ms or UNTUNED in self.errors:
            gain = self.tuned_gain()
            extra = {f"{UNTUNED}_ms": self.median_ms(UNTUNED), "tuned_vs_untuned": self.speedup("tilec", UNTUNED),
                     "tuned_vs_untuned_quartiles": None if gain is None else [round(x, 4) for x in gain]}
        return {"model": self.model, **{f"{side}_ms": self.median_ms(side) for side in SIDES}, **extra,
                "tilec_vs_eager": self.speedup("tilec", "eager"),
                "tilec_vs_inductor": self.speedup("tilec", "inductor"), "rounds": self.rounds,
                "consecutive": self.consecutive,
                "coverage": self.coverage_fraction, "kernels_per_step": self.kernels_per_step, "errors": self.errors,
                "load_average": [None if x is None else round(x, 2) for x in self.loads], "warnings": self.warnings}

    @property
    def coverage_fraction(self) -> float | None:
        return models.coverage_fraction(self.coverage) if self.coverage is not None else None

    @property
    def kernels_per_step(self) -> float | None:
        if self.coverage is None or not self.steps_run:
            return None
        return self.coverage["kernels"] / (self.steps_run * self.tilec_sides)


def machine_header() -> str:
    """The CPU's model name (/proc/cpuinfo), the cores this process may use, torch's threads and the
    load average. The load matters: where another process holds a core, every step whose OpenMP
    team has a thread waiting for that core takes a scheduler slice longer (an mlp step measured
    160 ms instead of 2 on 2 cores); `--threads 1` sidesteps that."""
    import torch

    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{name}, {cores} cores, torch threads {torch.get_num_threads()}, load average {load} (1, 5, 15 min)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


CONSECUTIVE = 5  # steps each side runs back to back per timed round, by default (the first untimed)
WARMUP = 3  # untimed rounds of one step per side, by default (the first compiles)


def check_counts(steps: int, warmup: int, consecutive: int = CONSECUTIVE) -> None:
    if steps < 1 or warmup < 1 or consecutive < 1:
        raise TilecError(f"tilec bench model needs --steps >= 1, --warmup >= 1 (the first warm-up round "
                         f"compiles) and --consecutive >= 1, got --steps {steps} --warmup {warmup} "
                         f"--consecutive {consecutive}")


def run_model(model: str | models.Workload, steps: int, warmup: int, sides: dict[str, str | None] | None = None,
              clock: Callable[[], float] = time.perf_counter,
              load: Callable[[], float | None] = roofline.load_average,
              consecutive: int = CONSECUTIVE, records: Path | None = None) -> ModelResult:
    """Warm up and time one model's training step on every side (see the module docstring): `model`
    names one of tilec.bench.models' or is a workload of its own. `load` reads the load average
    before and after (ModelResult.warnings). With `records`, the tilec side runs with those tuning
    records and the side "untuned" with none."""
    import torch

    check_counts(steps, warmup, consecutive)
    sides = dict(SIDES if sides is None else sides)
    scopes: dict[str, using] = {}  # side -> the tuning records its steps run with
    if records is not None:
        if sides.get("tilec") != models.BACKEND:
            raise TilecError(f"tuning records apply to the backend {models.BACKEND!r} only; the tilec side's is "
                             f"{sides.get('tilec')!r}")
        sides[UNTUNED] = models.BACKEND
        scopes = {"tilec": using(records), UNTUNED: using(None)}
    name = model if isinstance(model, str) else model.name
    result = ModelResult(name, cores=roofline.cores(), consecutive=consecutive, tilec_sides=1 + (records is not None))
    before = load()
    torch._dynamo.reset()  # the previous model's compiled code and guards go
    base = models.build(model) if isinstance(model, str) else model
    steppers = {}
    for side, backend in sides.items():
        try:
            steppers[side] = models.stepper(models.copy_of(base), backend)
        except Exception as err:  # noqa: BLE001 - a side that cannot start is reported, not fatal
            result.errors[side] = _first_line(err)
    tilec_backend = sides.get("tilec") == "tilec" and "tilec" in steppers  # coverage counts exist

    def round_(first: int, count: int, timed: bool, swapped: bool = False) -> None:
        """Steps first .. first + count - 1 of every side, one side after the other; when `timed`,
        each side's steps after the first are timed (all of them when count is 1). `swapped`: the
        tilec and untuned sides in each other's places."""
        order = list(steppers.items())
        if swapped and "tilec" in steppers and UNTUNED in steppers:
            i, j = list(steppers).index("tilec"), list(steppers).index(UNTUNED)
            order[i], order[j] = order[j], order[i]
        for side, step in order:
            timed_ms = []
            for k in range(first, first + count):
                if side in result.errors:
                    break
                start = clock()
                try:
                    if side in scopes:
                        with scopes[side]:
                            step(k)
                    else:
                        step(k)
                except Exception as err:  # noqa: BLE001 - e.g. Inductor's compile failing on this machine
                    result.errors[side] = _first_line(err)
                    break
                if timed and (k > first or count == 1):
                    timed_ms.append((clock() - start) * 1e3)
            if timed_ms:
                result.times_ms.setdefault(side, []).extend(timed_ms)
                result.round_ms.setdefault(side, []).append(statistics.median(timed_ms))

    for k in range(warmup):
        round_(k, 1, timed=False)
    if tilec_backend and "tilec" not in result.errors:
        models.reset_coverage()
    per_round = max(1, consecutive - 1)  # timed steps a round adds per side
    k = warmup
    for r in range(-(-steps // per_round)):
        count = min(consecutive, steps - r * per_round + (consecutive > 1))  # the last round stops at `steps`
        round_(k, count, timed=True, swapped=r % 2 == 1)
        k += count
        result.rounds += 1
        result.steps_run += count
    if tilec_backend and "tilec" not in result.errors:
        result.coverage = models.coverage()
    result.loads = (before, load())
    return result


def _ms(value: float | None) -> str:
    return f"{value:12.2f}" if value is not None else f"{'-':>12}"


def _times(value: float | None) -> str:
    return f"{value:6.2f}x" if value is not None else f"{'-':>7}"


def table_header(records: bool = False) -> str:
    tuned = f"{'untuned ms':>12}  {'tuned gain (quartiles)':>24}" if records else ""
    return (f"{'model':<10}{'eager ms':>12}{'inductor ms':>12}{'tilec ms':>12}  {'vs eager':>8} {'vs ind.':>8}  "
            f"{'coverage':>8} {'kernels/step':>12}{tuned}")


def table_row(r: ModelResult, records: bool = False) -> str:
    fraction = f"{r.coverage_fraction:8.1%}" if r.coverage_fraction is not None else f"{'-':>8}"
    kernels = f"{r.kernels_per_step:12.1f}" if r.kernels_per_step is not None else f"{'-':>12}"
    tuned = ""
    if records:
        gain = r.tuned_gain()
        quartiles = f"({gain[0]:.3f}-{gain[2]:.3f})" if gain is not None else ""
        tuned = f"{_ms(r.median_ms(UNTUNED))}  {_times(r.speedup('tilec', UNTUNED)):>8} {quartiles:>15}"
    return (f"{r.model:<10}{_ms(r.median_ms('eager'))}{_ms(r.median_ms('inductor'))}{_ms(r.median_ms('tilec'))}  "
            f"{_times(r.speedup('tilec', 'eager')):>8} {_times(r.speedup('tilec', 'inductor')):>8}  {fraction} {kernels}"
            f"{tuned}")


def explanation(steps: int, warmup: int, backend: str | None = models.BACKEND, consecutive: int = CONSECUTIVE,
                records: Path | None = None) -> str:
    stand_in = "" if backend == "tilec" else f"; the tilec column is torch.compile(backend={backend!r})"
    if records is not None:
        stand_in += (f"; tilec runs with the tuning records {records}, 'untuned' with none, and 'tuned gain' = "
                     f"untuned ms / tilec ms, with the quartiles of the rounds' ratios")
    rounds = ("one step of each side per round" if consecutive == 1 else
              f"{consecutive} steps of each side back to back per round, the first, after another side's, untimed")
    return (f"one training step (forward, backward, SGD update), median ms of {steps} timed steps per side, "
            f"interleaved ({rounds}), after {warmup} warm-up round(s); 'vs eager' and 'vs ind.' = the other side's "
            f"ms / tilec's ms (above 1: "
            f"tilec is faster); coverage = ATen calls run by tilec kernels / all ATen calls of the compiled graphs{stand_in}")
