"""tilec.nn's normalisations against torch beyond the OpInfo/ModuleInfo samples (tests/test_nn_opinfo.py):
memory orders the samples do not hold, running statistics over several batches (momentum None:
the cumulative average), torch.compile with running statistics, empty inputs, and torch's errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import tilec.nn as tnn
import tilec.nn.functional as TF
from tilec.errors import TilecError


def _check(ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> None:
    """Same values, strides and gradients (of every tensor that requires grad) on copies of `tensors`."""
    mine = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_(t.requires_grad) for t in tensors]
    ref = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_(t.requires_grad) for t in tensors]
    out, want = ours(*mine), theirs(*ref)
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride()
    grad = torch.randn_like(want)
    leaves = [i for i, t in enumerate(tensors) if t.requires_grad]
    got = torch.autograd.grad(out, [mine[i] for i in leaves], grad)
    expected = torch.autograd.grad(want, [ref[i] for i in leaves], grad)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def _channels_last(*shape: int) -> torch.Tensor:
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return torch.randn(*shape, dtype=torch.float64).to(memory_format=fmt).requires_grad_()


def test_rms_norm_memory_formats() -> None:
    """torch's: channels_last for channels_last (whichever axes are normalised), else contiguous."""
    x = _channels_last(2, 3, 4, 5)
    _check(lambda t: TF.rms_norm(t, (5,)), lambda t: F.rms_norm(t, (5,)), x)  # W is not innermost
    w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    _check(lambda t, v: TF.rms_norm(t, (4, 5), v), lambda t, v: F.rms_norm(t, (4, 5), v), x, w)
    _check(lambda t, v: TF.rms_norm(t, (3, 4, 5), v, 1e-3), lambda t, v: F.rms_norm(t, (3, 4, 5), v, 1e-3),
           x, torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True))
    transposed = torch.randn(4, 6, 5, dtype=torch.float64).transpose(1, 2).requires_grad_()
    _check(lambda t: TF.rms_norm(t, (6,)), lambda t: F.rms_norm(t, (6,)), transposed)
    _check(lambda t: TF.rms_norm(t, (2, 3)), lambda t: F.rms_norm(t, (2, 3)), _channels_last(2, 4, 3, 2, 3))


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_channels_last_3d(groups: int) -> None:
    x = _channels_last(2, 6, 3, 2, 3)
    w, b = (torch.randn(6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    _check(lambda t, u, v: TF.group_norm(t, groups, u, v), lambda t, u, v: F.group_norm(t, groups, u, v), x, w, b)


def test_batch_norm_on_transposed_and_channels_last_inputs() -> None:
    w, b = (torch.randn(5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    transposed = torch.randn(4, 3, 5, dtype=torch.float64).transpose(1, 2).requires_grad_()
    _check(lambda t, u, v: TF.batch_norm(t, None, None, u, v, training=True),
           lambda t, u, v: F.batch_norm(t, None, None, u, v, training=True), transposed, w, b)
    x = _channels_last(2, 5, 3, 4)
    mean, var = torch.randn(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64) + 0.5
    _check(lambda t, u, v: TF.batch_norm(t, mean, var, u, v, eps=1e-3),
           lambda t, u, v: F.batch_norm(t, mean, var, u, v, eps=1e-3), x, w, b)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("module", ["BatchNorm1d", "BatchNorm2d"])
def test_running_statistics_over_batches_then_eval(momentum: float | None, module: str) -> None:
    ours, theirs = getattr(tnn, module)(3, momentum=momentum), getattr(torch.nn, module)(3, momentum=momentum)
    shape = (4, 3) if module == "BatchNorm1d" else (4, 3, 5, 5)
    for _ in range(3):
        x = torch.randn(*shape)
        torch.testing.assert_close(ours(x), theirs(x))
    for (name, got), (_, want) in zip(ours.named_buffers(), theirs.named_buffers()):
        torch.testing.assert_close(got, want, msg=name)
    ours.eval()
    theirs.eval()
    x = torch.randn(*shape)
    torch.testing.assert_close(ours(x), theirs(x))


def test_batch_norm_trains_under_torch_compile() -> None:
    ours, theirs = tnn.BatchNorm2d(3, momentum=None), torch.nn.BatchNorm2d(3, momentum=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(ours, fullgraph=True)
        for _ in range(2):
            x = torch.randn(4, 3, 5, 5, requires_grad=True)
            out, want = compiled(x), theirs(x)
            torch.testing.assert_close(out, want)
            got = torch.autograd.grad(out.square().sum(), [x, ours.weight])
            expected = torch.autograd.grad(want.square().sum(), [x, theirs.weight])
            for a, b in zip(got, expected):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    assert int(ours.num_batches_tracked) == 2


def test_empty_inputs() -> None:
    x = torch.randn(3, 0, requires_grad=True)
    assert TF.layer_norm(x, (0,)).shape == (3, 0)
    bn = tnn.BatchNorm2d(5)
    empty = torch.randn(0, 5, 2, 2).to(memory_format=torch.channels_last)
    out = bn(empty)
    assert out.shape == empty.shape and out.stride() == torch.nn.BatchNorm2d(5)(empty).stride()
    torch.testing.assert_close(bn.running_mean, torch.zeros(5))  # an empty batch leaves the statistics


def test_errors_as_torch_raises_them() -> None:
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        TF.batch_norm(torch.randn(1, 3), None, None, training=True)
    with pytest.raises(RuntimeError, match="running_mean must be defined"):
        TF.batch_norm(torch.randn(2, 3), None, None, training=False)
    with pytest.raises(TilecError, match="momentum=None"):
        TF.batch_norm(torch.randn(2, 3), torch.zeros(3), torch.ones(3), training=True, momentum=None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="num_groups=4"):
        TF.group_norm(torch.randn(2, 6), 4)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        TF.layer_norm(torch.randn(2, 6), (5,))
    with pytest.raises(TilecError, match="dtype"):
        TF.rms_norm(torch.ones(2, 6, dtype=torch.int32), (6,))


@pytest.mark.parametrize("momentum", [0.5, -1.2, 0.0])
def test_functional_batch_norm_updates_strided_running_statistics(momentum: float) -> None:
    """The update lands in the caller's tensors, views included (the OpInfo comparison sees only outputs)."""
    x = torch.randn(5, 5, 5, dtype=torch.float64)
    stats = torch.rand(5, 2, dtype=torch.float64) + 0.5
    mean, var = stats[:, 0], stats[:, 1]  # non-contiguous views
    want_mean, want_var = mean.clone(), var.clone()
    TF.batch_norm(x, mean, var, training=True, momentum=momentum, eps=0.6)
    F.batch_norm(x, want_mean, want_var, training=True, momentum=momentum, eps=0.6)
    torch.testing.assert_close(stats[:, 0], want_mean)
    torch.testing.assert_close(stats[:, 1], want_var)
