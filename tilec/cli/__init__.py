"""The `tilec` command line: `tilec explain SRC --shape A=64x32 [--stage tensor|loop|llvm|...]`,
`tilec bench [OP] [--shape M=1024,N=1024,K=1024] [--json]`, `tilec tune OP|FILE`, `tilec plot`,
`tilec records {list,show,export,import}` and `tilec info [--json]`.

Errors print one clear message on stderr (no traceback) and exit with status 1.

`main` is the entry point (`tilec`, `python -m tilec.cli`); `parser` assembles the subcommands,
each defined with its parser in its own module: `explain`, `bench`, `tune`, `records` (records
and plot), `info`; `arguments` holds the argument types they share.
"""

from __future__ import annotations

import sys
from typing import Sequence

from tilec.cli.bench import reexec_with_quiet_baselines
from tilec.cli.parser import build_parser
from tilec.errors import TilecError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "bench" and not getattr(args, "no_reexec", False) and argv is None:
        reexec_with_quiet_baselines(sys.argv[1:])
    try:
        return int(args.run(args))
    except TilecError as err:
        print(f"tilec: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


__all__ = ["build_parser", "main"]
