"""Every error tilec raises on bad input is a :class:`TilecError`.

The subclasses say which stage refused the input; the message says what was
expected, what was received and how to fix it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager


class TilecError(Exception):
    """Base class of every error tilec raises on purpose."""


class TileSyntaxError(TilecError):
    """The source text does not parse. Carries the 1-based line and column."""

    def __init__(self, message: str, source: str, line: int, column: int) -> None:
        self.line = line
        self.column = column
        self.source = source
        self.reason = message
        super().__init__(f"{message} at line {line}, column {column}\n{caret_snippet(source, line, column)}")


class SemanticError(TilecError):
    """The program parses but means nothing: undefined tensor, rank mismatch, ..."""


class TilecWarning(UserWarning):
    """Legal but suspicious input: the program means something the user probably did not intend."""


class BindError(TilecError):
    """Call-time arguments do not fit the program (shape, dtype, size symbol)."""


class ScheduleError(TilecError):
    """A schedule primitive is illegal for the loop nest it is applied to."""


class CodegenError(TilecError):
    """The backend could not compile the lowered program (a tilec bug or an unsupported construct)."""


class TargetError(TilecError):
    """Code compiled for one machine cannot run on this one (an explicit CPU with features it lacks)."""


def caret_snippet(source: str, line: int, column: int) -> str:
    """The offending source line with a caret under `column` (both 1-based)."""
    lines = source.splitlines() or [""]
    line = max(1, min(line, len(lines)))
    text = lines[line - 1].expandtabs(1)
    return f"    {text}\n    {' ' * max(0, column - 1)}^"


_POSITION = re.compile(r"\(line \d+, column \d+\)")


@contextmanager
def located(pos: tuple[int, int] | None, source: str) -> Iterator[None]:
    """Inside, a BindError or SemanticError without a position gets "(line L, column C)" and a caret
    snippet of `source` appended (the same error object, re-raised). Nothing is added when `pos` is
    None (a statement derived by autodiff, a program built without source)."""
    try:
        yield
    except (BindError, SemanticError) as err:
        message = str(err)
        if pos is not None and not _POSITION.search(message):
            line, column = pos
            snippet = _short_snippet(source, line, column) if source else ""
            err.args = (f"{message} (line {line}, column {column})\n{snippet}".rstrip(),)
        raise


def _short_snippet(source: str, line: int, column: int, width: int = 100) -> str:
    """`caret_snippet`, the line cut to `width` characters around `column` (a call-time message
    quotes the program, whose lines may be long: a 400-digit literal)."""
    lines = source.splitlines() or [""]
    text = lines[max(1, min(line, len(lines))) - 1].expandtabs(1)
    start = max(0, min(column - 1 - width // 2, len(text) - width))
    if start == 0 and len(text) <= width:
        return caret_snippet(source, line, column)
    shown = ("..." if start else "") + text[start:start + width] + ("..." if start + width < len(text) else "")
    return f"    {shown}\n    {' ' * (column - 1 - start + (3 if start else 0))}^"
