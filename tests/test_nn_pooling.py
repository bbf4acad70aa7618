"""tilec.nn.functional's pooling against torch where the OpInfo samples are thin: ties, NaN and
infinities inside windows (which single element gets max_pool2d's gradient), channels_last,
unbatched and empty inputs, ceil_mode windows, and the refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilec
import tilec.nn
import tilec.nn.functional as T

NAN, INF = float("nan"), float("inf")


def _awkward_input() -> torch.Tensor:
    """Windows holding ties, NaN (one or several), +inf beside NaN, -inf only, and -0.0 beside 0."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
    x[0, 0, 1, 1] = NAN
    x[0, 1, 2:4, 2:4] = 5.0
    x[1, 0, 0, :] = INF
    x[1, 0, 1, 1] = NAN
    x[1, 0, 1, 3] = NAN
    x[1, 1, 3, :] = 0.0
    x[1, 1, 2, :3] = -0.0
    x[1, 2] = -INF
    return x


LAYOUTS = {"contiguous": lambda x: x, "channels_last": lambda x: x.to(memory_format=torch.channels_last),
           "unbatched": lambda x: x[1], "strided": lambda x: x[..., ::2]}
MAX_ARGS = [((3, 2), (2, 1), (1, 1), (1, 2), True), ((2, 2), None, 0, 1, False), ((3, 3), 1, 1, 2, True)]


def _grads(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    cotangent = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape) + 1
    return torch.autograd.grad(out, x, cotangent)[0]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("args", MAX_ARGS, ids=str)
def test_max_pool2d_picks_torchs_element_at_ties_nan_and_inf(layout, args):
    x = LAYOUTS[layout](_awkward_input()).detach().requires_grad_()
    got, got_indices = T.max_pool2d(x, *args, return_indices=True)
    want, want_indices = F.max_pool2d(x, *args, return_indices=True)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert torch.equal(got_indices, want_indices) and got.stride() == want.stride()
    assert got_indices.stride() == want_indices.stride()
    torch.testing.assert_close(_grads(got, x), _grads(want, x))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_avg_and_adaptive_pool_follow_torch(layout):
    x = LAYOUTS[layout](torch.randn(2, 3, 7, 6, dtype=torch.float64)).requires_grad_()
    for kwargs in [dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                   dict(kernel_size=(3, 2), padding=(1, 0), ceil_mode=True),
                   dict(kernel_size=2, divisor_override=3)]:
        got, want = T.avg_pool2d(x, **kwargs), F.avg_pool2d(x, **kwargs)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
        torch.testing.assert_close(_grads(got, x), _grads(want, x))
    for size in [(5, 4), 3, (None, 2), (7, 3), 1]:
        got, want = T.adaptive_avg_pool2d(x, size), F.adaptive_avg_pool2d(x, size)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
        torch.testing.assert_close(_grads(got, x), _grads(want, x))


def test_empty_batch_keeps_shape_and_gradient():
    x = torch.randn(0, 2, 6, 6, requires_grad=True)
    out, indices = T.max_pool2d(x, 2, return_indices=True)
    assert out.shape == (0, 2, 3, 3) and indices.dtype == torch.int64 and out.requires_grad
    assert T.avg_pool2d(x, 3).shape == (0, 2, 2, 2)
    assert T.adaptive_avg_pool2d(x, (4, 5)).shape == (0, 2, 4, 5)


def test_modules_are_torchs_with_tilec_forward():
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    for cls, args in [("MaxPool2d", (3, 2, 1)), ("AvgPool2d", (3, 2, 1)), ("AdaptiveAvgPool2d", ((3, 5),))]:
        module, reference = getattr(tilec.nn, cls)(*args), getattr(torch.nn, cls)(*args)
        assert isinstance(module, getattr(torch.nn, cls))
        got, want = module(x), reference(x)
        torch.testing.assert_close(got, want)
        assert got.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("call, message", [
    (lambda x: T.max_pool2d(x, 2, padding=2), "padding 2 must be at most half the kernel size 2"),
    (lambda x: T.max_pool2d(x, 9), "output size"),
    (lambda x: T.avg_pool2d(x.int(), 2), "dtype torch.int32"),
    (lambda x: T.max_pool2d(x[0, 0], 2), "3-D or 4-D"),
    (lambda x: T.adaptive_avg_pool2d(x, (1, 2, 3)), "output_size"),
])
def test_refusals_name_the_option(call, message):
    with pytest.raises(tilec.TilecError, match="tilec.nn.functional") as err:
        call(torch.randn(1, 2, 6, 6))
    assert message in str(err.value)


def test_max_pool2d_differentiates_twice_like_torch():
    x = torch.randn(2, 3, 7, 6, dtype=torch.float64).to(memory_format=torch.channels_last).requires_grad_()
    cotangent = torch.randn(2, 3, 4, 3, dtype=torch.float64, requires_grad=True)
    results = []
    for pool in (T.max_pool2d, F.max_pool2d):
        (dx,) = torch.autograd.grad(pool(x, 3, 2, 1), x, cotangent, create_graph=True)
        results.append((dx, *torch.autograd.grad((dx * dx).sum(), cotangent)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


def test_max_pool2d_refuses_windows_of_padding_only():
    x = torch.randn(1, 1, 2, 2)  # torch: -inf at index 6, outside the 2x2 plane
    with pytest.raises(tilec.TilecError, match="holds padding only"):
        T.max_pool2d(x, 2, stride=1, padding=1, dilation=3)
