"""Convolutions through tilec's own convolution programs (tilec.nn.functional's: the input taken
to channels-last inside, an implicit GEMM), each a kernel call of its own; the backward is the
gradient program tilec derives from the same source (tilec.ops.tile_grad), the bias gradient a
Tile reduction. Kernel taps that read only padding (a 3x3 kernel on a 1x1 map) are left out of
both (`live_taps`), their weight gradient zero."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch

from tilec.nn import functional
from tilec.nn.functional import convolution
from tilec.ops.kernels import forward_fn, grad_fn
from tilec.ops.program import run_program_no_grad
from tilec.ops.tile_grad import input_grads
from tilec.torch_backend import tasks
from tilec.torch_backend.lowering.registry import library_call
from tilec.torch_backend.program import Unsupported

aten = torch.ops.aten
_FUNCTIONS = {1: "conv1d", 2: "conv2d", 3: "conv3d"}


def _check(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],  # noqa: A002
           dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> None:
    if transposed:
        raise Unsupported("a transposed convolution")
    if input.dim() - 2 not in _FUNCTIONS or input.dim() != weight.dim():
        raise Unsupported(f"a convolution of a {input.dim()}-d input")
    if groups != 1:
        raise Unsupported("a grouped convolution")
    if input.dtype not in (torch.float32, torch.float64) or weight.dtype != input.dtype:
        raise Unsupported(f"a convolution in {input.dtype}")
    if any(t is not None and t.device.type != "cpu" for t in (input, weight, bias)):
        raise Unsupported("a convolution off the CPU")


def _plan(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], padding: Sequence[int],
          dilation: Sequence[int], has_bias: bool) -> Any:
    n = x.dim() - 2
    return convolution._conv_plan(_FUNCTIONS[n], x, w, torch.empty(w.shape[0]) if has_bias else None,
                                  tuple(stride), tuple(padding), tuple(dilation), 1)


@library_call(aten.convolution.default, check=_check)
def conv(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],  # noqa: A002
         padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
         groups: int) -> torch.Tensor:
    conv_fn = getattr(functional, _FUNCTIONS[input.dim() - 2])
    taps, padding = _live(input, weight, stride, padding, dilation)
    weight = weight[taps]
    with torch.no_grad():
        out = conv_fn(input, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)
    if (input.shape, weight.shape) not in _NOTED:
        _NOTED.add((input.shape, weight.shape))
        plan = _plan(input, weight, stride, padding, dilation, bias is not None)
        if plan.source is not None and not plan.channels_last:
            tasks.note(plan.source, forward_fn(plan.source).inputs,
                       [t.shape for t in (input, weight, bias) if t is not None],
                       [t.dtype for t in (input, weight, bias) if t is not None])
    return out


#: the shapes whose programs tasks.note has (a set lookup per call instead of a note)
_NOTED: set[Any] = set()


def _check_backward(grad: Any, input: Any, weight: Any, bias_sizes: Any, stride: Any, padding: Any,  # noqa: A002
                    dilation: Any, transposed: bool, output_padding: Any, groups: int, output_mask: Any) -> None:
    _check(input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if input.shape[1] == 0:
        raise Unsupported("a convolution backward with no input channels")


@lru_cache(maxsize=4096)
def live_taps(size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
              dilation: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[int, ...]] | None:
    """When a single tap per spatial dimension reads the input (the others read only padding): that
    tap, per dimension, and the padding that makes the 1x1 convolution with it the same one; else
    None. A 3x3 kernel with padding 1 on a 1x1 map (ResNet's last stage on CIFAR) reads the input
    with its centre alone: the other eight taps multiply zeros, and their weight gradient is zero.
    (Narrower kernels that keep several taps -- 2x2 of a stride-2 3x3 on a 2x2 map -- measured
    slower than the whole kernel.)"""
    taps, pads = [], []
    for n, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        out = (n + 2 * p - d * (k - 1) - 1) // s + 1
        live = [t for t in range(k) if any(0 <= o * s - p + t * d < n for o in range(out))]
        if len(live) != 1:
            return None
        p_new = p - live[0] * d
        if p_new < 0 or (n + 2 * p_new - 1) // s + 1 != out:
            return None
        taps.append(slice(live[0], live[0] + 1))
        pads.append(p_new)
    return (tuple(taps), tuple(pads)) if any(k > 1 for k in kernel) else None


def _live(input: torch.Tensor, weight: torch.Tensor, stride: Sequence[int], padding: Sequence[int],  # noqa: A002
          dilation: Sequence[int]) -> tuple[tuple[slice, ...], Sequence[int]]:
    """The index of `weight`'s live taps (() for all of it) and the padding to use with them (live_taps)."""
    live = live_taps(tuple(input.shape[2:]), tuple(weight.shape[2:]), tuple(stride), tuple(padding), tuple(dilation))
    if live is None:
        return (), padding
    return (slice(None), slice(None), *live[0]), live[1]


@lru_cache(maxsize=None)
def _channel_sum(rank: int) -> str:
    axes = ", ".join(f"a{d}" for d in range(rank - 2))
    sizes = ", ".join(f"S{d}" for d in range(rank - 2))
    return f"function (G[N, C, {sizes}]) -> (O) {{ O[c: C] = +(G[n, c, {axes}]); }}"


@library_call(aten.convolution_backward.default, check=_check_backward)
def conv_backward(grad: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, bias_sizes: Any,  # noqa: A002
                  stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                  output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> tuple[Any, ...]:
    taps, padding = _live(input, weight, stride, padding, dilation)
    x, w, g = input.contiguous(), weight[taps].contiguous(), grad.contiguous()
    source = _plan(x, w, stride, padding, dilation, False).source  # (NC* tensors: not channels-last)
    needs = [bool(output_mask[0]), bool(output_mask[1])]
    gi, gw = input_grads(source, [x, w], needs, [g])
    if taps != () and gw is not None:  # the gradient of the taps that read only padding is 0
        whole = gw.new_zeros(weight.shape)
        whole[taps] = gw
        gw = whole
    if (g.shape, x.shape, w.shape, tuple(needs)) not in _NOTED:
        _NOTED.add((g.shape, x.shape, w.shape, tuple(needs)))
        names = forward_fn(source).inputs
        wrt = tuple(n for n, need in zip(names, needs) if need)
        derived = grad_fn(source, wrt)
        tasks.note(derived.source, derived.inputs, [x.shape, w.shape, g.shape], [x.dtype, w.dtype, g.dtype])
    gb = run_program_no_grad(_channel_sum(g.dim()), [g])[0] if output_mask[2] else None
    return gi, gw, gb
