"""`tilec::attention` and `attention`: softmax(scale * q k^T [causal]) v on [B, H, S, D] tensors.

The templates compile the Tile program into one fused kernel; its gradient is the derived
program's (one fused backward kernel too). `scale` defaults to 1/sqrt(D), as in torch's sdpa.

Requires: rank-4 float32 or float64 tensors of one dtype on one device, k and v sharing q's batch
and heads, k sharing q's D. Guarantees: a [B, H, S, DV] result and gradients for q, k and v;
arguments it does not support raise OpError naming them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilec.ops import sources
from tilec.ops.arguments import OpError, check_tensor, same_dtype
from tilec.ops.autocast import lower_precision
from tilec.ops.eager import NODES, Node, eager, run_eager, signature
from tilec.ops.kernels import run_forward
from tilec.ops.tile_grad import input_grads


def _attention_check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor("attention", name, t, rank=4)
    same_dtype("attention", q=q, k=k, v=v)
    b, h, s, d = q.shape
    if tuple(k.shape[:2]) != (b, h) or k.shape[3] != d:
        raise OpError(f"tilec.attention: 'k' has shape {tuple(k.shape)}, expected ({b}, {h}, T, {d}) to match "
                      f"'q' of shape {tuple(q.shape)}")
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise OpError(f"tilec.attention: 'v' has shape {tuple(v.shape)}, expected ({b}, {h}, {k.shape[2]}, DV) "
                      f"to match 'k' of shape {tuple(k.shape)}")
    if min(q.numel(), k.numel(), v.numel()) == 0:
        raise OpError("tilec.attention: empty tensors are not supported")


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


@torch.library.custom_op("tilec::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
               scale: float | None = None) -> torch.Tensor:
    _attention_check(q, k, v)
    return run_forward(sources.attention_source(bool(causal), _scale(q, scale)), q, k, v)


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
      scale: float | None = None) -> torch.Tensor:
    _attention_check(q, k, v)
    return q.new_empty((*q.shape[:3], v.shape[3]))


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    q, k, v, causal, scale = inputs
    ctx.save_for_backward(q, k, v)
    ctx.source = sources.attention_source(bool(causal), _scale(q, scale))


def _attention_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    q, k, v = ctx.saved_tensors
    grads = input_grads(ctx.source, [q, k, v], list(ctx.needs_input_grad[:3]), [grad])
    return (*grads, None, None)


_attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(scale * q k^T [causal]) v on [B, H, S, D]; scale defaults to 1/sqrt(D) like torch's sdpa."""
    q, k, v = lower_precision(q, k, v)  # under torch.autocast
    if eager(q, k, v):
        key = ("attention", causal, scale, signature(q), signature(k), signature(v))
        node = NODES.get(key)
        if node is None:
            _attention_check(q, k, v)
            source = sources.attention_source(bool(causal), _scale(q, scale))
            node = NODES[key] = Node(source, (None,) * 3, (*q.shape[:3], v.shape[3]), (q, k, v))
        return run_eager(node, q, k, v)
    return torch.ops.tilec.attention(q, k, v, causal, scale)
