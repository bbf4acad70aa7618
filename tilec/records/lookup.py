"""The best tuning records of a program, as the TemplateSchedule `Function` compiles it with.

Requires: a program, its signature and target. Guarantees: one config per statement that has a
usable best record (one of this target and compiler whose config still lowers), or None; a
database that cannot be read warns once and yields None (the default schedule).

A statement with no record of its own (this program, names aside, at these shapes) takes the
best record of the nearest shape of its family (the same statement of the same program at other
sizes; distance: tilec.records.record.shape_distance) whose config lowers at this shape too.
"""

from __future__ import annotations

import warnings

from tilec.config import options
from tilec.errors import TilecError, TilecWarning
from tilec.ir.tensor import Program
from tilec.pipeline import Signature, compiler_fingerprint, lower_program
from tilec.records.db import RecordDB, default_path
from tilec.records.record import Record, shape_distance, task_family, task_key
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.target import Target

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, TilecWarning, stacklevel=4)


def recorded_schedule(program: Program, sig: Signature, target: Target,
                      sources: dict[int, str] | None = None) -> TemplateSchedule | None:
    """One TemplateSchedule from the best record of each statement of `program`, or None; with
    `sources`, each statement a record schedules gets there where it came from (its file, row id,
    trial and time).

    One query per statement. A best record whose config does not lower is skipped with a
    TilecWarning; a database that cannot be read warns once and yields None (the default).
    """
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
    configs = []
    try:
        with RecordDB(path) as db:
            for stmt in range(len(program.statements)):
                record, row = db.best_with_id(task_key(text, shapes, dtypes, stmt, sizes), target.key, compiler)
                config = None if record is None else _usable_config(record, stmt, program, sig, target)
                how = "tuning record"
                if record is None:
                    record, row, config = _nearest(db, text, stmt, program, sig, target, compiler)
                    how = "nearest-shape reuse of tuning record"
                if config is None or record is None:
                    continue
                configs.append(config)
                if sources is not None:
                    time_ms = f", {record.time_s * 1e3:.4g} ms" if record.time_s is not None else ""
                    at = f", tuned at {_dims_text(record.dims)}" if how != "tuning record" else ""
                    sources[stmt] = (f"{how} {row} of {path} (task {record.task[:12]}, trial {record.trial}"
                                     f"{time_ms}{at})")
    except TilecError as err:
        _warn_once(str(path), f"{err}; compiling with default schedules")
        return None
    return TemplateSchedule(tuple(configs)) if configs else None


def _nearest(db: RecordDB, text: str, stmt: int, program: Program, sig: Signature, target: Target,
             compiler: str) -> tuple[Record | None, int | None, TemplateConfig | None]:
    """The best record of the nearest shape of the statement's family whose config lowers here."""
    family, dims = task_family(text, dict(sig.shapes), dict(sig.dtypes), stmt, dict(sig.sizes))
    ranked = sorted(((shape_distance(dims, r.dims or {}), row, r) for r, row in db.family_bests(family, target.key, compiler)),
                    key=lambda x: x[:2])
    for distance, row, record in ranked:
        if distance == float("inf"):
            break
        try:
            config = TemplateSchedule.from_json(record.schedule).override(stmt)
            if config is not None:
                lower_program(program, sig, TemplateSchedule((config,)), target)  # legal at this shape?
                return record, row, config
        except (TilecError, TypeError, ValueError, KeyError):  # not legal here: the next nearest
            continue
    return None, None, None


def _dims_text(dims: dict[str, list[int]] | None) -> str:
    return " ".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in sorted((dims or {}).items()))


def _usable_config(record: Record, stmt: int, program: Program, sig: Signature,
                   target: Target) -> TemplateConfig | None:
    try:
        config = TemplateSchedule.from_json(record.schedule).override(stmt)
        if config is None:
            raise TilecError(f"its schedule has no config for statement {stmt}")
        lower_program(program, sig, TemplateSchedule((config,)), target)  # cheap: no LLVM
        return config
    except (TilecError, TypeError, ValueError, KeyError) as err:  # (knobs of the wrong type or name: a damaged row)
        warnings.warn(f"the best tuning record of statement {stmt} (task {record.task}, trial {record.trial}) "
                      f"does not build and is skipped: {err}", TilecWarning, stacklevel=4)
        return None


__all__ = ["recorded_schedule"]
