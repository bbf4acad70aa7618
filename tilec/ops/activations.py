"""`tilec::relu`, `tilec::gelu` and their wrappers: elementwise activations on Tile kernels.

GELU is the exact form, x * Phi(x) through erf (torch's approximate="none"). The tensor is
flattened to one axis for the kernel, so any shape and layout is taken.

Requires: a float32 or float64 tensor on the CPU or a CUDA device. Guarantees: a contiguous
result of x's shape (an empty x gives an empty result, without a kernel) and its gradient from
the derived program.
"""

from __future__ import annotations

from typing import Any

import torch

from tilec.ops import sources
from tilec.ops.arguments import check_tensor
from tilec.ops.eager import NODES, Node, eager, run_eager, signature
from tilec.ops.kernels import run_forward
from tilec.ops.tile_grad import input_grads


def _unary(name: str) -> Any:
    @torch.library.custom_op(f"tilec::{name}", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x)
        if x.numel() == 0:
            return torch.empty_like(x, memory_format=torch.contiguous_format)
        return run_forward(sources.unary_source(name), x.reshape(-1)).reshape(x.shape)

    @op.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        check_tensor(name, "x", x)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        if x.numel() == 0:
            return (torch.zeros_like(x),)
        (g,) = input_grads(sources.unary_source(name), [x.reshape(-1)], [True], [grad.reshape(-1)])
        assert g is not None
        return (g.reshape(x.shape),)

    op.register_autograd(backward, setup_context=setup)
    return op


_relu = _unary("relu")
_gelu = _unary("gelu")


def _unary_eager(name: str, x: torch.Tensor) -> torch.Tensor | None:
    if not eager(x):
        return None
    key = (name, signature(x))
    node = NODES.get(key)
    if node is None:
        check_tensor(name, "x", x)
        if x.numel() == 0:
            return None
        node = NODES[key] = Node(sources.unary_source(name), ((-1,),), x.shape, (x,),
                                 grad_from_output=name == "relu")  # (X > 0 iff relu(X) > 0)
    return run_eager(node, x)


def relu(x: torch.Tensor) -> torch.Tensor:
    out = _unary_eager("relu", x)
    return torch.ops.tilec.relu(x) if out is None else out


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x * Phi(x) through erf (torch's approximate="none")."""
    out = _unary_eager("gelu", x)
    return torch.ops.tilec.gelu(x) if out is None else out
