"""Tuning records: the SQLite store, its CLI, and applying the best record at compile time."""

from __future__ import annotations

import io
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest

import tilec
import tilec.cli
from tilec import records as R
from tilec.records import lookup
from tilec.records import Record, RecordDB, task_key, using
from tilec.config import options
from tilec.pipeline import compiler_fingerprint, resolve_target

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
SHAPES = {"A": (128, 64), "B": (64, 96)}
DTYPES = {"A": "float32", "B": "float32"}
TASK = task_key(str(tilec.parse(GEMM)), SHAPES, DTYPES, 0)
DISTINCT = {"mr": 4, "nr": 32, "mc": 8, "kc": 16}  # a register block no heuristic picks for this shape
rng = np.random.default_rng(5)


def gemm_config(**knobs: object) -> list[dict]:
    return [{"stmt": 0, "template": "implicit_gemm", "knobs": knobs}]


def rec(time_s: float | None = 1e-3, error: str = "ok", task: str = TASK, target: str | None = None,
        compiler: str | None = None, trial: int = 0, **knobs: object) -> Record:
    return Record(task, target or resolve_target("llvm").key, compiler or compiler_fingerprint(),
                  gemm_config(**(knobs or DISTINCT)), time_s, error, trial=trial, op="gemm", shape="M=128,N=96,K=64")


@pytest.fixture
def db_path(tmp_path, monkeypatch):
    path = tmp_path / "records.sqlite"
    monkeypatch.setattr(options, "records_path", path)
    monkeypatch.setattr(lookup, "_warned", set())
    return path


# ---------------------------------------------------------------- records and keys

def test_record_json_round_trip_and_validation():
    r = Record("t", "llvm:x", "c", gemm_config(mr=4), None, "timeout", trial=3, seed=7, created=1.5, op="gemm")
    assert Record.from_json(json.loads(json.dumps(r.to_json()))) == r
    for bad, match in [({**r.to_json(), "error": "crash"}, "must be one of"),
                       ({**r.to_json(), "error": "ok"}, "needs its 'time_s'"),
                       ({**r.to_json(), "colour": 1}, "unknown field"),
                       ({k: v for k, v in r.to_json().items() if k != "task"}, "missing field"),
                       ({**r.to_json(), "schedule": [{"template": "x"}]}, "integer 'stmt'"),
                       ({**r.to_json(), "time_s": float("nan")}, "finite"),
                       ({**r.to_json(), "trial": -1}, "non-negative"), ([1], "JSON object")]:
        with pytest.raises(tilec.TilecError, match=match):
            Record.from_json(bad)


def test_numpy_values_become_plain_json():
    knobs = {"mr": np.int64(4), "pack_a": np.bool_(True)}
    schedule = gemm_config(**knobs)
    r = Record("t", "llvm:x", "c", schedule, np.float64(1e-3), "ok", trial=np.int64(2), seed=np.int32(1))
    schedule[0]["knobs"]["mr"] = 6  # the record keeps its own copy
    assert r.schedule == gemm_config(mr=4, pack_a=True) and type(r.trial) is int and type(r.time_s) is float
    assert Record.from_json(json.loads(json.dumps(r.to_json()))) == r
    with pytest.raises(tilec.TilecError, match="not plain JSON"):
        Record("t", "llvm:x", "c", gemm_config(mr=object()), None, "build_error")


def test_task_key_is_stable_and_tells_tasks_apart():
    text = str(tilec.parse(GEMM))
    assert TASK == task_key(text, dict(reversed(SHAPES.items())), {"A": "f4", "B": np.float32}, 0)
    assert TASK == task_key(text, tuple(SHAPES.items()), tuple(DTYPES.items()), 0, sizes={})
    assert len(TASK) == 24 and int(TASK, 16) >= 0
    others = {task_key(text, {**SHAPES, "A": (128, 65)}, DTYPES, 0), task_key(text, SHAPES, {**DTYPES, "B": "float64"}, 0),
              task_key(text, SHAPES, DTYPES, 1), task_key(text, SHAPES, DTYPES, 0, sizes={"N": 8}),
              task_key(text + " ", SHAPES, DTYPES, 0)}
    assert TASK not in others and len(others) == 5


# ---------------------------------------------------------------- the database

def test_add_records_and_best(db_path):
    fast, slow = rec(1e-3, trial=1), rec(2e-3, trial=2)
    with RecordDB(db_path) as db:
        for r in (slow, rec(1e-4, compiler="0.0.1+stale"), rec(1e-4, target="llvm:othercpu:+avx2"),
                  rec(None, "timeout"), rec(1e-5, "wrong_answer"), fast, rec(1e-6, task="other")):
            db.add(r)
        assert len(db.records()) == 7 and len(db.records(TASK)) == 6
        assert all(time.time() - r.created < 60 for r in db.records())
        best = db.best(TASK, resolve_target("llvm").key, compiler_fingerprint())
        assert best is not None and best.trial == 1 and best.schedule == fast.schedule
        assert db.best(TASK, resolve_target("llvm").key, "0.0.1+stale").compiler == "0.0.1+stale"
        assert db.best("nothing", resolve_target("llvm").key, compiler_fingerprint()) is None


def test_default_path_is_in_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(options, "records_path", None)
    monkeypatch.setattr(options, "cache_dir", tmp_path / "new" / "cache")
    with RecordDB() as db:
        assert db.path == tmp_path / "new" / "cache" / "records.sqlite" and db.path.exists()
        assert db._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    monkeypatch.setattr(options, "cache_dir", None)
    with pytest.raises(tilec.TilecError, match="TILEC_RECORDS"):
        RecordDB()


def test_records_are_append_only(db_path):
    with RecordDB(db_path) as db:
        db.add(rec())
        db.add(rec())  # a second, later measurement of the same schedule is a second record
        assert not hasattr(db, "update") and not hasattr(db, "delete")
    conn = sqlite3.connect(db_path)
    for statement in ("UPDATE records SET time_s = 0", "DELETE FROM records"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.close()
    with RecordDB(db_path) as db:
        assert len(db.records()) == 2


def test_a_newer_schema_or_a_foreign_file_is_refused(db_path, tmp_path):
    RecordDB(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("INSERT INTO tilec_schema VALUES (?)", (R.SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(tilec.TilecError, match=f"schema version {R.SCHEMA_VERSION + 1}, newer than this tilec reads"):
        RecordDB(db_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(tilec.TilecError, match="cannot open the tuning records"):
        RecordDB(junk)


VERSION_1 = (  # the schema of the files tilec wrote before confirmation (schema version 1)
    "CREATE TABLE tilec_schema (version INTEGER NOT NULL)",
    "INSERT INTO tilec_schema VALUES (1)",
    """CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT NOT NULL UNIQUE,
        task TEXT NOT NULL, target TEXT NOT NULL, compiler TEXT NOT NULL, schedule TEXT NOT NULL,
        time_s REAL, error TEXT NOT NULL, trial INTEGER NOT NULL, seed INTEGER,
        created REAL NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL)""",
)


def _version_1_file(path, records: list[Record]) -> None:
    conn = sqlite3.connect(path)
    for statement in VERSION_1:
        conn.execute(statement)
    for r in records:
        row = {k: v for k, v in r.to_json().items() if k not in R.record._LATER_FIELDS}
        row["schedule"] = json.dumps(row["schedule"], sort_keys=True)
        conn.execute(f"INSERT INTO records (digest, {', '.join(row)}) VALUES (?, {', '.join('?' * len(row))})",
                     (R.record._digest(r), *row.values()))
    conn.commit()
    conn.close()


def test_a_version_1_file_is_upgraded_and_serves_its_trials(db_path):
    trials = [replace(rec(2e-3, trial=1), created=1.0), replace(rec(1e-3, trial=2, mr=8, nr=16, mc=8, kc=16), created=2.0)]
    _version_1_file(db_path, trials)
    with RecordDB(db_path) as db:
        assert db.records(TASK) == trials
        assert db.best(TASK, trials[0].target, trials[0].compiler) == trials[1]
        confirmed = replace(trials[0], time_s=1.5e-3, created=3.0, confirmed=1, spread=0.05)
        db.add(confirmed)  # slower than trial 2's minimum, but re-measured: the trusted best
        assert db.best(TASK, trials[0].target, trials[0].compiler) == confirmed
        assert db.import_jsonl(io.StringIO(json.dumps(trials[1].to_json()))) == 0  # the same trial, known
    assert sqlite3.connect(db_path).execute("SELECT max(version) FROM tilec_schema").fetchone()[0] == R.SCHEMA_VERSION


WRITER = textwrap.dedent("""
    import sys
    from tilec.records import Record, RecordDB
    path, name, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with RecordDB(path) as db:
        if start < 0:  # resume: continue after the last recorded trial
            start = 1 + max((r.trial for r in db.records("task") if r.target == name), default=-1)
        for trial in range(start, stop):
            db.add(Record("task", name, "c", [{"stmt": 0, "template": "default"}], 1.0 + trial, "ok", trial=trial))
            print(trial, flush=True)
""")


def writer(path, name: str, start: int, stop: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(start), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_writers(db_path):
    procs = [writer(db_path, name, 0, 60) for name in ("llvm:a", "llvm:b")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with RecordDB(db_path) as db:
        records = db.records()
    for name in ("llvm:a", "llvm:b"):
        assert sorted(r.trial for r in records if r.target == name) == list(range(60))


def test_a_writer_killed_with_sigkill_loses_nothing_committed_and_resumes(db_path):
    p = writer(db_path, "llvm:a", 0, 10_000)
    assert p.stdout is not None
    done = [int(p.stdout.readline()) for _ in range(25)]  # 25 records reported committed
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    with RecordDB(db_path) as db:
        trials = [r.trial for r in db.records()]
        assert db._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert trials[:25] == done and trials == list(range(len(trials)))
    resumed = writer(db_path, "llvm:a", -1, len(trials) + 30)
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    with RecordDB(db_path) as db:
        assert [r.trial for r in db.records()] == list(range(len(trials) + 30))


# ---------------------------------------------------------------- JSON lines

def test_export_import_round_trip_skips_duplicates(db_path, tmp_path):
    with RecordDB(db_path) as db:
        for i in range(3):
            db.add(rec(1e-3 * (i + 1), trial=i))
        db.add(rec(None, "build_error", trial=3))
        assert db.export_jsonl(tmp_path / "out.jsonl") == 4
        buffer = io.StringIO()
        assert db.export_jsonl(buffer) == 4 and buffer.getvalue() == (tmp_path / "out.jsonl").read_text()
        original = db.records()
    with RecordDB(tmp_path / "copy.sqlite") as copy:
        assert copy.import_jsonl(tmp_path / "out.jsonl") == 4
        assert copy.import_jsonl(io.StringIO("\n" + buffer.getvalue() + "\n")) == 0  # duplicates, blank lines
        assert copy.records() == original


@pytest.mark.parametrize("line, match", [
    ("{not json", "line 2: not JSON"),
    ('{"task": "t"}', "line 2: not a tuning record: missing field"),
    (json.dumps({**rec().to_json(), "error": "segfault"}), "line 2: .*must be one of"),
    ("[1, 2]", "line 2: .*JSON object"),
])
def test_import_refuses_malformed_lines_and_adds_nothing(db_path, tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rec().to_json()) + "\n" + line + "\n")
    with RecordDB(db_path) as db:
        with pytest.raises(tilec.TilecError, match=match) as info:
            db.import_jsonl(path)
        assert str(path) in str(info.value) and db.records() == []


# ---------------------------------------------------------------- CLI

def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = tilec.cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_list_show_export_import(db_path, tmp_path, capsys, monkeypatch):
    rc, out, _ = run_cli(capsys, "records", "list")
    assert rc == 0 and "does not exist" in out and not db_path.exists()
    with RecordDB(db_path) as db:
        db.add(rec(2e-3, trial=1))
        db.add(rec(1e-3, trial=2, mr=4, nr=16, mc=8, kc=16))
        db.add(rec(None, "timeout", trial=3))
        db.add(rec(1e-5, task="0" * 24, compiler="stale"))
    rc, out, _ = run_cli(capsys, "records", "list")
    header, *rows = out.splitlines()
    assert rc == 0 and header.split() == ["TASK", "OP", "SHAPE", "TARGET", "TIME", "ERROR", "TRIAL", "AGE"]
    assert len(rows) == 4 and rows[0].split()[:5] == [TASK, "gemm", "M=128,N=96,K=64", resolve_target("llvm").key.rsplit(":", 1)[0], "2"]
    assert "timeout" in rows[2] and "+avx" not in out
    rc, out, _ = run_cli(capsys, "records", "list", "--records", str(db_path), "--task", "000")
    assert rc == 0 and len(out.splitlines()) == 2

    rc, out, _ = run_cli(capsys, "records", "show", TASK[:8])
    assert rc == 0 and len(out.split("\n\n")[0].splitlines()) == 4 and "(trial 2)" in out
    assert json.loads(out[out.index("["):]) == gemm_config(mr=4, nr=16, mc=8, kc=16)
    rc, out, _ = run_cli(capsys, "records", "show", "0" * 24)
    assert rc == 0 and "no usable record" in out and "0 failed, 1 stale (another compiler), 0 foreign" in out
    rc, _, err = run_cli(capsys, "records", "show", "fff")
    assert rc == 1 and err.startswith("tilec: error: no records of task fff")

    rc, out, err = run_cli(capsys, "records", "export", "-")
    assert rc == 0 and len(out.splitlines()) == 4 and "exported 4" in err
    exported = out
    assert run_cli(capsys, "records", "export", str(tmp_path / "x.jsonl"))[0] == 0
    copy = str(tmp_path / "copy.sqlite")
    rc, _, err = run_cli(capsys, "records", "import", str(tmp_path / "x.jsonl"), "--records", copy)
    assert rc == 0 and "imported 4 new" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO(exported))
    rc, _, err = run_cli(capsys, "records", "import", "-", "--records", copy)
    assert rc == 0 and "imported 0 new" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"task": 1}\n'))
    rc, _, err = run_cli(capsys, "records", "import", "-", "--records", copy)
    assert rc == 1 and err.startswith("tilec: error: <input>, line 1: not a tuning record")  # (sys.stdin says <stdin>)


def test_cli_reports_a_missing_database(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "records", "export", "-", "--records", str(tmp_path / "none.sqlite"))
    assert rc == 1 and "no tuning records at" in err


# ---------------------------------------------------------------- applying the best record

def gemm_inputs() -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_normal(SHAPES["A"]).astype(np.float32), rng.standard_normal(SHAPES["B"]).astype(np.float32)


def loop_ir(fn: tilec.Function = None) -> str:
    return (fn or tilec.compile(GEMM)).explain(SHAPES, stage="loop")


def test_the_best_record_is_applied(db_path):
    assert "C.acc: float32[4, 32]" not in loop_ir()
    with RecordDB(db_path) as db:
        db.add(rec(2e-3, mr=2, nr=16, mc=8, kc=16))
        db.add(rec(1e-3))
    assert "C.acc: float32[4, 32]" in loop_ir()
    fn = tilec.compile(GEMM)
    a, b = gemm_inputs()
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "C.acc: float32[4, 32]" not in loop_ir(fn.with_schedule(tilec.TemplateSchedule()))  # explicit wins
    options.use_records = False
    try:
        assert "C.acc: float32[4, 32]" not in loop_ir()
    finally:
        options.use_records = True


@pytest.mark.parametrize("column, value", [("schedule", "{not json"), ("schedule", json.dumps({"stmt": 0})),
                                           ("time_s", "fast"), ("trial", -3), ("error", "exploded")])
def test_a_damaged_row_is_skipped_with_one_warning_and_the_others_still_serve(db_path, column, value):
    """A row that is not a record (bad JSON, a wrong type: a hand-edited file, an older tilec) costs
    only itself: reading skips it with one TilecWarning naming it, and the next best record applies."""
    with RecordDB(db_path) as db:
        db.add(rec(2e-3))  # the runner-up: DISTINCT's register block
        db.add(rec(3e-3, mr=1, nr=16, mc=8, kc=16))
    best = rec(1e-3, mr=2, nr=16, mc=8, kc=16)  # the fastest, written damaged
    row = {**best.to_json(), "schedule": json.dumps(best.schedule), "created": 1.0, "digest": "damaged", column: value}
    with sqlite3.connect(db_path) as conn:
        damaged = conn.execute(f"INSERT INTO records ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                               tuple(row.values())).lastrowid
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with RecordDB(db_path) as db:
            assert len(db.records()) == 2 and len(db.records(TASK)) == 2
            best = db.best(TASK, resolve_target("llvm").key, compiler_fingerprint())
            assert best is not None and best.time_s == 2e-3
    about = [str(w.message) for w in caught if issubclass(w.category, tilec.TilecWarning) and f"row {damaged} " in str(w.message)]
    assert len(about) == 1  # once, however often it is read
    assert "damaged and skipped" in about[0] and str(db_path) in about[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tilec.TilecWarning)
        assert "C.acc: float32[4, 32]" in loop_ir()  # the compiler applies the runner-up's register block


def test_a_recorded_schedule_with_knobs_of_the_wrong_type_falls_back_to_the_default(db_path):
    with RecordDB(db_path) as db:
        db.add(rec(1e-3, mr="four", nr=16, mc=8, kc=16))
    with pytest.warns(tilec.TilecWarning, match="does not build and is skipped"):
        text = loop_ir()
    assert "C.acc" in text
    a, b = gemm_inputs()
    np.testing.assert_allclose(tilec.compile(GEMM)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_record_serves_every_program_that_differs_only_in_names(db_path):
    """Records are keyed by the program with its names numbered and its inputs' declared dimensions
    dropped (the shapes fix them): `tilec tune gemm`'s program, the README's matmul and a renamed
    copy are one task; a program whose statement reads a size symbol bound to another value is not."""
    declared = "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"
    assert task_key(str(tilec.parse(declared)), SHAPES, DTYPES, 0) == TASK
    renamed = "function (X[R, S], W[S, T]) -> (Y) { Y[a, b: R, T] = +(X[a, q] * W[q, b]); }"
    x_shapes, x_dtypes = {"X": SHAPES["A"], "W": SHAPES["B"]}, {"X": "float32", "W": "float32"}
    assert task_key(str(tilec.parse(renamed)), x_shapes, x_dtypes, 0) == TASK
    with RecordDB(db_path) as db:
        db.add(rec(1e-3))  # DISTINCT's register block, recorded for GEMM
    fn = tilec.compile(renamed)
    assert "Y.acc: float32[4, 32]" in fn.explain(x_shapes, stage="loop")
    a, b = gemm_inputs()
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # the same statement where M is A's second dimension (A is 128 x 64: M = 64, not 128)
    swapped = "function (A[K, M], B[L, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"
    assert task_key(str(tilec.parse(swapped)), SHAPES, DTYPES, 0) != TASK
    # and a different product of the same names is another task
    other = "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[j, k]); }"
    assert task_key(str(tilec.parse(other)), {"A": (128, 64), "B": (96, 64)}, DTYPES, 0) != TASK


def test_explain_and_tilec_log_say_where_each_schedule_came_from(db_path, monkeypatch, capsys):
    templates = tilec.compile(GEMM).explain(SHAPES, stage="templates")
    assert templates.rstrip().endswith("<- heuristic")
    with RecordDB(db_path) as db:
        db.add(rec(2e-3, mr=2, nr=16, mc=8, kc=16))
        db.add(rec(1e-3))
    monkeypatch.setenv("TILEC_LOG", "schedule")
    fn = tilec.compile(GEMM)
    fn(*gemm_inputs())
    log = capsys.readouterr().err
    assert "tilec schedule: function (A, B) -> (C)" in log and "A=128x64, B=64x96" in log
    assert f"<- tuning record 2 of {db_path} (task {TASK[:12]}, trial 0, 1 ms)" in log  # row 2: the faster one
    assert "<- tuning record 2 of" in fn.explain(SHAPES, stage="templates")
    assert "<- tuning record 2 of" in fn.explain(SHAPES)  # the whole explain: its templates section
    given = fn.with_schedule(tilec.TemplateSchedule())
    assert given.explain(SHAPES, stage="templates").rstrip().endswith("<- the given schedule")


def test_an_untuned_shape_takes_the_nearest_tuned_shapes_record(db_path):
    """The same statement at other sizes: the record of the nearest shape of the family applies
    where its knobs lower, and explain says so; a record's shapes are under numbered names."""
    from tilec.autotune.task import tasks_for

    def task_at(m: int, n: int, k: int):
        return tasks_for(GEMM, {"A": (m, k), "B": (k, n)}, {"A": "float32", "B": "float32"})[0]

    near, far = task_at(128, 96, 64), task_at(512, 512, 64)
    assert near.family[0] == far.family[0] and near.key != far.key
    with RecordDB(db_path) as db:
        db.add(near.record(DISTINCT, 1e-3, trial=1))
        db.add(far.record({"mr": 2, "nr": 16, "mc": 8, "kc": 16}, 5e-4, trial=1))
    shapes = {"A": (120, 64), "B": (64, 100)}
    fn = tilec.compile(GEMM)
    templates = fn.explain(shapes, stage="templates")
    assert f"<- nearest-shape reuse of tuning record 1 of {db_path}" in templates, templates
    assert "tuned at v0=128x64 v1=64x96" in templates
    assert "C.acc: float32[4, 32]" in fn.explain(shapes, stage="loop")  # the near record's register block
    a, b = rng.standard_normal(shapes["A"]).astype(np.float32), rng.standard_normal(shapes["B"]).astype(np.float32)
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
    # nothing is near enough 4096 rows: the heuristic
    assert tilec.compile(GEMM).explain({"A": (4096, 64), "B": (64, 100)}, stage="templates").rstrip().endswith("<- heuristic")
    # a record of the exact shape wins over any neighbour's
    exact = task_at(120, 100, 64)
    with RecordDB(db_path) as db:
        db.add(exact.record({"mr": 2, "nr": 16, "mc": 8, "kc": 16}, 2e-3, trial=1))
    assert "<- tuning record 3 of" in tilec.compile(GEMM).explain(shapes, stage="templates")


def test_a_record_never_replaces_the_winograd_that_untuned_calls_run(db_path):
    """Records come from tunable statements only: another shape's implicit-GEMM record is reused
    where the heuristic runs the implicit GEMM, never where it runs Winograd (no knobs)."""
    from tilec.autotune.task import tasks_for
    from tilec.bench.ops.cases import select_cases

    def conv(channels: int) -> tuple[str, dict]:
        case = select_cases("conv2d", [f"N=1,C={channels},H=8,W=8,CO={channels},KH=3,KW=3,stride=1,pad=1"])[0]
        return case.source(), {"X": (1, channels, 8, 8), "F": (channels, channels, 3, 3)}

    src, shapes = conv(96)
    task = tasks_for(src, shapes)[0]
    with RecordDB(db_path) as db:
        db.add(task.record(dict(task.default_config(), mr=2, nr=16, kc=16, mc=2), 1e-4, trial=1))
    near, wide = conv(112), conv(128)
    assert "nearest-shape reuse of tuning record 1" in tilec.compile(near[0]).explain(near[1], stage="templates")
    templates = tilec.compile(wide[0]).explain(wide[1], stage="templates")
    assert "winograd" in templates and "tuning record" not in templates, templates


def test_stale_foreign_and_failed_records_are_never_applied(db_path):
    with RecordDB(db_path) as db:
        db.add(rec(1e-3, compiler="0.0.1+stale"))
        db.add(rec(1e-3, target="llvm:othercpu:+avx2"))
        db.add(rec(None, "runtime_error"))
        db.add(rec(1e-3, task=task_key(str(tilec.parse(GEMM)), SHAPES, {**DTYPES, "A": "float64"}, 0)))
    assert "C.acc: float32[4, 32]" not in loop_ir()


def test_the_lookup_is_one_query_per_statement_per_signature(db_path, monkeypatch):
    with RecordDB(db_path) as db:
        db.add(rec())
    calls = []
    original = RecordDB.best_with_id
    monkeypatch.setattr(RecordDB, "best_with_id", lambda self, *a: calls.append(a) or original(self, *a))
    src = "function (A[M, K], B[K, N]) -> (O) { C[i, j: M, N] = +(A[i, k] * B[k, j]); O = relu(C); }"
    fn = tilec.compile(src)
    a, b = gemm_inputs()
    for _ in range(3):
        np.testing.assert_allclose(fn(a, b), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    fn.explain(SHAPES)
    # one signature: the tunable statement and its cut; the relu (the matmul's epilogue) takes no record
    assert len(calls) == 2
    fn(a[:64], b)
    assert len(calls) == 4


@pytest.mark.parametrize("schedule, match", [
    (gemm_config(mr=4, nr=32, mc=10), "multiple of mr"),
    ([{"stmt": 0, "template": "from_the_future", "knobs": {}}], "unknown template"),
    (gemm_config(warp=4), "no knob"),
    ([{"stmt": 1, "template": "default"}], "no config for statement 0"),
])
def test_a_record_that_does_not_build_is_skipped_with_a_warning(db_path, schedule, match):
    with RecordDB(db_path) as db:
        db.add(Record(TASK, resolve_target("llvm").key, compiler_fingerprint(), schedule, 1e-3, "ok", trial=9))
    a, b = gemm_inputs()
    with pytest.warns(tilec.TilecWarning, match=f"trial 9.*does not build and is skipped.*{match}"):
        out = tilec.compile(GEMM)(a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_an_unreadable_database_warns_once_and_compiles_the_default(db_path):
    db_path.write_bytes(b"garbage" * 1000)
    a, b = gemm_inputs()
    with pytest.warns(tilec.TilecWarning, match="cannot open the tuning records") as caught:
        np.testing.assert_allclose(tilec.compile(GEMM)(a, b), a @ b, rtol=1e-4, atol=1e-4)
        tilec.compile(GEMM)(a, b)
    assert len([w for w in caught if "tuning records" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tilec.compile(GEMM)(a, b)


def test_using_switches_the_records_a_function_takes_back_and_forth(db_path, tmp_path):
    """One process runs the same Function tuned and untuned, alternately (`tilec bench model
    --records`): the kernels chosen under one set of records are never served under another."""
    with RecordDB(db_path) as db:
        db.add(rec(1e-3))
    fn = tilec.compile(GEMM)
    a, b = gemm_inputs()
    kernels = {}
    for records in (db_path, None, db_path, None):
        with using(records):
            assert ("C.acc: float32[4, 32]" in loop_ir(fn)) == (records is not None)
            np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
            kernel = fn.kernel_for((SHAPES["A"], SHAPES["B"]), ("float32", "float32"))
            assert kernels.setdefault(records, kernel) is kernel  # the same kernel each time back
    assert kernels[db_path].key != kernels[None].key
    assert options.use_records and options.records_path == db_path  # as before the blocks
    with pytest.raises(tilec.TilecError, match="no tuning-record database at .*missing.sqlite"):
        with using(tmp_path / "missing.sqlite"):
            pass
