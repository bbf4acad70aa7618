"""`tilec explain SRC --shape A=64x32 [--stage tensor|loop|llvm|...]`: print a Tile program's stages.

Requires: Tile source (or a file holding it) and the input shapes (--shape) and sizes (--size)
that the stages asked for need. Guarantees: the stages on stdout (tilec.pipeline.explain), or
only the one named by --stage, with no headers.
"""

from __future__ import annotations

import argparse
import sys

from tilec.cli.arguments import parse_pair, parse_shape, read_source
from tilec.errors import TilecError
from tilec.pipeline import STAGES


def cmd_explain(args: argparse.Namespace) -> int:
    import tilec

    source = read_source(args.source)
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


def add_explain_parser(sub: argparse._SubParsersAction) -> None:
    explain = sub.add_parser("explain", help="print every compilation stage of a Tile program",
                             description="Print the tensor IR, loop IR and LLVM IR of a Tile program "
                                         "for the given input shapes (or one stage with --stage).")
    explain.add_argument("source", help="Tile source text, or a file containing it")
    explain.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME=DIMS",
                         help="an input's shape, e.g. A=64x32 (repeat for each input; A=scalar for A[])")
    explain.add_argument("--dtype", action="append", type=parse_pair, default=[], metavar="NAME=DTYPE",
                         help="an input's dtype (default float32)")
    explain.add_argument("--size", action="append", type=parse_pair, default=[], metavar="SYMBOL=N",
                         help="bind a size symbol that the shapes do not determine")
    explain.add_argument("--stage", choices=STAGES, help="print only this stage, with no headers")
    explain.add_argument("--target", default="llvm", help="compilation target (default: llvm, the host CPU; 'llvm -mcpu=haswell -mattr=-avx512f': an explicit CPU)")
    explain.set_defaults(run=cmd_explain)
