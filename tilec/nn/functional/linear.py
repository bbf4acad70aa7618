"""The linear layer of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def linear(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.linear is not implemented yet")
__all__ = ["linear"]
