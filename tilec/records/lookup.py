"""The best tuning records of a program, as the TemplateSchedule `Function` compiles it with.

Requires: a program, its signature and target. Guarantees: one config per statement that has a
usable best record (one of this target and compiler whose config still lowers), or None; a
database that cannot be read warns once and yields None (the default schedule).

A statement with no record of its own (this program, names aside, at these shapes) takes the
record of the statement cut out of the program (tilec.schedule.cuts), if it has one, else the best
record of the nearest shape of its family (the same statement of the same program, or the same
cut, at other sizes; distance: tilec.records.record.shape_distance) whose config lowers at this
shape too.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

from tilec.config import options
from tilec.errors import TilecError, TilecWarning
from tilec.frontend import parse
from tilec.ir.bounds import bind
from tilec.ir.tensor import Program
from tilec.pipeline import Signature, compiler_fingerprint, lower_program
from tilec.records.db import RecordDB, default_path
from tilec.records.record import Record, shape_distance, task_family, task_key
from tilec.schedule.cuts import cut, tunable_statements
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.target import Target

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, TilecWarning, stacklevel=4)


class using:  # noqa: N801 - a context manager, named as the function it reads as
    """Within a `with using(path):` block, the kernels looked up anew (a Function's first call at a
    signature, an op's first call at its shapes) take their schedules from the tuning records at
    `path`, or from the heuristic alone with None. Kernels chosen under other records are not
    reused: every cache that keeps a chosen kernel is keyed by the records in force (tilec.config.
    Options.records_key), so one process can run the same model tuned and untuned, alternately.
    The options come back as they were when the block ends. One `using` may be entered again and
    again (at every training step: entering costs two attribute swaps; the path is checked once,
    here). Not thread-safe: the records in force are process-wide."""

    __slots__ = ("_path", "_key", "_saved")

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        if path is not None and not Path(path).is_file():
            raise TilecError(f"no tuning-record database at {path} (tilec tune ... --records {path} writes one)")
        self._path = None if path is None else Path(path)
        self._key = None if self._path is None else os.fspath(self._path)
        self._saved: list[tuple[bool, Path | None, str | None]] = []

    def __enter__(self) -> None:
        self._saved.append(options.swap_records(self._path is not None, self._path, self._key))

    def __exit__(self, *exc: object) -> None:
        options.swap_records(*self._saved.pop())


def recorded_schedule(program: Program, sig: Signature, target: Target,
                      sources: dict[int, str] | None = None) -> TemplateSchedule | None:
    """One TemplateSchedule from the best record of each statement of `program`, or None; with
    `sources`, each statement a record schedules gets there where it came from (its file, row id,
    trial and time).

    Per statement the tuner tunes (tilec.schedule.cuts.tunable_statements), the first of: its own
    record (this program, names aside, at these shapes); the record of the statement alone
    (tilec.schedule.cuts: what `tilec tune model` tunes); the nearest shape's record of either. A
    best record whose config does not lower is skipped with a TilecWarning; a database that cannot
    be read warns once and yields None (the default).
    """
    if not options.use_records:
        return None
    try:
        path = default_path()
    except TilecError:
        return None  # no cache directory and no TILEC_RECORDS: nothing was ever recorded
    if not path.exists():
        return None  # the common case, and it creates nothing
    text, compiler = str(program), compiler_fingerprint()
    configs = []
    try:
        with RecordDB(path) as db:
            alone = _Cuts(program, sig, target)
            for stmt in range(len(program.statements)):
                if not alone.tunable(stmt):
                    continue
                whole = _Key(text, sig, stmt)
                found = _exact(db, whole, stmt, program, sig, target, compiler, warn=True)
                how = "tuning record"
                part = alone.get(stmt) if found is None else None
                if found is None and part is not None:
                    found = _exact(db, part, stmt, program, sig, target, compiler, warn=False)
                    how = "tuning record of the statement alone"
                for key, kind in ((whole, ""), (part, " of the statement alone")):
                    if found is None and key is not None:
                        found = _nearest(db, key, stmt, program, sig, target, compiler)
                        how = f"nearest-shape reuse of tuning record{kind}"
                if found is None:
                    continue
                record, row, config = found
                configs.append(config)
                if sources is not None:
                    time_ms = f", {record.time_s * 1e3:.4g} ms" if record.time_s is not None else ""
                    at = f", tuned at {_dims_text(record.dims)}" if how.startswith("nearest") else ""
                    sources[stmt] = (f"{how} {row} of {path} (task {record.task[:12]}, trial {record.trial}"
                                     f"{time_ms}{at})")
    except TilecError as err:
        _warn_once(str(path), f"{err}; compiling with default schedules")
        return None
    return TemplateSchedule(tuple(configs)) if configs else None


class _Key:
    """A statement's task key and family, as the tuner wrote them (tilec.autotune.task.Task.key):
    `stmt` of the program `text` at the signature's shapes."""

    def __init__(self, text: str, sig: Signature, stmt: int) -> None:
        self.text, self.sig, self.stmt = text, sig, stmt

    @property
    def task(self) -> str:
        return task_key(self.text, dict(self.sig.shapes), dict(self.sig.dtypes), self.stmt, dict(self.sig.sizes))

    @property
    def family(self) -> tuple[str, dict[str, list[int]]]:
        return task_family(self.text, dict(self.sig.shapes), dict(self.sig.dtypes), self.stmt, dict(self.sig.sizes))


class _Cuts:
    """The program's tunable statements and their keys cut out of it, worked out on first use."""

    def __init__(self, program: Program, sig: Signature, target: Target) -> None:
        self.program, self.sig, self.target = program, sig, target
        self.keys: dict[int, _Key | None] | None = None  # tunable statement -> its cut's key

    def tunable(self, stmt: int) -> bool:
        """Whether the tuner tunes `stmt`: no record applies to another statement (a convolution
        that untuned calls run with Winograd keeps it, whatever another shape's implicit-GEMM
        record says)."""
        return stmt in self._keys()

    def get(self, stmt: int) -> _Key | None:
        return self._keys().get(stmt)

    def _keys(self) -> dict[int, _Key | None]:
        if self.keys is None:
            self.keys = {}
            try:
                bp = bind(self.program, dict(self.sig.shapes), dict(self.sig.dtypes), dict(self.sig.sizes))
                found = tunable_statements(bp, self.target)
            except TilecError:
                return self.keys  # a program that does not bind has no records of its statements either
            for f in found:
                try:
                    part = cut(bp, f.index, f.count)
                    text = str(parse(part.source, dict(part.sizes)))  # as the tuner's Task prints it
                    self.keys[f.index] = _Key(text, Signature(part.shapes, part.dtypes, part.sizes), part.first)
                except TilecError:
                    self.keys[f.index] = None  # tunable in its program, but with no cut of its own
        return self.keys


_Found = tuple[Record, "int | None", TemplateConfig]


def _exact(db: RecordDB, key: _Key, stmt: int, program: Program, sig: Signature, target: Target, compiler: str,
           warn: bool) -> _Found | None:
    """The best record of `key`, as a config of statement `stmt` of `program` (None where there
    is none or it does not lower there; a record of the statement itself that does not lower
    warns, one of its cut may simply not fit the whole program)."""
    record, row = db.best_with_id(key.task, target.key, compiler)
    if record is None:
        return None
    try:
        return record, row, _config_at(record, key.stmt, stmt, program, sig, target)
    except (TilecError, TypeError, ValueError, KeyError) as err:  # (knobs of the wrong type or name: a damaged row)
        if warn:
            warnings.warn(f"the best tuning record of statement {stmt} (task {record.task}, trial {record.trial}) "
                          f"does not build and is skipped: {err}", TilecWarning, stacklevel=4)
        return None


def _nearest(db: RecordDB, key: _Key, stmt: int, program: Program, sig: Signature, target: Target,
             compiler: str) -> _Found | None:
    """The best record of the nearest shape of the key's family whose config lowers here."""
    family, dims = key.family
    ranked = sorted(((shape_distance(dims, r.dims or {}), row, r) for r, row in db.family_bests(family, target.key, compiler)),
                    key=lambda x: x[:2])
    for distance, row, record in ranked:
        if distance == float("inf"):
            break
        try:
            return record, row, _config_at(record, key.stmt, stmt, program, sig, target)
        except (TilecError, TypeError, ValueError, KeyError):  # not legal here: the next nearest
            continue
    return None


def _config_at(record: Record, recorded: int, stmt: int, program: Program, sig: Signature,
               target: Target) -> TemplateConfig:
    """The record's config of its statement `recorded`, moved to statement `stmt` of `program`
    and checked to lower there (cheap: no LLVM)."""
    config = TemplateSchedule.from_json(record.schedule).override(recorded)
    if config is None:
        raise TilecError(f"its schedule has no config for statement {recorded}")
    config = replace(config, stmt=stmt)
    lower_program(program, sig, TemplateSchedule((config,)), target)
    return config


def _dims_text(dims: dict[str, list[int]] | None) -> str:
    return " ".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in sorted((dims or {}).items()))


__all__ = ["recorded_schedule"]
