"""Losses of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def cross_entropy(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.cross_entropy is not implemented yet")


def mse_loss(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.mse_loss is not implemented yet")
__all__ = ["cross_entropy", "mse_loss"]
