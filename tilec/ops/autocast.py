"""torch.autocast for tilec's ops and tilec.nn: the casts torch's autocast applies to the same ops.

Within ``torch.autocast(device, dtype=...)`` torch runs linear layers, convolutions, matrix products
and attention in the autocast dtype (its "lower precision" ops), losses in float32, and everything
else in its inputs' dtypes (tests/test_low_precision.py checks tilec against torch op by op). Ops
registered through torch.library would get no cast (autocast falls through custom ops) and the eager
fast path skips the dispatcher, so the ops and modules call these two functions on entry.

Requires: torch tensors (None allowed). Guarantees: the tensors unchanged outside autocast; inside,
`lower_precision` gives float32 tensors the autocast dtype of their device (float64 stays, as in
torch), `full_precision` gives 16-bit float tensors float32. The casts are differentiable.
"""

from __future__ import annotations

from typing import Any

import torch

from tilec.ops.arguments import LOW_PRECISION


# Whether autocast is on for any device (one C call, ~0.2 us): the common case, autocast off, then
# costs the ops' eager fast path no device lookups (torch < 2.4 lacks it: ask per device)
_ANY_AUTOCAST = getattr(torch._C, "_is_any_autocast_enabled", None)


def _autocast_dtype(tensors: tuple[torch.Tensor | None, ...]) -> torch.dtype | None:
    """The autocast dtype of the first tensor's device, or None where autocast is off there."""
    if _ANY_AUTOCAST is not None and not _ANY_AUTOCAST():
        return None
    for t in tensors:
        if isinstance(t, torch.Tensor):
            device = t.device.type
            if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
                return torch.get_autocast_dtype(device)
            return None
    return None


def lower_precision(*tensors: Any) -> tuple[Any, ...]:
    """The tensors of a linear layer, convolution, product or attention as autocast runs them."""
    dtype = _autocast_dtype(tensors)
    if dtype is None:
        return tensors
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t for t in tensors)


def full_precision(*tensors: Any) -> tuple[Any, ...]:
    """The tensors of a loss as autocast runs them: 16-bit floats in float32."""
    if _autocast_dtype(tensors) is None:
        return tensors
    return tuple(t.float() if isinstance(t, torch.Tensor) and t.dtype in LOW_PRECISION else t for t in tensors)


__all__ = ["full_precision", "lower_precision"]
