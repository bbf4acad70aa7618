"""The baselines `tilec bench` times tilec against: numpy's matmul (torch's for 16-bit floats, which
numpy computes element by element), PyTorch's conv2d and sdpa.

Requires: the op's inputs (numpy arrays) and sizes. Guarantees: a zero-argument call of the
baseline on those inputs (torch tensors share the arrays' memory); a baseline that needs PyTorch
raises a BenchError saying how to install it when PyTorch is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilec.bench.ops.op import BenchError, Inputs, Shape


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BenchError("this baseline needs PyTorch; install it with "
                         "`python -m pip install torch` (or run scripts/install.sh)") from None
    return torch


def as_torch(a: np.ndarray) -> Any:
    """A torch tensor sharing `a`'s memory (bfloat16 through its bits: torch cannot read ml_dtypes' type)."""
    torch = import_torch()
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _low_precision(inputs: Inputs) -> bool:
    return inputs[0].dtype.name in ("bfloat16", "float16")


def gemm_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    if _low_precision(inputs):
        a, b = (as_torch(x) for x in inputs)
        return lambda: a @ b
    a, b = inputs
    return lambda: np.matmul(a, b)


def gemm_bias_relu_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    if _low_precision(inputs):
        torch = import_torch()
        a, b, bias = (as_torch(x) for x in inputs)
        return lambda: torch.relu(torch.addmm(bias, a, b))
    a, b, bias = inputs
    return lambda: np.maximum(np.matmul(a, b) + bias, 0)


def conv2d_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    torch = import_torch()
    x, f = (as_torch(a) for a in inputs)
    stride, pad = shape["stride"], shape["pad"]
    return lambda: torch.nn.functional.conv2d(x, f, stride=stride, padding=pad)


def attention_baseline(causal: bool) -> Callable[[Inputs, Shape], Callable[[], Any]]:
    def build(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
        torch = import_torch()
        q, k, v = (as_torch(a) for a in inputs)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return build
