"""Tuning on a Ray cluster (tilec.autotune.distributed, `tilec tune --ray`): a local cluster of two
nodes (ray.cluster_utils.Cluster, each advertising this machine's hardware resource) measures a
task's 64 trials with both nodes, survives one node's death mid-run with every trial recorded,
and finds the same best as a local run; a node of other hardware is never used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

import tilec
from tilec.autotune.distributed import RayMeasurer, hardware_resource, node_resources
from tilec.autotune.measure import FakeMeasurer
from tilec.autotune.task import tasks_for
from tilec.autotune.tuner import tune
from tilec.bench.ops import gemm_source
from tilec.records import RecordDB


def gemm_task(m: int, n: int, k: int, target: str = "llvm") -> Any:
    from tilec.pipeline import resolve_target

    return tasks_for(gemm_source({}), {"A": (m, k), "B": (k, n)}, target=resolve_target(target),
                     label=f"gemm {m}x{n}x{k}")[0]


def test_an_address_nobody_answers_at_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    if ray.is_initialized():  # (with the module's cluster up, RayMeasurer would use it)
        pytest.fail("run this test before the cluster fixture")
    assert main(["tune", "gemm", "--shape", "M=48,N=40,K=32", "--trials", "2", "--ray", "127.0.0.1:1"]) != 0
    err = capsys.readouterr().err
    assert "no Ray cluster answers there" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def cluster():
    here = node_resources()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": here})
    second = c.add_node(num_cpus=1, resources=here)
    c.add_node(num_cpus=1, resources={hardware_resource("another machine"): 1})  # never measures for us
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c, second
    ray.shutdown()
    c.shutdown()


def test_two_nodes_measure_and_a_dead_one_loses_nothing(cluster: Any, tmp_path: Path) -> None:
    c, second = cluster
    task = gemm_task(64, 64, 64)
    with RecordDB(tmp_path / "local.sqlite") as db:
        local = tune(task, 64, FakeMeasurer(), db, seed=3)
    killed: list[int] = []

    def kill_the_second_node(progress: Any) -> None:
        if progress.measured == 24 and not killed:
            killed.append(progress.measured)
            c.remove_node(second)  # the next batch is sent to its actor too, and comes back from the other

    with RecordDB(tmp_path / "ray.sqlite") as db, RayMeasurer(None, factory=FakeMeasurer) as measurer:
        best = tune(task, 64, measurer, db, seed=3, progress=kill_the_second_node)
        trials = [r for r in db.records(task.key) if r.confirmed == 0]
        assert len(trials) == 64 and sorted(r.trial for r in trials) == list(range(1, 65))
        assert len({json.dumps(r.schedule) for r in trials}) == 64
    assert killed and measurer.lost == [second.node_id]
    assert len(measurer.measured_by) == 2 and sum(measurer.measured_by.values()) == 64
    assert measurer.measured_by[second.node_id] < 24 + 8  # nothing after its death
    assert best is not None and local is not None
    assert best.schedule == local.schedule and best.time_s == pytest.approx(local.time_s)


def test_cli_tunes_on_the_cluster_with_real_measurements(cluster: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    records = tmp_path / "r.sqlite"
    assert main(["tune", "gemm", "--shape", "M=48,N=40,K=32", "--trials", "6", "--ray", "auto",
                 "--records", str(records)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["time_ms"] > 0 and summary["confirmed"]
    with RecordDB(records) as db:
        trials = [r for r in db.records(summary["task"]) if r.confirmed == 0]
    assert len(trials) == 6 and all(r.error == "ok" and r.time_s for r in trials)


def test_a_task_for_other_hardware_finds_no_node(cluster: Any) -> None:
    task = gemm_task(32, 32, 32, target="llvm -mcpu=haswell")
    with RayMeasurer(None, factory=FakeMeasurer) as measurer:
        with pytest.raises(tilec.TilecError, match="no live node of the Ray cluster advertises"):
            measurer.measure(task, [task.default_config()])

