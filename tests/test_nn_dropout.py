"""tilec.nn.functional.dropout and tilec.nn.Dropout, checked by what dropout guarantees (it is random,
so tests/test_nn_opinfo.py leaves it out).

On every OpInfo sample of nn.functional.dropout (float32 and float64, contiguous and not): with
training=False or p=0 the output is the input; with p=1 it is zero with a zero gradient; otherwise
each element is 0 or x / (1 - p), the gradient is grad * (out != 0) / (1 - p) where x != 0, and on
large tensors the number of zeros lies within a binomial bound of p. The mask comes from torch's
generator, so one seed gives torch's own mask.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch_reference import DTYPES, samples

import tilec.nn
import tilec.nn.functional as F

# the zero count of n elements lies within SIGMAS binomial standard deviations of n p
SIGMAS = 6.0


def _arguments(sample: object) -> tuple[torch.Tensor, float, bool]:
    kwargs = dict(sample.kwargs)  # type: ignore[attr-defined]
    return sample.input, float(kwargs.get("p", 0.5)), bool(kwargs.get("training", True))  # type: ignore[attr-defined]


def _leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_(True)


def check_dropout(x: torch.Tensor, out: torch.Tensor, grad_in: torch.Tensor, cotangent: torch.Tensor,
                  p: float, training: bool) -> None:
    """The guarantees of the module docstring for one call: x the input, out the output, grad_in
    the gradient of sum(out * cotangent) with respect to x."""
    assert out.shape == x.shape and out.dtype == x.dtype
    x, out = x.detach(), out.detach()
    if not training or p == 0:
        assert torch.equal(out, x)
        assert torch.equal(grad_in, cotangent)
        return
    if p == 1:
        assert not out.any() and not grad_in.any()
        return
    kept = out != 0
    scaled = x / (1 - p)
    torch.testing.assert_close(torch.where(kept, out, scaled), scaled)  # each element is 0 or x / (1 - p)
    nonzero = x != 0
    want = torch.where(kept, cotangent / (1 - p), torch.zeros_like(cotangent))
    torch.testing.assert_close(grad_in[nonzero], want[nonzero])


def _binomial_bound(n: int, p: float) -> float:
    return SIGMAS * math.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dropout_on_opinfo_samples(dtype: torch.dtype) -> None:
    found = samples("nn.functional.dropout", dtype)
    assert found
    for sample in found:
        x, p, training = _arguments(sample)
        leaf = _leaf(x)
        out = F.dropout(leaf, **sample.kwargs)
        cotangent = torch.randn(x.shape, dtype=dtype)
        (grad_in,) = torch.autograd.grad(out, leaf, cotangent)
        check_dropout(x, out, grad_in, cotangent, p, training)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
def test_dropout_zero_fraction_is_p(dtype: torch.dtype, p: float, layout: str) -> None:
    x = torch.rand(8, 16, 32, 32, dtype=dtype) + 0.5  # no zeros
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(1, 3)
    leaf = _leaf(x)
    out = F.dropout(leaf, p)
    assert out.stride() == torch.empty_like(x).stride()  # torch's layout
    cotangent = torch.randn(x.shape, dtype=dtype)
    (grad_in,) = torch.autograd.grad(out, leaf, cotangent)
    check_dropout(x, out, grad_in, cotangent, p, True)
    zeros = int((out == 0).sum())
    assert abs(zeros - x.numel() * p) <= _binomial_bound(x.numel(), p), (zeros, x.numel(), p)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_one_seed_gives_torchs_mask(layout: str) -> None:
    x = torch.randn(4, 3, 8, 8)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    torch.manual_seed(7)
    ours = F.dropout(x, 0.3)
    torch.manual_seed(7)
    theirs = torch.nn.functional.dropout(x, 0.3)
    assert torch.equal(ours == 0, theirs == 0)
    torch.testing.assert_close(ours, theirs)


def test_dropout_special_cases_follow_torch() -> None:
    x = torch.tensor([float("inf"), float("nan"), 1.0, -2.0])
    assert F.dropout(x, 0.5, training=False) is x  # torch returns its input
    assert F.dropout(x, 0.0) is x
    assert torch.equal(F.dropout(x, 1.0).isnan(), torch.nn.functional.dropout(x, 1.0).isnan())  # x * 0
    empty = torch.empty(0, 3)
    assert F.dropout(empty, 0.5) is empty
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            F.dropout(x, p)


def test_dropout_in_place() -> None:
    x = torch.rand(6, 7) + 0.5
    base = _leaf(x)
    y = base * 1.0
    out = F.dropout(y, 0.4, inplace=True)
    assert out is y
    cotangent = torch.randn(x.shape)
    (grad_in,) = torch.autograd.grad(out, base, cotangent)
    check_dropout(x, out, grad_in, cotangent, 0.4, True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.dropout(_leaf(x), 0.4, inplace=True)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dropout_module(dtype: torch.dtype, inplace: bool) -> None:
    module = tilec.nn.Dropout(0.25, inplace=inplace)
    assert isinstance(module, torch.nn.Dropout) and module.p == 0.25 and not list(module.parameters())
    assert module.load_state_dict(torch.nn.Dropout(0.25).state_dict()) is not None
    x = torch.rand(64, 128, dtype=dtype) + 0.5
    for training in (True, False):
        module.train(training)
        base = _leaf(x)
        y = base * 1.0
        out = module(y)
        cotangent = torch.randn(x.shape, dtype=dtype)
        (grad_in,) = torch.autograd.grad(out, base, cotangent)
        check_dropout(x, out, grad_in, cotangent, 0.25, training)
        if training:
            zeros = int((out == 0).sum())
            assert abs(zeros - x.numel() * 0.25) <= _binomial_bound(x.numel(), 0.25)
    with pytest.raises(ValueError):
        tilec.nn.Dropout(1.5)
