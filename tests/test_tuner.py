"""The autotuner's parts, each alone: space, features, cost model, search, measurement, tuner."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pytest

from tilec.autotune.features import Featurizer
from tilec.autotune.measure import FakeMeasurer, LocalMeasurer, MeasureOptions, synthetic_cost
from tilec.records import Record, RecordDB
from tilec.autotune.search import ModelSearch, RandomSearch
from tilec.autotune.space import Constraint, Knob, Space, SpaceTooLarge, space_for
from tilec.autotune.task import Task, tasks_for
from tilec.autotune.tuner import best_so_far, tune
from tilec.bench.ops import attention_source, gemm_source
from tilec.schedule.template_schedule import TemplateSchedule

pytest.importorskip("xgboost")
from tilec.autotune.model import CostModel  # noqa: E402


def gemm_task(m: int = 256, n: int = 256, k: int = 256) -> Task:
    return tasks_for(gemm_source({}), {"A": (m, k), "B": (k, n)}, label=f"gemm {m}x{n}x{k}")[0]


@pytest.fixture(scope="module")
def task() -> Task:
    return gemm_task()


@pytest.fixture(scope="module")
def space(task: Task) -> Any:
    return space_for(task)


# ------------------------------------------------------------------ task and space


def test_tasks_for_finds_templates() -> None:
    (attn,) = tasks_for(attention_source(dict(D=16)), {"Q": (1, 2, 32, 16), "K": (1, 2, 32, 16),
                                                       "V": (1, 2, 32, 16)})
    assert attn.template == "attention" and attn.stmt == 0
    (g,) = tasks_for(gemm_source({}), {"A": (64, 32), "B": (32, 48)})
    assert g.template == "implicit_gemm" and (g.plan.m, g.plan.n, g.plan.k) == (64, 48, 32)
    assert g.schedule(g.default_config()).configs[0].template == "implicit_gemm"


def test_space_round_trips_and_holds_the_default(task: Task, space: Space) -> None:
    assert len(space) > 100
    for i in list(range(0, len(space), 97)) + [len(space) - 1]:
        assert space.index(space.config(i)) == i
    assert space.index(task.default_config()) is not None
    assert space_for(task).config(5) == space.config(5)  # deterministic
    assert all(j != 5 and space.index(space.config(j)) == j for j in space.neighbours(5))


def test_space_constraints_give_reasons(task: Task, space: Space) -> None:
    good = space.config(0)
    assert space.reason(good) is None
    assert "multiple of mr" in str(space.reason(dict(good, mr=4, mc=6)))
    assert "vector registers" in str(space.reason(dict(good, mr=14, nr=task.target.vector_bits // 8)))
    assert space.index(dict(good, mr=4, mc=6)) is None
    assert space.rejections["mc_multiple"] > 0


def test_space_size_cap_is_actionable() -> None:
    with pytest.raises(SpaceTooLarge, match="drop choices from the largest knob"):
        Space((Knob("a", tuple(range(100))), Knob("b", tuple(range(100)))), max_points=1000)
    small = Space((Knob("a", (1, 2, 3)),), (Constraint("odd", lambda c: None if c["a"] % 2 else "even"),))
    assert len(small) == 2 and small.reason({"a": 2}) == "odd: even"


# ------------------------------------------------------------------ features and model


def test_features_fixed_length_and_finite(task: Task, space: Space) -> None:
    for with_ir in (False, True):
        f = Featurizer(task, with_ir=with_ir)
        X = f.matrix([space.config(i) for i in range(0, len(space), 50)])  # noqa: N806
        assert X.shape[1] == len(f.names) and np.isfinite(X).all()
    attn = tasks_for(attention_source(dict(D=16)), {n: (1, 2, 32, 16) for n in "QKV"})[0]
    fa = Featurizer(attn, with_ir=True)
    assert fa(attn.default_config()).shape == (len(fa.names),)


def test_model_ranks_and_saves_json(tmp_path: Path, task: Task, space: Space) -> None:
    f = Featurizer(task)
    configs = [space.config(i) for i in range(0, len(space), 40)]
    X, y = f.matrix(configs), [synthetic_cost(c) for c in configs]  # noqa: N806
    model = CostModel(seed=0)
    assert not model.predict(X).any()  # untrained: no opinion
    model.fit(X, y)
    score = model.predict(X)
    ranks = [np.argsort(np.argsort(v)) for v in (score, -np.asarray(y))]
    assert np.corrcoef(*ranks)[0, 1] > 0.8  # higher score = faster (Spearman)
    path = tmp_path / "model.json"
    model.save(path)
    json.loads(path.read_text())  # XGBoost JSON, not a pickle
    assert np.allclose(CostModel.load(path).predict(X), score)
    transfer = CostModel(seed=0)
    transfer.add_prior(X, y)
    transfer.fit(X[:0], [])
    assert transfer.trained


# ------------------------------------------------------------------ search and tuner (fake measurer)


def _run(search: RandomSearch, batches: int, n: int = 8) -> list[int]:
    seen: list[int] = []
    for _ in range(batches):
        batch = search.next_batch(n)
        seen += batch
        search.update([(i, synthetic_cost(search.space.config(i))) for i in batch])
    return seen


def test_search_is_reproducible_and_never_repeats(task: Task, space: Space) -> None:
    def make(seed: int) -> ModelSearch:
        return ModelSearch(space, Featurizer(task), CostModel(seed), seed=seed, first=[3])

    a, b = _run(make(1), 4), _run(make(1), 4)
    assert a == b and len(set(a)) == len(a) == 32 and a[0] == 3
    assert _run(make(2), 4) != a
    r = _run(RandomSearch(space, seed=1), 4)
    assert r == _run(RandomSearch(space, seed=1), 4) and len(set(r)) == 32


def test_sweep_proposes_the_models_best_and_annealing_takes_large_spaces(task: Task, space: Space) -> None:
    featurizer = Featurizer(task)
    sweep = ModelSearch(space, featurizer, CostModel(0), seed=0, explore=0.0)
    sweep.update([(i, synthetic_cost(space.config(i))) for i in sweep.next_batch(16)])
    batch = sweep.next_batch(4)
    free = [i for i in range(len(space)) if i not in sweep.proposed or i in batch]
    scores = dict(zip(free, sweep.model.predict(featurizer.matrix([space.config(i) for i in free]))))
    top = sorted(scores.values(), reverse=True)[:4]
    assert sorted((scores[i] for i in batch), reverse=True) == pytest.approx(top)
    # past the sweep's size limit the same search anneals: reproducible, never repeating
    def anneal(seed: int) -> ModelSearch:
        return ModelSearch(space, Featurizer(task), CostModel(seed), seed=seed, sweep_points=0)

    a = _run(anneal(3), 4)
    assert a == _run(anneal(3), 4) and len(set(a)) == len(a) == 32


def test_search_stops_early() -> None:
    flat = Space((Knob("x", tuple(range(50))),))
    s = RandomSearch(flat, seed=0, patience=2)
    s.update([(0, 1.0)])
    for _ in range(2):
        s.update([(i, 2.0) for i in s.next_batch(4)])
    assert s.done


def test_tuner_finds_the_synthetic_optimum_and_resumes(tmp_path: Path) -> None:
    t = gemm_task(64, 64, 64)
    space = space_for(t)
    optimum = min(synthetic_cost(space.config(i)) for i in range(len(space)))
    db = RecordDB(tmp_path / "r.sqlite")
    fake = FakeMeasurer(faults={"build_error": lambda c: c["mr"] == 3, "timeout": lambda c: c["mr"] == 10})
    best = tune(t, 96, fake, db, seed=0)
    assert best is not None and best.time_s == pytest.approx(optimum) and best.confirmed == 1
    trials = [r for r in db.records(t.key) if r.confirmed == 0]
    assert len(trials) == 96 == len({json.dumps(c, sort_keys=True) for c in fake.calls})
    assert {r.error for r in trials} >= {"ok"}
    assert fake.calls[0] == t.default_config()
    # the confirmation re-measured the 4 fastest trials and the default, once, after the search
    (confirmed,) = fake.remeasured
    fastest = sorted((r for r in trials if r.time_s is not None), key=lambda r: (r.time_s, r.trial))[:4]
    assert [t.schedule(c).to_json() for c in confirmed] == [r.schedule for r in fastest] + [t.schedule(t.default_config()).to_json()]
    # a rerun measures `trials` new candidates, none measured before
    again = FakeMeasurer()
    tune(t, 8, again, db, seed=0)
    assert len(again.calls) == 8 and len([r for r in db.records(t.key) if r.confirmed == 0]) == 104
    assert not {json.dumps(c, sort_keys=True) for c in again.calls} & {json.dumps(c, sort_keys=True) for c in fake.calls}
    assert best_so_far(db.records(t.key))[-1] == pytest.approx(optimum)
    # ... and confirms again, with the previous confirmation's best among the candidates
    assert len(again.remeasured) == 1 and t.config_of(TemplateSchedule.from_json(best.schedule)) in again.remeasured[0]


def test_the_confirmation_undoes_a_lucky_trial(tmp_path: Path) -> None:
    """A candidate whose trial ran 40% fast by luck ranks first among the trials, but its
    re-measurement beside the others shows its real time, and the truly fastest becomes the best;
    the default's time in the summary is the one measured beside them."""
    from tilec.autotune.tuner import default_time
    from tilec.pipeline import compiler_fingerprint

    t = gemm_task(64, 64, 64)
    space = space_for(t)
    ranked = sorted(range(len(space)), key=lambda i: synthetic_cost(space.config(i)))
    optimum = space.config(ranked[0])
    lucky = next(space.config(i) for i in ranked if synthetic_cost(space.config(i)) > 1.3 * synthetic_cost(optimum))
    db = RecordDB(tmp_path / "r.sqlite")
    for trial, (config, luck) in enumerate([(t.default_config(), 1.0), (lucky, 0.6), (optimum, 1.0)], 1):
        db.add(Record(t.key, t.target.key, compiler_fingerprint(), t.schedule(config).to_json(),
                      synthetic_cost(config) * luck, "ok", trial=trial))
    assert synthetic_cost(lucky) * 0.6 < synthetic_cost(optimum) < synthetic_cost(lucky)
    truth = FakeMeasurer()
    best = tune(t, 0, truth, db, seed=0, confirm=2)  # no new trials: only the confirmation
    assert truth.calls == [] and len(truth.remeasured) == 1
    assert best is not None and best.confirmed == 1 and best.time_s == pytest.approx(synthetic_cost(optimum))
    assert t.config_of(TemplateSchedule.from_json(best.schedule)) == optimum
    assert default_time(t, db) == pytest.approx(synthetic_cost(t.default_config()))
    assert tune(t, 0, truth, db, seed=0) == best and len(truth.remeasured) == 1  # nothing new: not again


def test_a_candidate_must_beat_the_default_in_most_rounds_to_be_kept() -> None:
    """Round by round, side by side: a lower median won in half the rounds is noise, not a win;
    how many wins are enough is a one-sided sign test's answer, stricter with more candidates."""
    from math import comb

    from tilec.autotune.confirm import ALPHA, beats, wins_needed

    default = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    assert beats([9.0] * 8, default) and beats([9.0] * 8, default, candidates=5)
    seven = [9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 12.0]  # P(7 or 8 wins of 8 by chance) = 3.5%
    assert beats(seven, default) and not beats(seven, default, candidates=4)
    assert not beats([5.0, 5.0, 5.0, 5.0, 11.0, 11.0, 11.0, 11.0], default)  # 4 of 8, however large the wins
    assert not beats([10.0] * 8, default) and not beats([], [])
    for rounds in (5, 8, 40, 200):
        for candidates in (1, 5):
            k = wins_needed(rounds, candidates)
            tail = sum(comb(rounds, j) for j in range(k, rounds + 1)) / 2 ** rounds
            below = sum(comb(rounds, j) for j in range(k - 1, rounds + 1)) / 2 ** rounds
            assert tail <= ALPHA / candidates < below  # the smallest count the test accepts
    assert 0.55 < wins_needed(200, 5) / 200 < 0.62  # a millisecond kernel's ~200 rounds: a clear majority

def test_a_second_shape_starts_from_the_first_shapes_records(tmp_path: Path) -> None:
    """`tilec tune` hands the records of the op's other shapes to the cost model (transfer): the
    tune of a new shape finds them, and its first batch is the model's choice, not random."""
    from tilec.cli import build_parser
    from tilec.cli.tune import _transfer_tasks, _tune_tasks

    def args(shape: str) -> Any:
        return build_parser().parse_args(["tune", "gemm", "--shape", shape])

    first, _, first_shape = _tune_tasks(args("M=96,N=128,K=64"))
    db = RecordDB(tmp_path / "r.sqlite")
    tune(first[0], 48, FakeMeasurer(), db, seed=0, op="gemm", shape=first_shape)
    second, _, second_shape = _tune_tasks(args("M=128,N=96,K=80"))
    (prior,) = _transfer_tasks(args(second_shape), db, 0, "gemm", second_shape, second[0].target.key)
    assert prior.key == first[0].key
    assert _transfer_tasks(args(second_shape), db, 0, "conv2d", second_shape, second[0].target.key) == []

    db.close()

    def first_batch(transfer: list[Task], seed: int) -> float:
        fake, copy = FakeMeasurer(), tmp_path / f"s{seed}-{len(transfer)}.sqlite"
        shutil.copy(tmp_path / "r.sqlite", copy)  # the first shape's records, and nothing of the second's
        tune(second[0], 8, fake, RecordDB(copy), seed=seed, transfer=transfer, batch_size=8)
        return float(np.median([synthetic_cost(c) for c in fake.calls[1:]]))  # after the default

    guided = [first_batch([prior], seed) for seed in range(3)]
    blind = [first_batch([], seed) for seed in range(3)]
    assert max(guided) < min(blind), (guided, blind)


# ------------------------------------------------------------------ real measurement


@dataclasses.dataclass(frozen=True)
class FaultyTask(Task):
    """A test-only task whose candidate with a given mr segfaults, hangs or computes garbage."""

    faults: tuple[tuple[int, str], ...] = ()

    def build(self, config: Mapping[str, Any] | None) -> Callable[[list[np.ndarray]], Any]:
        fault = dict(self.faults).get(config["mr"]) if config is not None else None
        call = super().build(config)
        if fault == "segfault":
            return lambda arrays: ctypes.string_at(0)
        if fault == "hang":
            return lambda arrays: time.sleep(3600)
        if fault == "wrong":
            return lambda arrays: call(arrays) + 1.0
        if fault == "raise":
            raise RuntimeError("injected build failure")
        return call

    def compile_object(self, config: Mapping[str, Any]) -> str:
        fault = dict(self.faults).get(config["mr"])
        if fault == "builder_segfault":
            ctypes.string_at(0)
        if fault == "builder_hang":
            time.sleep(3600)
        if fault == "builder_raise":
            raise RuntimeError("injected compile failure")
        return super().compile_object(config)


FAULTS = ((1, "segfault"), (2, "hang"), (3, "wrong"), (4, "raise"))
BUILDER_FAULTS = ((8, "builder_segfault"), (10, "builder_hang"), (12, "builder_raise"))


def faulty_task(faults: tuple[tuple[int, str], ...]) -> FaultyTask:
    base = gemm_task(64, 48, 32)
    return FaultyTask(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Task)}, faults=faults)


def test_local_measurer_catches_faults() -> None:
    """Measurement-side faults, with the candidates built in the measurement process itself."""
    t = faulty_task(FAULTS)
    good = t.default_config()
    if good["mr"] in dict(FAULTS):  # (AVX2's default block is 4 rows high: the good candidate must not fault)
        good = dict(good, mr=6, mc=24)
    configs = [dict(good, mr=mr, mc=mr * 4, pack_a=True) for mr in (1, 2, 3, 4)] + [good]
    with LocalMeasurer(MeasureOptions(timeout_s=2.0, repeats=2, min_repeat_s=0.001, build_workers=0)) as m:
        results = m.measure(t, configs)
    assert [r.error for r in results] == ["runtime_error", "timeout", "wrong_answer", "build_error", "ok"]
    assert results[-1].time_s is not None and results[-1].time_s > 0
    assert "signal" in results[0].message and "injected" in results[3].message


def test_parallel_builds_catch_builder_faults_and_feed_the_measurer() -> None:
    """A compile that segfaults, hangs or raises in a builder is recorded and skipped; the other
    candidates are built by the pool (the measurement process only loads their object code)."""
    good = faulty_task(()).default_config()
    faulty = [mr for mr, _ in BUILDER_FAULTS if mr != good["mr"]]  # the default's mr (the host's) must build
    faulty += [mr for mr in (9, 11, 13) if mr != good["mr"]][:len(BUILDER_FAULTS) - len(faulty)]
    t = faulty_task(tuple(zip(faulty, (fault for _, fault in BUILDER_FAULTS))))
    configs = [dict(good, mr=mr, nr=16, mc=mr * 2, pack_a=True) for mr in faulty + [2, 4]] + [good]
    from tilec import pipeline
    from tilec.config import options

    with LocalMeasurer(MeasureOptions(timeout_s=4.0, repeats=2, min_repeat_s=0.001, build_workers=2)) as m:
        results = m.measure(t, configs)
        again = m.measure(t, configs[3:])  # the pool replaced its dead and killed workers
        # the pool's object code is where the measurer looks: building here is a disk-cache hit (with
        # this process's own kernels forgotten: an earlier test may have loaded the same one)
        from tilec.runtime.kernels import kernels

        kernels.clear()
        before, old = pipeline.stats.disk_hits, (options.cache_dir, options.disk_cache)
        options.cache_dir, options.disk_cache = m.cache_dir, True
        try:
            t.build(configs[3])
        finally:
            options.cache_dir, options.disk_cache = old
        assert pipeline.stats.disk_hits == before + 1
    assert [r.error for r in results] == ["build_error", "timeout", "build_error", "ok", "ok", "ok"]
    assert "builder process died (signal" in results[0].message and "killed after" in results[1].message
    assert "injected compile failure" in results[2].message
    assert [r.error for r in again] == ["ok", "ok", "ok"]


def test_real_tiny_gemm_tuning_end_to_end(tmp_path: Path) -> None:
    t = gemm_task(96, 80, 64)
    db = RecordDB(tmp_path / "records.sqlite")
    seen = []
    with LocalMeasurer(MeasureOptions(repeats=2, min_repeat_s=0.001)) as m:
        best = tune(t, 4, m, db, seed=0, batch_size=2, progress=seen.append)
    records = [r for r in db.records(t.key) if r.confirmed == 0]
    assert best is not None and best.error == "ok" and len(records) == 4
    assert [p.measured for p in seen] == [1, 2, 3, 4]
    assert all(r.error == "ok" for r in records)
    # then all four (the default among them) were re-measured together, and the default and those
    # that beat it were recorded: the best is the confirmation's
    confirmed = [r for r in db.records(t.key) if r.confirmed == 1]
    assert {json.dumps(r.schedule) for r in confirmed} <= {json.dumps(r.schedule) for r in records}
    assert t.schedule(t.default_config()).to_json() in [r.schedule for r in confirmed]
    assert best == min(confirmed, key=lambda r: r.time_s or 0.0)
    assert all(r.time_s is not None and r.time_s > 0 and r.spread is not None for r in confirmed)
    from tilec.cli import main

    assert main(["plot", str(tmp_path / "records.sqlite"), "--task", t.key[:8], "--out", str(tmp_path / "c.png"),
                 "--baseline-ms", "0.05", "--baseline-name", "numpy"]) == 0
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_names_the_series_marks_each_trial_and_starts_its_axis_at_zero(tmp_path: Path, capsys) -> None:
    """`tilec plot`: points per trial, the best-so-far line, the default's (trial 1) and a baseline's
    times as lines, a y axis from 0, the speedup in the title and printed; a missing --out
    directory is a clear error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tilec.autotune import tuner
    from tilec.cli import main

    t = gemm_task(64, 64, 64)
    db = RecordDB(tmp_path / "r.sqlite")
    times = [4e-3, 5e-3, 2e-3, None, 3e-3, 1e-3]
    for trial, time_s in enumerate(times, 1):
        db.add(Record(t.key, t.target.key, "c", [{"stmt": 0, "template": "implicit_gemm", "knobs": {"mr": trial}}],
                      time_s, "ok" if time_s else "timeout", trial=trial, op="gemm", shape="M=64,N=64,K=64"))
    saved = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        saved["fig"] = fig
        return real_savefig(fig, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        speedup = tuner.plot_run(db.records(t.key), str(tmp_path / "p.png"), ("numpy", 2.5e-3))
    finally:
        plt.Figure.savefig = real_savefig
    assert speedup == pytest.approx(4.0)  # the default (trial 1, 4 ms) against the best (1 ms)
    ax = saved["fig"].axes[0]
    assert ax.get_ylim()[0] == 0
    assert "gemm M=64,N=64,K=64" in ax.get_title() and "4.00x the default" in ax.get_title()
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[:2] == ["gemm M=64,N=64,K=64: each trial", "gemm M=64,N=64,K=64: best so far"]
    assert any(label.startswith("default schedule 4") for label in labels) and any(label.startswith("numpy 2.5") for label in labels)
    points = ax.get_lines()[0]
    assert list(points.get_xdata()) == [1, 2, 3, 5, 6] and list(points.get_ydata()) == pytest.approx([4, 5, 2, 3, 1])
    db.close()
    assert main(["plot", str(tmp_path / "r.sqlite"), "--task", t.key[:8], "--out", str(tmp_path / "q.png")]) == 0
    assert "4.00x the default" in capsys.readouterr().out
    assert main(["plot", str(tmp_path / "r.sqlite"), "--task", t.key[:8], "--out", str(tmp_path / "missing" / "q.png")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_tune_cuda_without_gpu_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    assert main(["tune", "gemm", "--target", "cuda"]) == 2  # (tests/test_gpu_tune.py: the GPU tuning itself)
    err = capsys.readouterr().err
    assert "needs a GPU" in err and "Traceback" not in err


def test_experiment_caches_measurements_and_counts_trials_to_target():
    from tilec.bench.tuner_experiment import CachedMeasurer, trials_to_reach

    (task,) = tasks_for(gemm_source({}), {"A": (64, 64), "B": (64, 64)}, {"A": "float32", "B": "float32"})
    inner = FakeMeasurer()
    calls: list[int] = []
    original = inner.measure

    def counting(task_: Any, configs: Any) -> Any:
        calls.append(len(configs))
        return original(task_, configs)

    inner.measure = counting  # type: ignore[method-assign]
    cached = CachedMeasurer(inner)
    space = space_for(task)
    configs = [space.config(i) for i in range(min(4, len(space)))]
    first = cached.measure(task, configs)
    again = cached.measure(task, configs[::-1])
    assert calls == [len(configs), 0] or calls == [len(configs)]
    assert [r.time_s for r in again] == [r.time_s for r in first][::-1]
    assert trials_to_reach([5.0, 4.0, 3.0, 3.0], 3.5) == 3 and trials_to_reach([5.0], 1.0) is None


def test_table_measures_a_space_once_and_replays_it(tmp_path: Path) -> None:
    """tilec.bench.tuner_table fills a table (here with a fake measurer, partially), re-measures its
    top points keeping the minimum; the experiment replays it over exactly the table's points,
    random search running until it has seen them all."""
    from tilec.bench.tuner_experiment import TableMeasurer, bar_holds, mean_trials, run, table_space
    from tilec.bench.tuner_table import config_key, load_table, measure_table
    from tilec.errors import TilecError

    (task,) = tasks_for(gemm_source({}), {"A": (64, 64), "B": (64, 64)}, {"A": "float32", "B": "float32"})
    jitter = iter(np.random.default_rng(0).uniform(1.0, 1.5, 10_000))
    seen: dict[str, list[float]] = {}

    def noisy(c: Mapping[str, Any]) -> float:
        t = synthetic_cost(c) * next(jitter)
        seen.setdefault(config_key(dict(c)), []).append(t)
        return t

    fake = FakeMeasurer(cost=noisy)
    out = tmp_path / "table.json"
    table = measure_table(task, out, top=5, rounds=2, batch=16, limit=40, measurer=fake, log=lambda s: None)
    assert len(table) == 40 and load_table(out) == table
    assert len(fake.calls) == 40 + 2 * 5  # the top 5 measured twice more
    assert sorted(len(v) for v in seen.values()) == [1] * 35 + [3] * 5
    for key, times in seen.items():  # each point keeps the minimum of its measurements
        assert table[key] == (min(times), "ok")
    assert measure_table(task, out, top=0, rounds=0, limit=40, measurer=fake, log=lambda s: None) == table
    assert len(fake.calls) == 50  # resumed: nothing measured again

    replay = TableMeasurer(out)
    sub = table_space(space_for(task), replay.table, task.default_config())
    assert len(sub) == 40 and {config_key(sub.config(i)) for i in range(len(sub))} == set(table)
    assert replay.best() == min(t for t, _ in table.values())
    missing = next(c for c in (space_for(task).config(i) for i in range(len(space_for(task))))
                   if config_key(c) not in table)
    with pytest.raises(TilecError, match="no entry"):
        replay.measure(task, [missing])

    summary = run(trials=12, seeds=(0,), table=str(out), task=task, out=str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert summary["configs_known"] == 40 and summary["best_ms"] == pytest.approx(replay.best() * 1e3)
    assert summary["trials_to_95pct"]["random seed 0"] is not None  # it ran through all 40 points
    assert summary["within_5pct"] >= 1 and summary["random_expected_trials"] <= 41 / 2
    assert bar_holds(3, 6) and not bar_holds(4, 7) and bar_holds(5, None) and not bar_holds(None, 9)
    assert mean_trials([2, None, 4], cap=10) == pytest.approx(16 / 3)  # a miss counts as the whole run


def test_experiment_can_leave_a_point_out_and_tables_take_any_gemm_shape(tmp_path: Path) -> None:
    """--without-default: the left-out point is no point of the replayed space (and the default is
    then not kept as a point either); --size takes N or M,N,K, and anything else is a TilecError."""
    from tilec.bench.tuner_experiment import table_space
    from tilec.bench.tuner_table import config_key, gemm_task, measure_table
    from tilec.errors import TilecError

    task = gemm_task("64")
    assert task.label == "gemm 64^3" and dict(task.shapes) == {"A": (64, 64), "B": (64, 64)}
    out = tmp_path / "table.json"
    table = measure_table(task, out, top=0, rounds=0, limit=20, measurer=FakeMeasurer(), log=lambda s: None)
    whole = table_space(space_for(task), table, task.default_config())
    left = whole.config(0)
    without = table_space(space_for(task), table, task.default_config(), without=left)
    keys = {config_key(without.config(i)) for i in range(len(without))}
    assert len(without) == len(whole) - 1 and config_key(left) not in keys and keys < set(table)
    other = gemm_task("48,80,32")
    assert other.label == "gemm M=48,N=80,K=32" and dict(other.shapes) == {"A": (48, 32), "B": (32, 80)}
    for bad in ("48,80", "0", "12x", "48,80,32,4"):
        with pytest.raises(TilecError, match="give N .* or M,N,K"):
            gemm_task(bad)


def test_speed_labels_and_regression_objective(task: Task, space: Space) -> None:
    from tilec.autotune.model import speed_labels

    labels = speed_labels([2.0, 1.0, None, 4.0])
    assert np.allclose(labels, [-1.0, 0.0, -3.0, -2.0])
    f = Featurizer(task)
    configs = [space.config(i) for i in range(0, len(space), 40)]
    X, y = f.matrix(configs), [synthetic_cost(c) for c in configs]  # noqa: N806
    model = CostModel(seed=0, params={"objective": "reg:squarederror"})
    model.fit(X, y)
    ranks = [np.argsort(np.argsort(v)) for v in (model.predict(X), -np.asarray(y))]
    assert np.corrcoef(*ranks)[0, 1] > 0.8


def test_gemm_features_describe_the_micro_kernel(task: Task) -> None:
    f = Featurizer(task)
    names = list(f.names)
    small = f(dict(task.default_config(), mr=4, nr=32, kc=64, mc=8, pack_a=True))
    big = f(dict(task.default_config(), mr=4, nr=32, kc=256, mc=64, pack_a=True))
    at = {n: names.index(n) for n in ("a_panel_l1", "kernel_l1", "a_block_l1", "log_mc_tiles", "acc_regs", "k_tail")}
    l1 = task.target.host.l1d_bytes  # the host's (32 KiB on Zen 4, 48 KiB on Zen 5)
    assert small[at["a_panel_l1"]] == pytest.approx(4 * 64 * 4 / l1)
    assert small[at["kernel_l1"]] == pytest.approx((4 + 32) * 64 * 4 / l1)
    assert big[at["a_block_l1"]] == pytest.approx(64 * 256 * 4 / l1)
    assert small[at["log_mc_tiles"]] == pytest.approx(1.0) and big[at["log_mc_tiles"]] == pytest.approx(4.0)
    lanes = task.target.vector_bits // 32
    assert small[at["acc_regs"]] == 4 * -(-32 // lanes) and small[at["k_tail"]] == 0.0


# ------------------------------------------------------------------ tuning gradient kernels


def test_backward_tasks_are_the_kernels_tilec_grad_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuning the gradient program's statements (fake measurer) leaves records that tilec.grad
    applies when it compiles, and the tuned gradients stay right."""
    import tilec
    from tilec.autotune.task import backward_tasks
    from tilec.config import options
    from tilec.schedule.template_schedule import TemplateSchedule

    source, shapes = gemm_source({}), {"A": (48, 32), "B": (32, 40)}
    tasks = backward_tasks(source, shapes, ["A", "B"], label="gemm backward")
    assert [t.template for t in tasks] == ["implicit_gemm", "implicit_gemm"]
    assert dict(tasks[0].shapes)["DC"] == (48, 40)
    db_path = tmp_path / "records.sqlite"
    defaults = [dict(t.default_config()) for t in tasks]

    def cost(c: Mapping[str, Any]) -> float:  # the synthetic cost, the defaults made slow (on any host)
        return synthetic_cost(c) * (10.0 if dict(c) in defaults else 1.0)

    with RecordDB(db_path) as db:
        bests = [tune(t, 16, FakeMeasurer(cost=cost), db, seed=0) for t in tasks]
    configs = [t.config_of(TemplateSchedule.from_json(b.schedule)) for t, b in zip(tasks, bests) if b is not None]
    assert len(configs) == 2 and configs[0] != tasks[0].default_config()  # the records hold other configs
    monkeypatch.setattr(options, "records_path", db_path)
    monkeypatch.setattr(options, "use_records", True)
    g = tilec.grad(source, ["A", "B"])
    recorded = g._recorded_schedule(tasks[0].signature)
    assert recorded is not None
    assert [dict(c.knobs) for c in recorded.configs] == configs
    assert [c.stmt for c in recorded.configs] == [t.stmt for t in tasks]
    rng = np.random.default_rng(3)
    a, b, dc = (rng.standard_normal(s).astype(np.float32) for s in ((48, 32), (32, 40), (48, 40)))
    da, db_ = g(a, b, dc)
    np.testing.assert_allclose(da, dc @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db_, a.T @ dc, rtol=1e-4, atol=1e-4)


def test_backward_tasks_reject_unknown_inputs() -> None:
    from tilec.autotune.task import backward_tasks
    from tilec.errors import TilecError

    with pytest.raises(TilecError, match="with respect to Z"):
        backward_tasks(gemm_source({}), {"A": (8, 8), "B": (8, 8)}, ["Z"])


def test_the_fused_attention_gradient_is_not_split_into_gemm_tasks() -> None:
    """A record for one product of the attention gradient would replace its fused kernel."""
    from tilec.ops.sources import attention_source
    from tilec.autotune.task import backward_tasks

    shapes = {"Q": (1, 2, 40, 16), "K": (1, 2, 40, 16), "V": (1, 2, 40, 16)}
    for causal in (False, True):
        assert backward_tasks(attention_source(causal, 0.25), shapes, ["Q", "K", "V"]) == []
