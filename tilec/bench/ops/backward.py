"""The backward cases of `tilec bench --backward`: an op's input gradients given its output's.

tilec's side is `tilec.grad(source, wrt)` called on the forward inputs and the output gradient
(the derived program recomputes only the forward values the gradients read: the NHWC copies for
conv2d, the softmax for attention). torch's side runs the forward once, outside the timed call,
and times `torch.autograd.grad(y, inputs, dy, retain_graph=True)`: only the saved graph's backward
nodes (ConvolutionBackward0 -> aten.convolution_backward; SDPA's backward kernel).

Requires: an Op with a backward case (BACKWARD_OPS). Guarantees: `backward_op` returns the Op
whose inputs are the forward inputs plus an output gradient, whose `wrt` names the inputs whose
gradients tilec computes, and whose baseline is torch autograd's backward; other ops are a
BenchError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tilec.bench.ops.baselines import as_torch, import_torch
from tilec.bench.ops.inputs import conv2d_output_size, random_array
from tilec.bench.ops.op import BenchError, Inputs, Op, Shape


BACKWARD_BASELINE = "torch.autograd.grad(y, inputs, dy, retain_graph=True) after y = "


def _with_grad_output(make: Callable[[Shape, str, np.random.Generator], Inputs],
                      out_shape: Callable[[Shape], tuple[int, ...]]) -> Callable[[Shape, str, np.random.Generator], Inputs]:
    def inputs(s: Shape, dtype: str, rng: np.random.Generator) -> Inputs:
        return make(s, dtype, rng) + (random_array(rng, dtype, *out_shape(s)),)
    return inputs


def _conv2d_out_shape(s: Shape) -> tuple[int, ...]:
    return (s["N"], s["CO"]) + conv2d_output_size(s)


def _attention_out_shape(s: Shape) -> tuple[int, ...]:
    return s["B"], s["H"], s["S"], s["D"]


def _backward_baseline(forward: Callable[..., Any]) -> Callable[[Inputs, Shape], Callable[[], Any]]:
    def build(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
        torch = import_torch()
        xs = tuple(as_torch(a).requires_grad_(True) for a in inputs[:-1])
        dy = as_torch(inputs[-1])
        y = forward(torch, shape, *xs)
        return lambda: torch.autograd.grad(y, xs, dy, retain_graph=True)
    return build


def _conv2d_forward(torch: Any, s: Shape, x: Any, w: Any) -> Any:
    return torch.nn.functional.conv2d(x, w, stride=s["stride"], padding=s["pad"])


def _attention_forward(causal: bool) -> Callable[..., Any]:
    def forward(torch: Any, s: Shape, q: Any, k: Any, v: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return forward


def backward_op(op: Op) -> Op:
    """The gradients of `op`'s inputs given its output's gradient, against torch autograd."""
    wrt: tuple[str, ...]
    if op.name == "conv2d":
        wrt, out_shape, forward = ("X", "F"), _conv2d_out_shape, _conv2d_forward
        flops_factor = 2.0  # the input and the weight gradient: one conv's work each
    elif op.name == "attention":
        wrt, out_shape, forward = ("Q", "K", "V"), _attention_out_shape, _attention_forward(op.causal)
        flops_factor = 2.5  # QK^T again, dP = dO V^T, dV, dQ, dK: five products to the forward's two
    else:
        raise BenchError(f"--backward applies to conv2d and attention, not to {op.name}")
    forward_flops = op.flops
    return replace(op, label=f"{op.label}-backward", baseline=BACKWARD_BASELINE + op.baseline,
                   baseline_short=f"{op.baseline_short} bwd",
                   make_inputs=_with_grad_output(op.make_inputs, out_shape),
                   make_baseline=_backward_baseline(forward),
                   flops=lambda s: flops_factor * forward_flops(s), wrt=wrt,
                   elements=_backward_elements(op, out_shape))


def _backward_elements(op: Op, out_shape: Callable[[Shape], tuple[int, ...]]) -> Callable[[Shape], float] | None:
    """The forward inputs and the output gradient read, one gradient per input written: twice the
    forward's inputs (its elements less its output) plus the output gradient."""
    forward = op.elements
    if forward is None:
        return None

    def elements(s: Shape) -> float:
        out = float(np.prod(out_shape(s)))
        return 2 * (forward(s) - out) + out
    return elements


BACKWARD_OPS = ("conv2d", "attention")
