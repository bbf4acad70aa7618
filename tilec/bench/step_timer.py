"""Time a model's training step under the tilec backend, in a process of its own.

`tilec tune model --budget` runs this before deciding whether its records help: once with the
records (TILEC_RECORDS=PATH) and once without (TILEC_RECORDS=""), alternately, each in a fresh
process, because a process compiles each program once (with whatever records it finds then) and
TorchDynamo shares compiled graphs among copies of a model.

Run: `python -m tilec.bench.step_timer (--model NAME | --file MODEL.py) [--steps N]`; prints one
JSON object, {"median_ms": ..., "steps": N}. A step is forward, backward and an SGD update.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

WARMUP = 3  # steps before timing: the first compiles


def _stepper(model_name: str | None, file: str | None) -> Callable[[int], Any]:
    from tilec.bench import models

    if file is None:
        return models.stepper(models.build(model_name or "mlp"), models.BACKEND)
    from tilec.torch_backend.tuning import model_from_file

    model, loss_of = model_from_file(file)  # (the file's example inputs, every step)
    work = models.Workload(file, model, batch=lambda k: {}, loss=lambda compiled, batch: loss_of(compiled), lr=1e-3)
    return models.stepper(work, models.BACKEND)


def median_step_ms(model_name: str | None, file: str | None, steps: int) -> float:
    models_step = _stepper(model_name, file)
    for k in range(WARMUP):
        models_step(k)
    times = []
    for k in range(steps):
        start = time.perf_counter()
        models_step(WARMUP + k)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tilec.bench.step_timer")
    parser.add_argument("--model", default=None)
    parser.add_argument("--file", default=None)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    print(json.dumps({"median_ms": median_step_ms(args.model, args.file, args.steps), "steps": args.steps}))


if __name__ == "__main__":
    main()
