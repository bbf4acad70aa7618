"""Convolutions of tilec.nn.functional: conv1d, conv2d, conv3d and conv_transpose2d, and the
padding modes of the convolution modules (`pad_for_conv`).

Requires: float32 or float64 tensors of one dtype on one device; torch.nn.functional's arguments.
Guarantees: torch's output shape, dtype and memory format (channels-last when the input or the
weight is, as torch's CPU convolutions give) and gradients derived from the Tile programs of
tilec/ops/sources.py (conv_source, whose 2-D NCHW case is the tuned conv2d_source, and
conv_transpose_source). Batched and unbatched inputs, padding as integers, tuples, "same" (the odd
padding after, as torch) or "valid", any stride, dilation and groups, empty tensors. Arguments
torch refuses raise an OpError naming them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import torch

from tilec.nn.functional.layout import check_float
from tilec.nn.functional.plans import planned
from tilec.ops import sources
from tilec.ops.arguments import OpError, same_dtype
from tilec.ops.autocast import lower_precision
from tilec.ops.program import run_program

IntOrTuple = int | Sequence[int]

_CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


def _ints(op: str, name: str, value: IntOrTuple, n: int, least: int) -> tuple[int, ...]:
    """`value` (one integer, or one per spatial axis) as n integers >= least."""
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) == 1:
        values = values * n
    if len(values) != n or not all(isinstance(v, int) and v >= least for v in values):
        raise OpError(f"tilec.nn.functional.{op}: '{name}' must be one integer or {n} integers >= {least}, "
                      f"got {value!r}")
    return tuple(int(v) for v in values)


def _padding(op: str, padding: str | IntOrTuple, n: int, kernel: Sequence[int], stride: Sequence[int],
             dilation: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The zeros (before, after) each spatial axis: torch's "same" pads d (k - 1) in all, the odd
    one after; "valid" none."""
    if padding == "valid":
        return ((0, 0),) * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise OpError(f"tilec.nn.functional.{op}: padding='same' is not supported for strided convolutions "
                          f"(stride {tuple(stride)}), as in torch")
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in totals)
    if isinstance(padding, str):
        raise OpError(f"tilec.nn.functional.{op}: padding={padding!r}; expected 'same', 'valid' or integers")
    return tuple((p, p) for p in _ints(op, "padding", padding, n, 0))


def _check(op: str, n: int, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002 (torch's name)
           bias: torch.Tensor | None, groups: int) -> bool:
    """Checks the tensors of an n-d convolution; whether `input` is batched (rank n + 2, else n + 1)."""
    check_float(op, "input", input)
    check_float(op, "weight", weight)
    if bias is not None:
        check_float(op, "bias", bias)
    same_dtype(f"nn.functional.{op}", input=input, weight=weight, bias=bias)
    if input.dim() not in (n + 1, n + 2):
        raise OpError(f"tilec.nn.functional.{op}: 'input' must have rank {n + 1} (unbatched) or {n + 2} "
                      f"(batched), got shape {tuple(input.shape)}")
    if weight.dim() != n + 2:
        raise OpError(f"tilec.nn.functional.{op}: 'weight' must have rank {n + 2}, got shape {tuple(weight.shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise OpError(f"tilec.nn.functional.{op}: 'groups' must be an integer >= 1, got {groups!r}")
    if bias is not None and bias.dim() != 1:
        raise OpError(f"tilec.nn.functional.{op}: 'bias' must have rank 1, got shape {tuple(bias.shape)}")
    return input.dim() == n + 2


def _channels_last(n: int, x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether torch's CPU convolution gives a channels-last output: when the input (batched) or the
    weight is channels-last and not also contiguous; in 3-D only for float32 (torch's channels-last
    3-D convolution is oneDNN's, which has no float64: float64 comes out contiguous)."""
    fmt = _CHANNELS_LAST.get(n)
    if fmt is None or (n == 3 and x.dtype != torch.float32):
        return False
    return any(t.is_contiguous(memory_format=fmt) and not t.is_contiguous() for t in (x, weight))


def _grouped(t: torch.Tensor, axis: int, groups: int) -> torch.Tensor:
    """`t` with its axis `axis` split into (groups, size / groups): the group axis of the programs."""
    if groups == 1:
        return t
    size = t.shape[axis]
    return t.reshape(*t.shape[:axis], groups, size // groups, *t.shape[axis + 1:])


def _to_channels_last(x: torch.Tensor) -> torch.Tensor:
    """N, C, *S -> N, *S, C (a view; contiguous when x is channels-last)."""
    return x.permute(0, *range(2, x.dim()), 1)


def _from_channels_last(y: torch.Tensor) -> torch.Tensor:
    """N, *S, C -> N, C, *S (a view: channels-last when y is contiguous)."""
    return y.permute(0, y.dim() - 1, *range(1, y.dim() - 1))


def _run(source: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int,
         channels_last: bool, out_shape: tuple[int, ...]) -> torch.Tensor:
    """A convolution program of tilec/ops/sources.py on batched x (N, C, *S), the weight split at its
    axis 0 into groups, bias: the (N, CO, *OS) result, channels-last when `channels_last`."""
    if channels_last:
        image = _grouped(_to_channels_last(x), x.dim() - 1, groups)
        kernel_shape = (out_shape[0], *out_shape[2:], out_shape[1])
    else:
        image = _grouped(x, 1, groups)
        kernel_shape = out_shape
    tensors = [image, _grouped(weight, 0, groups)]
    if bias is not None:
        tensors.append(_grouped(bias, 0, groups))
    grouped_shape = list(kernel_shape)
    axis = len(kernel_shape) - 1 if channels_last else 1
    if groups > 1:
        grouped_shape[axis:axis + 1] = [groups, kernel_shape[axis] // groups]
    out = run_program(source, tensors, grouped_shape).reshape(kernel_shape)
    return _from_channels_last(out) if channels_last else out


def _empty_result(shape: tuple[int, ...], *tensors: torch.Tensor | None) -> torch.Tensor:
    """An empty tensor of `shape` in the autograd graph of `tensors` (their gradients: zeros), made
    by concatenating empty views (no kernel runs over nothing)."""
    return torch.cat([t.reshape(-1)[:0] for t in tensors if t is not None]).reshape(shape)


class _Plan(NamedTuple):
    """What a call's checked arguments decide: the program (None: the result is empty, torch's for no
    input channels) and the (batched) result's shape and layout."""

    source: str | None
    out_shape: tuple[int, ...]
    groups: int
    channels_last: bool
    batched: bool


#: The plans of the calls so far, by their arguments' metadata (tilec.nn.functional.plans).
_PLANS: dict[tuple[Any, ...], _Plan] = {}


def _execute(plan: _Plan, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002 (torch's name)
             bias: torch.Tensor | None) -> torch.Tensor:
    x = input if plan.batched else input.unsqueeze(0)
    if plan.source is None:
        out = _empty_result(plan.out_shape, x, weight, bias)
    else:
        out = _run(plan.source, x, weight, bias, plan.groups, plan.channels_last, plan.out_shape)
    return out if plan.batched else out.squeeze(0)


def _conv_plan(op: str, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002 (torch's name)
               bias: torch.Tensor | None, stride: IntOrTuple, padding: str | IntOrTuple, dilation: IntOrTuple,
               groups: int) -> _Plan:
    """The checked plan of torch.nn.functional.conv{n}d."""
    n = int(op[4])
    batched = _check(op, n, input, weight, bias, groups)
    x = input if batched else input.unsqueeze(0)
    s = _ints(op, "stride", stride, n, 1)
    d = _ints(op, "dilation", dilation, n, 1)
    kernel = tuple(weight.shape[2:])
    pads = _padding(op, padding, n, kernel, s, d)
    channels, out_channels = x.shape[1], weight.shape[0]
    if out_channels == 0:
        raise OpError(f"tilec.nn.functional.{op}: 'weight' of shape {tuple(weight.shape)} has 0 out channels; "
                      f"torch refuses that too")
    if weight.shape[1] * groups != channels or out_channels % groups:
        raise OpError(f"tilec.nn.functional.{op}: 'weight' of shape {tuple(weight.shape)} with groups={groups} "
                      f"expects {weight.shape[1] * groups} input channels (and out channels divisible by "
                      f"groups); 'input' has shape {tuple(input.shape)}")
    if bias is not None and bias.shape[0] != out_channels:
        raise OpError(f"tilec.nn.functional.{op}: 'bias' has shape {tuple(bias.shape)}, expected ({out_channels},)")
    spatial = []
    for size, k, (before, after), st, dl in zip(x.shape[2:], kernel, pads, s, d):
        span = size + before + after - dl * (k - 1)
        if span < 1:
            raise OpError(f"tilec.nn.functional.{op}: the kernel {kernel} (dilation {d}) is larger than the "
                          f"padded input (shape {tuple(input.shape)}, padding {pads})")
        spatial.append((span - 1) // st + 1)
    if channels == 0:  # torch's result for no input channels: empty, with 0 channels too
        return _Plan(None, (x.shape[0], 0, *spatial), groups, False, batched)
    channels_last = _channels_last(n, x, weight)
    # float32 conv3d accumulates in float64: its sums over C x KD x KH x KW taps, in order, drift
    # beyond torch's float32 result on PyTorch's own samples (4x4x4 taps, dilation 3); widened it
    # still beats torch (2 x 16^3, 16 -> 32 channels, 3x3x3: 4.7 ms, float32 sums 2.8 ms, torch 6.3 ms)
    wide = n == 3 and x.dtype == torch.float32
    if n == 2 and 1 < groups == channels == out_channels and max(s) <= 2 and not channels_last:
        # depthwise: a direct sum of taps per output cell (the stencil template's form), no group axis
        source = sources.depthwise_source((s[0], s[1]), (pads[0], pads[1]), (d[0], d[1]), bias is not None)
        return _Plan(source, (x.shape[0], out_channels, *spatial), 1, False, batched)
    source = sources.conv_source(s, pads, d, bias is not None, groups, channels_last, wide)
    return _Plan(source, (x.shape[0], out_channels, *spatial), groups, channels_last, batched)


def conv1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002
           stride: IntOrTuple = 1, padding: str | IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> torch.Tensor:
    """torch.nn.functional.conv1d."""
    input, weight, bias = lower_precision(input, weight, bias)  # noqa: A001 (under torch.autocast)
    plan = planned(_PLANS, _conv_plan, "conv1d", input, weight, bias, stride, padding, dilation, groups)
    return _execute(plan, input, weight, bias)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002
           stride: IntOrTuple = 1, padding: str | IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> torch.Tensor:
    """torch.nn.functional.conv2d (the NCHW case with symmetric padding is the tuned conv2d_source)."""
    input, weight, bias = lower_precision(input, weight, bias)  # noqa: A001 (under torch.autocast)
    plan = planned(_PLANS, _conv_plan, "conv2d", input, weight, bias, stride, padding, dilation, groups)
    return _execute(plan, input, weight, bias)


def conv3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002
           stride: IntOrTuple = 1, padding: str | IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> torch.Tensor:
    """torch.nn.functional.conv3d."""
    input, weight, bias = lower_precision(input, weight, bias)  # noqa: A001 (under torch.autocast)
    plan = planned(_PLANS, _conv_plan, "conv3d", input, weight, bias, stride, padding, dilation, groups)
    return _execute(plan, input, weight, bias)


def conv_transpose2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,  # noqa: A002
                     stride: IntOrTuple = 1, padding: IntOrTuple = 0, output_padding: IntOrTuple = 0,
                     groups: int = 1, dilation: IntOrTuple = 1) -> torch.Tensor:
    """torch.nn.functional.conv_transpose2d (weight: in_channels, out_channels / groups, kH, kW)."""
    input, weight, bias = lower_precision(input, weight, bias)  # noqa: A001 (under torch.autocast)
    plan = planned(_PLANS, _conv_transpose_plan, "conv_transpose2d", input, weight, bias, stride, padding, output_padding,
                    groups, dilation)
    return _execute(plan, input, weight, bias)


def _conv_transpose_plan(op: str, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002 (torch's name)
                         bias: torch.Tensor | None, stride: IntOrTuple, padding: IntOrTuple,
                         output_padding: IntOrTuple, groups: int, dilation: IntOrTuple) -> _Plan:
    """The checked plan of torch.nn.functional.conv_transpose{n}d."""
    n = int(op[-2])
    batched = _check(op, n, input, weight, bias, groups)
    x = input if batched else input.unsqueeze(0)
    s = _ints(op, "stride", stride, n, 1)
    p = _ints(op, "padding", padding, n, 0)
    extra = _ints(op, "output_padding", output_padding, n, 0)
    d = _ints(op, "dilation", dilation, n, 1)
    if any(e >= max(st, dl) for e, st, dl in zip(extra, s, d)):
        raise OpError(f"tilec.nn.functional.{op}: 'output_padding' {extra} must be smaller than the stride {s} or "
                      f"the dilation {d}, as in torch")
    channels, out_channels = x.shape[1], weight.shape[1] * groups
    if channels == 0 or weight.shape[0] != channels or channels % groups:
        raise OpError(f"tilec.nn.functional.{op}: 'weight' of shape {tuple(weight.shape)} expects "
                      f"{weight.shape[0]} input channels (divisible by groups={groups}); 'input' has shape "
                      f"{tuple(input.shape)}")
    if bias is not None and bias.shape[0] != out_channels:
        raise OpError(f"tilec.nn.functional.{op}: 'bias' has shape {tuple(bias.shape)}, expected ({out_channels},)")
    spatial = [(size - 1) * st - 2 * pd + dl * (k - 1) + e + 1
               for size, k, st, pd, dl, e in zip(x.shape[2:], weight.shape[2:], s, p, d, extra)]
    if any(size < 0 for size in spatial):
        raise OpError(f"tilec.nn.functional.{op}: the output size {spatial} is negative (input shape "
                      f"{tuple(input.shape)}, padding {p})")
    channels_last = _channels_last(n, x, weight)
    source = sources.conv_transpose_source(s, p, extra, d, bias is not None, groups, channels_last)
    return _Plan(source, (x.shape[0], out_channels, *spatial), groups, channels_last, batched)


# ------------------------------------------------------------------ the modules' padding modes

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


@lru_cache(maxsize=None)
def axis_pad_source(mode: str, before: int, after: int) -> str:
    """X[A, L, B] -> O[A, before + L + after, B], the middle axis padded as torch.nn.functional.pad's
    `mode` ("reflect", "replicate" or "circular") pads it: the copy of X plus one gathered piece per
    padded side, each zero elsewhere (so each gradient sums onto the cells it read)."""
    size = f"L + {before + after}"
    reads = {"reflect": (f"{before} - j", "L - 2 - t"), "replicate": ("0", "L - 1"),
             "circular": (f"L - {before} + j", "t")}[mode]
    lines = [f"Mid[a, j + {before}, b: A, {size}, B] = =(X[a, j, b]);"]
    pieces = ["Mid"]
    if before:
        lines.append(f"Left[a, j, b: A, {size}, B] = =(X[a, {reads[0]}, b]), j < {before};")
        pieces.append("Left")
    if after:
        lines.append(f"Right[a, L + {before} + t, b: A, {size}, B] = =(X[a, {reads[1]}, b]), t < {after};")
        pieces.append("Right")
    lines.append(f"O = {' + '.join(pieces)};")
    body = "".join(f"    {line}\n" for line in lines)
    return f"function (X[A, L, B]) -> (O) {{\n{body}}}"


def pad_for_conv(op: str, x: torch.Tensor, pads: Sequence[tuple[int, int]], mode: str) -> torch.Tensor:
    """x (N, C, *S or C, *S) with its last len(pads) axes padded by (before, after) in `mode`
    ("reflect", "replicate", "circular"), as torch's convolution modules pad before a convolution
    without padding; one Tile program per padded axis, on a contiguous copy of x. Channels-last x
    gives a channels-last copy of the result for reflect and replicate, as torch's padding does."""
    if mode not in PADDING_MODES[1:]:
        raise OpError(f"tilec.nn.{op}: padding_mode={mode!r}; expected one of {', '.join(PADDING_MODES)}")
    out = x
    for axis, (before, after) in zip(range(x.dim() - len(pads), x.dim()), pads):
        if not before and not after:
            continue
        length = out.shape[axis]
        limit = length - 1 if mode == "reflect" else length
        if before > limit or after > limit or length == 0:
            raise OpError(f"tilec.nn.{op}: padding_mode={mode!r} pads ({before}, {after}) an axis of size {length} "
                          f"(input shape {tuple(x.shape)}); torch allows at most {limit}")
        shape = (math.prod(out.shape[:axis]), length, math.prod(out.shape[axis + 1:]))
        padded = run_program(axis_pad_source(mode, before, after), [out.reshape(shape)],
                             (shape[0], length + before + after, shape[2]))
        out = padded.reshape(*out.shape[:axis], length + before + after, *out.shape[axis + 1:])
    fmt = _CHANNELS_LAST.get(x.dim() - 2)
    if mode != "circular" and fmt is not None and x.is_contiguous(memory_format=fmt) and not x.is_contiguous():
        out = out.contiguous(memory_format=fmt)  # torch's reflect and replicate padding keep channels-last
    return out


__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose2d", "pad_for_conv", "PADDING_MODES"]
