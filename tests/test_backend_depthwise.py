"""Depthwise convolutions under `torch.compile(..., backend="tilec")`
(tilec/torch_backend/lowering/depthwise.py): stride-1 ones (3x3 and 5x5, with and without bias,
dilated) run in tilec kernels, forward and backward, and agree with eager torch on random inputs;
strided depthwise and other grouped convolutions run in torch, without error.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo

import tilec.torch_backend as backend


def _train_once(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    y = model(x)
    y.square().mean().backward()
    return y.detach(), x.grad, [p.grad for p in model.parameters()]


def _compare(model: torch.nn.Module, x: torch.Tensor) -> dict:
    torch._dynamo.reset()
    compiled_model = copy.deepcopy(model)
    backend.reset_coverage()
    got = _train_once(torch.compile(compiled_model, backend="tilec"), x)
    report = backend.coverage()
    want = _train_once(model, x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-6)
    for g, w in zip(got[2], want[2]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * float(w.abs().max()))
    return report


@pytest.mark.parametrize("kernel, dilation, bias", [(3, 1, False), (5, 1, True), (3, 2, True)])
def test_stride_one_depthwise_convolutions_run_in_tilec_and_agree_with_eager(kernel, dilation, bias):
    torch.manual_seed(kernel + dilation)
    c = 6
    pad = dilation * (kernel - 1) // 2
    model = torch.nn.Sequential(torch.nn.Conv2d(c, c, kernel, padding=pad, dilation=dilation, groups=c, bias=bias),
                                torch.nn.ReLU(), torch.nn.Conv2d(c, 4, 1))
    report = _compare(model, torch.randn(3, c, 11, 21))
    assert not any("convolution" in op for op in report["fallback"]), report
    assert report["kernels"] > 0


@pytest.mark.parametrize("stride, groups", [(2, 6), (1, 3)])
def test_strided_depthwise_and_other_grouped_convolutions_run_in_torch(stride, groups):
    torch.manual_seed(stride)
    model = torch.nn.Sequential(torch.nn.Conv2d(6, 6, 3, stride=stride, padding=1, groups=groups), torch.nn.ReLU())
    report = _compare(model, torch.randn(2, 6, 9, 13))
    assert report["fallback"].get("convolution", 0) >= 1 and report["fallback"].get("convolution_backward", 0) >= 1, report
