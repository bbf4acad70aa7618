"""The linear layer of tilec.nn.functional: input @ weight.T + bias, on the tuned linear_source.

Requires: float32 or float64 tensors of one dtype on one device; input of rank >= 1 whose last
axis is weight's in_features. Guarantees: torch.nn.functional.linear's result (..., out_features)
and gradients, derived from tilec/ops/sources.py's linear_source (the leading axes flattened into
its rows); empty axes give empty results, and in_features 0 gives the bias (or zeros) broadcast.
"""

from __future__ import annotations

import math

import torch

from tilec.nn.functional.layout import check_float
from tilec.ops import sources
from tilec.ops.arguments import OpError, same_dtype
from tilec.ops.program import run_program


def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.linear (weight of rank 2, or 1 for a single output feature with no axis)."""
    check_float("linear", "input", input)
    check_float("linear", "weight", weight)
    if bias is not None:
        check_float("linear", "bias", bias)
    same_dtype("nn.functional.linear", input=input, weight=weight, bias=bias)
    if input.dim() == 0 or weight.dim() not in (1, 2):
        raise OpError(f"tilec.nn.functional.linear: 'input' must have rank >= 1 and 'weight' rank 1 or 2, got "
                      f"shapes {tuple(input.shape)} and {tuple(weight.shape)}")
    w = weight if weight.dim() == 2 else weight.unsqueeze(0)
    out_features, in_features = w.shape
    if input.shape[-1] != in_features:
        raise OpError(f"tilec.nn.functional.linear: 'input' has {input.shape[-1]} features (shape "
                      f"{tuple(input.shape)}) but 'weight' expects {in_features} (shape {tuple(weight.shape)})")
    if bias is not None:
        if bias.dim() > 1 or (bias.dim() == 1 and bias.shape[0] not in (1, out_features)):
            raise OpError(f"tilec.nn.functional.linear: 'bias' has shape {tuple(bias.shape)}, expected "
                          f"({out_features},)")
        bias = bias.expand(out_features)
    rows = math.prod(input.shape[:-1])
    tensors = [input.reshape(rows, in_features), w] + ([bias] if bias is not None else [])
    out = run_program(sources.linear_source(bias is not None, "none"), tensors, (rows, out_features))
    lead = tuple(input.shape[:-1])
    return out.reshape(*lead, out_features) if weight.dim() == 2 else out.reshape(lead)


__all__ = ["linear"]
