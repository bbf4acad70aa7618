"""The record store: one SQLite file of tuning records, append-only.

`RecordDB` stores records in SQLite (WAL mode, one commit per record), so several tuners may
write at once and a tuner killed with SIGKILL loses at most the candidate it was measuring.
`best()` trusts only records of exactly the asking target and compiler: a stale or foreign
record is ignored, never applied; among those, the task's latest confirmation (its top candidates
re-measured interleaved, tilec.autotune.confirm) before any single trial. Records travel as JSON lines (`export_jsonl`, `import_jsonl`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import IO, Iterator

from tilec.config import options
from tilec.errors import TilecError, TilecWarning
from tilec.records.record import Record, _digest

SCHEMA_VERSION = 3  # 2 added confirmed and spread, 3 family and dims; older files are upgraded on opening
BUSY_TIMEOUT_MS = 30_000  # concurrent tuners wait this long for each other's commits

_COLUMNS = ("task", "target", "compiler", "schedule", "time_s", "error", "trial", "seed", "created", "op", "shape",
            "confirmed", "spread", "family", "dims")
_ADDED = {"confirmed": "INTEGER NOT NULL DEFAULT 0", "spread": "REAL",  # since version 2
          "family": "TEXT NOT NULL DEFAULT ''", "dims": "TEXT"}  # since version 3
_FAMILY_INDEX = "CREATE INDEX IF NOT EXISTS records_family ON records (family, target, compiler)"
# the usable records, best first: of the latest confirmation (tilec.autotune.confirm), then the fastest
_USABLE_BEST_FIRST = "error = 'ok' AND time_s IS NOT NULL ORDER BY confirmed DESC, time_s, id"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS tilec_schema (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS records (
        id INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE,
        task TEXT NOT NULL, target TEXT NOT NULL, compiler TEXT NOT NULL, schedule TEXT NOT NULL,
        time_s REAL, error TEXT NOT NULL, trial INTEGER NOT NULL, seed INTEGER,
        created REAL NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL,
        confirmed INTEGER NOT NULL DEFAULT 0, spread REAL, family TEXT NOT NULL DEFAULT '', dims TEXT)""",
    "CREATE INDEX IF NOT EXISTS records_best ON records (task, target, compiler, error, time_s)",
    _FAMILY_INDEX,
    # append-only: enforced by the database, not only by the absence of an update method
    """CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
        BEGIN SELECT RAISE(ABORT, 'tuning records are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
        BEGIN SELECT RAISE(ABORT, 'tuning records are append-only'); END""",
)


def default_path() -> Path:
    """`options.records_path`, else `<cache_dir>/records.sqlite` (Options.records_file)."""
    path = options.records_file()
    if path is None:
        raise TilecError("no tuning-record database: the cache directory is disabled (TILEC_CACHE_DIR is empty); "
                         "give a path (--records PATH) or set TILEC_RECORDS")
    return path


class RecordDB:
    """The append-only record store. Safe to share between processes, not between threads."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._damaged: set[int] = set()  # ids of the rows skipped as damaged (each warned about once)
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
        if version is not None and version < SCHEMA_VERSION:
            self._upgrade()
            version = self._version()
        if version is None or version > SCHEMA_VERSION:
            raise TilecError(f"the tuning records {self.path} have schema version {version}, newer than this tilec "
                             f"reads ({SCHEMA_VERSION}); upgrade tilec, or use another file (--records PATH or "
                             f"TILEC_RECORDS)")

    def _upgrade(self) -> None:
        """Add the columns later versions added (old rows: trials of no known family). A file
        that cannot be written fails to open, through the caller's sqlite3.Error handler."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            have = {row[1] for row in self._conn.execute("PRAGMA table_info(records)")}
            for column, kind in _ADDED.items():
                if column not in have:
                    self._conn.execute(f"ALTER TABLE records ADD COLUMN {column} {kind}")
            self._conn.execute(_FAMILY_INDEX)
            if (self._version() or 0) < SCHEMA_VERSION:  # (another process may have upgraded it meanwhile)
                self._conn.execute("INSERT INTO tilec_schema (version) VALUES (?)", (SCHEMA_VERSION,))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

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

    def records(self, task: str | None = None, target: str | None = None, compiler: str | None = None) -> list[Record]:
        """Every record (or those of `task`, and of `target` and `compiler` where given), oldest first."""
        given = [(column, value) for column, value in (("task", task), ("target", target), ("compiler", compiler))
                 if value is not None]
        where = "WHERE " + " AND ".join(f"{column} = ?" for column, _ in given) if given else ""
        return list(self._select(f"{where} ORDER BY id", tuple(value for _, value in given)))

    def best(self, task: str, target: str, compiler: str) -> Record | None:
        """The fastest successful record of exactly this task, target and compiler (damaged rows
        skipped): of the task's latest confirmation if it has one, else of all its trials."""
        return self.best_with_id(task, target, compiler)[0]

    def best_with_id(self, task: str, target: str, compiler: str) -> tuple[Record | None, int | None]:
        """`best` and its row id (None, None when there is none)."""
        return next(self._select_with_ids(f"WHERE task = ? AND target = ? AND compiler = ? AND {_USABLE_BEST_FIRST}",
                                          (task, target, compiler)), (None, None))

    def family_bests(self, family: str, target: str, compiler: str) -> list[tuple[Record, int]]:
        """Per task of this family (target and compiler), its `best` and row id."""
        out: dict[str, tuple[Record, int]] = {}
        for record, row in self._select_with_ids(f"WHERE family = ? AND target = ? AND compiler = ? AND {_USABLE_BEST_FIRST}",
                                                 (family, target, compiler)):
            out.setdefault(record.task, (record, row))
        return list(out.values())

    def _select(self, clause: str, params: tuple) -> Iterator[Record]:
        return (record for record, _ in self._select_with_ids(clause, params))

    def _select_with_ids(self, clause: str, params: tuple) -> Iterator[tuple[Record, int]]:
        """The records of the rows `clause` selects, in its order; a damaged row (bad JSON, a wrong
        type: an older tilec's or a hand-edited file) is skipped with one warning naming it."""
        try:
            rows = self._conn.execute(f"SELECT id, {', '.join(_COLUMNS)} FROM records {clause}", params).fetchall()
        except sqlite3.Error as err:
            raise TilecError(f"cannot read the tuning records {self.path}: {err}") from None
        for row_id, *row in rows:
            values = dict(zip(_COLUMNS, row))
            try:
                values["schedule"] = json.loads(values["schedule"])
                values["dims"] = None if values["dims"] is None else json.loads(values["dims"])
                record = Record(**values)
            except (ValueError, TypeError, TilecError) as err:  # (json's errors are ValueErrors)
                self._skip(row_id, err)
                continue
            yield record, row_id

    def _skip(self, row_id: int, err: Exception) -> None:
        if row_id in self._damaged:
            return
        self._damaged.add(row_id)
        warnings.warn(f"tuning records {self.path}: row {row_id} is damaged and skipped ({err}); the other records "
                      f"still serve (`tilec records` lists them)", TilecWarning, stacklevel=3)

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
    values["dims"] = None if record.dims is None else json.dumps(record.dims, sort_keys=True)
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


__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "RecordDB", "default_path"]
