"""Depthwise 2-D convolutions (groups = input channels = output channels, stride 1) and their
backward, as the library rules of tilec.torch_backend.lowering.library run them.

The program is tilec.ops.sources.depthwise_source's direct sum of taps, which the `stencil`
template vectorises; its gradient program (tilec.autodiff) is a stencil too for the input and a
sum over batch and space for the filter. Measured on Zen 4, 2 cores, 3x3 pad 1, batch 8, one call
each: forward 32 channels at 56x56 0.23 ms against torch's 2.6 ms, 96 at 28x28 0.21 / 0.20, 144 at
14x14 0.13 / 0.12; both gradients 0.64 / 0.58 / 0.31 ms where torch's forward and backward took
5.6 / 4.0 / 0.46 ms. Other grouped convolutions, and strided depthwise ones (the stencil's
stride-2 forward ran 1.1-1.7x slower than torch's, tilec.schedule.cpu.stencil), run in torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilec.ops.kernels import call, forward_fn, grad_fn
from tilec.ops.sources import depthwise_source
from tilec.runtime.function import Function
from tilec.torch_backend import tasks

_FORWARDS: dict[tuple[Any, ...], Function] = {}
_BACKWARDS: dict[tuple[Any, ...], Function | None] = {}  # the gradient program, None when none is asked for


def is_depthwise(input: Any, weight: Any, stride: Sequence[int], groups: int) -> bool:  # noqa: A002
    """A 2-D convolution this module runs: one filter per channel, stride 1."""
    return (groups > 1 and input.dim() == 4 and weight.dim() == 4 and input.shape[1] == groups
            and weight.shape[0] == groups and weight.shape[1] == 1 and all(s == 1 for s in stride))


def _source(padding: Sequence[int], dilation: Sequence[int], has_bias: bool) -> str:
    return depthwise_source((1, 1), ((padding[0], padding[0]), (padding[1], padding[1])), (dilation[0], dilation[1]),
                            has_bias)


def forward(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # noqa: A002
            padding: Sequence[int], dilation: Sequence[int]) -> torch.Tensor:
    key = (input.shape, weight.shape, input.dtype, bias is not None, tuple(padding), tuple(dilation))
    fn = _FORWARDS.get(key)
    tensors = [input, weight] if bias is None else [input, weight, bias]
    if fn is None:
        fn = _FORWARDS[key] = forward_fn(_source(padding, dilation, bias is not None))
        tasks.note(fn.source, fn.inputs, [t.shape for t in tensors], [t.dtype for t in tensors])
    return call(fn, tensors)[0]


def backward(grad: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, padding: Sequence[int],  # noqa: A002
             dilation: Sequence[int], needs: tuple[bool, bool]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The input's and the weight's gradients where `needs` asks for them (the bias's is the
    caller's: a channel sum)."""
    key = (grad.shape, input.shape, weight.shape, input.dtype, tuple(padding), tuple(dilation), needs)
    if key not in _BACKWARDS:
        grads = None
        if any(needs):
            source = _source(padding, dilation, False)
            grads = grad_fn(source, tuple(n for n, need in zip(("X", "F"), needs) if need))
            tasks.note(grads.source, grads.inputs, [input.shape, weight.shape, grad.shape],
                       [input.dtype, weight.dtype, grad.dtype])
        _BACKWARDS[key] = grads
    grads = _BACKWARDS[key]
    if grads is None:
        return None, None
    out = iter(call(grads, [input.contiguous(), weight.contiguous(), grad.contiguous()]))
    return (next(out) if needs[0] else None), (next(out) if needs[1] else None)


__all__ = ["is_depthwise", "forward", "backward"]
