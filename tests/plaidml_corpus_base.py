"""The records of the PlaidML corpus and the numpy helpers its references share.

A corpus entry is a Tile program as PlaidML's own sources write it, the arguments to call it
with, and a numpy function computing what PlaidML documents it to compute: a tuple of index
values contributes only when every access is in bounds and every constraint holds (out-of-range
tuples are skipped, not clamped); cells no tuple writes are 0, or the `default` tensor's value.

Nothing here imports tilec: the references are the ground truth.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PLAIDML = "plaidml/plaidml"


@dataclass(frozen=True)
class Arg:
    """One argument: its shape and dtype, and how its values are drawn.

    `lo`/`hi` bound uniform floats or integers (inclusive for integers); `choices` draws from a
    fixed set; `value` gives the argument exactly (scalars such as a leak factor or a size).
    """

    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    lo: float | None = None
    hi: float | None = None
    choices: tuple[float, ...] | None = None
    value: Any = None

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        dtype = np.dtype(self.dtype)
        if self.value is not None:
            return np.broadcast_to(np.asarray(self.value, dtype), self.shape).copy()
        if self.choices is not None:
            return rng.choice(np.asarray(self.choices), size=self.shape).astype(dtype)
        if dtype == np.bool_:
            return rng.integers(0, 2, size=self.shape).astype(np.bool_)
        if dtype.kind in "iu":
            lo = int(self.lo if self.lo is not None else (0 if dtype.kind == "u" else -5))
            hi = int(self.hi if self.hi is not None else 9)
            return rng.integers(lo, hi + 1, size=self.shape).astype(dtype)
        if self.lo is not None or self.hi is not None:
            lo = self.lo if self.lo is not None else -1.0
            hi = self.hi if self.hi is not None else 1.0
            return rng.uniform(lo, hi, size=self.shape).astype(dtype)
        return rng.standard_normal(self.shape).astype(dtype)


def f32(*shape: int, lo: float | None = None, hi: float | None = None) -> Arg:
    return Arg(tuple(shape), "float32", lo, hi)


def pos(*shape: int) -> Arg:
    """Strictly positive float32 values (for log, sqrt, pow, division)."""
    return Arg(tuple(shape), "float32", 0.25, 2.0)


def ints(*shape: int, dtype: str = "int32", lo: int | None = None, hi: int | None = None) -> Arg:
    return Arg(tuple(shape), dtype, lo, hi)


def scalar(value: float | int, dtype: str = "float32") -> Arg:
    return Arg((), dtype, value=value)


@dataclass(frozen=True)
class Program:
    """A Tile program from PlaidML's sources with its arguments and numpy reference.

    `cite` names the repository file and the tag or commit it was read at; `note` says how a
    Python/C++ template was filled in. `reference(**arguments)` returns one array per output,
    in the order of the program's output list (a tuple when there are several). `dtype`, when
    given, is the result dtype PlaidML documents (checked); otherwise only values are compared.
    """

    id: str
    cite: str
    code: str
    args: dict[str, Arg]
    reference: Callable[..., Any]
    note: str = ""
    sizes: dict[str, int] = field(default_factory=dict)
    dtype: str | None = None


@dataclass(frozen=True)
class Negative:
    """A program PlaidML refuses; tilec must raise a TilecError whose message matches every
    regular expression in `culprit` (each names the tensor, index or size at fault) and gives a
    line and column. `args` are the call's arguments (the error may come at compile or call time).
    """

    id: str
    cite: str
    code: str
    args: dict[str, Arg]
    culprit: tuple[str, ...]
    note: str = ""


# --------------------------------------------------------------------------- numpy helpers


def take(x: np.ndarray, positions: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`x` read at the outer product of per-axis integer positions, and where all are in range.

    Out-of-range reads give 0 and a False mask: PlaidML skips those tuples.
    """
    grids = np.ix_(*[np.asarray(p).reshape(-1) for p in positions])
    ok = np.ones([g.size for g in grids], bool)
    clipped = []
    for axis, g in enumerate(grids):
        ok = ok & (g >= 0) & (g < x.shape[axis])
        clipped.append(np.clip(g, 0, max(x.shape[axis] - 1, 0)))
    values = x[tuple(clipped)]
    return np.where(ok, values, 0), ok


def spatial_window(x: np.ndarray, spatial_axes: Sequence[int], starts: Sequence[np.ndarray]):
    """`x` with each spatial axis re-indexed by `starts[i]` (positions, possibly out of range).

    Returns (values, mask) whose spatial axes have len(starts[i]); other axes are kept whole.
    """
    positions = [np.arange(n) for n in x.shape]
    for axis, s in zip(spatial_axes, starts):
        positions[axis] = np.asarray(s)
    return take(x, positions)


def conv(x: np.ndarray, k: np.ndarray, *, channels_first: bool, strides: Sequence[int],
         dilations: Sequence[int], pads: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """PlaidML's convolution: O[n, x, co] = sum I[n, s*x + d*k - pad, ci] * K[k, ci, co].

    Kernel layout is (K..., CI, CO) for channels-last and (CO, CI, K...) for channels-first.
    """
    rank = len(strides)
    kernel_sizes = k.shape[2:] if channels_first else k.shape[:rank]
    spatial = list(range(2, 2 + rank)) if channels_first else list(range(1, 1 + rank))
    xx = x.astype(np.float64)
    result = None
    for offs in itertools.product(*(range(n) for n in kernel_sizes)):
        starts = [s * np.arange(o) + d * kk - p for s, d, kk, p, o in zip(strides, dilations, offs, pads, out)]
        window, _ = spatial_window(xx, spatial, starts)
        if channels_first:
            tap = k[(slice(None), slice(None), *offs)].astype(np.float64)  # (CO, CI)
            term = np.einsum("nc...,oc->no...", window, tap)
        else:
            tap = k[offs].astype(np.float64)  # (CI, CO)
            term = np.einsum("n...c,co->n...o", window, tap)
        result = term if result is None else result + term
    assert result is not None
    return result


def pool(x: np.ndarray, *, channels_first: bool, kernel: Sequence[int], strides: Sequence[int],
         pads: Sequence[int], out: Sequence[int], op: str) -> np.ndarray:
    """PlaidML's pooling: max or sum of I[n, s*x + k - pad, c] over in-range window cells."""
    rank = len(kernel)
    spatial = list(range(2, 2 + rank)) if channels_first else list(range(1, 1 + rank))
    xx = x.astype(np.float64)
    acc = None
    for offs in itertools.product(*(range(n) for n in kernel)):
        starts = [s * np.arange(o) + kk - p for s, kk, p, o in zip(strides, offs, pads, out)]
        window, ok = spatial_window(xx, spatial, starts)
        if op == "max":
            window = np.where(ok, window, -np.inf)
            acc = window if acc is None else np.maximum(acc, window)
        elif op == "count":
            acc = ok.astype(np.float64) if acc is None else acc + ok
        else:
            acc = window if acc is None else acc + window
    assert acc is not None
    return np.where(np.isneginf(acc), 0.0, acc)


def same_pad(size: int, kernel: int, stride: int, lower: bool) -> tuple[int, int]:
    """(output size, padding before) of PlaidML's SAME_UPPER / SAME_LOWER autopadding."""
    out = (size + stride - 1) // stride
    total = max(0, (out - 1) * stride + kernel - size)
    return out, ((total + 1) // 2 if lower else total // 2)


def softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def relu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, 0.0, x)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): halves go away from zero (numpy's round goes to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)
