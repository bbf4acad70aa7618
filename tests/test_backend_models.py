"""torch.compile(model, backend="tilec") trains whole models as eager torch does (issue 17).

Each model of tilec.bench.models (mlp, gpt2, bert, resnet18) is trained 25 SGD steps twice from the
same weights, on the same batches and with the same dropout masks (the tilec backend's drawn by
torch, as eager's: `models.train`'s default): eagerly and compiled. The
first losses must agree within 1e-3 (relative) and the means of the last 10 within 2%. With the
backend "tilec", its coverage counts over the compiled run must show that tilec's kernels ran at
least 90% of the graphs' ATen calls, and that kernels ran at all.

`pytest --compile-backend aot_eager tests/test_backend_models.py` compares a stand-in backend's
training instead; the coverage tests are the tilec backend's own and always compile with "tilec".
bert and resnet18 are marked slow (`pytest -m slow`; resnet18's float64 run, below, is not); resnet18's convolutions are also trained
by the compile_cnn example's test.

resnet18's curves are compared at 32 images a batch and lr 0.003 (TRACKED), not at the benchmark's 8
images and lr 0.01: there the last stage's batch norms see 8 values a channel (1x1 maps), which
magnifies float32 rounding so much that eager torch does not reproduce itself: run with one thread
instead of two (another summation order in its kernels, nothing else changed), its last-10 mean
moved by 11%, 6.5% and 13% (weight seeds 0, 1, 2; 2026-12-01); Inductor's and tilec's ended 4.6%
and 2.3% from eager's (seed 0, 2026-11-24). At 32 images and lr 0.003 eager against its one-thread self
ends 0.44%, 0.59% and 1.09% apart on the same seeds, tilec 0.25%, 1.77% and 0.66% (seed 0 is the
test's). resnet18's training is also compared in float64, where rounding is too small to steer
it: there tilec must follow eager to 1e-6 (measured: 3e-9 and 2e-8 on seeds 0 and 2).
"""

from __future__ import annotations

from typing import Any

import pytest

from tilec.bench import models

STEPS = 25
SLOW = ("bert", "resnet18")
TRACKED: dict[str, dict[str, Any]] = {"resnet18": {"images": 32, "lr": 0.003}}  # builders' options (see above)
PARAMS = [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in models.MODELS]
_runs: dict[tuple[str, str], tuple[list[float], list[float], dict[str, Any] | None]] = {}
_eager: dict[str, list[float]] = {}


def _run(name: str, backend: str) -> tuple[list[float], list[float], dict[str, Any] | None]:
    """(eager losses, compiled losses, the tilec backend's coverage of the compiled run or None), once
    per model and backend in this session."""
    if name in models.MODELS[1:]:
        pytest.importorskip("transformers")
    if (name, backend) not in _runs:
        eager = models.build(name, **TRACKED.get(name, {}))
        compiled = models.copy_of(eager)
        if name not in _eager:
            _eager[name] = models.train(eager, STEPS, backend=None)
        if backend == "tilec":
            models.reset_coverage()
        losses = models.train(compiled, STEPS, backend=backend)
        _runs[name, backend] = (_eager[name], losses, models.coverage() if backend == "tilec" else None)
    return _runs[name, backend]


@pytest.mark.parametrize("name", PARAMS)
def test_compiled_training_tracks_eager(name: str, request: pytest.FixtureRequest):
    eager, compiled, _ = _run(name, request.config.getoption("--compile-backend"))
    assert models.relative_difference(compiled[0], eager[0]) <= 1e-3, (compiled[0], eager[0])
    assert models.relative_difference(models.tail_mean(compiled), models.tail_mean(eager)) <= 0.02, (compiled, eager)


def test_gpt2_learns_with_the_kernels_own_dropout_masks():
    """With the backend's default masks (drawn in its kernels, not torch's) GPT-2 starts where eager
    does up to dropout's share of the first loss and learns as far: eager itself, seeded 1 or 2
    instead of 0, ends 2.0% and 5.1% from its seed-0 run (25 steps; first losses 4e-5 and 7e-4
    apart), tilec with kernel masks 3.8%, 4.0% and 9.0% on seeds 0, 1 and 2 (first losses 9e-4 to
    2.8e-3) (2026-12-04, Zen 4). The masks' own statistics: tests/test_dropout_masks.py."""
    pytest.importorskip("transformers")
    eager = models.build("gpt2")
    compiled = models.copy_of(eager)
    expected = _eager["gpt2"] if "gpt2" in _eager else models.train(eager, STEPS, backend=None)
    losses = models.train(compiled, STEPS, backend="tilec", masks="kernel")
    assert models.relative_difference(losses[0], expected[0]) <= 1e-2, (losses[0], expected[0])
    assert models.relative_difference(models.tail_mean(losses), models.tail_mean(expected)) <= 0.15, (losses, expected)
    assert models.tail_mean(losses) < 0.5 * losses[0], losses


@pytest.mark.slow  # (82 s of CI's 2-core budget on Zen 3: it runs with the nightly checks)
def test_resnet18_in_float64_trains_as_eager_does():
    """Every kernel of the step in float64 (forward, backward; the SGD update stays torch's): the
    losses of 25 steps follow eager's to 1e-6, and tilec's kernels run at least 90% of the ATen calls."""
    pytest.importorskip("transformers")
    import torch

    eager = models.in_dtype(models.build("resnet18"), torch.float64)
    compiled = models.copy_of(eager)
    expected = models.train(eager, STEPS, backend=None)
    models.reset_coverage()
    losses = models.train(compiled, STEPS, backend="tilec")
    report = models.coverage()
    assert max(models.relative_difference(a, b) for a, b in zip(losses, expected)) <= 1e-6, (losses, expected)
    assert models.coverage_fraction(report) >= 0.9 and report["kernels"] > 0, report


@pytest.mark.parametrize("name", PARAMS)
def test_tilec_backend_runs_most_aten_calls(name: str):
    """The tilec backend's own claim (fails, not skips, where tilec.torch_backend is missing)."""
    *_, report = _run(name, "tilec")
    assert report is not None and report["kernels"] > 0, report
    assert models.coverage_fraction(report) >= 0.9, report
