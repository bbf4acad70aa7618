"""Normalisations of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def layer_norm(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.layer_norm is not implemented yet")


def group_norm(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.group_norm is not implemented yet")


def batch_norm(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.batch_norm is not implemented yet")


def rms_norm(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.rms_norm is not implemented yet")
__all__ = ["layer_norm", "group_norm", "batch_norm", "rms_norm"]
