"""Proof that the index arithmetic lowering emits stays inside int64 (no wrapping, ever).

Requires: a contraction's normalised conditions, its guards and its (non-empty, bounded) ranges.
Guarantees: `check` returns only when every sub-expression of every index, guard and loop bound
that tilec.ir.lower emits, evaluated the way it emits them, has a magnitude below 2**63 over the
variables' ranges; otherwise it raises BindError "index arithmetic exceeds 64 bits in ...".

How lowering evaluates an affine form (see tilec.ir.lower.affine_expr): with coefficients whose
gcd g is 1, the constant plus each term in turn; otherwise ``g * (sum of (c/g) * v) + const``,
the terms ``(c/g) * v`` and their partial sums over the box, then the product by g, then the
constant. An access index is only evaluated where
its tuple contributes (inside every guard), so its value there lies in the tensor's bounds: the
inner sum is then limited by that condition too, which is what lets ``2**61*i - 2**61*j`` index
a 3-element tensor safely (it is ``2**61 * (i - j)`` with ``i - j`` in [0, 0] where it runs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tilec.errors import BindError
from tilec.ir.affine import Interval, IntAffine, ceil_div, floor_div, scale_interval
from tilec.ir.conditions import Condition

INT64_MAX = 2**63 - 1


def abbreviate_numbers(text: str) -> str:
    """`text` with every number of more than 30 digits shortened to its ends and digit count."""
    return re.sub(r"\d{31,}", lambda m: f"{m[0][:12]}...{m[0][-6:]} ({len(m[0])} digits)", text)


class _TooWide(Exception):
    def __init__(self, what: str, iv: Interval):
        super().__init__(what)
        self.what, self.iv = what, iv


def _fit(iv: Interval, what: str) -> Interval:
    lo, hi = iv
    if lo is None or hi is None or lo < -INT64_MAX or hi > INT64_MAX:
        raise _TooWide(what, iv)
    return iv


def _add(a: Interval, b: Interval) -> Interval:
    assert None not in a and None not in b
    return a[0] + b[0], a[1] + b[1]  # type: ignore[operator]


def affine_interval(e: IntAffine, box: Mapping[str, Interval], where: Interval | None = None) -> Interval:
    """The interval of e's numerator as lowering evaluates it, checking every step fits int64;
    `where` is a range the numerator is known to lie in wherever it is evaluated."""
    g = e.content or 1
    _fit((-g, g), f"coefficient factor {g} of {e}")
    _fit((-abs(e.const), abs(e.const)), f"constant {e.const} of {e}")
    total: Interval = (e.const, e.const) if g == 1 else (0, 0)  # g == 1: the constant comes first
    for v, c in e.coeffs:
        _fit((-abs(c // g), abs(c // g)), f"coefficient {c} of {e}")
        total = _fit(_add(total, _fit(scale_interval(box[v], c // g), f"term {c}*{v} of {e}")), f"{e}")
    if g == 1:
        return total
    if where is not None:  # the inner sum is limited by the value's own range there
        lo, hi = where
        inner_lo = total[0] if lo is None else max(total[0], ceil_div(lo - e.const, g))  # type: ignore[type-var]
        inner_hi = total[1] if hi is None else min(total[1], floor_div(hi - e.const, g))  # type: ignore[type-var]
        total = (inner_lo, inner_hi) if inner_lo <= inner_hi else (0, 0)  # type: ignore[operator]
    total = _fit(scale_interval(total, g), f"{e}")
    return _fit(_add(total, (e.const, e.const)), f"{e}")


def _check_divisor(e: IntAffine) -> None:
    # Divisors above int64 are emitted as "numerator == 0" (tilec.ir.lower): valid because the
    # numerator's magnitude, proven below 2**63, is then below the divisor.
    if e.divisor < 1:
        raise _TooWide(f"divisor {e.divisor} of {e}", (e.divisor, e.divisor))


def _check_guard(g: Condition, box: Mapping[str, Interval]) -> None:
    e = g.expr
    _check_divisor(e)
    affine_interval(e, box)
    for bound in (g.lo, g.hi):
        if bound is not None:
            _fit((bound, bound), f"bound {bound} of guard {g}")
    if e.divisor != 1:
        return
    for v, _ in e.coeffs:  # the guard may become the bounds of v's loop: (bound - rest) / |c|
        rest = IntAffine(tuple(t for t in e.coeffs if t[0] != v), e.const)
        r = affine_interval(rest, box)
        for bound in (g.lo, g.hi):
            if bound is not None:
                _fit((bound - r[1], bound - r[0]), f"loop bound from guard {g}")  # type: ignore[operator]


def check(indices: Sequence[tuple[IntAffine, int]], guards: Sequence[Condition],
          ranges: Mapping[str, tuple[int, int]], what: str) -> None:
    """Prove int64 suffices (see the module docstring) or raise BindError.

    `indices` are (index, extent) of every access, the output's included; `ranges` inclusive."""
    box: dict[str, Interval] = {v: (lo, hi) for v, (lo, hi) in ranges.items()}
    try:
        for v, (lo, hi) in ranges.items():
            _fit((lo, hi + 1), f"the range of '{v}'")
        for e, extent in indices:
            _check_divisor(e)
            affine_interval(e, box, (0, e.divisor * (extent - 1)))
        for g in guards:
            _check_guard(g, box)
    except _TooWide as err:
        reach = "[" + ", ".join("unbounded" if b is None else str(b) for b in err.iv) + "]"
        box_text = ", ".join(f"{v} in [{a}, {b}]" for v, (a, b) in ranges.items())
        raise BindError(abbreviate_numbers(f"index arithmetic exceeds 64 bits in {what}: {err.what} reaches {reach} "
                                           f"over the index ranges {box_text}; use smaller coefficients or sizes")) \
            from None


__all__ = ["check", "affine_interval", "abbreviate_numbers", "INT64_MAX"]
