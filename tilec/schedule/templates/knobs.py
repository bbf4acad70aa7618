"""Knob records: a template's tunable parameters as a small frozen dataclass, checked on entry.

Every field of a knob record is declared with `knob(default, lo, hi)`: an integer or boolean
with inclusive bounds that hold on any target (the template's `problems` adds the checks that
depend on the statement and the target, such as a register block that must be a whole number
of vectors). `make_record` is the one way in from outside (a TemplateConfig, a tuning record, a
JSON file): it rejects unknown names, values of the wrong type (``"6"``, ``[6]``, ``None``, a bool
where an int is meant, anything but a bool where a bool is meant) and values out of bounds, with
a ScheduleError naming the template and the knob, before anything is built.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable
from dataclasses import Field, field, fields
from typing import Any

import numpy as np

from tilec.errors import ScheduleError


def knob(default: Any, lo: int | None = None, hi: int | None = None, doc: str = "") -> Any:
    """A knob field: its default, its inclusive bounds (ints) and what it means."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "doc": doc})


@functools.cache
def _kinds(record: type) -> dict[str, type]:
    """Each knob's kind, bool or int (read off the record's annotations once)."""
    hints = typing.get_type_hints(record)
    return {f.name: bool if hints.get(f.name) is bool else int for f in fields(record)}


def _coerce(template: str, record: type, f: Field, value: Any) -> Any:
    kind = _kinds(record)[f.name]
    where = f"template '{template}': knob '{f.name}'"
    if kind is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise ScheduleError(f"{where} must be true or false, got {value!r} ({type(value).__name__})")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ScheduleError(f"{where} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"{lo} to {hi}" if lo is not None and hi is not None else f">= {lo}" if lo is not None else f"<= {hi}"
        raise ScheduleError(f"{where} = {value} is out of range: it must be {bounds}")
    return value


def make_record(template: str, record: type, items: Iterable[tuple[str, Any]]) -> Any:
    """The knob record `record` of `template` from (name, value) pairs; unset knobs keep their
    defaults. Raises ScheduleError for unknown names, bad types and values out of bounds."""
    by_name = {f.name: f for f in fields(record)}
    values: dict[str, Any] = {}
    for name, value in items:
        f = by_name.get(name) if isinstance(name, str) else None
        if f is None:
            raise ScheduleError(f"template '{template}' has no knob {name!r}; its knobs are "
                                f"{', '.join(sorted(by_name))}")
        values[name] = _coerce(template, record, f, value)
    return record(**values)


def check_record(template: str, record: Any) -> None:
    """Raise ScheduleError unless every field of a knob record (however it was made) has its
    declared type and lies in its bounds."""
    for f in fields(record):
        _coerce(template, type(record), f, getattr(record, f.name))


__all__ = ["check_record", "knob", "make_record"]
