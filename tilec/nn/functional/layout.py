"""Running Tile programs on torch tensors in the layout torch would give: shared by tilec.nn.functional.

Requires: torch tensors on one device. Guarantees: `physical` views a dense (non-overlapping,
gap-free) tensor of any strides as a contiguous one without a copy, and `elementwise` runs a
one-input, one-output elementwise program on it so that the result has the input's strides (as
torch's ``empty_like(x)``: channels_last in, channels_last out).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch

from tilec.ops.arguments import check_tensor
from tilec.ops.program import run_program

FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def check_float(op: str, name: str, t: torch.Tensor) -> None:
    """An OpError unless `t` is a CPU or CUDA float32/float64 tensor (tilec.ops.arguments.check_tensor,
    naming the function as tilec.nn.functional.`op`)."""
    check_tensor(f"nn.functional.{op}", name, t)


def physical(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """(x permuted so that it is contiguous, the permutation) when x is dense in some axis order
    (channels_last, a transpose), else (x.contiguous(), identity)."""
    order = tuple(sorted(range(x.dim()), key=lambda d: (-int(x.stride()[d]), d)))
    permuted = x.permute(order)
    if not permuted.is_contiguous():
        return x.contiguous(), tuple(range(x.dim()))
    return permuted, order


def unpermute(y: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """The inverse of `physical`'s permutation applied to y (a view)."""
    inverse = [0] * len(order)
    for k, d in enumerate(order):
        inverse[d] = k
    return y.permute(inverse)


@lru_cache(maxsize=None)
def elementwise_source(expr: str, rank: int = 1) -> str:
    """A program X[D0, ..., D(rank-1)] -> O with O = `expr` (which names the input X)."""
    dims = ", ".join(f"D{k}" for k in range(rank))
    return f"function (X[{dims}]) -> (O) {{ O = {expr}; }}"


def elementwise(x: torch.Tensor, expr: str | Callable[[torch.dtype], str], grad_from_output: bool = False) -> torch.Tensor:
    """The elementwise program ``O = expr(X)`` on x, with x's shape and strides (see the module doc);
    `grad_from_output`: tilec.ops.program.run_program's."""
    text = expr if isinstance(expr, str) else expr(x.dtype)
    if x.is_contiguous() and x.numel():  # the common case, on x itself
        return run_program(elementwise_source(text, x.dim()), [x], x.shape, grad_from_output=grad_from_output)
    dense, order = physical(x)
    flat = dense.reshape(-1)
    if flat.numel() == 0:  # no kernel over nothing; the result still joins the autograd graph
        out = flat * 0
    else:
        out = run_program(elementwise_source(text), [flat], flat.shape, grad_from_output=grad_from_output)
    return unpermute(out.reshape(dense.shape), order)


__all__ = ["FLOATS", "check_float", "physical", "unpermute", "elementwise", "elementwise_source"]
