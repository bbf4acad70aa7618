"""`tilec::softmax`, `tilec::layer_norm` and their wrappers: normalisations over trailing axes.

softmax normalises along `dim` (moved last for the row-wise kernel, then back); layer_norm over
the trailing `normalized_shape` axes, with an optional elementwise weight and bias.

Requires: float32 or float64 tensors of one dtype on one device, non-empty. Guarantees: a
contiguous result of x's shape and gradients from the derived program (x, and layer_norm's
weight and bias); arguments it does not support raise OpError naming them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from tilec.ops import sources
from tilec.ops.arguments import OpError, check_tensor, flat, same_dtype
from tilec.ops.eager import NODES, Node, eager, run_eager, signature
from tilec.ops.kernels import run_forward
from tilec.ops.tile_grad import input_grads


def _softmax_check(x: torch.Tensor, dim: int) -> int:
    check_tensor("softmax", "x", x, min_rank=1)
    if not -x.dim() <= dim < x.dim():
        raise OpError(f"tilec.softmax: dim={dim} is out of range for 'x' of rank {x.dim()}")
    if x.numel() == 0:
        raise OpError("tilec.softmax: empty tensors are not supported")
    return dim % x.dim()


@torch.library.custom_op("tilec::softmax", mutates_args=())
def _softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    d = _softmax_check(x, dim)
    moved = x.movedim(d, -1)
    out = run_forward(sources.softmax_source(), flat(moved)).reshape(moved.shape)
    return out.movedim(-1, d).contiguous()


@_softmax.register_fake
def _(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _softmax_check(x, dim)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, dim = inputs
    ctx.save_for_backward(x)
    ctx.dim = dim % x.dim()


def _softmax_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x,) = ctx.saved_tensors
    moved = x.movedim(ctx.dim, -1)
    (g,) = input_grads(sources.softmax_source(), [flat(moved)], [True], [flat(grad.movedim(ctx.dim, -1))])
    assert g is not None
    return g.reshape(moved.shape).movedim(-1, ctx.dim).contiguous(), None


_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if eager(x):
        key = ("softmax", dim, signature(x))
        node = NODES.get(key)
        if node is None and _softmax_check(x, dim) == x.dim() - 1:
            node = NODES[key] = Node(sources.softmax_source(), ((-1, x.shape[-1]),), x.shape, (x,))
        if node is not None:
            return run_eager(node, x)
    return torch.ops.tilec.softmax(x, dim)


# ------------------------------------------------------------------ layer_norm


def _layer_norm_check(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None) -> int:
    shape = tuple(int(s) for s in normalized_shape)
    check_tensor("layer_norm", "x", x, min_rank=max(len(shape), 1))
    if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise OpError(f"tilec.layer_norm: normalized_shape={list(shape)} must be the last axes of 'x' "
                      f"(shape {tuple(x.shape)})")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_tensor("layer_norm", name, t)
            if tuple(t.shape) != shape:
                raise OpError(f"tilec.layer_norm: '{name}' has shape {tuple(t.shape)}, expected {shape}")
    same_dtype("layer_norm", x=x, weight=weight, bias=bias)
    if x.numel() == 0:
        raise OpError("tilec.layer_norm: empty tensors are not supported")
    return math.prod(shape)


def _layer_norm_inputs(x: torch.Tensor, k: int, weight: torch.Tensor | None,
                       bias: torch.Tensor | None) -> list[torch.Tensor]:
    return [x.reshape(-1, k)] + [t.reshape(k) for t in (weight, bias) if t is not None]


@torch.library.custom_op("tilec::layer_norm", mutates_args=())
def _layer_norm(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    k = _layer_norm_check(x, normalized_shape, weight, bias)
    source = sources.layer_norm_source(k, float(eps), weight is not None, bias is not None)
    return run_forward(source, *_layer_norm_inputs(x, k, weight, bias)).reshape(x.shape)


@_layer_norm.register_fake
def _(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None,
      bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    _layer_norm_check(x, normalized_shape, weight, bias)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _layer_norm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, normalized_shape, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.k = math.prod(int(s) for s in normalized_shape)
    ctx.eps = float(eps)


def _layer_norm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    k = ctx.k
    source = sources.layer_norm_source(k, ctx.eps, weight is not None, bias is not None)
    tensors = _layer_norm_inputs(x, k, weight, bias)
    present = [t for t in (weight, bias) if t is not None]
    flags = [ctx.needs_input_grad[0]] + [ctx.needs_input_grad[i] for i, t in ((2, weight), (3, bias))
                                         if t is not None]
    grads = input_grads(source, tensors, flags, [grad.reshape(-1, k)])
    out: list[Any] = [grads[0].reshape(x.shape) if grads[0] is not None else None, None]
    rest = iter(zip(present, grads[1:]))
    for t in (weight, bias):
        if t is None:
            out.append(None)
        else:
            original, g = next(rest)
            out.append(g.reshape(original.shape) if g is not None else None)
    return (*out, None)


_layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    if eager(x, weight, bias):
        tensors = [t for t in (x, weight, bias) if t is not None]
        given = normalized_shape if isinstance(normalized_shape, int) else tuple(normalized_shape)
        key = ("layer_norm", given, eps, signature(x), signature(weight), signature(bias))
        node = NODES.get(key)
        if node is None:
            shape = [int(given)] if isinstance(given, int) else [int(s) for s in given]
            k = _layer_norm_check(x, shape, weight, bias)
            source = sources.layer_norm_source(k, float(eps), weight is not None, bias is not None)
            node = NODES[key] = Node(source, ((-1, k),) + ((k,),) * (len(tensors) - 1), x.shape, tensors)
        return run_eager(node, *tensors)
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else [int(s) for s in normalized_shape]
    return torch.ops.tilec.layer_norm(x, shape, weight, bias, float(eps))
