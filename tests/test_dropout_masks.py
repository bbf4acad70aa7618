"""Dropout under `torch.compile(..., backend="tilec")`: masks drawn in the kernel (the default) and
masks drawn by torch (`set_dropout_masks("torch")`, eager's own), tilec.torch_backend.lowering.dropout.

Kernel masks cannot be compared with eager's bit for bit, so they are held to what a dropout mask
must be: each element kept with probability 1 - p independently of its neighbours, of the other
calls and of the other dropouts of the same graph (shares within binomial bounds, correlations
within a few standard errors of 0), kept elements scaled by 1 / (1 - p), the same mask in the
backward, and the same masks again under the same `torch.manual_seed`. Torch masks must be
eager's exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec.torch_backend as backend
from tilec.errors import TilecError


@pytest.fixture
def masks() -> Iterator[Callable[[str], None]]:
    """Choose the masks' source for this test (the previous choice restored after it)."""
    previous = backend.set_dropout_masks("kernel")
    yield backend.set_dropout_masks
    backend.set_dropout_masks(previous)


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="tilec", dynamic=False)


def _within_binomial(kept: int, n: int, keep: float, sigmas: float = 5.0) -> bool:
    return abs(kept - n * keep) <= sigmas * math.sqrt(n * keep * (1 - keep)) + 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # (one choice)
@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=4), p=st.sampled_from([0.1, 0.5, 0.8]),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]), transposed=st.booleans(),
       seed=st.integers(0, 2**16))
def test_kernel_masks_keep_one_minus_p_and_scale_what_they_keep(masks, shape, p, dtype, transposed, seed):
    masks("kernel")
    x = (torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 1.0).to(dtype)
    if transposed and x.dim() >= 2:
        x = x.transpose(0, -1)  # a view: the mask's indices come from a tensor of its own then
    y = _compiled(lambda t: F.dropout(t, p, training=True))(x)
    assert y.shape == x.shape and y.dtype == dtype
    kept = y != 0
    assert _within_binomial(int(kept.sum()), x.numel(), 1 - p)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
    torch.testing.assert_close(y[kept].double(), (x.double() / (1 - p))[kept], rtol=tol, atol=0)


def test_kernel_masks_show_no_pattern_across_elements_calls_or_dropouts(masks):
    """Neighbours along each axis, two calls, and two dropouts of one graph: uncorrelated."""
    masks("kernel")
    x = torch.ones(32, 64, 64)
    two = _compiled(lambda t: (F.dropout(t, 0.5, training=True), F.dropout(t, 0.5, training=True)))
    a, b = (m != 0 for m in two(x))
    c, _ = (m != 0 for m in two(x))
    limit = 5 / math.sqrt(x.numel())  # five standard errors of a correlation of n independent bits

    def corr(u: torch.Tensor, v: torch.Tensor) -> float:
        return float(np.corrcoef(u.flatten().double().numpy(), v.flatten().double().numpy())[0, 1])

    assert abs(float(a.double().mean()) - 0.5) <= limit
    for axis in range(3):
        n = a.shape[axis] - 1
        assert abs(corr(a.narrow(axis, 0, n), a.narrow(axis, 1, n))) <= 5 / math.sqrt(a.numel() * n / a.shape[axis])
    assert abs(corr(a, b)) <= limit and abs(corr(a, c)) <= limit
    assert not torch.equal(a, b) and not torch.equal(a, c)


def test_kernel_masks_repeat_under_one_seed_and_the_backward_uses_the_forwards(masks):
    masks("kernel")
    w = torch.randn(48, 40, requires_grad=True)
    x = torch.rand(64, 48) + 0.5
    step = _compiled(lambda x, w: F.dropout(x @ w, 0.3, training=True))
    torch.manual_seed(5)
    y = step(x, w)
    torch.manual_seed(5)
    again = step(x, w)
    assert torch.equal(y, again)
    kept = (again != 0).double()
    g = torch.randn_like(y)
    again.backward(g)
    torch.testing.assert_close(w.grad.double(), x.double().t() @ (g.double() * kept / 0.7), rtol=1e-4, atol=1e-4)


def test_torch_masks_are_eagers_under_one_seed(masks):
    masks("torch")
    x = torch.randn(6, 7, 33)
    fn = lambda t: F.dropout(t.sin(), 0.25, training=True)  # noqa: E731
    torch.manual_seed(11)
    got = _compiled(fn)(x)
    torch.manual_seed(11)
    torch.testing.assert_close(got, fn(x), rtol=1e-6, atol=1e-6)
    torch.manual_seed(11)
    assert torch.equal(got != 0, fn(x) != 0)


def test_p_zero_one_and_evaluation_need_no_mask(masks):
    masks("kernel")
    x = torch.randn(5, 9)
    assert torch.equal(_compiled(lambda t: F.dropout(t, 1.0, training=True))(x), torch.zeros_like(x))
    assert torch.equal(_compiled(lambda t: F.dropout(t, 0.0, training=True))(x), x)
    assert torch.equal(_compiled(lambda t: F.dropout(t, 0.5, training=False))(x), x)


def test_a_mode_not_known_is_refused_by_name(masks, monkeypatch):
    with pytest.raises(TilecError, match="'kernel', 'torch'"):
        masks("fast")
    masks(None)
    monkeypatch.setenv("TILEC_DROPOUT_MASKS", "torch")
    assert backend.dropout_masks() == "torch"
    monkeypatch.setenv("TILEC_DROPOUT_MASKS", "philox")
    with pytest.raises(TilecError, match="TILEC_DROPOUT_MASKS='philox'"):
        backend.dropout_masks()
    with pytest.raises(Exception, match="TILEC_DROPOUT_MASKS='philox'"):  # (torch wraps the backend's error)
        _compiled(lambda t: F.dropout(t, 0.5, training=True))(torch.ones(3))
