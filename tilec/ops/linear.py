"""`tilec::linear` and `linear`: x[..., in] @ weight[out, in].T + bias, an activation fused.

The leading axes of x are flattened into the GEMM's rows; `activation` is None, "relu" or
"gelu" (tilec/ops/sources.py's ACTIVATIONS).

Requires: float32 or float64 tensors of one dtype on one device, x of rank >= 1 with weight's
in-features last. Guarantees: a (..., out) result and gradients for x, weight and bias from the
derived program; arguments it does not support raise OpError naming them.
"""

from __future__ import annotations

from typing import Any

import torch

from tilec.ops import sources
from tilec.ops.arguments import OpError, check_tensor, flat, same_dtype
from tilec.ops.autocast import lower_precision
from tilec.ops.eager import NODES, Node, eager, run_eager, signature
from tilec.ops.kernels import run_forward
from tilec.ops.tile_grad import input_grads


def _linear_check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> None:
    check_tensor("linear", "x", x, min_rank=1)
    check_tensor("linear", "weight", weight, rank=2)
    same_dtype("linear", x=x, weight=weight, bias=bias)
    if activation not in sources.ACTIVATIONS:
        raise OpError(f"tilec.linear: activation={activation!r}; expected one of {', '.join(sources.ACTIVATIONS)}")
    if x.shape[-1] != weight.shape[1]:
        raise OpError(f"tilec.linear: 'x' has {x.shape[-1]} features (shape {tuple(x.shape)}) but 'weight' "
                      f"expects {weight.shape[1]} (shape {tuple(weight.shape)})")
    if bias is not None:
        check_tensor("linear", "bias", bias, rank=1)
        if bias.shape[0] != weight.shape[0]:
            raise OpError(f"tilec.linear: 'bias' has shape {tuple(bias.shape)}, expected ({weight.shape[0]},)")
    if x.numel() == 0 or weight.numel() == 0:
        raise OpError(f"tilec.linear: empty tensors are not supported (x {tuple(x.shape)}, weight "
                      f"{tuple(weight.shape)})")


@torch.library.custom_op("tilec::linear", mutates_args=())
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            activation: str = "none") -> torch.Tensor:
    _linear_check(x, weight, bias, activation)
    source = sources.linear_source(bias is not None, activation)
    out = run_forward(source, flat(x), weight, *([bias] if bias is not None else []))
    return out.reshape(*x.shape[:-1], weight.shape[0])


@_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
      activation: str = "none") -> torch.Tensor:
    _linear_check(x, weight, bias, activation)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.activation = activation


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    source = sources.linear_source(bias is not None, ctx.activation)
    tensors = [flat(x), weight] + ([bias] if bias is not None else [])
    needs = list(ctx.needs_input_grad[:len(tensors)])
    grads = input_grads(source, tensors, needs, [grad.reshape(-1, weight.shape[0])])
    if grads[0] is not None:
        grads[0] = grads[0].reshape(x.shape)
    if bias is None:
        grads.append(None)
    return (*grads, None)


_linear.register_autograd(_linear_backward, setup_context=_linear_setup)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    """x[..., in] @ weight[out, in].T + bias, then `activation` (None, "relu" or "gelu") fused."""
    x, weight, bias = lower_precision(x, weight, bias)  # under torch.autocast
    act = activation or "none"
    if eager(x, weight, bias):
        tensors = (x, weight) if bias is None else (x, weight, bias)
        key = ("linear", act, signature(x), signature(weight), signature(bias))
        node = NODES.get(key)
        if node is None:
            _linear_check(x, weight, bias, act)
            source = sources.linear_source(bias is not None, act)
            views = ((-1, x.shape[-1]),) + (None,) * (len(tensors) - 1)
            node = NODES[key] = Node(source, views, (*x.shape[:-1], weight.shape[0]), tensors)
        return run_eager(node, *tensors)
    return torch.ops.tilec.linear(x, weight, bias, act)
