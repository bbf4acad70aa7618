"""Tuning a whole model: every kernel its training step runs under the tilec backend, one budget.

`step_workload(model, step)` compiles the model with torch.compile(backend="tilec"), runs one
forward and backward pass (`example_step(example_inputs)`: on the example inputs), and returns the tuner's tasks of every
program the backend ran, each with the number of places in the graphs that run it. `tune_model`
hands them to tilec.autotune.scheduler.tune_tasks, which spends the budget where the expected
gain is largest; the records it writes apply to every later compilation of those programs (in
this process after torch._dynamo.reset(), or in the next one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from tilec.errors import TilecError
from tilec.torch_backend import tasks


def _loss_of(output: Any) -> torch.Tensor:
    """A scalar to differentiate: a `loss` field (transformers' outputs), else the sum of the first
    floating-point tensor the output holds."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, torch.Tensor) and output.is_floating_point():
        return output.float().sum()
    items = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for item in items:
        if isinstance(item, torch.Tensor) and item.is_floating_point() and item.requires_grad:
            return item.float().sum()
    raise TilecError(f"cannot find a loss in the model's output ({type(output).__name__}): pass loss=FUNCTION "
                     f"(output -> scalar tensor)")


def example_step(example_inputs: Any, loss: Callable[[Any], torch.Tensor] | None = None
                 ) -> Callable[[Any], torch.Tensor]:
    """A training step's loss computation: the model called on `example_inputs` (a tuple of
    positional arguments, or a dict of keyword arguments), then `loss` (default: `_loss_of`)."""
    def step(model: Any) -> torch.Tensor:
        output = model(**example_inputs) if isinstance(example_inputs, dict) else model(*example_inputs)
        return (loss or _loss_of)(output)
    return step


def step_workload(model: torch.nn.Module, step: Callable[[Any], torch.Tensor]) -> list[tuple[Any, int]]:
    """(Task, places in the graphs that run it) for every tunable statement of every program that
    `step(compiled model)` (the loss of a batch, see example_step) and its backward pass run under
    the tilec backend."""
    import torch._dynamo

    from tilec.torch_backend import tuning_workload

    torch._dynamo.reset()  # compile afresh, so that every program is seen (and counted) again
    tasks.PROGRAMS.clear()
    step(torch.compile(model, backend="tilec")).backward()
    model.zero_grad(set_to_none=True)
    workload = tuning_workload()
    if not workload:
        raise TilecError(f"nothing to tune in {type(model).__name__}: the kernels of its training step have no "
                         f"tunable statement")
    return workload


def model_from_file(path: str) -> tuple[torch.nn.Module, Callable[[Any], torch.Tensor]]:
    """The model a Python file defines (`model`, `example_inputs`: a tuple, or a dict of keyword
    arguments; optionally `loss`: output -> scalar) and its example step (`example_step`)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("tilec_tuned_model", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise TilecError(f"tune model {path}: no such Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: say what failed in it
        raise TilecError(f"tune model {path}: running the file failed: {type(err).__name__}: {err}") from None
    missing = [name for name in ("model", "example_inputs") if not hasattr(module, name)]
    if missing:
        raise TilecError(f"tune model {path}: the file must define {' and '.join(missing)} (the module to tune and "
                         f"its example inputs: a tuple, or a dict of keyword arguments)")
    return module.model, example_step(module.example_inputs, getattr(module, "loss", None))


def tune_model(model: torch.nn.Module, example_inputs: Any, budget: str | float = "10m", *, effort: str = "default",
               loss: Callable[[Any], torch.Tensor] | None = None, records: str | None = None, seed: int = 0,
               progress: Callable[[Any, float], None] | None = None) -> Sequence[Any]:
    """Tune the kernels of `model`'s training step within `budget` (seconds, or "90s", "10m", "1h"):
    the scheduler's rows (tilec.autotune.scheduler.TaskRow: task, runs per step, share of the step,
    default and tuned seconds, trials), the records written to `records` (default: tilec's)."""
    from tilec.autotune.measure import LocalMeasurer
    from tilec.autotune.scheduler import parse_budget, tune_tasks
    from tilec.records import RecordDB

    seconds = parse_budget(budget) if isinstance(budget, str) else float(budget)
    workload = step_workload(model, example_step(example_inputs, loss))
    with RecordDB(records) as db, LocalMeasurer() as measurer:
        return tune_tasks(workload, measurer, db, seconds, effort=effort, seed=seed, op=f"model-{type(model).__name__}",
                          progress=progress)


__all__ = ["example_step", "model_from_file", "step_workload", "tune_model"]
