"""Checking and normalising the ops' arguments: one OpError that names the argument at fault.

Requires: the arguments as the op received them. Guarantees: `check_tensor` and `same_dtype`
return only for CPU or CUDA tensors of float32 or float64, of the asked rank, all of one op on
one device with one dtype; `pair` and `as_list` give a stride-like argument as two integers;
`flat` views a tensor as rows of its last axis (what the row-wise kernels take).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilec.errors import TilecError


class OpError(TilecError, ValueError):
    """A tilec op was called with arguments it does not support (dtype, rank, shape, device, ...)."""


LOW_PRECISION = (torch.bfloat16, torch.float16)  # stored in 16 bits, computed in float32 (tilec.ir.dtypes)
FLOAT_DTYPES = (torch.float32, torch.float64) + LOW_PRECISION


def check_tensor(op: str, name: str, t: Any, rank: int | None = None, min_rank: int | None = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise OpError(f"tilec.{op}: '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise OpError(f"tilec.{op}: '{name}' is on {t.device}; tilec ops take CPU or CUDA tensors")
    if t.dtype not in FLOAT_DTYPES:
        raise OpError(f"tilec.{op}: '{name}' has dtype {t.dtype}; torch.float32, torch.float64, torch.bfloat16 and "
                      f"torch.float16 are supported")
    if rank is not None and t.dim() != rank:
        raise OpError(f"tilec.{op}: '{name}' must have rank {rank}, got shape {tuple(t.shape)}")
    if min_rank is not None and t.dim() < min_rank:
        raise OpError(f"tilec.{op}: '{name}' must have rank at least {min_rank}, got shape {tuple(t.shape)}")


def same_dtype(op: str, **tensors: torch.Tensor | None) -> None:
    """All tensors of one op share a dtype (the fake kernels give the output that dtype) and a device."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise OpError(f"tilec.{op}: the tensors must be on one device, got {listing}; move them with .to(device)")
    given = {name: t.dtype for name, t in tensors.items() if t is not None}
    if len(set(given.values())) > 1:
        listing = ", ".join(f"{name} {dtype}" for name, dtype in given.items())
        raise OpError(f"tilec.{op}: the tensors must share one dtype, got {listing}")


def pair(op: str, name: str, value: Sequence[int], least: int) -> tuple[int, int]:
    values = tuple(int(v) for v in value)
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or any(v < least for v in values):
        raise OpError(f"tilec.{op}: '{name}' must be one or two integers >= {least}, got {list(value)}")
    return values[0], values[1]


def as_list(value: int | Sequence[int]) -> list[int]:
    return [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]


def flat(x: torch.Tensor) -> torch.Tensor:
    """`x` as rows of its last axis (a view when x is contiguous)."""
    return x.reshape(-1, x.shape[-1])
