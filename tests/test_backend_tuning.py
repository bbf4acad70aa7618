"""Tuning records apply to the kernels the torch.compile backend builds: a training step's kernels
give tuner tasks (`tilec.torch_backend.tuning_tasks()`), a few candidates of one are measured into a
fresh record database, and a new process compiling the same model applies that database's best
schedule to the kernel (and computes the same loss)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""
    import json, sys, torch
    import tilec.torch_backend as tb
    from tilec.torch_backend import compiler, tasks as tasks_module
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 16))
    x = torch.randn(40, 48)
    loss = torch.compile(model, backend="tilec")(x).square().mean()
    loss.backward()
    tasks = tb.tuning_tasks()
    if sys.argv[1] == "tune":
        from tilec.autotune.measure import LocalMeasurer, MeasureOptions
        from tilec.autotune.tuner import tune
        from tilec.records import RecordDB
        with RecordDB(None) as db, LocalMeasurer(MeasureOptions(timeout_s=60, build_workers=1)) as m:
            best = tune(tasks[0], 3, m, db, strategy="random")
        print(json.dumps({"tasks": len(tasks), "tuned": tasks[0].key, "best": best is not None}))
    else:
        functions = [compiler.forward_fn(source) for source, _ in tasks_module.PROGRAMS]
        recorded = [fn for fn in functions if any(s is not None for s in fn._recorded.values())]
        print(json.dumps({"tasks": len(tasks), "with_records": len(recorded), "loss": loss.item()}))
""")


def _run(mode: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tuned_records_apply_to_backend_kernels(tmp_path: Path) -> None:
    env = {**os.environ, "TILEC_RECORDS": str(tmp_path / "records.sqlite"), "TILEC_CACHE_DIR": str(tmp_path / "cache")}
    before = _run("check", env)
    assert before["tasks"] >= 1 and before["with_records"] == 0
    tuned = _run("tune", env)
    assert tuned["best"], tuned
    after = _run("check", env)
    assert after["with_records"] >= 1, after
    assert abs(after["loss"] - before["loss"]) <= 1e-4 * abs(before["loss"])


def test_one_process_runs_a_compiled_model_tuned_and_untuned_alternately(tmp_path: Path) -> None:
    """`tilec.records.using` around each step (as `tilec bench model --records` runs its "untuned"
    side): the backend's kernels take the records' schedule inside the block and the heuristic's
    outside it, back and forth in one process, and both compute the same loss."""
    import torch

    import tilec.torch_backend as tb
    from tilec.autotune.measure import LocalMeasurer, MeasureOptions
    from tilec.autotune.tuner import tune
    from tilec.config import options
    from tilec.records import RecordDB, using
    from tilec.torch_backend import compiler, tasks as tasks_module

    torch.manual_seed(0)
    tasks_module.PROGRAMS.clear()  # (earlier tests' programs would come first in tuning_tasks())
    model = torch.nn.Sequential(torch.nn.Linear(40, 88), torch.nn.ReLU(), torch.nn.Linear(88, 24))
    compiled = torch.compile(model, backend="tilec")
    x = torch.randn(36, 40)

    def loss() -> float:
        out = compiled(x).square().mean()
        out.backward()
        return out.item()

    path = tmp_path / "records.sqlite"
    with using(None):
        untuned = loss()
    task = tb.tuning_tasks()[0]
    with RecordDB(path) as db, LocalMeasurer(MeasureOptions(timeout_s=60, build_workers=1)) as m:
        assert tune(task, 3, m, db, strategy="random") is not None
    runs = []
    for records in (path, None, path, None):
        with using(records):
            runs.append((records, loss(), options.records_key()))
    assert all(abs(value - untuned) <= 1e-4 * abs(untuned) for _, value, _ in runs)
    by_records: dict = {}  # the records in force -> the schedules the kernels' lookups found under them
    for source, _ in tasks_module.PROGRAMS:
        for (_sig, key), schedule in compiler.forward_fn(source)._recorded.items():
            by_records.setdefault(key, []).append(schedule)
    tuned_key, untuned_key = runs[0][2], runs[1][2]
    assert by_records[untuned_key] and all(s is None for s in by_records[untuned_key])  # the heuristic's
    assert any(s is not None for s in by_records[tuned_key])
