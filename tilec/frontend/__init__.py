"""Tile source -> tensor IR: grammar, parser, semantic analysis."""

from __future__ import annotations

from collections.abc import Iterable

from tilec.errors import TilecError
from tilec.frontend.parser import parse_source
from tilec.frontend.sema import analyse
from tilec.ir.tensor import Program


def parse(source: str, size_names: Iterable[str] = ()) -> Program:
    """Parse and check Tile source. `size_names` are size symbols given by keyword."""
    try:
        return analyse(parse_source(source), source, size_names)
    except RecursionError:
        raise TilecError("the program is nested too deeply to compile; split deep expressions into "
                         "several statements") from None
