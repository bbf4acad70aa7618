"""`tilec bench model` and tilec.bench.models: the workloads are deterministic, a failing side is
reported while the others go on, and the command's errors are one clear line."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tilec.bench import model_step, models
from tilec.cli import main
from tilec.errors import TilecError


def test_a_workload_is_the_same_every_time():
    a, b = models.build("mlp"), models.build("mlp")
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert all(torch.equal(a.batch(3)[k], b.batch(3)[k]) for k in ("x", "y"))
    assert not torch.equal(a.batch(3)["x"], a.batch(4)["x"])
    assert a.model.training


def test_copies_train_independently_and_alike():
    work = models.build("mlp")
    twin = models.copy_of(work)
    assert models.train(work, 3, backend=None) == models.train(twin, 3, backend=None)
    assert twin.model is not work.model


def test_unknown_model_and_missing_transformers_are_clear(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(models.ModelError, match="expected one of mlp, gpt2, bert, resnet18"):
        models.build("vgg")
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(models.ModelError, match="need the package 'transformers'"):
        models.build("gpt2")


def test_a_failing_side_is_reported_and_the_others_go_on():
    result = model_step.run_model("mlp", steps=2, warmup=1, sides={"eager": None, "broken": "no_such_backend"})
    assert "broken" in result.errors and result.median_ms("broken") is None
    assert len(result.times_ms["eager"]) == 2 and result.median_ms("eager") > 0


@pytest.mark.parametrize("steps, consecutive, rounds, run", [(6, 3, 3, 9), (5, 3, 3, 8), (4, 1, 4, 4), (2, 5, 1, 3)])
def test_each_side_runs_consecutive_steps_and_its_first_is_not_timed(steps, consecutive, rounds, run,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """Per timed round each side runs `consecutive` steps back to back; the one after another side's
    step is left out of the timings (with 1 step a round every step is timed)."""
    calls: list[tuple[str, int]] = []

    def stepper(work, backend, lr=None):
        return lambda k: calls.append((backend or "eager", k))

    monkeypatch.setattr(models, "stepper", stepper)
    ticks = iter(range(10_000))
    result = model_step.run_model("mlp", steps=steps, warmup=1, sides={"eager": None, "other": "aot_eager"},
                                  clock=lambda: float(next(ticks)), consecutive=consecutive)
    assert result.rounds == rounds and result.steps_run == run
    assert all(len(result.times_ms[side]) == steps for side in ("eager", "other"))
    assert calls[:2] == [("eager", 0), ("aot_eager", 0)]  # the warm-up round: one step each
    sides_in_order = [side for side, _ in calls[2:]]
    first_round = min(consecutive, run)
    assert sides_in_order[:2 * first_round] == ["eager"] * first_round + ["aot_eager"] * first_round
    assert [k for side, k in calls[2:] if side == "eager"] == list(range(1, 1 + run))  # back to back, in order
    assert len(calls) == 2 + 2 * run


def test_with_records_the_tilec_side_runs_them_and_an_untuned_side_runs_none(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """`--records`: every step of the tilec side runs with the records in force, every step of the
    "untuned" side with none, interleaved; the tuned gain is the untuned side's time over the tilec
    side's, round by round."""
    from tilec.config import options

    path = tmp_path / "records.sqlite"
    path.write_bytes(b"")
    seen: list[tuple[str, tuple]] = []  # (side, the records in force) per step
    step_ms = {"tilec": 2, "untuned": 3}
    built: list[str] = []

    def stepper(work, backend, lr=None):
        side = ("tilec", "untuned")[len(built)]  # the sides are built in this order
        built.append(side)

        def step(k):
            seen.append((side, options.records_key()))
            now[0] += step_ms[side]
        return step

    now = [0.0]
    monkeypatch.setattr(models, "stepper", stepper)
    before = options.records_key()
    result = model_step.run_model("mlp", steps=4, warmup=1, sides={"tilec": models.BACKEND},
                                  clock=lambda: now[0], consecutive=3, records=path)
    assert options.records_key() == before
    order = [side for side, _ in seen]  # the warm-up round, then rounds whose first side alternates
    assert order == ["tilec", "untuned"] + ["tilec"] * 3 + ["untuned"] * 3 + ["untuned"] * 3 + ["tilec"] * 3
    keys = {side: {key for s, key in seen if s == side} for side in ("tilec", "untuned")}
    assert keys["tilec"] == {str(path)} and keys["untuned"] == {None}
    assert result.median_ms("tilec") == 2000 and result.median_ms("untuned") == 3000  # (the clock counts seconds)
    assert result.round_ratios("tilec", "untuned") == [1.5, 1.5] and result.tuned_gain() == (1.5, 1.5, 1.5)
    line = result.to_dict()
    assert line["tuned_vs_untuned"] == 1.5 and line["untuned_ms"] == 3000 and line["tuned_vs_untuned_quartiles"] == [1.5] * 3
    assert "(1.500-1.500)" in model_step.table_row(result, records=True)
    with pytest.raises(TilecError, match="apply to the backend 'tilec' only"):
        model_step.run_model("mlp", steps=1, warmup=1, sides={"tilec": "aot_eager"}, records=path)


def test_a_busy_machine_makes_a_models_figures_unreliable():
    loads = iter([6.0, 0.1])
    result = model_step.run_model("mlp", steps=1, warmup=1, sides={"eager": None}, load=lambda: next(loads))
    (warning,) = result.warnings
    assert "6.00 before mlp's rounds" in warning and "unreliable" in warning
    assert result.to_dict()["warnings"] == [warning] and result.to_dict()["load_average"] == [6.0, 0.1]
    calm = model_step.run_model("mlp", steps=1, warmup=1, sides={"eager": None}, load=lambda: 0.0)
    assert calm.warnings == []


def test_cli_model_warns_on_a_busy_machine(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    from tilec.bench import roofline

    monkeypatch.setattr(roofline, "load_average", lambda: 64.0)
    code = main(["bench", "model", "--models", "mlp", "--steps", "1", "--warmup", "1", "--backend", "aot_eager",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "load average was 64.00 at the start of the run" in err and "at the end of the run" in err


def test_cli_model_with_a_stand_in_backend(capsys: pytest.CaptureFixture[str]):
    """All three sides (Inductor included) on the mlp, the tilec column compiled by aot_eager."""
    code = main(["bench", "model", "--models", "mlp", "--steps", "2", "--warmup", "1", "--backend", "aot_eager",
                 "--json"])
    out, err = capsys.readouterr()
    (line,) = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert code == 0, err
    assert line["model"] == "mlp" and line["rounds"] == 1 and line["consecutive"] == 5 and line["errors"] == {}
    assert all(line[f"{side}_ms"] > 0 for side in ("eager", "inductor", "tilec")) and line["tilec_vs_eager"] > 0


@pytest.mark.parametrize("argv, message", [
    (["bench", "model", "--models", "mlp,vgg"], "--models takes names from mlp, gpt2, bert, resnet18"),
    (["bench", "model", "--models", "mlp", "--steps", "0"], "needs --steps >= 1"),
    (["bench", "gemm", "--steps", "3"], "belong to `tilec bench model`"),
    (["bench", "model", "--models", "mlp", "--threads", "0"], "--threads must be at least 1"),
    (["bench", "model", "--models", "mlp", "--records", "no/such.sqlite"], "--records no/such.sqlite: no such file"),
])
def test_cli_model_bad_input_is_one_clear_error(capsys: pytest.CaptureFixture[str], argv: list[str], message: str):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_model_without_transformers_still_runs_the_mlp(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    code = main(["bench", "model", "--models", "gpt2,mlp", "--steps", "1", "--warmup", "1", "--backend", "aot_eager",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and "need the package 'transformers'" in err and "Traceback" not in err
    assert [json.loads(x)["model"] for x in out.splitlines() if x.startswith("{")] == ["mlp"]
