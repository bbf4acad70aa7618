"""`tilec bench model`: one training step of whole models under eager torch, Inductor and tilec.

The models are tilec.bench.models' (mlp, gpt2, bert, resnet18). Per model, three copies from the
same weights, one per side: eager (no compilation), torch.compile's default backend (Inductor) and
`torch.compile(model, backend="tilec")`. A step is forward, backward and the SGD update. The sides
run interleaved in this process, one step each per round, so that they share the machine's state
(clock, caches, other load): `warmup` rounds first (the first compiles), then `steps` timed rounds;
the report gives each side's median. Around the timed rounds, tilec.torch_backend's coverage
counts say which share of the ATen calls tilec's kernels ran and how many kernels a step launched.

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

#: the sides in the order each round runs them, and the torch.compile backend of each (None: eager)
SIDES: dict[str, str | None] = {"eager": None, "inductor": "inductor", "tilec": models.BACKEND}


@dataclass
class ModelResult:
    model: str
    times_ms: dict[str, list[float]] = field(default_factory=dict)  # side -> its timed steps
    errors: dict[str, str] = field(default_factory=dict)  # side -> why it stopped
    coverage: dict[str, Any] | None = None  # tilec.torch_backend.coverage() over the timed rounds
    rounds: int = 0  # timed rounds run
    loads: tuple[float | None, float | None] = (None, None)  # the 1-minute load average before and after
    cores: int = 1

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

    def to_dict(self) -> dict[str, Any]:
        """The JSON line of `tilec bench model --json`."""
        return {"model": self.model, **{f"{side}_ms": self.median_ms(side) for side in SIDES},
                "tilec_vs_eager": self.speedup("tilec", "eager"),
                "tilec_vs_inductor": self.speedup("tilec", "inductor"), "rounds": self.rounds,
                "coverage": self.coverage_fraction, "kernels_per_step": self.kernels_per_step, "errors": self.errors,
                "load_average": [None if x is None else round(x, 2) for x in self.loads], "warnings": self.warnings}

    @property
    def coverage_fraction(self) -> float | None:
        return models.coverage_fraction(self.coverage) if self.coverage is not None else None

    @property
    def kernels_per_step(self) -> float | None:
        return self.coverage["kernels"] / self.rounds if self.coverage is not None and self.rounds else None


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


def check_counts(steps: int, warmup: int) -> None:
    if steps < 1 or warmup < 1:
        raise TilecError(f"tilec bench model needs --steps >= 1 and --warmup >= 1 (the first warm-up round "
                         f"compiles), got --steps {steps} --warmup {warmup}")


def run_model(name: str, steps: int, warmup: int, sides: dict[str, str | None] | None = None,
              clock: Callable[[], float] = time.perf_counter,
              load: Callable[[], float | None] = roofline.load_average) -> ModelResult:
    """Warm up and time one model's training step on every side (see the module docstring); `load`
    reads the load average before and after (ModelResult.warnings)."""
    import torch

    check_counts(steps, warmup)
    sides = SIDES if sides is None else sides
    result = ModelResult(name, cores=roofline.cores())
    before = load()
    torch._dynamo.reset()  # the previous model's compiled code and guards go
    base = models.build(name)
    steppers = {}
    for side, backend in sides.items():
        try:
            steppers[side] = models.stepper(models.copy_of(base), backend)
        except Exception as err:  # noqa: BLE001 - a side that cannot start is reported, not fatal
            result.errors[side] = _first_line(err)
    tilec_backend = sides.get("tilec") == "tilec" and "tilec" in steppers  # coverage counts exist

    def round_(k: int, timed: bool) -> None:
        for side, step in steppers.items():
            if side in result.errors:
                continue
            start = clock()
            try:
                step(k)
            except Exception as err:  # noqa: BLE001 - e.g. Inductor's compile failing on this machine
                result.errors[side] = _first_line(err)
                continue
            if timed:
                result.times_ms.setdefault(side, []).append((clock() - start) * 1e3)

    for k in range(warmup):
        round_(k, timed=False)
    if tilec_backend and "tilec" not in result.errors:
        models.reset_coverage()
    for k in range(warmup, warmup + steps):
        round_(k, timed=True)
        result.rounds += 1
    if tilec_backend and "tilec" not in result.errors:
        result.coverage = models.coverage()
    result.loads = (before, load())
    return result


def _ms(value: float | None) -> str:
    return f"{value:12.2f}" if value is not None else f"{'-':>12}"


def _times(value: float | None) -> str:
    return f"{value:6.2f}x" if value is not None else f"{'-':>7}"


def table_header() -> str:
    return (f"{'model':<10}{'eager ms':>12}{'inductor ms':>12}{'tilec ms':>12}  {'vs eager':>8} {'vs ind.':>8}  "
            f"{'coverage':>8} {'kernels/step':>12}")


def table_row(r: ModelResult) -> str:
    fraction = f"{r.coverage_fraction:8.1%}" if r.coverage_fraction is not None else f"{'-':>8}"
    kernels = f"{r.kernels_per_step:12.1f}" if r.kernels_per_step is not None else f"{'-':>12}"
    return (f"{r.model:<10}{_ms(r.median_ms('eager'))}{_ms(r.median_ms('inductor'))}{_ms(r.median_ms('tilec'))}  "
            f"{_times(r.speedup('tilec', 'eager')):>8} {_times(r.speedup('tilec', 'inductor')):>8}  {fraction} {kernels}")


def explanation(steps: int, warmup: int, backend: str | None = models.BACKEND) -> str:
    stand_in = "" if backend == "tilec" else f"; the tilec column is torch.compile(backend={backend!r})"
    return (f"one training step (forward, backward, SGD update), median ms of {steps} interleaved rounds after "
            f"{warmup} warm-up round(s); 'vs eager' and 'vs ind.' = the other side's ms / tilec's ms (above 1: "
            f"tilec is faster); coverage = ATen calls run by tilec kernels / all ATen calls of the compiled graphs{stand_in}")
