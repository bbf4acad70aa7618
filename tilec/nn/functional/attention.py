"""Attention of tilec.nn.functional (not written yet: each raises a TilecError)."""

from __future__ import annotations

from typing import Any

from tilec.ops.arguments import OpError


def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.scaled_dot_product_attention is not implemented yet")


def multi_head_attention_forward(*args: Any, **kwargs: Any) -> Any:
    raise OpError("tilec.nn.functional.multi_head_attention_forward is not implemented yet")
__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]
