"""Tuning the GPU templates (tilec.autotune.gpu): spaces with reasons, features from the GPU loop
IR, the tuner with a fake measurer (no GPU), the measurement plumbing on cuda-sim, and the CLI."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tilec.autotune.features import Featurizer
from tilec.autotune.measure import FakeMeasurer
from tilec.records import RecordDB
from tilec.autotune.space import space_for
from tilec.autotune.task import Task, tasks_for
from tilec.autotune.tuner import tune
from tilec.bench.ops import attention_source
from tilec.schedule.gpu import attention as gpu_attention
from tilec.schedule.gpu.gemm import GpuGemmKnobs
from tilec.pipeline import resolve_target

from reference import MATMUL

SIM = resolve_target("cuda-sim")


def task(source: str, shapes: dict[str, tuple[int, ...]], dtype: str = "float32") -> Task:
    (t, *_) = tasks_for(source, shapes, {n: dtype for n in shapes}, SIM, label="test")
    return t


GEMM = task(MATMUL, {"A": (256, 96), "B": (96, 200)})
TC = task(MATMUL, {"A": (128, 64), "B": (64, 96)}, "float16")
ATT = task(attention_source({"D": 64}), {"Q": (1, 2, 256, 64), "K": (1, 2, 256, 64), "V": (1, 2, 256, 64)}, "float16")


def test_templates_of_the_gpu_tasks() -> None:
    assert (GEMM.template, TC.template, ATT.template) == ("gpu_gemm", "gpu_tensorcore", "gpu_attention")
    assert ATT.flops == 2.0 * 2 * 256 * 256 * 128


@pytest.mark.parametrize("t", [GEMM, TC, ATT], ids=lambda t: t.template)
def test_gpu_spaces_hold_the_default_and_only_buildable_points(t: Task) -> None:
    space = space_for(t)
    assert space.index(t.default_config()) is not None
    assert len(space) > 4 and space.rejections, "the constraints should reject something, with reasons"
    rng = np.random.default_rng(0)
    for i in rng.choice(len(space), size=3, replace=False):  # legal points lower to GPU loop IR
        t.lower(space.config(int(i)))


def test_constraint_reasons_name_the_limit() -> None:
    space = space_for(GEMM)
    reason = space.reason({"bm": 128, "bn": 128, "bk": 32, "tm": 1, "tn": 1, "double_buffer": True})
    assert reason is not None and "threads per block" in reason and "shared memory" in reason
    att = space_for(ATT)
    assert "registers per thread" in str(att.reason({"bq": 64, "bk": 128}))
    assert SIM.gpu is not None
    assert GpuGemmKnobs(**GEMM.default_config()).problems(SIM.gpu) == []
    assert gpu_attention.GpuAttentionKnobs(**ATT.default_config()).problems(64, 64, SIM.gpu) == []


def test_features_come_from_the_gpu_loop_ir() -> None:
    f = Featurizer(GEMM, with_ir=True)
    space = space_for(GEMM)
    a = f(GEMM.default_config())
    small = {"bm": 16, "bn": 16, "bk": 8, "tm": 1, "tn": 1, "double_buffer": False}
    b = f(small)
    assert len(a) == len(b) == len(f.names) and "shared_kib" in f.names and "threads" in f.names
    named = dict(zip(f.names, b))
    assert named["threads"] == 256 and named["shared_kib"] == (16 * 8 * 2) * 4 / 1024
    assert named["log_blocks"] == pytest.approx(np.log2(16 * 13))
    assert f.matrix([space.config(i) for i in range(5)]).shape == (5, len(f.names))


def test_tuner_runs_the_gpu_spaces_with_a_fake_measurer(tmp_path: Any) -> None:
    def cost(c: Any) -> float:  # fastest at bq=128, bk=32
        return 1e-3 * (1 + abs(np.log2(c["bq"] / 128)) + abs(np.log2(c["bk"] / 32)))

    with RecordDB(tmp_path / "r.sqlite") as db:
        best = tune(ATT, 12, FakeMeasurer(cost=cost), db, seed=1)
    assert best is not None and best.error == "ok"


def test_cli_tune_on_cuda_sim_measures_in_the_child_process(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The plumbing only: candidates built for cuda-sim, checked against the default's result, timed."""
    from tilec.cli import main

    code = main(["tune", "gemm", "--shape", "M=48,N=40,K=24", "--target", "cuda-sim", "--trials", "3",
                 "--records", str(tmp_path / "r.sqlite")])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["task"]
    with RecordDB(tmp_path / "r.sqlite") as db:
        records = [r for r in db.records(summary["task"]) if r.confirmed == 0]
    assert len(records) == 3 and all(r.target.startswith("cuda-sim:") for r in records)
    assert sum(r.error == "ok" for r in records) >= 1
