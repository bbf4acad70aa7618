"""Convolutions of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def conv1d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.conv1d is not implemented yet")


def conv2d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.conv2d is not implemented yet")


def conv3d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.conv3d is not implemented yet")


def conv_transpose2d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.conv_transpose2d is not implemented yet")
__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose2d"]
