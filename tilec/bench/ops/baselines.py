"""The baselines `tilec bench` times tilec against: numpy's matmul, PyTorch's conv2d and sdpa.

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


def gemm_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    a, b = inputs
    return lambda: np.matmul(a, b)


def gemm_bias_relu_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    a, b, bias = inputs
    return lambda: np.maximum(np.matmul(a, b) + bias, 0)


def conv2d_baseline(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
    torch = import_torch()
    x, f = (torch.from_numpy(a) for a in inputs)
    stride, pad = shape["stride"], shape["pad"]
    return lambda: torch.nn.functional.conv2d(x, f, stride=stride, padding=pad)


def attention_baseline(causal: bool) -> Callable[[Inputs, Shape], Callable[[], Any]]:
    def build(inputs: Inputs, shape: Shape) -> Callable[[], Any]:
        torch = import_torch()
        q, k, v = (torch.from_numpy(a) for a in inputs)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return build
