"""Whole-model tuning under a budget (tilec.autotune.scheduler, `tilec tune model --budget`): every
task gets a first round, later rounds go where the expected gain per second is largest, the budget
holds, each tuned task is confirmed, and the table's shares add up; bad input is a TilecError."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import tilec
from tilec.autotune.measure import FakeMeasurer
from tilec.autotune.scheduler import EFFORTS, format_table, parse_budget, revert_to_defaults, step_estimate, tune_tasks
from tilec.autotune.task import tasks_for
from tilec.bench.ops import gemm_source
from tilec.records import RecordDB


def gemm_task(m: int, n: int, k: int, label: str):
    return tasks_for(gemm_source({}), {"A": (m, k), "B": (k, n)}, label=label)[0]


def ticking(step: float = 1.0):
    """A clock that moves `step` seconds each time it is read."""
    counter = itertools.count()
    return lambda: next(counter) * step


def test_rounds_go_where_the_step_spends_its_time(tmp_path: Path) -> None:
    heavy, light = gemm_task(64, 64, 64, "heavy"), gemm_task(64, 48, 64, "light")
    db = RecordDB(tmp_path / "r.sqlite")
    measurer = FakeMeasurer()
    budget = 60.0
    clock = ticking()
    rows = tune_tasks([(heavy, 10), (light, 1)], measurer, db, budget, effort="quick", clock=clock)
    by_label = {r.task.label: r for r in rows}
    assert [r.task.label for r in rows] == ["heavy", "light"]
    assert by_label["light"].rounds >= 1 and by_label["heavy"].trials > 3 * by_label["light"].trials
    assert clock() <= budget + 3 * len(rows) + 10  # the rounds stop inside the budget (the clock ticks per read)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert by_label["heavy"].share == pytest.approx(10 * by_label["heavy"].default_s /
                                                    (10 * by_label["heavy"].default_s + by_label["light"].default_s))
    for row in rows:  # confirmed: each task's best is its confirmation's
        best = db.best(row.task.key, row.task.target.key, db.records(row.task.key)[0].compiler)
        assert best is not None and best.confirmed == 1 and best.time_s == pytest.approx(row.best_s)
        assert row.best_s <= row.default_s
    before, after = step_estimate(rows)
    assert before == pytest.approx(sum(r.weight * r.default_s for r in rows)) and after <= before
    table = format_table(rows)
    assert table.splitlines()[1].startswith("heavy") and "light" in table


def test_tuned_tasks_go_back_to_their_defaults_when_the_step_did_not_gain(tmp_path: Path) -> None:
    from tilec.pipeline import compiler_fingerprint

    task = gemm_task(64, 64, 64, "t")
    db = RecordDB(tmp_path / "r.sqlite")
    (row,) = tune_tasks([(task, 1)], FakeMeasurer(), db, 30.0, effort="quick", clock=ticking())
    default = task.schedule(task.default_config()).to_json()
    best = db.best(task.key, task.target.key, compiler_fingerprint())
    assert best is not None and best.schedule != default  # the fake cost has its optimum elsewhere
    assert revert_to_defaults([row], db) == 1
    back = db.best(task.key, task.target.key, compiler_fingerprint())
    assert back is not None and back.schedule == default and back.confirmed == best.confirmed + 1
    assert row.best_s == back.time_s and revert_to_defaults([row], db) == 0  # already there

def test_a_budget_smaller_than_a_round_still_tunes_the_first_task_once(tmp_path: Path) -> None:
    a, b = gemm_task(64, 64, 64, "a"), gemm_task(64, 48, 64, "b")
    rows = tune_tasks([(a, 1), (b, 1)], FakeMeasurer(), RecordDB(tmp_path / "r.sqlite"), 0.5, effort="quick",
                      clock=ticking(10.0))
    assert [r.rounds for r in rows] == [1, 0] and rows[0].trials == EFFORTS["quick"].round
    assert rows[1].best_s is None and "-" in format_table(rows)


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("1.5m", 90.0)])
def test_budgets_read_as_durations(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["ten", "", "-5m", "0", "inf", "5x"])
def test_a_bad_budget_is_refused(text: str) -> None:
    with pytest.raises(tilec.TilecError, match="budget"):
        parse_budget(text)


def test_unknown_effort_is_refused(tmp_path: Path) -> None:
    with pytest.raises(tilec.TilecError, match="effort 'huge'"):
        tune_tasks([], FakeMeasurer(), RecordDB(tmp_path / "r.sqlite"), 1.0, effort="huge")


MODEL_FILE = '''
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8))
example_inputs = (torch.randn(16, 32),)
'''


def test_cli_tunes_a_model_file_within_its_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    path = tmp_path / "net.py"
    path.write_text(MODEL_FILE)
    records = tmp_path / "r.sqlite"
    assert main(["tune", "model", str(path), "--budget", "20s", "--effort", "quick", "--records", str(records)]) == 0
    out = capsys.readouterr()
    summaries = [json.loads(line) for line in out.out.strip().splitlines()]
    assert summaries and all(s["runs_per_step"] >= 1 and s["trials"] >= 0 for s in summaries)
    programs = {s["program"]: s["share"] for s in summaries}  # one share per program, however many statements
    assert all(programs[s["program"]] == s["share"] for s in summaries)
    assert 0 < max(programs.values()) <= 1.0 and sum(programs.values()) == pytest.approx(1.0, abs=1e-3)
    assert "share" in out.err and "tuned kernels per step, as the tuner timed them alone" in out.err
    assert "training step, interleaved in this process (40 timed steps each)" in out.err  # checked on the step itself
    with RecordDB(records) as db:
        tuned = [s for s in summaries if s["trials"]]
        assert tuned and all(any(r.confirmed for r in db.records(s["task"])) for s in tuned)
        assert {r.op for r in db.records()} == {"model-net"}


@pytest.mark.parametrize("argv,match", [
    (["tune", "gemm", "--budget", "1m"], "--budget tunes a whole model"),
    (["tune", "model", "missing.py", "--budget", "1m"], "no such Python file"),
    (["tune", "model", "--budget", "soon"], "budget 'soon'"),
])
def test_cli_budget_errors_name_the_problem(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    assert main(argv) != 0
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_a_model_file_without_example_inputs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    path = tmp_path / "net.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(4, 4)\n")
    assert main(["tune", "model", str(path), "--budget", "1m"]) != 0
    assert "must define example_inputs" in capsys.readouterr().err


@pytest.mark.parametrize("tuned_ms, reverted", [(10.0, False), (10.15, True), (10.5, True)])
def test_the_step_check_keeps_the_records_only_when_the_rounds_gain_one_percent(
        tuned_ms: float, reverted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`tilec tune model`'s check: the tilec side with the records against the untuned side, in this
    process; below a 1% median gain over the rounds, the tuned tasks go back on their defaults."""
    import argparse

    from tilec.autotune import scheduler
    from tilec.bench import model_step, models
    from tilec.cli import tune_model

    calls: list[dict] = []

    def run_model(work, steps, warmup, sides, records=None):
        calls.append({"work": work.name, "steps": steps, "sides": sides, "records": records})
        return model_step.ModelResult(work.name, times_ms={"tilec": [tuned_ms] * 4, "untuned": [10.2] * 4},
                                      round_ms={"tilec": [tuned_ms] * 4, "untuned": [10.2] * 4})

    monkeypatch.setattr(model_step, "run_model", run_model)
    monkeypatch.setattr(scheduler, "revert_to_defaults", lambda rows, db: len(rows))
    records = tmp_path / "r.sqlite"
    RecordDB(records).close()
    args = argparse.Namespace(records=str(records), model_file=None, model="mlp", verify_steps=8)
    tune_model.verify_step(args, ["row"])
    err = capsys.readouterr().err
    assert calls == [{"work": "mlp", "steps": 8, "sides": {"tilec": models.BACKEND}, "records": records}]
    assert f"10.200 ms untuned, {tuned_ms:.3f} ms tuned (gain {10.2 / tuned_ms:.3f}x" in err
    assert ("back on it" in err) == reverted
