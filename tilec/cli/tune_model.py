"""`tilec tune model`: every kernel of a model's training step, tuned statement by statement
(`--trials` each) or within one budget (`--budget`, tilec.autotune.scheduler), the budget's
records checked on the step itself; and the measurer `tilec tune` uses: this machine's, or a Ray
cluster's (`--ray`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tilec.errors import TilecError

if TYPE_CHECKING:
    from tilec.autotune.measure import MeasureOptions
    from tilec.autotune.task import Task
    from tilec.autotune.tuner import Progress


def model_workload(args: argparse.Namespace) -> "list[tuple[Task, int]]":
    """(task, places in the step's graphs that run it) for every tunable statement of every program
    the backend runs in one training step of the model: `--model NAME` (tilec.bench.models), or
    the file given after `model`, which defines `model`, `example_inputs` (a tuple, or a dict of
    keyword arguments) and optionally `loss` (the model's output -> a scalar tensor)."""
    from tilec.torch_backend.tuning import model_from_file, step_workload

    if args.model_file is not None:
        model, step = model_from_file(args.model_file)
    else:
        from tilec.bench import models

        work = models.build(args.model)  # (in train mode)
        model, step = work.model, (lambda compiled: work.loss(compiled, work.batch(0)))
    return step_workload(model, step)


def model_tasks(args: argparse.Namespace) -> "tuple[list[Task], str, str]":
    """`tilec tune model`: the tasks of model_workload, or the one --stmt picks."""
    tasks = [task for task, _ in model_workload(args)]
    if args.stmt is not None:
        if not 0 <= args.stmt < len(tasks):
            raise TilecError(f"--stmt {args.stmt}: the model has {len(tasks)} tuning tasks, 0 to {len(tasks) - 1}")
        tasks = [tasks[args.stmt]]
    return tasks, model_name(args), ""


def model_name(args: argparse.Namespace) -> str:
    return f"model-{Path(args.model_file).stem if args.model_file else args.model}"


def make_measurer(args: argparse.Namespace, options: "MeasureOptions") -> Any:
    """The nodes of a Ray cluster with --ray, else this machine."""
    if args.ray is None:
        from tilec.autotune.measure import LocalMeasurer

        return LocalMeasurer(options)
    from tilec.autotune.distributed import RayMeasurer

    return RayMeasurer(args.ray, options)


def run_budget(args: argparse.Namespace, show: "Callable[[str, Progress | None], None] | None") -> list[dict]:
    """`tilec tune model --budget T`: the step's tasks tuned by tilec.autotune.scheduler; the final
    table and the tuned kernels' time per step before and after on stderr, a summary per task."""
    from tilec.autotune.measure import MeasureOptions
    from tilec.autotune.scheduler import EFFORTS, format_table, parse_budget, program_of, step_estimate, tune_tasks
    from tilec.records import RecordDB

    if args.op != "model":
        raise TilecError("--budget tunes a whole model: `tilec tune model [FILE.py] --budget 10m`; for one op use --trials")
    if args.effort not in EFFORTS:
        raise TilecError(f"--effort {args.effort!r}: expected one of {', '.join(EFFORTS)}")
    seconds = parse_budget(args.budget)
    workload = model_workload(args)
    options = MeasureOptions(timeout_s=args.timeout, build_workers=args.jobs)

    def report(row: Any, elapsed: float) -> None:
        if show is not None:
            sys.stderr.write(f"tune model: {elapsed:.0f}/{seconds:.0f} s, {row.task.label}: round {row.rounds}, "
                             f"{row.trials} trials, default {_ms(row.default_s)}, best {_ms(row.best_s)}\n")
            sys.stderr.flush()

    with RecordDB(args.records) as db, make_measurer(args, options) as measurer:
        rows = tune_tasks(workload, measurer, db, seconds, effort=args.effort, seed=args.seed, op=model_name(args),
                          progress=report)
    before, after = step_estimate(rows)
    sys.stderr.write(format_table(rows) + f"\ntuned kernels per step, as the tuner timed them alone: "
                     f"{before * 1e3:.3f} ms before, {after * 1e3:.3f} ms after ({before / after if after else 1.0:.2f}x)\n")
    if args.verify_steps > 0:
        verify_step(args, rows)
    programs: dict[tuple, int] = {}  # a program's statements are tasks of their own that share its time
    return [{"task": r.task.key, "label": r.task.label, "runs_per_step": r.weight,
             "program": programs.setdefault(program_of(r.task), len(programs)), "share": round(r.share, 4),
             "default_ms": None if r.default_s is None else r.default_s * 1e3,
             "time_ms": None if r.best_s is None else r.best_s * 1e3, "trials": r.trials} for r in rows]


VERIFY_GAIN = 0.01  # the tuned step must be this much faster than the untuned one to keep its records


def verify_step(args: argparse.Namespace, rows: Any) -> None:
    """Time the training step with the new records and without, interleaved in this process (tilec.
    bench.model_step: the tilec side with the records against the untuned one, in turns first); if
    the median of the rounds' gains is not VERIFY_GAIN, put the tuned tasks back on their default
    schedules (scheduler.revert_to_defaults)."""
    from tilec.autotune.scheduler import revert_to_defaults
    from tilec.bench import model_step, models
    from tilec.records import RecordDB, default_path

    records = Path(args.records) if args.records else default_path()
    try:
        work = models.from_file(args.model_file) if args.model_file else models.build(args.model)
        result = model_step.run_model(work, args.verify_steps, model_step.WARMUP, {"tilec": models.BACKEND},
                                      records=records)
    except (TilecError, models.ModelError) as err:
        sys.stderr.write(f"tune model: could not time the training step to check the records ({err}); they are kept\n")
        return
    if result.errors:
        side, error = next(iter(result.errors.items()))
        sys.stderr.write(f"tune model: could not time the training step to check the records ({side}: {error}); "
                         f"they are kept\n")
        return
    untuned, tuned = result.median_ms(model_step.UNTUNED), result.median_ms("tilec")
    quartiles = result.tuned_gain()
    gain = quartiles[1] if quartiles is not None else (untuned / tuned if untuned and tuned else 1.0)
    spread = f"; the rounds' quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}" if quartiles is not None else ""
    sys.stderr.write(f"training step, interleaved in this process ({args.verify_steps} timed steps each): "
                     f"{untuned:.3f} ms untuned, {tuned:.3f} ms tuned (gain {gain:.3f}x{spread})\n")
    if gain < 1 + VERIFY_GAIN:
        with RecordDB(records) as db:
            count = revert_to_defaults(rows, db)
        sys.stderr.write(f"tune model: the tuned step is not at least {100 * VERIFY_GAIN:.0f}% faster, so the {count} "
                         f"tuned kernel statement(s) that left their default schedule are back on it (their records "
                         f"stay, and a later tuning can win them back)\n")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"
