"""`tilec::conv2d` and `conv2d`: a 2-D convolution like torch.nn.functional.conv2d, on Tile kernels.

NCHW input, OIHW weight, optional bias; integer stride, padding and dilation (one or two each);
any groups, depthwise included: with groups > 1 the tensors enter the grouped program
(tilec/ops/sources.py) as free views with the group axis split out.

Requires: float32 or float64 tensors of one dtype on one device. Guarantees: torch's result
shape (N, CO, OH, OW) and gradients for x, weight and bias from the derived program; arguments
it does not support raise OpError naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilec.ops import sources
from tilec.ops.arguments import OpError, as_list, check_tensor, pair, same_dtype
from tilec.ops.autocast import lower_precision
from tilec.ops.eager import NODES, Node, eager, run_eager, signature
from tilec.ops.kernels import run_forward
from tilec.ops.tile_grad import input_grads


def _conv2d_check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], groups: int
                  ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, ...]]:
    check_tensor("conv2d", "x", x, rank=4)
    check_tensor("conv2d", "weight", weight, rank=4)
    same_dtype("conv2d", x=x, weight=weight, bias=bias)
    if not isinstance(groups, int) or groups < 1:
        raise OpError(f"tilec.conv2d: 'groups' must be an integer >= 1, got {groups!r}")
    s = pair("conv2d", "stride", stride, 1)
    p = pair("conv2d", "padding", padding, 0)
    d = pair("conv2d", "dilation", dilation, 1)
    n, c, h, w = x.shape
    co, ci, kh, kw = weight.shape
    if ci * groups != c:
        per = f" per group ({groups} groups need {c} / {groups})" if groups > 1 else ""
        raise OpError(f"tilec.conv2d: 'weight' has {ci} input channels{per} (shape {tuple(weight.shape)}) but "
                      f"'x' has {c} (shape {tuple(x.shape)})")
    if co % groups:
        raise OpError(f"tilec.conv2d: 'weight' has {co} output channels (shape {tuple(weight.shape)}), "
                      f"not a multiple of groups={groups}")
    if bias is not None:
        check_tensor("conv2d", "bias", bias, rank=1)
        if bias.shape[0] != co:
            raise OpError(f"tilec.conv2d: 'bias' has shape {tuple(bias.shape)}, expected ({co},)")
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if oh < 1 or ow < 1 or n == 0 or c == 0 or co == 0:
        raise OpError(f"tilec.conv2d: a {kh}x{kw} kernel (dilation {d}) does not fit 'x' of shape "
                      f"{tuple(x.shape)} with padding {p}")
    return s, p, d, (n, co, oh, ow)


def _conv2d_views(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  groups: int) -> tuple[Any, ...]:
    """The shapes x, weight (and bias) take inside the grouped program (tilec/ops/sources.py): free views
    of the contiguous tensors with the group axis split out; None for each when groups == 1."""
    n = 2 if bias is None else 3
    if groups == 1:
        return (None,) * n
    co = weight.shape[0]
    views = ((x.shape[0], groups, x.shape[1] // groups, *x.shape[2:]),
             (groups, co // groups, *weight.shape[1:]), (groups, co // groups))
    return views[:n]


def _viewed(tensors: Sequence[torch.Tensor], views: Sequence[Any]) -> list[torch.Tensor]:
    return [t if v is None else t.reshape(v) for t, v in zip(tensors, views)]


@torch.library.custom_op("tilec::conv2d", mutates_args=())
def _conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
            padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    s, p, d, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, groups)
    source = sources.conv2d_source(s, p, d, bias is not None, groups)
    tensors = [x, weight] + ([bias] if bias is not None else [])
    return run_forward(source, *_viewed(tensors, _conv2d_views(x, weight, bias, groups))).reshape(shape)


@_conv2d.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
      padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    *_, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, groups)
    return x.new_empty(shape)


def _conv2d_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.params = (pair("conv2d", "stride", stride, 1), pair("conv2d", "padding", padding, 0),
                  pair("conv2d", "dilation", dilation, 1))
    ctx.groups = groups
    ctx.out_shape = output.shape


def _conv2d_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    s, p, d = ctx.params
    source = sources.conv2d_source(s, p, d, bias is not None, ctx.groups)
    tensors = [x, weight] + ([bias] if bias is not None else [])
    views = _conv2d_views(x, weight, bias, ctx.groups)
    needs = list(ctx.needs_input_grad[:len(tensors)])
    if ctx.groups > 1:
        n, co, oh, ow = ctx.out_shape
        grad = grad.reshape(n, ctx.groups, co // ctx.groups, oh, ow)
    grads = input_grads(source, _viewed(tensors, views), needs, [grad])
    grads = [g if g is None else g.reshape(t.shape) for g, t in zip(grads, tensors)]
    if bias is None:
        grads.append(None)
    return (*grads, None, None, None, None)


_conv2d.register_autograd(_conv2d_backward, setup_context=_conv2d_setup)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """Like torch.nn.functional.conv2d (NCHW, OIHW, integer padding only; any groups, depthwise too)."""
    x, weight, bias = lower_precision(x, weight, bias)  # under torch.autocast
    if isinstance(padding, str):
        raise OpError(f"tilec.conv2d: padding={padding!r} is not supported; give the padding as integers")
    stride, padding, dilation = as_list(stride), as_list(padding), as_list(dilation)
    if eager(x, weight, bias):
        tensors = (x, weight) if bias is None else (x, weight, bias)
        key = ("conv2d", *stride, *padding, *dilation, groups, signature(x), signature(weight), signature(bias))
        node = NODES.get(key)
        if node is None:
            s, p, d, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, int(groups))
            source = sources.conv2d_source(s, p, d, bias is not None, int(groups))
            node = NODES[key] = Node(source, _conv2d_views(x, weight, bias, int(groups)), shape, tensors)
        return run_eager(node, *tensors)
    return torch.ops.tilec.conv2d(x, weight, bias, stride, padding, dilation, int(groups))
