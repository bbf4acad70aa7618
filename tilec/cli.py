"""The `tilec` command line: `tilec explain SRC --shape A=64x32 [--stage tensor|loop|llvm|...]`
and `tilec bench [OP] [--shape M=1024,N=1024,K=1024] [--json]`, and `tilec records {list,show,export,import}`.

Errors print one clear message on stderr (no traceback) and exit with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tilec.pipeline import STAGES
from tilec.errors import TilecError

if TYPE_CHECKING:
    from tilec.autotune.task import Task
    from tilec.records import Record, RecordDB


def _parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=DIMS such as A=64x32, got {text!r}")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims not in ("", "scalar") else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"dimensions must be integers separated by 'x' (A=64x32), got {dims!r}") from None
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"dimensions must be non-negative, got {dims!r}")
    return name, shape


def _parse_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _read_source(text: str) -> str:
    """SRC is Tile text, or the path of a file holding it."""
    if "\n" not in text and len(text) < 4096:
        path = Path(text)
        try:
            if path.suffix in (".tile", ".txt") or path.is_file():
                return path.read_text()
        except OSError as err:
            raise TilecError(f"cannot read {text}: {err.strerror}") from None
    return text


def cmd_explain(args: argparse.Namespace) -> int:
    import tilec

    source = _read_source(args.source)
    sizes = {}
    for name, value in args.size:
        try:
            sizes[name] = int(value)
        except ValueError:
            raise TilecError(f"--size {name}={value}: the value must be an integer") from None
    fn = tilec.compile(source, target=args.target, **sizes)
    shapes = dict(args.shape)
    dtypes = dict(args.dtype)
    sys.stdout.write(fn.explain(shapes, dtypes, args.stage))
    return 0


# OpenBLAS's idle threads busy-wait for 2^28 cycles (~0.1 s here) after every call unless told
# otherwise, and on a small machine they steal the cores from whatever runs next: in an
# interleaved benchmark, from tilec. With this setting they sleep as soon as they are idle;
# numpy's own speed is unchanged (`python -m tilec.bench.baseline_env` measures it). It must be
# set before OpenBLAS loads, hence the re-exec. torch's OpenMP threads spin only briefly; the
# harness's cool-down lets them settle instead (OMP_WAIT_POLICY=PASSIVE would slow torch itself).
QUIET_BASELINE_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4"}


def _reexec_with_quiet_baselines(argv: Sequence[str]) -> None:
    """Run `tilec bench` again in a fresh interpreter whose environment has QUIET_BASELINE_ENV."""
    missing = {k: v for k, v in QUIET_BASELINE_ENV.items() if k not in os.environ}
    if not missing:
        return
    env = {**os.environ, **missing}
    os.execve(sys.executable, [sys.executable, "-m", "tilec.cli", *argv], env)


def cmd_bench(args: argparse.Namespace) -> int:
    from tilec.bench import harness, ops
    from tilec.config import options
    from tilec.pipeline import resolve_target

    if args.records is not None:  # compile with the best schedules these records hold
        if not Path(args.records).is_file():
            raise TilecError(f"--records {args.records}: no such file (tune first: tilec tune OP --records "
                             f"{args.records})")
        options.records_path, options.use_records = Path(args.records), True

    if args.target in ("cuda", "cuda-sim"):
        return _bench_gpu(args)
    cases: list[Any]
    if args.op == "train_step":
        from tilec.bench import train_step

        cases = list(train_step.cases(batch=4 if args.quick else None))
    else:
        cases = ops.select_cases(args.op, args.shape, causal=args.causal, quick=args.quick,
                                 dtype=args.dtype, target=args.target, backward=args.backward)
    settings = harness.Settings(args.warmup, args.repeats, args.warmup_time, args.budget, args.cooldown)
    resolve_target(args.target)  # an unknown target fails here, before any case runs
    table = None if args.json else harness.Table(cases)
    if table is not None:
        print(table.header(), flush=True)
    failed = 0
    for case in cases:
        result = harness.run_case(case, settings)
        if result.error is not None:
            print(f"tilec: error: {result.error}", file=sys.stderr, flush=True)
            failed += 1
        print(harness.to_json(result) if table is None else table.row(result), flush=True)
    return 1 if failed else 0


def _bench_gpu(args: argparse.Namespace) -> int:
    """`tilec bench --target cuda` (tilec.bench.gpu: CUDA events vs cuBLAS/cuDNN/SDPA), or the quick shapes
    on the GPU emulator (--target cuda-sim: a correctness smoke test, no timing). Exit code 2 without a GPU."""
    import json

    from tilec.bench import gpu

    if args.op not in ("all", "gemm", "conv2d", "attention"):
        raise TilecError(f"the GPU bench has the cases gemm, conv2d and attention, not {args.op}")
    if args.target == "cuda-sim":
        rows = [r for r in gpu.smoke_sim() if args.op in ("all", r["op"])]
        for row in rows:
            print(json.dumps(row) if args.json else f"{row['op']:<10} {row['shape']:<28} {row['dtype']:<8} cuda-sim  "
                  f"{'ok' if row['ok'] else 'WRONG'}", flush=True)
        return 0 if all(r["ok"] for r in rows) else 1
    try:
        gpu.require_gpu()
    except gpu.NoGpu as err:
        print(f"tilec: {err}", file=sys.stderr)
        return 2
    rows = [r for r in gpu.run(quick=args.quick, repeats=max(1, args.repeats)) if args.op in ("all", r["op"])]
    for row in rows:
        print(json.dumps(row) if args.json else
              f"{row['op']:<10} {row['shape']:<28} {row['dtype']:<8} tilec {row['tilec_ms']:9.3f} ms  "
              f"{row['baseline']} {row['baseline_ms']:9.3f} ms  ratio {row['ratio']:.2f}x  ({row['device']})",
              flush=True)
    return 0


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
    from tilec.bench.ops import OP_NAMES

    bench = sub.add_parser(
        "bench", help="time tilec kernels against numpy/PyTorch, interleaved in one process",
        description="Time tilec kernels and their baselines (numpy, PyTorch) side by side in this process, "
                    "interleaved: tilec, baseline, tilec, baseline, ... Reports the median of the timed "
                    "calls; ratio = baseline_ms / tilec_ms, so a ratio above 1 means tilec is faster. "
                    "The first warm-up call of each side is checked against the other.")
    bench.add_argument("op", nargs="?", default="all", metavar="OP",
                       help=f"one of {', '.join(OP_NAMES)}, train_step (one SGD step of the training "
                            f"examples' CNN and transformer, tilec's modules vs torch's), or all (the default: "
                            f"every op's acceptance cases, causal attention included)")
    bench.add_argument("--shape", action="append", default=[], metavar="NAME=N,...",
                       help="the op's sizes, e.g. M=1024,N=1024,K=1024 (gemm, gemm_bias_relu); "
                            "N=8,C=64,H=56,W=56,CO=64,KH=3,KW=3,stride=1,pad=1 (conv2d; stride 1 and pad 0 "
                            "by default); B=4,H=8,S=512,D=64 (attention). Repeat for more cases. "
                            "Without it the op's acceptance cases run")
    bench.add_argument("--causal", action="store_true", help="attention with a causal mask")
    bench.add_argument("--backward", action="store_true",
                       help="time the gradients (tilec.grad) against torch autograd's backward, forward excluded "
                            "(conv2d, attention)")
    bench.add_argument("--quick", action="store_true", help="one small case per op, for a fast check")
    bench.add_argument("--dtype", default="float32", help="float32 (default) or float64")
    bench.add_argument("--target", default="llvm", help="compilation target (default: llvm, the host CPU)")
    bench.add_argument("--warmup", type=int, default=1, metavar="N",
                       help="untimed pairs before timing, at least 1: the first compiles and checks (default 1)")
    bench.add_argument("--warmup-time", type=float, default=0.5, metavar="SECONDS",
                       help="and warm up for at least this long, the first pair included (default 0.5)")
    bench.add_argument("--repeats", type=int, default=3, metavar="N", help="timed pairs (default 3)")
    bench.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                       help="per case: after the first warm-up and timed pair, run more pairs only while "
                            "the case stays within this many seconds (default 30)")
    bench.add_argument("--records", default=None, metavar="PATH",
                       help="benchmark the best kernels these tuning records hold (default: tilec's records file)")
    bench.add_argument("--cooldown", type=float, default=0.02, metavar="SECONDS",
                       help="idle time after every call, both sides, so that one library's idle threads are "
                            "quiet before the other runs (default 0.02)")
    bench.add_argument("--json", action="store_true", help="print one JSON object per case instead of a table")
    bench.set_defaults(run=cmd_bench)


def cmd_records(args: argparse.Namespace) -> int:
    from tilec.records import RecordDB, default_path

    path = Path(args.records) if args.records else default_path()
    if args.action == "import":
        with RecordDB(path) as db:
            added = db.import_jsonl(sys.stdin if args.file == "-" else args.file)
        print(f"imported {added} new record(s) into {path}", file=sys.stderr)
        return 0
    if not path.exists():
        if args.action == "list":
            print(f"no tuning records: {path} does not exist")
            return 0
        raise TilecError(f"no tuning records at {path}; give the database with --records PATH")
    with RecordDB(path) as db:
        if args.action == "export":
            count = db.export_jsonl(sys.stdout if args.file == "-" else args.file)
            print(f"exported {count} record(s) from {path}", file=sys.stderr)
        elif args.action == "list":
            records = [r for r in db.records() if args.task is None or r.task.startswith(args.task)]
            print(_records_table(records) if records else f"no tuning records in {path}")
        else:
            _show_task(db, args.key, args.target)
    return 0


def _show_task(db: "RecordDB", key: str, target_name: str) -> None:
    import json

    from tilec.pipeline import compiler_fingerprint, resolve_target

    tasks = sorted({r.task for r in db.records() if r.task.startswith(key)})
    if len(tasks) != 1:
        raise TilecError(f"no records of task {key} in {db.path}; `tilec records list` shows the tasks" if not tasks
                         else f"task prefix {key} is ambiguous: {', '.join(tasks)}")
    records = db.records(tasks[0])
    print(_records_table(records))
    target, compiler = resolve_target(target_name), compiler_fingerprint()
    best = db.best(tasks[0], target.key, compiler)
    if best is None:
        foreign = sum(r.target != target.key for r in records)
        stale = sum(r.target == target.key and r.compiler != compiler for r in records)
        print(f"\nno usable record for {_short_target(target.key)} and compiler {compiler}: "
              f"{len(records) - foreign - stale} failed, {stale} stale (another compiler), "
              f"{foreign} foreign (another target)")
    else:
        print(f"\nbest for {_short_target(target.key)}, compiler {compiler}: {_format_time(best.time_s)} "
              f"(trial {best.trial})\n{json.dumps(best.schedule, indent=2, sort_keys=True)}")


def _records_table(records: "list[Record]") -> str:
    import time

    now = time.time()
    rows = [("TASK", "OP", "SHAPE", "TARGET", "TIME", "ERROR", "TRIAL", "AGE")]
    rows += [(r.task, r.op or "-", r.shape or "-", _short_target(r.target), _format_time(r.time_s), r.error,
              str(r.trial), _format_age(now - r.created)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _short_target(key: str) -> str:
    return ":".join(key.split(":")[:2])  # name and CPU, without the feature string


def _format_time(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _format_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def _add_records_parser(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--records", metavar="PATH",
                        help="the tuning-record database (default: $TILEC_RECORDS, else records.sqlite in tilec's "
                             "cache directory)")
    records = sub.add_parser("records", help="list, show, export and import tuning records",
                             description="The tuning records that `tilec tune` writes and `tilec.compile` applies.")
    actions = records.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="a table of the records")
    listing.add_argument("--task", metavar="KEY", help="only the records of this task (a key or its prefix)")
    show = actions.add_parser("show", parents=[common], help="every record of one task and its best schedule")
    show.add_argument("key", help="the task key (or a unique prefix), as `tilec records list` shows it")
    show.add_argument("--target", default="llvm", help="the target whose best record to show (default: llvm)")
    export = actions.add_parser("export", parents=[common], help="write every record as JSON lines")
    export.add_argument("file", help="the output file, or - for stdout")
    imports = actions.add_parser("import", parents=[common], help="add the records of a JSON-lines file")
    imports.add_argument("file", help="the input file, or - for stdin")
    records.set_defaults(run=cmd_records)


def _tune_tasks(args: argparse.Namespace, quiet: bool = False) -> "tuple[list[Task], str, str]":
    """(tasks, op name, shape text) for `tilec tune OP|FILE [--shape ...] [--backward]`: the
    forward statement chosen by --stmt (default: the first tunable one), then with --backward
    every tunable statement of the gradient program (tilec.grad of the op's inputs)."""
    import numpy as np

    from dataclasses import replace

    from tilec.autotune.task import backward_tasks, tasks_for
    from tilec.bench import ops
    from tilec.frontend import parse
    from tilec.target import host_target

    sizes: dict[str, int] = {}
    if args.op in ops.OP_NAMES:
        op = ops.get_op(args.op)
        op_sizes = ops.parse_shape(op, args.shape[0]) if args.shape else dict(op.cases[0])
        source = op.source(op_sizes)
        arrays = op.make_inputs(op_sizes, "float32", np.random.default_rng(0))
        shapes = {n: a.shape for n, a in zip(parse(source).input_names, arrays)}
        op_name, shape_text = args.op, ops.format_shape(op_sizes)
        wrt = ops.backward_op(op).wrt if args.op in ops.BACKWARD_OPS else tuple(parse(source).input_names)
    else:
        source = _read_source(args.op)
        shapes = dict(_parse_shape(s) for s in args.shape)
        op_name, shape_text = Path(args.op).stem if "\n" not in args.op else "tile", \
            ",".join(f"{n}={'x'.join(map(str, d))}" for n, d in shapes.items())
        wrt = tuple(parse(source).input_names)
    label = f"{op_name} {shape_text}"
    tasks: list[Task]
    if args.target in ("cuda", "cuda-sim"):
        from tilec.pipeline import resolve_target

        if args.backward:
            raise TilecError("--backward tunes CPU kernels only (--target llvm); the gradient programs have no "
                             "GPU tuning tasks yet")
        dtypes = {n: args.dtype for n in shapes}
        tasks = tasks_for(source, shapes, dtypes, resolve_target(args.target), label=label)
    else:
        tasks = tasks_for(source, shapes, target=host_target(), sizes=sizes, label=label)
    if not tasks:
        raise TilecError(f"nothing to tune in {op_name}: no statement matches a tunable template "
                         f"(implicit_gemm: a sum of products; attention: the softmax(QK^T)V chain)")
    if args.stmt is not None and not 0 <= args.stmt < len(tasks):
        raise TilecError(f"--stmt {args.stmt}: {op_name} has {len(tasks)} tunable statement(s), 0 to {len(tasks) - 1}")
    chosen = [tasks[args.stmt if args.stmt is not None else 0]]
    if args.backward:
        grads = backward_tasks(source, shapes, wrt, target=host_target(), sizes=sizes,
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
    import time

    from tilec.autotune.measure import LocalMeasurer, MeasureOptions
    from tilec.records import RecordDB
    from tilec.autotune.tuner import Progress, default_time, describe, tune

    if args.target == "cuda":
        from tilec.bench import gpu

        try:
            gpu.require_gpu()  # torch (CUDA events, device tensors) and a GPU that tilec's runtime reaches
        except gpu.NoGpu as err:
            print(f"tilec: tune --target cuda needs a GPU: {err}", file=sys.stderr)
            return 2
    if args.target not in ("llvm", "cpu", "host", "cuda", "cuda-sim"):
        raise TilecError(f"--target {args.target}: known targets are llvm, cuda and cuda-sim")
    tasks, op_name, shape_text = _tune_tasks(args)
    options = MeasureOptions(timeout_s=args.timeout, build_workers=args.jobs)
    with RecordDB(args.records) as db, LocalMeasurer(options) as measurer:
        for index, task in enumerate(tasks):  # one JSON line per tuned kernel: the forward one, then the gradient's
            started = time.monotonic()

            def show(p: Progress, label: str = task.label) -> None:
                best = "-" if p.best_s is None else f"{p.best_s * 1e3:.3f} ms"
                eta = "-" if p.eta_s is None else f"{p.eta_s:.0f} s"
                sys.stderr.write(f"\r\033[Ktune {label}: {p.measured}/{p.total} measured, best {best}, ETA {eta}")
                sys.stderr.flush()

            kernel_op = op_name if task is tasks[0] else f"{op_name}-backward"  # as `tilec bench --backward` names it
            transfer = _transfer_tasks(args, db, index, kernel_op, shape_text, task.target.key)
            best = tune(task, args.trials, measurer, db, seed=args.seed, progress=show, op=kernel_op, shape=shape_text,
                        transfer=transfer)
            sys.stderr.write("\n")
            if best is None:
                raise TilecError(f"every candidate of {task.label} failed; see `tilec records show {task.key}`")
            base = default_time(task, db) or measurer.default_time
            summary = {"task": task.key, "label": task.label, **describe(best, base),
                       "wall_s": round(time.monotonic() - started, 1)}
            print(json.dumps(summary), flush=True)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from tilec.records import RecordDB
    from tilec.autotune.tuner import best_so_far, plot

    if not Path(args.records).exists():
        raise TilecError(f"no tuning records at {args.records}")
    with RecordDB(args.records) as db:
        keys = sorted({r.task for r in db.records() if r.task.startswith(args.task)})
        if len(keys) != 1:
            raise TilecError(f"--task {args.task} matches {len(keys)} tasks in {args.records}; give a unique prefix "
                             f"of a key that `tilec records list` shows")
        records = db.records(keys[0])
    plot({keys[0][:12]: best_so_far(records)}, args.out, title=f"{records[0].op} {records[0].shape}".strip())
    print(args.out)
    return 0


def _add_tune_parsers(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser("tune", help="autotune an op's template knobs and record the best schedule",
                          description="Search the template knobs of an op (or of the first tunable statement of "
                                      "a .tile file, and with --backward of its gradient program), building candidates "
                                      "in parallel processes and measuring each in a separate process, and append "
                                      "every measurement to the tuning records.")
    tune.add_argument("op", metavar="OP|FILE", help="gemm, conv2d, attention, ... or a Tile file")
    tune.add_argument("--shape", action="append", default=[], metavar="SHAPE",
                      help="an op's sizes as in `tilec bench` (M=1024,N=1024,K=1024; default: its first "
                           "acceptance case), or for a file each input's NAME=DIMS (repeat)")
    tune.add_argument("--trials", type=int, default=64, help="candidates to measure (default 64)")
    tune.add_argument("--records", default=None, metavar="PATH", help="the record database (default: the cache's)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--stmt", type=int, default=None, help="which tunable statement (default: the first)")
    tune.add_argument("--timeout", type=float, default=20.0, help="seconds per candidate before it is killed")
    tune.add_argument("--target", default="llvm",
                      help="llvm (the host CPU, default); cuda (a GPU: gpu_gemm, gpu_tensorcore, gpu_attention "
                           "knobs, timed with CUDA events); cuda-sim (the same GPU spaces run on the CPU emulator: "
                           "a test of the plumbing only, its times mean nothing)")
    tune.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                      help="input dtype for GPU targets (float16: tensor cores / fp16 attention)")
    tune.add_argument("--backward", action="store_true",
                      help="tune the gradient kernels too (those tilec.grad and the torch ops compile), "
                           "each for --trials candidates")
    tune.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="processes building candidates in parallel (default: one per core; 1: build in the "
                           "measurement process, one after another)")
    tune.set_defaults(run=cmd_tune)
    plot = sub.add_parser("plot", help="plot best-so-far time versus trials of a tuning run (PNG)")
    plot.add_argument("records", metavar="RECORDS", help="the record database")
    plot.add_argument("--task", required=True, help="the task key or a unique prefix")
    plot.add_argument("--out", required=True, metavar="FILE.png")
    plot.set_defaults(run=cmd_plot)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilec", description="The tilec tensor-expression compiler.")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="print every compilation stage of a Tile program",
                             description="Print the tensor IR, loop IR and LLVM IR of a Tile program "
                                         "for the given input shapes (or one stage with --stage).")
    explain.add_argument("source", help="Tile source text, or a file containing it")
    explain.add_argument("--shape", action="append", type=_parse_shape, default=[], metavar="NAME=DIMS",
                         help="an input's shape, e.g. A=64x32 (repeat for each input; A=scalar for A[])")
    explain.add_argument("--dtype", action="append", type=_parse_pair, default=[], metavar="NAME=DTYPE",
                         help="an input's dtype (default float32)")
    explain.add_argument("--size", action="append", type=_parse_pair, default=[], metavar="SYMBOL=N",
                         help="bind a size symbol that the shapes do not determine")
    explain.add_argument("--stage", choices=STAGES, help="print only this stage, with no headers")
    explain.add_argument("--target", default="llvm", help="compilation target (default: llvm, the host CPU)")
    explain.set_defaults(run=cmd_explain)
    _add_bench_parser(sub)
    _add_records_parser(sub)
    _add_tune_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bench" and not getattr(args, "no_reexec", False) and argv is None:
        _reexec_with_quiet_baselines(sys.argv[1:])
    try:
        return int(args.run(args))
    except TilecError as err:
        print(f"tilec: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
