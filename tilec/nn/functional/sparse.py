"""Embeddings of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def embedding(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.embedding is not implemented yet")
__all__ = ["embedding"]
