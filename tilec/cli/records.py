"""`tilec records {list,show,export,import}` and `tilec plot`: the tuning records, read back.

Requires: a record database (--records, else tilec's default) that `tilec tune` wrote, or for
`import` a JSON-lines file of records. Guarantees: `list` and `show` print tables (`show` also
the best usable schedule for a target, or why there is none), `export`/`import` copy records as
JSON lines, `plot` writes a PNG of a task's best-so-far time against trials; a missing database
or an unknown or ambiguous task is a TilecError naming what to give instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tilec.errors import TilecError

if TYPE_CHECKING:
    from tilec.records import Record, RecordDB


def cmd_records(args: argparse.Namespace) -> int:
    from tilec.records import RecordDB, default_path

    path = Path(args.records) if args.records else default_path()
    if args.action == "import":
        with RecordDB(path) as db:
            added = db.import_jsonl(sys.stdin if args.file == "-" else args.file)
        print(f"imported {added} new record(s) into {path}", file=sys.stderr)
        return 0
    if not path.exists():
        if args.action == "list":
            print(f"no tuning records: {path} does not exist")
            return 0
        raise TilecError(f"no tuning records at {path}; give the database with --records PATH")
    with RecordDB(path) as db:
        if args.action == "export":
            count = db.export_jsonl(sys.stdout if args.file == "-" else args.file)
            print(f"exported {count} record(s) from {path}", file=sys.stderr)
        elif args.action == "list":
            records = [r for r in db.records() if args.task is None or r.task.startswith(args.task)]
            print(_records_table(records) if records else f"no tuning records in {path}")
        else:
            _show_task(db, args.key, args.target)
    return 0


def _show_task(db: "RecordDB", key: str, target_name: str) -> None:
    import json

    from tilec.pipeline import compiler_fingerprint, resolve_target

    tasks = sorted({r.task for r in db.records() if r.task.startswith(key)})
    if len(tasks) != 1:
        raise TilecError(f"no records of task {key} in {db.path}; `tilec records list` shows the tasks" if not tasks
                         else f"task prefix {key} is ambiguous: {', '.join(tasks)}")
    records = db.records(tasks[0])
    print(_records_table(records))
    target, compiler = resolve_target(target_name), compiler_fingerprint()
    best = db.best(tasks[0], target.key, compiler)
    if best is None:
        foreign = sum(r.target != target.key for r in records)
        stale = sum(r.target == target.key and r.compiler != compiler for r in records)
        print(f"\nno usable record for {_short_target(target.key)} and compiler {compiler}: "
              f"{len(records) - foreign - stale} failed, {stale} stale (another compiler), "
              f"{foreign} foreign (another target)")
    else:
        print(f"\nbest for {_short_target(target.key)}, compiler {compiler}: {_format_time(best.time_s)} "
              f"({_trial(best) if best.confirmed else f'trial {best.trial}'})\n{json.dumps(best.schedule, indent=2, sort_keys=True)}")


def _records_table(records: "list[Record]") -> str:
    import time

    now = time.time()
    rows = [("TASK", "OP", "SHAPE", "TARGET", "TIME", "ERROR", "TRIAL", "AGE")]
    rows += [(r.task, r.op or "-", r.shape or "-", _short_target(r.target), _format_time(r.time_s), r.error,
              _trial(r), _format_age(now - r.created)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _trial(record: "Record") -> str:
    """The trial number, or for a confirmation (a median of re-measurements) its round and spread."""
    if record.confirmed == 0:
        return str(record.trial)
    return f"confirmation {record.confirmed}, spread {100 * (record.spread or 0.0):.0f}%"


def _short_target(key: str) -> str:
    return ":".join(key.split(":")[:2])  # name and CPU, without the feature string


def _format_time(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def _format_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def add_records_parser(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--records", metavar="PATH",
                        help="the tuning-record database (default: $TILEC_RECORDS, else records.sqlite in tilec's "
                             "cache directory)")
    records = sub.add_parser("records", help="list, show, export and import tuning records",
                             description="The tuning records that `tilec tune` writes and `tilec.compile` applies.")
    actions = records.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="a table of the records")
    listing.add_argument("--task", metavar="KEY", help="only the records of this task (a key or its prefix)")
    show = actions.add_parser("show", parents=[common], help="every record of one task and its best schedule")
    show.add_argument("key", help="the task key (or a unique prefix), as `tilec records list` shows it")
    show.add_argument("--target", default="llvm", help="the target whose best record to show (default: llvm)")
    export = actions.add_parser("export", parents=[common], help="write every record as JSON lines")
    export.add_argument("file", help="the output file, or - for stdout")
    imports = actions.add_parser("import", parents=[common], help="add the records of a JSON-lines file")
    imports.add_argument("file", help="the input file, or - for stdin")
    records.set_defaults(run=cmd_records)



def cmd_plot(args: argparse.Namespace) -> int:
    from tilec.records import RecordDB
    from tilec.autotune.tuner import plot_run

    if not Path(args.records).exists():
        raise TilecError(f"no tuning records at {args.records}")
    if not Path(args.out).resolve().parent.is_dir():
        raise TilecError(f"--out {args.out}: the directory {Path(args.out).parent} does not exist; create it first")
    if args.baseline_ms is not None and not args.baseline_ms > 0:
        raise TilecError(f"--baseline-ms must be a positive time in milliseconds, got {args.baseline_ms}")
    with RecordDB(args.records) as db:
        keys = sorted({r.task for r in db.records() if r.task.startswith(args.task)})
        if len(keys) != 1:
            raise TilecError(f"--task {args.task} matches {len(keys)} tasks in {args.records}; give a unique prefix "
                             f"of a key that `tilec records list` shows")
        records = db.records(keys[0])
    baseline = None if args.baseline_ms is None else (args.baseline_name, args.baseline_ms / 1e3)
    speedup = plot_run(records, args.out, baseline)
    print(args.out + ("" if speedup is None else f": the best schedule is {speedup:.2f}x the default"))
    return 0


def add_plot_parser(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser("plot", help="plot a tuning run: each trial, the best so far, the default schedule (PNG)")
    plot.add_argument("records", metavar="RECORDS", help="the record database")
    plot.add_argument("--task", required=True, help="the task key or a unique prefix")
    plot.add_argument("--out", required=True, metavar="FILE.png")
    plot.add_argument("--baseline-ms", type=float, default=None, metavar="MS",
                      help="a baseline's time per call to draw as a line (e.g. numpy's, from `tilec bench`)")
    plot.add_argument("--baseline-name", default="baseline", metavar="NAME", help="its label (default: baseline)")
    plot.set_defaults(run=cmd_plot)
