"""A tuning record: one measured candidate, and the key of the task it belongs to.

A `Record` is the task (program, shapes, dtypes, statement; see `task_key`), the target and
compiler it was measured with, its schedule (a TemplateSchedule as JSON, one config for the
task's statement), and the time or the typed error. Records read from files are checked field
by field (`Record.from_json`): a damaged record is a TilecError, never a crash.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping, TypeVar, Union

import numpy as np

from tilec.errors import TilecError

_V = TypeVar("_V")
_Items = Union[Mapping[str, _V], Iterable[tuple[str, _V]]]  # a dict, or its items

TASK_ERRORS = ("ok", "build_error", "timeout", "runtime_error", "wrong_answer")


def task_key(program_text: str, shapes: _Items[tuple[int, ...]], dtypes: _Items[str], stmt: int,
             sizes: _Items[int] | None = None) -> str:
    """A stable hash of one statement of a program at given input shapes and dtypes.

    `program_text` is the printed program, `str(tilec.parse(src))` (not the source as typed:
    `Function` looks records up by `str(self.program)`). `shapes`, `dtypes` and `sizes` are
    dicts or (name, value) pairs, in any order. `sizes` are size symbols bound by keyword
    (`tilec.compile(src, N=8)`), which the text and shapes do not show.

    The names do not matter (`canonical_task`): ``C[i, j: M, N] = +(A[i, k] * B[k, j])`` and
    ``function (X[M, L], W[L, N]) -> (Y) { Y[a, b: M, N] = +(X[a, r] * W[r, b]); }`` at the same
    shapes are one task, so a record tuned for one serves the other.
    """
    program, shape_map, dtype_map, size_map = _canonical(program_text, shapes, dtypes, sizes)
    payload: dict[str, Any] = {
        "program": program,
        "shapes": {name: list(shape) for name, shape in shape_map},
        "dtypes": dict(dtype_map),
        "stmt": int(stmt),
    }
    if size_map:
        payload["sizes"] = dict(size_map)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def task_family(program_text: str, shapes: _Items[tuple[int, ...]], dtypes: _Items[str], stmt: int,
                sizes: _Items[int] | None = None) -> tuple[str, dict[str, list[int]]]:
    """The task's key without its shapes, and its shapes under the numbered names (`canonical_task`):
    the tasks of one family are one statement of one program at other sizes, so a record tuned at
    one shape can serve the nearest one (tilec.records.lookup) where its knobs are legal."""
    program, shape_map, dtype_map, _ = _canonical(program_text, shapes, dtypes, sizes)
    text = json.dumps({"program": program, "dtypes": dict(dtype_map), "stmt": int(stmt)}, sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24], {name: list(shape) for name, shape in shape_map}


def _canonical(program_text: str, shapes: _Items[tuple[int, ...]], dtypes: _Items[str],
               sizes: _Items[int] | None) -> tuple[str, "_Pairs", "_Pairs", "_Pairs"]:
    """`canonical_task` of the arguments task_key and task_family take, in a stable order."""
    shape_items = tuple(sorted((name, tuple(int(d) for d in shape)) for name, shape in dict(shapes).items()))
    dtype_items = tuple(sorted((name, _dtype_name(dtype)) for name, dtype in dict(dtypes).items()))
    size_items = tuple(sorted((name, int(v)) for name, v in dict(sizes or {}).items()))
    return canonical_task(program_text, shape_items, dtype_items, size_items)


NEAR = 4  # a record serves another shape only if no dimension differs by more than this factor


def shape_distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How far apart two tasks' shapes are: the sum over their dimensions of |log2(a / b)|; inf
    when they do not have the same tensors of the same ranks, or when a dimension differs by
    more than a factor NEAR (a schedule tuned for 64 rows says little about 4096)."""
    if set(a) != set(b) or any(len(a[k]) != len(b[k]) for k in a):
        return math.inf
    logs = [abs(math.log2(max(1, x) / max(1, y))) for k in a for x, y in zip(a[k], b[k])]
    return math.inf if any(d > math.log2(NEAR) for d in logs) else sum(logs)


_KEYWORDS = frozenset({"function", "default", "no_defract"})
_TOKEN = re.compile(r"\[\[.*?\]\]|(?<![\w.])[A-Za-z_]\w*")  # an attribute (kept whole), or a name
_Pairs = tuple[tuple[str, Any], ...]


@functools.lru_cache(maxsize=1024)
def canonical_task(program_text: str, shapes: _Pairs, dtypes: _Pairs, sizes: _Pairs) -> tuple[str, _Pairs, _Pairs, _Pairs]:
    """The program with every name it chose (tensors, indices, size symbols) numbered in order of
    first appearance and its inputs' declared dimensions dropped, with the shapes, dtypes and the
    values of the size symbols its statements use under those numbers. Two programs that differ
    only in names, or in dimensions their inputs' shapes fix anyway, become one; the values of
    the size symbols keep apart those whose statements read a symbol bound differently. Calls
    (`exp(x)`), keywords and attributes keep their names. A program that does not bind at these
    shapes is its text as given."""
    from tilec.frontend import parse
    from tilec.ir.bounds import bind

    try:
        bound = bind(parse(program_text), dict(shapes), dict(dtypes), dict(sizes))
    except (TilecError, KeyError):
        return program_text, shapes, dtypes, sizes
    header, brace, body = program_text.partition("{")
    header = re.sub(r"(\w+)\[[^\]]*\]", r"\1", header)  # inputs' dimensions: the shapes say them
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("[[") or token in _KEYWORDS or match.string[match.end():].lstrip().startswith("("):
            return token
        return names.setdefault(token, f"v{len(names)}")

    text = _TOKEN.sub(rename, header) + brace + _TOKEN.sub(rename, body)
    used = {t for t in _TOKEN.findall(body)}
    return (text, tuple(sorted((names.get(n, n), s) for n, s in shapes)),
            tuple(sorted((names.get(n, n), d) for n, d in dtypes)),
            tuple(sorted((names[n], v) for n, v in bound.sizes.items() if n in used and n in names)))


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name  # "f4", np.float32 and "float32" are one key
    except TypeError:
        return str(dtype)


@dataclass(frozen=True)
class Record:
    """One measured candidate. Construction validates every field (TilecError says which)."""

    task: str
    target: str
    compiler: str
    schedule: list[dict]  # TemplateSchedule.to_json(), one config for the task's statement
    time_s: float | None  # seconds per call; None when the candidate failed
    error: str  # one of TASK_ERRORS
    trial: int = 0
    seed: int | None = None
    created: float = 0.0  # unix time, filled in by RecordDB.add
    op: str = ""  # e.g. "gemm"
    shape: str = ""  # human text, e.g. "M=1024,N=1024,K=1024"
    # 0: a tuning trial (its time the minimum of a few back-to-back runs). n >= 1: the task's n-th
    # confirmation (tilec.autotune.confirm), its time the median of the runs of the top candidates
    # re-measured interleaved, and `spread` their (max - min) / median; best() trusts the latest.
    confirmed: int = 0
    spread: float | None = None
    family: str = ""  # task_family's key: the task without its shapes ("" in records of an older tilec)
    dims: dict[str, list[int]] | None = None  # the shapes under the family's names

    def __post_init__(self) -> None:
        for name in ("task", "target", "compiler"):
            _check(isinstance(getattr(self, name), str) and getattr(self, name) != "", f"'{name}' must be a non-empty string")
        _check(self.error in TASK_ERRORS, f"'error' must be one of {', '.join(TASK_ERRORS)}, got {self.error!r}")
        _check(self.time_s is None or (_is_number(self.time_s) and math.isfinite(self.time_s) and self.time_s >= 0),
               f"'time_s' must be a finite number of seconds or null, got {self.time_s!r}")
        _check(self.error != "ok" or self.time_s is not None, "a record with error 'ok' needs its 'time_s'")
        _check(_is_int(self.trial) and self.trial >= 0, f"'trial' must be a non-negative integer, got {self.trial!r}")
        _check(self.seed is None or _is_int(self.seed), f"'seed' must be an integer or null, got {self.seed!r}")
        _check(_is_number(self.created) and self.created >= 0, f"'created' must be a unix time, got {self.created!r}")
        _check(isinstance(self.op, str) and isinstance(self.shape, str), "'op' and 'shape' must be strings")
        _check(_is_int(self.confirmed) and self.confirmed >= 0,
               f"'confirmed' must be a non-negative integer, got {self.confirmed!r}")
        _check(isinstance(self.family, str), f"'family' must be a string, got {self.family!r}")
        _check(self.dims is None or (isinstance(self.dims, dict) and all(
            isinstance(k, str) and isinstance(v, list) and all(_is_int(d) and d >= 0 for d in v)
            for k, v in self.dims.items())), f"'dims' must map names to lists of sizes, got {self.dims!r}")
        _check(self.spread is None or (_is_number(self.spread) and math.isfinite(self.spread) and self.spread >= 0),
               f"'spread' must be a non-negative number or null, got {self.spread!r}")
        _check_schedule(self.schedule)
        # a private plain-JSON copy: numpy knob values become Python numbers, and the caller's
        # list stays theirs to change
        object.__setattr__(self, "schedule", _plain_json(self.schedule))
        if self.dims is not None:
            object.__setattr__(self, "dims", {k: [int(d) for d in v] for k, v in self.dims.items()})
        for name, kind in (("time_s", float), ("trial", int), ("seed", int), ("created", float), ("confirmed", int),
                           ("spread", float)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, kind(getattr(self, name)))  # numpy scalars, too

    def to_json(self) -> dict:
        return json.loads(json.dumps(asdict(self)))  # a deep copy: the caller may change it freely

    @staticmethod
    def from_json(d: Any) -> "Record":
        _check(isinstance(d, dict), f"a record is a JSON object, got {type(d).__name__}")
        names = [f.name for f in fields(Record)]
        unknown = sorted(set(d) - set(names))
        _check(not unknown, f"unknown field(s) {', '.join(unknown)}; a record has {', '.join(names)}")
        missing = [n for n in ("task", "target", "compiler", "schedule", "time_s", "error") if n not in d]
        _check(not missing, f"missing field(s) {', '.join(missing)}")
        return Record(**d)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise TilecError(f"not a tuning record: {message}")


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _plain_json(value: Any) -> Any:
    def scalar(x: Any) -> Any:
        if isinstance(x, np.generic):
            return x.item()
        raise TypeError(f"{type(x).__name__} {x!r}")

    try:
        return json.loads(json.dumps(value, default=scalar))
    except (TypeError, ValueError) as err:
        raise TilecError(f"not a tuning record: its schedule is not plain JSON ({err})") from None


def _check_schedule(schedule: Any) -> None:
    """Structure only: an unknown template (say, from a newer tilec) is refused when applied, not here."""
    _check(isinstance(schedule, list), f"'schedule' must be a list of template configs, got {type(schedule).__name__}")
    for item in schedule:
        _check(isinstance(item, dict) and _is_int(item.get("stmt")) and isinstance(item.get("template"), str)
               and isinstance(item.get("knobs", {}), dict),
               f"each 'schedule' entry needs an integer 'stmt', a string 'template' and a 'knobs' object, got {item!r}")


_LATER_FIELDS = {"confirmed": 0, "spread": None, "family": "", "dims": None}  # fields added after the first schema, at their defaults


def _digest(record: Record) -> str:
    """The record's identity. Fields added later are left out while at their defaults, so a trial
    exported by an older tilec and imported again is recognised as the one already stored."""
    values = {k: v for k, v in record.to_json().items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


__all__ = ["TASK_ERRORS", "Record", "shape_distance", "task_family", "task_key"]
