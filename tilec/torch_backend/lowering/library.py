"""Convolutions through tilec's own convolution programs (tilec.nn.functional's: the input taken
to channels-last inside, an implicit GEMM), each a kernel call of its own; the backward is the
gradient program tilec derives from the same source (tilec.ops.kernels.grad_fn), the bias gradient a
Tile reduction. Kernel taps that read only padding (a 3x3 kernel on a 1x1 map) are left out of
both (`live_taps`), their weight gradient zero. What a call runs is decided once per argument
signature; later calls run the compiled programs directly (a compiled graph's node records no
autograd and its arguments were checked at the signature's first call). Depthwise convolutions of
stride 1 run a program of their own (tilec.torch_backend.lowering.depthwise); other grouped ones
run in torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from tilec.nn import functional
from tilec.nn.functional import convolution
from tilec.ops.kernels import call, forward_fn, grad_fn
from tilec.runtime.function import Function
from tilec.torch_backend import tasks
from tilec.torch_backend.lowering import depthwise
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
    if groups != 1 and not depthwise.is_depthwise(input, weight, stride, groups):
        raise Unsupported("a grouped convolution other than a depthwise one of stride 1")
    if input.dtype not in (torch.float32, torch.float64) or weight.dtype != input.dtype:
        raise Unsupported(f"a convolution in {input.dtype}")
    if any(t is not None and t.device.type != "cpu" for t in (input, weight, bias)):
        raise Unsupported("a convolution off the CPU")


def _plan(x: torch.Tensor, w: torch.Tensor, stride: Sequence[int], padding: Sequence[int],
          dilation: Sequence[int], has_bias: bool) -> Any:
    n = x.dim() - 2
    return convolution._conv_plan(_FUNCTIONS[n], x, w, torch.empty(w.shape[0], dtype=x.dtype) if has_bias else None,
                                  tuple(stride), tuple(padding), tuple(dilation), 1)


@dataclass(frozen=True)
class _Forward:
    """A convolution signature's kernel: the live taps of the weight it reads (() for all) and the
    compiled program, or None where the call goes through tilec.nn.functional (channels-last input)."""

    taps: tuple[slice, ...]
    fn: Function | None


#: per argument signature (shapes, dtypes, layouts, hyper-parameters): what a call runs, decided once
_FORWARDS: dict[tuple[Any, ...], _Forward] = {}


@library_call(aten.convolution.default, check=_check)
def conv(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],  # noqa: A002
         padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
         groups: int) -> torch.Tensor:
    if groups != 1:  # (a depthwise convolution: _check)
        return depthwise.forward(input.contiguous(), weight.contiguous(), bias, padding, dilation)
    key = (input.shape, input.stride(), weight.shape, weight.stride(), input.dtype, bias is not None,
           tuple(stride), tuple(padding), tuple(dilation))
    plan = _FORWARDS.get(key)
    if plan is None:
        plan = _FORWARDS[key] = _forward_plan(input, weight, bias, stride, padding, dilation)
    weight = weight[plan.taps]
    if plan.fn is not None:  # the program itself: no checks, no autograd (a compiled graph's node)
        return call(plan.fn, [input, weight] if bias is None else [input, weight, bias])[0]
    live = _live(input, weight, stride, padding, dilation)[1] if plan.taps else padding
    with torch.no_grad():
        return getattr(functional, _FUNCTIONS[input.dim() - 2])(input, weight, bias, tuple(stride), tuple(live),
                                                                 tuple(dilation), groups)


def _forward_plan(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,  # noqa: A002
                  stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int]) -> _Forward:
    taps, padding = _live(input, weight, stride, padding, dilation)
    weight = weight[taps]
    plan = _plan(input, weight, stride, padding, dilation, bias is not None)
    if plan.source is None or plan.channels_last or not plan.batched:
        return _Forward(taps, None)
    fn = forward_fn(plan.source)
    tasks.note(plan.source, fn.inputs, [t.shape for t in (input, weight, bias) if t is not None],
               [t.dtype for t in (input, weight, bias) if t is not None])
    return _Forward(taps, fn)


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


@dataclass(frozen=True)
class _Backward:
    """A convolution backward signature's kernels: the weight's live taps (() for all), the derived
    gradient program (None when no input or weight gradient is asked for) and the bias gradient's
    channel sum (None when not asked for)."""

    taps: tuple[slice, ...]
    grads: Function | None
    needs: tuple[bool, bool]
    bias: Function | None


_BACKWARDS: dict[tuple[Any, ...], _Backward] = {}


@library_call(aten.convolution_backward.default, check=_check_backward)
def conv_backward(grad: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, bias_sizes: Any,  # noqa: A002
                  stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                  output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> tuple[Any, ...]:
    if groups != 1:  # (a depthwise convolution: _check)
        gi, gw = depthwise.backward(grad, input, weight, padding, dilation, (bool(output_mask[0]), bool(output_mask[1])))
        gb = call(forward_fn(_channel_sum(grad.dim())), [grad.contiguous()])[0] if output_mask[2] else None
        return gi, gw, gb
    key = (grad.shape, input.shape, weight.shape, input.dtype, tuple(stride), tuple(padding), tuple(dilation),
           tuple(bool(m) for m in output_mask))
    plan = _BACKWARDS.get(key)
    if plan is None:
        plan = _BACKWARDS[key] = _backward_plan(grad, input, weight, stride, padding, dilation, output_mask)
    g = grad.contiguous()
    gi = gw = None
    if plan.grads is not None:  # the derived program itself, its gradients in the order of `needs`
        out = iter(call(plan.grads, [input.contiguous(), weight[plan.taps].contiguous(), g]))
        gi = next(out) if plan.needs[0] else None
        gw = next(out) if plan.needs[1] else None
    if plan.taps and gw is not None:  # the gradient of the taps that read only padding is 0
        whole = gw.new_zeros(weight.shape)
        whole[plan.taps] = gw
        gw = whole
    gb = call(plan.bias, [g])[0] if plan.bias is not None else None
    return gi, gw, gb


def _backward_plan(grad: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
                   stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                   output_mask: Sequence[bool]) -> _Backward:
    taps, padding = _live(input, weight, stride, padding, dilation)
    w = weight[taps].contiguous()
    source = _plan(input.contiguous(), w, stride, padding, dilation, False).source  # (not channels-last)
    needs = (bool(output_mask[0]), bool(output_mask[1]))
    grads = None
    if any(needs):
        names = forward_fn(source).inputs
        grads = grad_fn(source, tuple(n for n, need in zip(names, needs) if need))
        tasks.note(grads.source, grads.inputs, [input.shape, w.shape, grad.shape], [input.dtype, w.dtype, grad.dtype])
    bias = forward_fn(_channel_sum(grad.dim())) if output_mask[2] else None
    return _Backward(taps, grads, needs, bias)
