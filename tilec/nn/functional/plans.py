"""Memoised argument checks: a function's plan (its checked, normalised arguments: the program,
the result's shape and layout) kept by the arguments' metadata, so that a repeated call skips the
checks, which cost more than a small kernel.

Requires: `make(op, *args)` depends on its tensor arguments only through their shapes, strides,
dtypes and devices, and raises for arguments it refuses (a refusal is not kept). Guarantees:
`planned` gives what `make` gives for those arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

Plan = TypeVar("Plan")

_LIMIT = 4096  # plans kept per cache before it starts over


def metadata_key(op: str, *args: Any) -> tuple[Any, ...]:
    """What `make` looks at: each tensor's shape, strides, dtype and device, and the other arguments
    (lists as tuples)."""
    return (op, *[(a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor)
                  else tuple(a) if isinstance(a, list) else a for a in args])


def planned(cache: dict[tuple[Any, ...], Plan], make: Callable[..., Plan], op: str, *args: Any) -> Plan:
    """make(op, *args), from `cache` when a call with the same metadata has been planned."""
    key = metadata_key(op, *args)
    try:
        plan = cache.get(key)
    except TypeError:  # an unhashable argument (symbolic sizes while torch.compile traces): plan anew
        return make(op, *args)
    if plan is None:
        plan = make(op, *args)
        if len(cache) >= _LIMIT:
            cache.clear()
        cache[key] = plan
    return plan


__all__ = ["planned", "metadata_key"]
