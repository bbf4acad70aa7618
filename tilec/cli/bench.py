"""`tilec bench [OP] [--shape M=1024,N=1024,K=1024] [--json]`: time tilec kernels against their baselines;
`tilec bench model [--models mlp,gpt2,bert,resnet18] [--steps N] [--consecutive N]`: whole models' training
steps, eager vs Inductor vs backend "tilec" (tilec.bench.model_step).

The CPU cases run through tilec.bench.harness (tilec and numpy/PyTorch interleaved in this
process); `--target cuda` runs tilec.bench.gpu, `--target cuda-sim` its quick shapes on the GPU
emulator. From the command line, `main` first re-executes the process with QUIET_BASELINE_ENV
unless it is set (`reexec_with_quiet_baselines`).

The CPU table opens with the roofline's peaks (tilec.runtime.peaks, measured on the first run on
a machine); rows carry each side's %peak and spread (tilec.bench.roofline). Warnings go to
stderr: the load average at the start and end of the run, a case whose samples scatter.

Requires: a known op and target (an unknown one fails before any case runs). Guarantees: one
table row or JSON line per case; exit status 1 when a case failed (its error on stderr) or a
cuda-sim result was wrong, 2 for `--target cuda` without a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from tilec.bench import roofline
from tilec.bench.harness import QUIET_BASELINE_ENV
from tilec.errors import TilecError




def reexec_with_quiet_baselines(argv: Sequence[str]) -> None:
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
    from tilec.target import parse_target

    if args.records is not None and not Path(args.records).is_file():
        raise TilecError(f"--records {args.records}: no such file (tune first: tilec tune OP --records "
                         f"{args.records})")
    if args.op == "model":  # with records, the tilec side against itself untuned
        return _bench_model(args)
    if args.records is not None:  # compile with the best schedules these records hold
        options.records_path, options.use_records = Path(args.records), True
    if args.models is not None or args.steps is not None or args.threads is not None or args.backend != "tilec":
        raise TilecError("--models, --steps, --threads and --backend belong to `tilec bench model` "
                         "(whole models' training steps)")
    name, target_options = parse_target(args.target)
    if name in ("cuda", "cuda-sim"):
        if target_options or args.consecutive is not None:
            raise TilecError(f"--target {args.target!r}: the GPU benchmarks take no CPU options (-mcpu, -mattr) "
                             f"and no --consecutive")
        return _bench_gpu(args)
    cases: list[Any]
    if args.op == "train_step":
        from tilec.bench import train_step

        cases = list(train_step.cases(batch=4 if args.quick else None, dtype=args.dtype))
    else:
        cases = ops.select_cases(args.op, args.shape, causal=args.causal, quick=args.quick,
                                 dtype=args.dtype, target=args.target, backward=args.backward)
    settings = harness.Settings(1 if args.warmup is None else args.warmup, args.repeats, args.warmup_time, args.budget,
                                args.cooldown, harness.CONSECUTIVE if args.consecutive is None else args.consecutive)
    resolve_target(args.target)  # an unknown target fails here, before any case runs
    peaks = _machine_peaks()
    table = None if args.json else harness.Table(cases)
    if table is not None:
        if peaks is not None:
            print(roofline.describe(peaks, args.dtype), flush=True)
        print(table.header(), flush=True)
    _warn_if_busy("at the start of the run")
    failed = 0
    for case in cases:
        result = harness.run_case(case, settings, peaks=peaks)
        if result.error is not None:
            print(f"tilec: error: {result.error}", file=sys.stderr, flush=True)
            failed += 1
        print(harness.to_json(result) if table is None else table.row(result), flush=True)
        for warning in result.warnings:
            if "samples spread" in warning:  # the load's warnings come once, at the start and the end
                print(f"tilec: warning: {warning}", file=sys.stderr, flush=True)
    _warn_if_busy("at the end of the run")
    return 1 if failed else 0


def _machine_peaks() -> Any:
    """The machine's measured peaks (tilec.runtime.peaks: measured once per machine, then cached), or
    None with a warning when the probe cannot run here (the table then has no %peak figures)."""
    from tilec.runtime import peaks

    path = peaks.cache_path()
    if path is None or not path.is_file():
        print("tilec: measuring this machine's peaks (once" + (f"; kept in {path})" if path else " per process)"),
              file=sys.stderr, flush=True)
    try:
        return peaks.machine_peaks()
    except (TilecError, OSError, MemoryError) as err:  # e.g. no room for the bandwidth buffer
        print(f"tilec: warning: no roofline figures: {err or type(err).__name__}", file=sys.stderr, flush=True)
        return None


def _warn_if_busy(when: str) -> None:
    """Print a warning when the load average says other processes compete for the cores."""
    warning = roofline.load_warning(roofline.load_average(), roofline.cores(), when)
    if warning is not None:
        print(f"tilec: warning: {warning}", file=sys.stderr, flush=True)


def _bench_model(args: argparse.Namespace) -> int:
    """`tilec bench model`: tilec.bench.model_step, one table row per model; exit status 1 when a model
    could not be built or a side failed (its error on stderr), the other models' and sides' figures still printed."""
    import json

    from tilec.bench import model_step, models

    names = [n.strip() for n in (args.models or ",".join(models.MODELS)).split(",") if n.strip()]
    unknown = [n for n in names if n not in models.MODELS]
    if unknown or not names:
        raise TilecError(f"--models takes names from {', '.join(models.MODELS)} separated by commas, got "
                         f"{args.models!r}")
    steps = 20 if args.steps is None else args.steps
    warmup = model_step.WARMUP if args.warmup is None else args.warmup
    consecutive = model_step.CONSECUTIVE if args.consecutive is None else args.consecutive
    model_step.check_counts(steps, warmup, consecutive)
    if args.threads is not None:
        import torch

        if args.threads < 1:
            raise TilecError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)  # tilec's kernels use torch's thread count too
    sides = {**model_step.SIDES, "tilec": args.backend}
    records = Path(args.records) if args.records is not None else None
    if records is not None and args.backend != models.BACKEND:
        raise TilecError(f"--records applies to the backend {models.BACKEND!r} only, not --backend {args.backend}")
    if not args.json:
        print(model_step.machine_header())
        print(model_step.explanation(steps, warmup, args.backend, consecutive, records))
        print(model_step.table_header(records is not None), flush=True)
    _warn_if_busy("at the start of the run")
    failed = 0
    for name in names:
        try:
            result = model_step.run_model(name, steps, warmup, sides, consecutive=consecutive, records=records)
        except models.ModelError as err:  # e.g. transformers is missing: the other models still run
            print(f"tilec: error: {err}", file=sys.stderr, flush=True)
            failed += 1
            continue
        for side, error in result.errors.items():
            print(f"tilec: error: {name}, {side}: {error}", file=sys.stderr, flush=True)
        failed += bool(result.errors)
        print(json.dumps(result.to_dict()) if args.json else model_step.table_row(result, records is not None), flush=True)
    _warn_if_busy("at the end of the run")
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


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    from tilec.bench.harness import CONSECUTIVE as OP_CONSECUTIVE
    from tilec.bench.model_step import CONSECUTIVE
    from tilec.bench.ops import OP_NAMES

    bench = sub.add_parser(
        "bench", help="time tilec kernels against numpy/PyTorch, interleaved in one process",
        description="Time tilec kernels and their baselines (numpy, PyTorch) side by side in this process, "
                    "interleaved: tilec, baseline, tilec, baseline, ... Reports the median of the timed "
                    "calls; ratio = baseline_ms / tilec_ms, so a ratio above 1 means tilec is faster. "
                    "The first warm-up call of each side is checked against the other.")
    bench.add_argument("op", nargs="?", default="all", metavar="OP",
                       help=f"one of {', '.join(OP_NAMES)}, train_step (one SGD step of the training "
                            f"examples' CNN and transformer, tilec's modules vs torch's), model (a training step "
                            f"of whole models: eager vs torch.compile with Inductor and with backend 'tilec'), "
                            f"or all (the default: every op's acceptance cases, causal attention included)")
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
    bench.add_argument("--dtype", default="float32", help="float32 (default), float64, bfloat16 or float16 (16-bit inputs and results, float32 "
                            "arithmetic; baselines in torch; train_step: under torch.autocast)")
    bench.add_argument("--target", default="llvm", help="compilation target (default: llvm, the host CPU; 'llvm -mcpu=haswell -mattr=-avx512f': an explicit CPU)")
    bench.add_argument("--warmup", type=int, default=None, metavar="N",
                       help="untimed pairs before timing, at least 1: the first compiles and checks (default 1; "
                            "for `model`, untimed rounds, default 3)")
    bench.add_argument("--models", default=None, metavar="NAME,...",
                       help="`model` only: which of mlp, gpt2, bert, resnet18 (default: all four; the last "
                            "three need the package transformers)")
    bench.add_argument("--steps", type=int, default=None, metavar="N",
                       help="`model` only: timed steps of each side (default 20)")
    bench.add_argument("--consecutive", type=int, default=None, metavar="N",
                       help=f"calls (for `model`: training steps) each side runs back to back per round, as a "
                            f"loop does; the first, which follows the other side's, is not timed (default "
                            f"{OP_CONSECUTIVE}, for `model` {CONSECUTIVE}; 1: one call each per round, every "
                            f"call timed)")
    bench.add_argument("--threads", type=int, default=None, metavar="N",
                       help="`model` only: torch.set_num_threads(N) for every side (default: torch's own); "
                            "1 gives steadier figures on a machine that other processes load")
    bench.add_argument("--backend", default="tilec", metavar="NAME",
                       help="`model` only: the torch.compile backend of the 'tilec' column (default tilec; "
                            "another, such as aot_eager, tries the benchmark without tilec.torch_backend)")
    bench.add_argument("--warmup-time", type=float, default=0.5, metavar="SECONDS",
                       help="and warm up for at least this long, the first pair included (default 0.5)")
    bench.add_argument("--repeats", type=int, default=3, metavar="N", help="timed pairs (default 3)")
    bench.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                       help="per case: after the first warm-up and timed pair, run more pairs only while "
                            "the case stays within this many seconds (default 30)")
    bench.add_argument("--records", default=None, metavar="PATH",
                       help="benchmark the best kernels these tuning records hold (default: tilec's records file); "
                            "for `model`, the tilec side with them against an 'untuned' side without any")
    bench.add_argument("--cooldown", type=float, default=0.02, metavar="SECONDS",
                       help="idle time after every call, both sides, so that one library's idle threads are "
                            "quiet before the other runs (default 0.02)")
    bench.add_argument("--json", action="store_true", help="print one JSON object per case instead of a table")
    bench.set_defaults(run=cmd_bench)
