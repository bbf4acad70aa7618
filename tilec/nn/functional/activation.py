"""Activations, softmax and dropout of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

import torch

from tilec.nn.functional.layout import check_float, elementwise
from tilec.ops.arguments import OpError


def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:  # noqa: A002 (torch's name)
    """torch.nn.functional.relu; its gradient passes through at NaN, as torch's does (the program
    selects 0 where X <= 0, so NaN takes the other branch)."""
    check_float("relu", "input", input)
    out = elementwise(input, "X <= 0 ? 0 : X")
    return input.copy_(out) if inplace else out


def gelu(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.gelu is not implemented yet")


def silu(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.silu is not implemented yet")


def sigmoid(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.sigmoid is not implemented yet")


def tanh(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.tanh is not implemented yet")


def softmax(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.softmax is not implemented yet")


def log_softmax(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.log_softmax is not implemented yet")


def dropout(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.dropout is not implemented yet")
__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout"]
