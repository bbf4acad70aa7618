"""`tilec tune OP|FILE [--shape ...] [--backward]`: search an op's template knobs, record every measurement.

The tasks are the op's forward statement (--stmt, default the first tunable one) and with
--backward every tunable statement of its gradient program; the records of the same kernel at
other shapes seed the cost model (transfer). Requires: a named op of tilec bench or a Tile file
with input shapes; `--target cuda` needs a GPU. Guarantees: every candidate's measurement is in
the record database, and one JSON summary line per tuned kernel is printed; exit status 2 for
`--target cuda` without a GPU, a TilecError when nothing is tunable or every candidate failed.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tilec.cli.arguments import parse_shape, read_source
from tilec.cli.tune_model import make_measurer, model_tasks, run_budget
from tilec.errors import TilecError
from tilec.schedule import params as lowering_params

if TYPE_CHECKING:
    from tilec.autotune.task import Task
    from tilec.autotune.tuner import Progress
    from tilec.records import RecordDB


PLAIN_EVERY = 8  # where stderr is not a terminal (a log file), a progress line every this many measurements


def _tune_tasks(args: argparse.Namespace, quiet: bool = False) -> "tuple[list[Task], str, str]":
    """(tasks, op name, shape text) for `tilec tune OP|FILE [--shape ...] [--backward]`: the
    forward statement chosen by --stmt (default: the first tunable one), then with --backward
    every tunable statement of the gradient program (tilec.grad of the op's inputs)."""
    import numpy as np

    from dataclasses import replace

    from tilec.autotune.task import backward_tasks, tasks_for
    from tilec.bench import ops
    from tilec.frontend import parse
    from tilec.pipeline import resolve_target

    sizes: dict[str, int] = {}
    target = resolve_target(args.target)
    if args.op == "model":
        return model_tasks(args)
    if args.op in ops.OP_NAMES:
        op = ops.get_op(args.op)
        op_sizes = ops.parse_shape(op, args.shape[0]) if args.shape else dict(op.cases[0])
        source = op.source(op_sizes)
        arrays = op.make_inputs(op_sizes, "float32", np.random.default_rng(0))
        shapes = {n: a.shape for n, a in zip(parse(source).input_names, arrays)}
        op_name, shape_text = args.op, ops.format_shape(op_sizes)
        wrt = ops.backward_op(op).wrt if args.op in ops.BACKWARD_OPS else tuple(parse(source).input_names)
    else:
        if re.fullmatch(r"[A-Za-z_][\w-]*", args.op) and not Path(args.op).is_file():
            close = difflib.get_close_matches(args.op, [*ops.OP_NAMES, "model"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TilecError(f"unknown op {args.op!r}{hint}: tilec tune takes one of {', '.join(ops.OP_NAMES)}, "
                             f"`model`, or a Tile program or the file holding it")
        source = read_source(args.op)
        try:
            shapes = dict(parse_shape(s) for s in args.shape)
        except argparse.ArgumentTypeError as err:  # (--shape is free text: an op's sizes or NAME=DIMS)
            raise TilecError(f"--shape for a Tile program: {err}") from None
        op_name, shape_text = Path(args.op).stem if "\n" not in args.op else "tile", \
            ",".join(f"{n}={'x'.join(map(str, d))}" for n, d in shapes.items())
        wrt = tuple(parse(source).input_names)
    label = f"{op_name} {shape_text}"
    tasks: list[Task]
    if target.is_gpu:
        if args.backward:
            raise TilecError("--backward tunes CPU kernels only (--target llvm); the gradient programs have no "
                             "GPU tuning tasks yet")
        if args.dtype == "bfloat16":
            raise TilecError("--dtype bfloat16 tunes CPU kernels only (--target llvm); the CUDA backend has no bfloat16")
        dtypes = {n: args.dtype for n in shapes}
        tasks = tasks_for(source, shapes, dtypes, target, label=label)
    else:
        tasks = tasks_for(source, shapes, {n: args.dtype for n in shapes}, target=target, sizes=sizes, label=label)
    if not tasks:
        raise TilecError(f"nothing to tune in {op_name}: no statement matches a tunable template "
                         f"(implicit_gemm: a sum of products; attention: the softmax(QK^T)V chain), or its "
                         f"products run an algorithm without knobs (winograd: 3x3 stride-1 convolutions of "
                         f"{lowering_params.current().winograd_min_channels}+ channels), which untuned calls use")
    if args.stmt is not None and not 0 <= args.stmt < len(tasks):
        raise TilecError(f"--stmt {args.stmt}: {op_name} has {len(tasks)} tunable statement(s), 0 to {len(tasks) - 1}")
    chosen = [tasks[args.stmt if args.stmt is not None else 0]]
    if args.backward:
        grads = backward_tasks(source, shapes, wrt, target=target, sizes=sizes,
                               label=f"{op_name} {shape_text} backward")
        for g in grads:
            chosen.append(replace(g, label=f"{g.label} (gradient statement {g.stmt})"))
        if not grads and not quiet:
            print(f"tilec tune: the gradient of {op_name} has no statement to tune on its own (no GEMM-like "
                  f"product outside a fused kernel; attention's gradient is one fused kernel, whose block "
                  f"sizes the tuner does not search yet)", file=sys.stderr)
    return chosen, op_name, shape_text


TRANSFER_SHAPES = 3  # earlier tunings of other shapes whose records seed the cost model


def _transfer_tasks(args: argparse.Namespace, db: "RecordDB", index: int, kernel_op: str, shape_text: str,
                    target_key: str) -> "list[Task]":
    """The same kernel of this op at other shapes tuned before into `db` (same target; newest
    first, at most TRANSFER_SHAPES): their records become the cost model's prior, so a second
    shape starts from what the first taught it. `index` is the kernel's place in _tune_tasks'
    list (0: the forward statement, then the gradient's). Only the named ops (gemm, conv2d,
    attention) record shapes that can be rebuilt."""
    from tilec.bench import ops

    if args.op not in ops.OP_NAMES:
        return []
    shapes: list[str] = []
    for r in reversed(db.records()):
        if r.op == kernel_op and r.shape not in (shape_text, *shapes) and r.target == target_key and r.shape:
            shapes.append(r.shape)
    out = []
    for other in shapes[:TRANSFER_SHAPES]:
        try:
            tasks, _, _ = _tune_tasks(argparse.Namespace(**{**vars(args), "shape": [other]}), quiet=True)
        except TilecError:  # a shape this tilec no longer accepts: no prior from it
            continue
        if index < len(tasks):
            out.append(tasks[index])
    return out


def cmd_tune(args: argparse.Namespace) -> int:
    import json

    from tilec.bench import gpu

    try:
        for summary in run_tune(args, progress_line(sys.stderr)):
            print(json.dumps(summary), flush=True)
    except gpu.NoGpu as err:
        print(f"tilec: tune --target cuda needs a GPU: {err}", file=sys.stderr)
        return 2
    return 0


def progress_line(stream: Any) -> "Callable[[str, Progress | None], None]":
    """A progress reporter for run_tune: on a terminal one line rewritten in place; elsewhere (a log
    file) a plain line every PLAIN_EVERY measurements and at the end. Called with None when a task is done."""
    tty = stream.isatty()
    shown: set[tuple[str, int]] = set()

    def show(label: str, p: "Progress | None") -> None:
        if p is None:
            if tty:
                stream.write("\n")
            return
        best = "-" if p.best_s is None else f"{p.best_s * 1e3:.3f} ms"
        eta = "-" if p.eta_s is None else f"{p.eta_s:.0f} s"
        line = f"tune {label}: {p.measured}/{p.total} measured, best {best}, ETA {eta}"
        if tty:
            stream.write(f"\r\033[K{line}")
        elif (label, p.measured) not in shown and (p.measured % PLAIN_EVERY == 0 or p.measured == p.total):
            shown.add((label, p.measured))
            stream.write(line + "\n")
        stream.flush()
    return show


def run_tune(args: argparse.Namespace, show: "Callable[[str, Progress | None], None] | None" = None) -> list[dict]:
    """Tune what `args` (the `tilec tune` arguments) name: one summary per tuned kernel (the forward
    one, then the gradient's), each also written to the records. Raises gpu.NoGpu for --target cuda
    without a GPU, TilecError for anything else the user must fix."""
    import time

    from tilec.autotune.measure import MeasureOptions
    from tilec.records import RecordDB
    from tilec.autotune.tuner import default_time, describe, tune

    if args.target == "cuda":
        from tilec.bench import gpu

        gpu.require_gpu()  # torch (CUDA events, device tensors) and a GPU that tilec's runtime reaches
    from tilec.pipeline import resolve_target
    from tilec.target import parse_target

    resolve_target(args.target)  # an unknown target, CPU or option fails here, naming what is accepted
    if args.op == "model" and parse_target(args.target)[1]:
        raise TilecError(f"tune model: --target {args.target!r}: the model's kernels are compiled by the torch.compile "
                         f"backend for target 'llvm'; set TILEC_TARGET={args.target!r} to tune them for that CPU")
    if args.budget is not None:
        return run_budget(args, show)
    tasks, op_name, shape_text = _tune_tasks(args)
    options = MeasureOptions(timeout_s=args.timeout, build_workers=args.jobs)
    summaries = []
    with RecordDB(args.records) as db, make_measurer(args, options) as measurer:
        for index, task in enumerate(tasks):
            started = time.monotonic()
            kernel_op = op_name if task is tasks[0] or args.op == "model" else f"{op_name}-backward"  # as `tilec bench --backward` names it
            transfer = _transfer_tasks(args, db, index, kernel_op, shape_text, task.target.key)
            report = None if show is None else (lambda p, label=task.label: show(label, p))
            best = tune(task, args.trials, measurer, db, seed=args.seed, progress=report, op=kernel_op, shape=shape_text,
                        transfer=transfer, confirm=args.confirm)
            if show is not None:
                show(task.label, None)
            if best is None:
                raise TilecError(f"every candidate of {task.label} failed; see `tilec records show {task.key}`")
            base = default_time(task, db) or measurer.default_time
            summaries.append({"task": task.key, "label": task.label, **describe(best, base),
                              "wall_s": round(time.monotonic() - started, 1)})
    return summaries


def tune_api(op: str, shape: "str | Sequence[str] | None" = None, **options: Any) -> list[dict]:
    """`tilec.tune`: `tilec tune OP|FILE` from Python. `op` and `shape` as on the command line (an
    op's sizes "M=1024,N=1024,K=1024", or for a Tile program each input's "NAME=DIMS"); the other
    options are the command's, by name (trials=64, records=None, seed=0, stmt=None, timeout=20.0,
    target="llvm", dtype="float32", backward=False, confirm=4, jobs=None, model="mlp"; progress=True prints
    the progress line on stderr). Returns one summary per tuned kernel, as the command prints."""
    progress = bool(options.pop("progress", False))
    shapes = [] if shape is None else [shape] if isinstance(shape, str) else list(shape)
    argv = ["tune", op, *(x for s in shapes for x in ("--shape", s))]
    parser = _tune_parser()
    tune_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["tune"]
    flags = {action.dest: action for action in tune_parser._actions}
    for name, value in options.items():
        action = flags.get(name)
        if action is None or name in ("op", "shape", "help"):
            raise TilecError(f"tilec.tune: unknown option {name!r}; it takes "
                             f"{', '.join(sorted(k for k in flags if k not in ('op', 'shape', 'help', 'run')))}")
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        raise TilecError(f"tilec.tune: invalid options {options!r} (see `tilec tune --help`)") from None
    return run_tune(args, progress_line(sys.stderr) if progress else None)


def _tune_parser() -> argparse.ArgumentParser:
    """A parser of the `tune` command alone (tilec.tune does not load the other commands)."""
    parser = argparse.ArgumentParser(prog="tilec.tune")
    add_tune_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def add_tune_parser(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser("tune", help="autotune an op's template knobs and record the best schedule",
                          description="Search the template knobs of an op (or of the first tunable statement of "
                                      "a .tile file, and with --backward of its gradient program), building candidates "
                                      "in parallel processes and measuring each in a separate process, and append "
                                      "every measurement to the tuning records.")
    tune.add_argument("op", metavar="OP|FILE", help="gemm, conv2d, attention, ... or a Tile file; or `model` "
                                                    "(with --model): every kernel torch.compile(backend=\"tilec\") "
                                                    "runs for that model's training step")
    tune.add_argument("model_file", nargs="?", default=None, metavar="MODEL.py",
                      help="with `tilec tune model`: a Python file defining `model`, `example_inputs` (a tuple, or a "
                           "dict of keyword arguments) and optionally `loss` (output -> scalar); instead of --model")
    tune.add_argument("--budget", default=None, metavar="TIME",
                      help="with `tilec tune model`: tune all of the step's kernels within this time (90s, 10m, 1h), "
                           "most where the expected gain is largest, instead of --trials for each")
    tune.add_argument("--verify-steps", type=int, default=40, metavar="N",
                      help="with --budget: then time N training steps with the new records and N without, "
                           "interleaved in this process, and put the tuned kernels back on their default schedules "
                           "unless the step got at least 1%% faster (the median of the rounds' gains; default 40; "
                           "0: do not check)")
    tune.add_argument("--effort", default="default", choices=("quick", "default", "full"),
                      help="with --budget: trials per round and candidates confirmed (quick 4/2, default 8/4, full 16/4)")
    tune.add_argument("--model", default="mlp", help="with `tilec tune model`: mlp, gpt2, bert or resnet18 "
                                                     "(tilec.bench.models; default mlp)")
    tune.add_argument("--shape", action="append", default=[], metavar="SHAPE",
                      help="an op's sizes as in `tilec bench` (M=1024,N=1024,K=1024; default: its first "
                           "acceptance case), or for a file each input's NAME=DIMS (repeat)")
    tune.add_argument("--trials", type=int, default=64, help="new candidates to measure (default 64); the task's earlier records guide the "
                      "search and are not measured again")
    tune.add_argument("--records", default=None, metavar="PATH", help="the record database (default: the cache's)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--stmt", type=int, default=None, help="which tunable statement (default: the first)")
    tune.add_argument("--timeout", type=float, default=20.0, help="seconds per candidate before it is killed")
    tune.add_argument("--target", default="llvm",
                      help="llvm (the host CPU, default; 'llvm -mcpu=haswell -mattr=-avx512f': an explicit CPU); cuda (a GPU: gpu_gemm, gpu_tensorcore, gpu_attention "
                           "knobs, timed with CUDA events); cuda-sim (the same GPU spaces run on the CPU emulator: "
                           "a test of the plumbing only, its times mean nothing)")
    tune.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                      help="input dtype (GPU targets: float32 or float16, for tensor cores / fp16 attention; the CPU: "
                           "bfloat16 too, whose GEMMs multiply bfloat16 pairs where the CPU has AVX512-BF16)")
    tune.add_argument("--backward", action="store_true",
                      help="tune the gradient kernels too (those tilec.grad and the torch ops compile), "
                           "each for --trials candidates")
    tune.add_argument("--confirm", type=int, default=4, metavar="K",
                      help="after the search, re-measure the K fastest candidates, the default schedule and the "
                           "previous best together, interleaved; a candidate replaces the default only if it was "
                           "faster in enough rounds for a one-sided sign test (level 0.05 shared among the candidates) "
                           "and by its median (default 4; 0: keep the fastest trial's minimum)")
    tune.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                      help="build and measure on a Ray cluster's nodes of this hardware (one measurer per node; "
                           "needs tilec[distributed] and nodes started with `ray start --resources` as `python -m "
                           "tilec.autotune.distributed` prints); the records stay here")
    tune.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="processes building candidates in parallel (default: one per core; 1: build in the "
                           "measurement process, one after another)")
    tune.set_defaults(run=cmd_tune)
