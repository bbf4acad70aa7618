"""The `tilec` argument parser: one subcommand per command module, in the order `--help` lists them.

Requires: nothing. Guarantees: `build_parser()` returns a fresh parser whose parsed arguments
carry `run`, the function of the chosen command (taking the parsed arguments, returning the exit
status).
"""

from __future__ import annotations

import argparse

from tilec.version import __version__
from tilec.cli.bench import add_bench_parser
from tilec.cli.explain import add_explain_parser
from tilec.cli.info import add_info_parser
from tilec.cli.records import add_plot_parser, add_records_parser
from tilec.cli.tune import add_tune_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilec", description="The tilec tensor-expression compiler.")
    parser.add_argument("--version", action="version", version=f"tilec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_explain_parser(sub)
    add_bench_parser(sub)
    add_records_parser(sub)
    add_tune_parser(sub)
    add_plot_parser(sub)
    add_info_parser(sub)
    return parser
