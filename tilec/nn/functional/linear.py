"""The linear layer of tilec.nn.functional: input @ weight.T + bias, on the tuned linear_source.

Requires: float32 or float64 tensors of one dtype on one device; input of rank >= 1 whose last
axis is weight's in_features. Guarantees: torch.nn.functional.linear's result (..., out_features)
and gradients, derived from tilec/ops/sources.py's linear_source (the leading axes flattened into
its rows); empty axes give empty results, and in_features 0 gives the bias (or zeros) broadcast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tilec.nn.functional.layout import check_float
from tilec.nn.functional.plans import planned
from tilec.ops import sources
from tilec.ops.arguments import OpError, same_dtype
from tilec.ops.autocast import lower_precision
from tilec.ops.eager import Node, eager, run_eager
from tilec.ops.program import eager_node, run_program


@dataclass(slots=True)
class _Plan:
    source: str
    rows: int  # the GEMM's rows: input's leading axes flattened
    in_features: int
    out_features: int
    out_shape: tuple[int, ...]
    node: Node | None = None  # the eager node, once a plain CPU call has made it (its shapes are the plan's)


_PLANS: dict[tuple[Any, ...], _Plan] = {}


def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.linear (weight of rank 2, or 1 for a single output feature with no axis)."""
    input, weight, bias = lower_precision(input, weight, bias)  # noqa: A001 (under torch.autocast)
    plan = planned(_PLANS, _plan, "linear", input, weight, bias)
    if plan.node is not None and input.dim() == 2 and weight.dim() == 2 and eager(input, weight, bias):
        # the common call, without views or the node lookup: its plan holds its node
        return run_eager(plan.node, input, weight) if bias is None else run_eager(plan.node, input, weight, bias)
    w = weight if weight.dim() == 2 else weight.unsqueeze(0)
    rows = input if input.dim() == 2 else input.reshape(plan.rows, plan.in_features)  # (views cost ~1 us)
    tensors = [rows, w]
    if bias is not None:
        tensors.append(bias if bias.dim() == 1 and bias.shape[0] == plan.out_features else bias.expand(plan.out_features))
    out = run_program(plan.source, tensors, (plan.rows, plan.out_features))
    direct = tensors[0] is input and tensors[1] is weight and (bias is None or tensors[2] is bias)
    if direct and eager(*tensors):
        plan.node = eager_node(plan.source, tensors, (plan.rows, plan.out_features), out.dtype)
    return out if input.dim() == 2 and weight.dim() == 2 else out.reshape(plan.out_shape)


def _plan(op: str, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> _Plan:  # noqa: A002
    """The checked plan of a call."""
    check_float(op, "input", input)
    check_float(op, "weight", weight)
    if bias is not None:
        check_float(op, "bias", bias)
    same_dtype(f"nn.functional.{op}", input=input, weight=weight, bias=bias)
    if input.dim() == 0 or weight.dim() not in (1, 2):
        raise OpError(f"tilec.nn.functional.{op}: 'input' must have rank >= 1 and 'weight' rank 1 or 2, got "
                      f"shapes {tuple(input.shape)} and {tuple(weight.shape)}")
    out_features, in_features = weight.shape if weight.dim() == 2 else (1, weight.shape[0])
    if input.shape[-1] != in_features:
        raise OpError(f"tilec.nn.functional.{op}: 'input' has {input.shape[-1]} features (shape "
                      f"{tuple(input.shape)}) but 'weight' expects {in_features} (shape {tuple(weight.shape)})")
    if bias is not None and (bias.dim() > 1 or (bias.dim() == 1 and bias.shape[0] not in (1, out_features))):
        raise OpError(f"tilec.nn.functional.{op}: 'bias' has shape {tuple(bias.shape)}, expected ({out_features},)")
    lead = tuple(input.shape[:-1])
    out_shape = (*lead, out_features) if weight.dim() == 2 else lead
    return _Plan(sources.linear_source(bias is not None, "none"), math.prod(lead), in_features, out_features,
                 out_shape)


__all__ = ["linear"]
