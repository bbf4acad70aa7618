"""Tuning records: one SQLite file of measured schedules, and the best one applied at compile time.

A `Record` is one measured candidate: the task (program, shapes, dtypes, statement; see
`task_key`), the target and compiler it was measured with, its schedule (a TemplateSchedule
as JSON, one config for the task's statement), and the time or the typed error. `RecordDB`
stores them append-only in SQLite (WAL mode, one commit per record), so several tuners may
write at once and a tuner killed with SIGKILL loses at most the candidate it was measuring.
`best()` trusts only records of exactly the asking target and compiler: a stale or foreign
record is ignored, never applied. `recorded_schedule` is what `Function` calls to apply the
best records to a program it compiles.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Mapping, TypeVar, Union

import numpy as np

from tilec.config import options
from tilec.errors import TilecError, TilecWarning
from tilec.schedule.templates.config import TemplateConfig, TemplateSchedule

if TYPE_CHECKING:
    from tilec.pipeline.driver import Signature
    from tilec.ir.tensor import Program
    from tilec.target import Target

_V = TypeVar("_V")
_Items = Union[Mapping[str, _V], Iterable[tuple[str, _V]]]  # a dict, or its items

TASK_ERRORS = ("ok", "build_error", "timeout", "runtime_error", "wrong_answer")
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000  # concurrent tuners wait this long for each other's commits

_COLUMNS = ("task", "target", "compiler", "schedule", "time_s", "error", "trial", "seed", "created", "op", "shape")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS tilec_schema (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS records (
        id INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE,
        task TEXT NOT NULL, target TEXT NOT NULL, compiler TEXT NOT NULL, schedule TEXT NOT NULL,
        time_s REAL, error TEXT NOT NULL, trial INTEGER NOT NULL, seed INTEGER,
        created REAL NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS records_best ON records (task, target, compiler, error, time_s)",
    # append-only: enforced by the database, not only by the absence of an update method
    """CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
        BEGIN SELECT RAISE(ABORT, 'tuning records are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
        BEGIN SELECT RAISE(ABORT, 'tuning records are append-only'); END""",
)


def task_key(program_text: str, shapes: _Items[tuple[int, ...]], dtypes: _Items[str], stmt: int,
             sizes: _Items[int] | None = None) -> str:
    """A stable hash of one statement of a program at given input shapes and dtypes.

    `program_text` is the canonical text, `str(tilec.parse(src))` (not the source as typed:
    `Function` looks records up by `str(self.program)`). `shapes`, `dtypes` and `sizes` are
    dicts or (name, value) pairs, in any order. `sizes` are size symbols bound by keyword
    (`tilec.compile(src, N=8)`), which the text and shapes do not show; without them the key
    is the same as with `sizes={}`.
    """
    payload: dict[str, Any] = {
        "program": program_text,
        "shapes": {name: [int(d) for d in shape] for name, shape in sorted(dict(shapes).items())},
        "dtypes": {name: _dtype_name(dtype) for name, dtype in sorted(dict(dtypes).items())},
        "stmt": int(stmt),
    }
    if sizes:
        payload["sizes"] = {name: int(v) for name, v in sorted(dict(sizes).items())}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


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
        _check_schedule(self.schedule)
        # a private plain-JSON copy: numpy knob values become Python numbers, and the caller's
        # list stays theirs to change
        object.__setattr__(self, "schedule", _plain_json(self.schedule))
        for name, kind in (("time_s", float), ("trial", int), ("seed", int), ("created", float)):
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


def _digest(record: Record) -> str:
    return hashlib.sha256(json.dumps(record.to_json(), sort_keys=True).encode()).hexdigest()


def default_path() -> Path:
    """`options.records_path`, else `<cache_dir>/records.sqlite`."""
    if options.records_path is not None:
        return Path(options.records_path)
    if options.cache_dir is None:
        raise TilecError("no tuning-record database: the cache directory is disabled (TILEC_CACHE_DIR is empty); "
                         "give a path (--records PATH) or set TILEC_RECORDS")
    return Path(options.cache_dir) / "records.sqlite"


class RecordDB:
    """The append-only record store. Safe to share between processes, not between threads."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        if path is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise TilecError(f"cannot create the directory of the tuning records {self.path}: {err.strerror}") from None
        try:
            # autocommit (isolation_level=None): every add() is its own committed transaction
            self._conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as err:
            raise TilecError(f"cannot open the tuning records {self.path}: {err}") from None
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._use_wal()
            self._check_schema()
        except sqlite3.Error as err:
            self._conn.close()
            raise TilecError(f"cannot open the tuning records {self.path}: {err}") from None
        except TilecError:
            self._conn.close()
            raise

    def _use_wal(self) -> None:
        # Switching a new file to WAL fails at once, without waiting on the busy timeout, while
        # another process is switching it too; so wait here.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _check_schema(self) -> None:
        version = self._version()
        if version is None:
            self._conn.execute("BEGIN IMMEDIATE")  # one creator at a time; the others see its tables
            try:
                for statement in _SCHEMA:
                    self._conn.execute(statement)
                if self._conn.execute("SELECT count(*) FROM tilec_schema").fetchone()[0] == 0:
                    self._conn.execute("INSERT INTO tilec_schema (version) VALUES (?)", (SCHEMA_VERSION,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            version = self._version()
        if version is None or version > SCHEMA_VERSION:
            raise TilecError(f"the tuning records {self.path} have schema version {version}, newer than this tilec "
                             f"reads ({SCHEMA_VERSION}); upgrade tilec, or use another file (--records PATH or "
                             f"TILEC_RECORDS)")

    def _version(self) -> int | None:
        exists = self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tilec_schema'")
        if exists.fetchone() is None:
            return None
        row = self._conn.execute("SELECT max(version) FROM tilec_schema").fetchone()
        return None if row[0] is None else int(row[0])

    # ------------------------------------------------------------ writing

    def add(self, record: Record) -> None:
        """Append `record` (stamped with the current time unless it has one), committed at once."""
        if record.created == 0.0:
            record = replace(record, created=time.time())
        self._insert([record])

    def _insert(self, records: list[Record]) -> int:
        rows = [(_digest(r), *_row(r)) for r in records]
        placeholders = ", ".join("?" * (len(_COLUMNS) + 1))
        try:
            before = self._conn.total_changes
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(f"INSERT OR IGNORE INTO records (digest, {', '.join(_COLUMNS)}) "
                                       f"VALUES ({placeholders})", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            return self._conn.total_changes - before
        except sqlite3.Error as err:
            raise TilecError(f"cannot write the tuning records {self.path}: {err}") from None

    def import_jsonl(self, file: "str | os.PathLike | IO[str]") -> int:
        """Add every record of a JSON-lines file (or open text file); returns how many were new.

        Every line is checked before any is added; a malformed one raises TilecError naming it.
        Records already present (identical in every field) are skipped.
        """
        name, lines = _read_lines(file)
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(Record.from_json(json.loads(line)))
            except json.JSONDecodeError as err:
                raise TilecError(f"{name}, line {number}: not JSON ({err.msg} at column {err.colno})") from None
            except (TilecError, TypeError) as err:
                raise TilecError(f"{name}, line {number}: {err}") from None
        return self._insert(records) if records else 0

    # ------------------------------------------------------------ reading

    def records(self, task: str | None = None) -> list[Record]:
        """Every record (or every record of `task`), oldest first."""
        where, params = ("WHERE task = ?", (task,)) if task is not None else ("", ())
        return list(self._select(f"{where} ORDER BY id", params))

    def best(self, task: str, target: str, compiler: str) -> Record | None:
        """The fastest successful record of exactly this task, target and compiler."""
        found = list(self._select("WHERE task = ? AND target = ? AND compiler = ? AND error = 'ok' AND time_s IS NOT NULL "
                                  "ORDER BY time_s, id LIMIT 1", (task, target, compiler)))
        return found[0] if found else None

    def _select(self, clause: str, params: tuple) -> Iterator[Record]:
        try:
            rows = self._conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM records {clause}", params).fetchall()
        except sqlite3.Error as err:
            raise TilecError(f"cannot read the tuning records {self.path}: {err}") from None
        for row in rows:
            values = dict(zip(_COLUMNS, row))
            values["schedule"] = json.loads(values["schedule"])
            yield Record(**values)

    def export_jsonl(self, file: "str | os.PathLike | IO[str]") -> int:
        """Write every record as one JSON object per line; returns how many."""
        records = self.records()
        text = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
        if isinstance(file, (str, os.PathLike)):
            try:
                Path(file).write_text(text)
            except OSError as err:
                raise TilecError(f"cannot write {file}: {err.strerror}") from None
        else:
            file.write(text)
        return len(records)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "RecordDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row(record: Record) -> tuple:
    values = asdict(record)
    values["schedule"] = json.dumps(record.schedule, sort_keys=True)
    return tuple(values[c] for c in _COLUMNS)


def _read_lines(file: "str | os.PathLike | IO[str]") -> tuple[str, list[str]]:
    if isinstance(file, (str, os.PathLike)):
        try:
            return str(file), Path(file).read_text().splitlines()
        except OSError as err:
            raise TilecError(f"cannot read {file}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise TilecError(f"cannot read {file}: not a text file of JSON lines") from None
    return str(getattr(file, "name", "<input>")), file.read().splitlines()


# ---------------------------------------------------------------- applying the best records

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, TilecWarning, stacklevel=4)


def recorded_schedule(program: "Program", sig: "Signature", target: "Target") -> TemplateSchedule | None:
    """One TemplateSchedule from the best record of each statement of `program`, or None.

    One query per statement. A best record whose config does not lower is skipped with a
    TilecWarning; a database that cannot be read warns once and yields None (the default).
    """
    from tilec.pipeline.driver import compiler_fingerprint

    if not options.use_records:
        return None
    try:
        path = default_path()
    except TilecError:
        return None  # no cache directory and no TILEC_RECORDS: nothing was ever recorded
    if not path.exists():
        return None  # the common case, and it creates nothing
    shapes, dtypes, sizes = dict(sig.shapes), dict(sig.dtypes), dict(sig.sizes)
    text, compiler = str(program), compiler_fingerprint()
    try:
        with RecordDB(path) as db:
            best = [db.best(task_key(text, shapes, dtypes, i, sizes), target.key, compiler)
                    for i in range(len(program.statements))]
    except TilecError as err:
        _warn_once(str(path), f"{err}; compiling with default schedules")
        return None
    configs = []
    for stmt, record in enumerate(best):
        config = None if record is None else _usable_config(record, stmt, program, sig, target)
        if config is not None:
            configs.append(config)
    return TemplateSchedule(tuple(configs)) if configs else None


def _usable_config(record: Record, stmt: int, program: "Program", sig: "Signature",
                   target: "Target") -> TemplateConfig | None:
    from tilec.pipeline.driver import lower_program

    try:
        config = TemplateSchedule.from_json(record.schedule).override(stmt)
        if config is None:
            raise TilecError(f"its schedule has no config for statement {stmt}")
        lower_program(program, sig, TemplateSchedule((config,)), target)  # cheap: no LLVM
        return config
    except TilecError as err:
        warnings.warn(f"the best tuning record of statement {stmt} (task {record.task}, trial {record.trial}) "
                      f"does not build and is skipped: {err}", TilecWarning, stacklevel=4)
        return None
