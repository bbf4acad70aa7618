"""Pooling of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def max_pool2d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.max_pool2d is not implemented yet")


def avg_pool2d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.avg_pool2d is not implemented yet")


def adaptive_avg_pool2d(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.adaptive_avg_pool2d is not implemented yet")
__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]
