"""The `tilec` command line: `tilec explain SRC --shape A=64x32 [--stage tensor|loop|llvm|...]`
and `tilec bench [OP] [--shape M=1024,N=1024,K=1024] [--json]`.

Errors print one clear message on stderr (no traceback) and exit with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from tilec.driver import STAGES
from tilec.errors import TilecError


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
    from tilec.target import resolve_target

    cases = ops.select_cases(args.op, args.shape, causal=args.causal, quick=args.quick,
                             dtype=args.dtype, target=args.target)
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


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
    from tilec.bench.ops import OP_NAMES

    bench = sub.add_parser(
        "bench", help="time tilec kernels against numpy/PyTorch, interleaved in one process",
        description="Time tilec kernels and their baselines (numpy, PyTorch) side by side in this process, "
                    "interleaved: tilec, baseline, tilec, baseline, ... Reports the median of the timed "
                    "calls; ratio = baseline_ms / tilec_ms, so a ratio above 1 means tilec is faster. "
                    "The first warm-up call of each side is checked against the other.")
    bench.add_argument("op", nargs="?", default="all", metavar="OP",
                       help=f"one of {', '.join(OP_NAMES)}, or all (the default: every op's acceptance cases, "
                            f"causal attention included)")
    bench.add_argument("--shape", action="append", default=[], metavar="NAME=N,...",
                       help="the op's sizes, e.g. M=1024,N=1024,K=1024 (gemm, gemm_bias_relu); "
                            "N=8,C=64,H=56,W=56,CO=64,KH=3,KW=3,stride=1,pad=1 (conv2d; stride 1 and pad 0 "
                            "by default); B=4,H=8,S=512,D=64 (attention). Repeat for more cases. "
                            "Without it the op's acceptance cases run")
    bench.add_argument("--causal", action="store_true", help="attention with a causal mask")
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
    bench.add_argument("--cooldown", type=float, default=0.02, metavar="SECONDS",
                       help="idle time after every call, both sides, so that one library's idle threads are "
                            "quiet before the other runs (default 0.02)")
    bench.add_argument("--json", action="store_true", help="print one JSON object per case instead of a table")
    bench.set_defaults(run=cmd_bench)


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
