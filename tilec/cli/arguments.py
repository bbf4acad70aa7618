"""The argument types the commands share: NAME=DIMS shapes, NAME=VALUE pairs, Tile source or a file.

Requires: the text of one command-line argument. Guarantees: a parsed value, or an
argparse.ArgumentTypeError (argparse prints it as a usage error) / a TilecError that says what
form was expected.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tilec.errors import TilecError


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
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


def parse_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def read_source(text: str) -> str:
    """SRC is Tile text, or the path of a file holding it (one that exists, or ends in .tile or .txt)."""
    if "\n" in text or len(text) >= 4096:
        return text
    path = Path(text)
    try:
        is_file = path.is_file()
    except OSError:  # not a name a file can have (too long, say): Tile text
        is_file = False
    if not is_file and path.suffix not in (".tile", ".txt"):
        return text
    try:
        return path.read_text()
    except OSError as err:
        raise TilecError(f"cannot read {text}: {err.strerror}") from None
