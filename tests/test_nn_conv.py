"""tilec.nn's convolution and linear modules and functions on inputs PyTorch's databases lack:
every padding_mode, ConvTranspose2d's output_size, channels-last layouts, empty tensors,
in_features 0. Each compares forward and gradients with torch's (tests/torch_reference.py's
`compare`)."""

from __future__ import annotations

import pytest
import torch
from torch_reference import compare

import tilec.nn
import tilec.nn.functional as T


def _modules(name: str, *args, **kwargs):
    torch.manual_seed(0)
    reference = getattr(torch.nn, name)(*args, **kwargs).double()
    module = getattr(tilec.nn, name)(*args, **kwargs).double()
    module.load_state_dict(reference.state_dict())
    return reference, module


def _check_module(name, ctor_args, ctor_kwargs, x, **forward_kwargs):
    reference, module = _modules(name, *ctor_args, **ctor_kwargs)
    outcome = compare(reference, module, (x,), forward_kwargs, list(reference.parameters()),
                      list(module.parameters()))
    assert outcome, outcome.detail


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("name,shape", [("Conv1d", (2, 3, 7)), ("Conv2d", (2, 3, 6, 7)), ("Conv2d", (3, 6, 7)),
                                        ("Conv3d", (1, 3, 4, 5, 6))])
def test_conv_padding_modes(name, shape, mode):
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    _check_module(name, (3, 4, 3), {"padding": 2, "padding_mode": mode, "stride": 2}, x)
    _check_module(name, (3, 4, 2), {"padding": "same", "padding_mode": mode, "dilation": 3}, x)


def test_conv_transpose2d_output_size():
    x = torch.randn(2, 3, 5, 6, dtype=torch.float64, requires_grad=True)
    _check_module("ConvTranspose2d", (3, 4, 3), {"stride": 2, "padding": 1}, x, output_size=[10, 12])
    _check_module("ConvTranspose2d", (3, 4, 3), {"stride": 3, "groups": 1, "dilation": 2}, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_channels_last_layouts(dtype):
    x = torch.randn(2, 4, 5, 6, dtype=dtype).to(memory_format=torch.channels_last)
    for w in (torch.randn(6, 2, 3, 3, dtype=dtype), torch.randn(6, 2, 3, 3, dtype=dtype).to(memory_format=torch.channels_last)):
        for xi in (x, x.contiguous()):
            want = torch.nn.functional.conv2d(xi, w, groups=2, padding=1)
            got = T.conv2d(xi, w, groups=2, padding=1)
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()
    unbatched, w = x[0].contiguous(), torch.randn(6, 4, 3, 3, dtype=dtype).to(memory_format=torch.channels_last)
    want, got = torch.nn.functional.conv2d(unbatched, w), T.conv2d(unbatched, w)  # torch: a channels-last squeeze
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    w = torch.randn(4, 3, 3, 3, dtype=dtype)
    want, got = torch.nn.functional.conv_transpose2d(x, w, stride=2), T.conv_transpose2d(x, w, stride=2)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_padding_modes_keep_torchs_layout(mode, dtype):
    reference, module = _modules("Conv2d", 3, 4, 3, padding=1, padding_mode=mode)
    reference, module = reference.to(dtype), module.to(dtype)
    x = torch.randn(2, 3, 5, 6, dtype=dtype).to(memory_format=torch.channels_last)
    want, got = reference(x), module(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("fn,x,w,b", [
    ("conv2d", (0, 3, 5, 5), (4, 3, 3, 3), (4,)),
    ("conv2d", (2, 0, 5, 5), (4, 0, 3, 3), (4,)),
    ("conv1d", (2, 0, 5), (4, 0, 3), None),
    ("conv_transpose2d", (0, 3, 5, 5), (3, 4, 3, 3), (4,)),
    ("linear", (2, 0), (3, 0), (3,)),
    ("linear", (2, 0), (3, 0), None),
    ("linear", (2, 3), (0, 3), (0,)),
    ("linear", (4,), (4,), None),
])
def test_empty_and_degenerate(fn, x, w, b):
    args = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in (x, w)]
    if b is not None:
        args.append(torch.randn(b, dtype=torch.float64, requires_grad=True))
    outcome = compare(getattr(torch.nn.functional, fn), getattr(T, fn), tuple(args), {})
    assert outcome, outcome.detail


def test_refusals_name_the_option():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with pytest.raises(tilec.TilecError, match="padding='same'"):
        T.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(tilec.TilecError, match="dtype"):
        T.conv2d(x.int(), w)
    with pytest.raises(tilec.TilecError, match="out channels"):
        T.conv2d(x, w[:0])
    with pytest.raises(tilec.TilecError, match="output_padding"):
        T.conv_transpose2d(x, w.transpose(0, 1), output_padding=2)
