"""The `tilec` command line: `tilec explain SRC --shape A=64x32 [--stage tensor|loop|llvm|...]`.

Errors print one clear message on stderr (no traceback) and exit with status 1.
"""

from __future__ import annotations

import argparse
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
        raise argparse.ArgumentTypeError(f"dimensions must be integers separated by 'x' (A=64x32), got {dims!r}")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except TilecError as err:
        print(f"tilec: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
