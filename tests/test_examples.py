"""The training examples run: tilec's modules track torch's step for step (a short run), and so does a
model compiled with torch.compile(model, backend="tilec") track its eager copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import train_cnn  # noqa: E402
import train_tilec_nn  # noqa: E402
import train_transformer  # noqa: E402
from training import train  # noqa: E402


def test_cnn_example_tracks_torch():
    curves = train("CNN", train_cnn.make_model, train_cnn.batches, F.cross_entropy, steps=12, report_every=6)
    assert all(abs(a - b) <= 2e-3 * max(1.0, abs(a)) for a, b in zip(curves["torch"], curves["tilec"]))


def test_transformer_example_tracks_torch():
    curves = train("transformer", train_transformer.Block, train_transformer.batches, train_transformer.loss_fn,
                   steps=12, lr=0.3, report_every=6)
    assert all(abs(a - b) <= 2e-3 * max(1.0, abs(a)) for a, b in zip(curves["torch"], curves["tilec"]))


def test_tilec_nn_only_example_tracks_torch():
    curves = train("tilec.nn only", train_tilec_nn.make_model, train_tilec_nn.batches, None,
                   model_loss=train_tilec_nn.loss_of, steps=12, report_every=6)
    assert all(abs(a - b) <= 2e-3 * max(1.0, abs(a)) for a, b in zip(curves["torch"], curves["tilec"]))


@pytest.mark.parametrize("example", ["cnn", "transformer", "tilec_nn"])
def test_bf16_examples_follow_torchs_bf16_run(example):
    """--bf16 (torch.autocast in bfloat16): tilec's loss follows torch's bf16 run within 2% (25 steps:
    the first loss and the mean of the last 10)."""
    args = {"cnn": ("CNN", train_cnn.make_model, train_cnn.batches, F.cross_entropy, {}),
            "transformer": ("transformer", train_transformer.Block, train_transformer.batches, train_transformer.loss_fn,
                            {"lr": 0.3}),
            "tilec_nn": ("tilec.nn only", train_tilec_nn.make_model, train_tilec_nn.batches, None,
                         {"model_loss": train_tilec_nn.loss_of})}[example]
    name, make, batches, loss_fn, extra = args
    curves = train(name, make, batches, loss_fn, steps=25, report_every=5, autocast=torch.bfloat16, **extra)
    torch_curve, tilec_curve = curves["torch"], curves["tilec"]
    assert abs(tilec_curve[0] - torch_curve[0]) <= 1e-2 * abs(torch_curve[0])
    tail_t, tail_o = sum(torch_curve[-10:]) / 10, sum(tilec_curve[-10:]) / 10
    assert abs(tail_o - tail_t) <= 0.02 * abs(tail_t)


def test_interleaved_train_steps_report_both_sides():
    from tilec.bench.train_step import TrainStepCase, interleaved

    result = interleaved(TrainStepCase("cnn", {"batch": 2}, dtype="bfloat16"), steps=2)
    times = {"tilec median", "tilec min", "torch median", "torch min", "ratio of mins", "ratio of medians"}
    assert set(result) == times | {"tilec faults", "torch faults"}
    assert all(result[k] > 0 for k in times) and all(result[k] >= 0 for k in ("tilec faults", "torch faults"))
    assert result["ratio of medians"] == result["torch median"] / result["tilec median"]


@pytest.mark.parametrize("name", ["gpt2", "resnet18"])
def test_compile_examples_track_eager(name: str, request: pytest.FixtureRequest):
    """examples/compile_gpt2.py and compile_cnn.py, 12 steps: both copies start from the same loss and
    both learn (the backend is tilec's, or the stand-in that `pytest --compile-backend aot_eager` names).
    Step-by-step agreement is not asked: ResNet-18's batch norms over 8 images at 1x1 in the last stage
    amplify rounding, so its curves part after a few steps under Inductor as under tilec;
    tests/test_backend_models.py compares the curves' ends over 25 steps."""
    pytest.importorskip("transformers")
    from compiling import compare

    from tilec.bench.models import relative_difference

    backend = request.config.getoption("--compile-backend")
    curves = compare(name, steps=12, backend=backend)
    assert relative_difference(curves[backend][0], curves["eager"][0]) <= 1e-3
    assert all(sum(c[-5:]) / 5 < c[0] for c in curves.values()), curves
