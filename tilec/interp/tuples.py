"""Enumerate every integer tuple of a finite box and keep those that meet every condition.

Tuples come in chunks of numpy arrays, one per variable. A condition ``form`` (rational
coefficients) is checked exactly on its integer numerator: with ``D`` the common denominator,
``num = D * form`` must satisfy ``0 <= num <= D * (extent - 1)`` and ``num % D == 0``. The
arithmetic runs in int64 only when a bound computed from the box proves that no intermediate
value reaches 2**62; otherwise in numpy object arrays of Python ints (exact, slower).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from tilec.errors import TilecError
from tilec.interp.polyhedron import Box, Condition, Form, box_size

MAX_TUPLES = 20_000_000  # the interpreter is slow on purpose, not without limit
CHUNK = 1 << 18
_SAFE = 1 << 62


def check_size(box: Box, what: str) -> int:
    """The number of candidate tuples in `box`; a TilecError when it is too many to enumerate."""
    n = box_size(box)
    if n > MAX_TUPLES:
        ranges = ", ".join(f"{v} in [{lo}, {hi}]" for v, lo, hi in ((v, *r) for v, r in box.items()))
        raise TilecError(f"the interpreter would enumerate {n} candidate tuples for {what} ({ranges}); it "
                         f"refuses more than {MAX_TUPLES}: interpret smaller inputs")
    return n


def integer_form(f: Form) -> tuple[int, list[tuple[str, int]], int]:
    """(D, integer coefficients, integer constant) of ``D * f``, D the least common denominator."""
    denom = math.lcm(*(c.denominator for _, c in f.coeffs), f.const.denominator)
    coeffs = [(v, int(c * denom)) for v, c in f.coeffs]
    return denom, coeffs, int(f.const * denom)


def _fits_int64(box: Box, conds: list[Condition]) -> bool:
    reach = max((max(abs(lo), abs(hi)) for lo, hi in box.values()), default=0)
    for cond in conds:
        denom, coeffs, const = integer_form(cond.form)
        worst = sum(abs(c) for _, c in coeffs) * max(reach, 1) + abs(const)  # also bounds each coefficient
        if worst >= _SAFE or denom * (abs(cond.extent) + 1) >= _SAFE:
            return False
    return reach < _SAFE


def valid_tuples(variables: tuple[str, ...], box: Box, conds: list[Condition],
                 what: str) -> Iterator[dict[str, np.ndarray]]:
    """Chunks of the tuples of `box` (variables in order) that meet every condition in `conds`.

    Each chunk maps every variable to an array of its values (int64 when they fit, else object).
    Requires a box no larger than MAX_TUPLES (see `check_size`).
    """
    total = check_size(box, what)
    if total == 0:
        return
    exact_ints = _fits_int64(box, conds)
    dims = tuple(box[v][1] - box[v][0] + 1 for v in variables)
    forms = [(integer_form(c.form), c.extent) for c in conds]
    for start in range(0, total, CHUNK):
        flat = np.arange(start, min(total, start + CHUNK), dtype=np.int64)
        digits = np.unravel_index(flat, dims) if dims else ()
        point: dict[str, np.ndarray] = {}
        for v, d in zip(variables, digits):
            values = d.astype(np.int64) if exact_ints else d.astype(object)
            point[v] = values + (box[v][0] if exact_ints else int(box[v][0]))
        keep = np.ones(len(flat), dtype=bool)
        for (denom, coeffs, const), extent in forms:
            num = np.full(len(flat), const, dtype=np.int64 if exact_ints else object)
            for v, c in coeffs:
                num = num + point[v] * c
            ok = (num >= 0) & (num <= denom * (extent - 1))
            if denom != 1:
                ok &= (num % denom) == 0
            keep &= ok.astype(bool)
        if keep.any():
            yield {v: values[keep] for v, values in point.items()} if variables else {"": flat[keep]}


__all__ = ["CHUNK", "MAX_TUPLES", "check_size", "integer_form", "valid_tuples"]
