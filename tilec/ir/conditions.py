"""Affine conditions on index variables and the ranges they imply, in exact integer arithmetic.

A `Condition` is ``lo <= numerator <= hi`` (either side may be absent) plus "the divisor
divides the numerator". `normalise` divides a condition by the gcd of its coefficients, so
``2**61 * i - 2**61 * j in [0, 2]`` becomes ``i - j in [0, 0]``. `infer_ranges` bounds every
index variable: interval propagation to a fixpoint, then Fourier–Motzkin projection of the
whole system onto each variable coupled to others, then propagation again. Both are sound
(they never drop an integer tuple satisfying every condition); bounds are Python ints, never
floats. `guards` keeps the conditions the ranges do not already imply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tilec.ir.affine import Bound, Interval, IntAffine, ceil_div, floor_div

Ranges = dict[str, Interval]


@dataclass(frozen=True)
class Condition:
    """``lo <= expr.numerator <= hi`` (None: that side is unbounded) and ``expr.divisor`` divides
    the numerator."""

    expr: IntAffine
    lo: Bound
    hi: Bound

    def __str__(self) -> str:
        num = IntAffine(self.expr.coeffs, self.expr.const)
        parts = []
        if self.lo is not None:
            parts.append(f"{num} >= {self.lo}")
        if self.hi is not None:
            parts.append(f"{num} <= {self.hi}")
        if self.expr.divisor != 1:
            parts.append(f"{num} % {self.expr.divisor} == 0")
        return " && ".join(parts)


def normalise(cond: Condition) -> Condition:
    """The same set of integer tuples with the common factor of the expression divided out.

    Without a divisor, ``g*e + c in [lo, hi]`` (g the gcd of the coefficients) becomes
    ``e in [ceil((lo - c) / g), floor((hi - c) / g)]``; with one, a factor common to the
    coefficients, the constant and the divisor is divided out of all of them."""
    e = cond.expr
    g = e.content
    if g <= 1:
        return cond
    if e.divisor == 1:
        inner = IntAffine(tuple((v, c // g) for v, c in e.coeffs), 0)
        lo = None if cond.lo is None else ceil_div(cond.lo - e.const, g)
        hi = None if cond.hi is None else floor_div(cond.hi - e.const, g)
        return Condition(inner, lo, hi)
    h = math.gcd(g, e.const, e.divisor)
    if h <= 1:
        return cond
    reduced = IntAffine(tuple((v, c // h) for v, c in e.coeffs), e.const // h, e.divisor // h)
    lo = None if cond.lo is None else ceil_div(cond.lo, h)
    hi = None if cond.hi is None else floor_div(cond.hi, h)
    return normalise(Condition(reduced, lo, hi))


def is_empty(iv: Interval) -> bool:
    return iv[0] is not None and iv[1] is not None and iv[0] > iv[1]


def _tighter(a: Bound, b: Bound, pick) -> Bound:  # type: ignore[no-untyped-def]
    return b if a is None else a if b is None else pick(a, b)


def propagate(conds: Sequence[Condition], variables: Iterable[str], start: Ranges | None = None) -> Ranges:
    """Tighten each variable's interval from every condition until nothing changes (or an interval
    becomes empty). Sound: no integer tuple satisfying every condition lies outside the result."""
    ranges: Ranges = {v: (None, None) for v in variables}
    if start:
        ranges.update(start)
    for _ in range(64):  # bounded: pathological systems stop with a sound (looser) box
        changed = False
        for cond in conds:
            for v, c in cond.expr.coeffs:
                rest = IntAffine(tuple(t for t in cond.expr.coeffs if t[0] != v), cond.expr.const)
                rlo, rhi = rest.interval(ranges)
                num_lo = None if cond.lo is None or rhi is None else cond.lo - rhi  # c*v in [num_lo, num_hi]
                num_hi = None if cond.hi is None or rlo is None else cond.hi - rlo
                if c < 0:
                    num_lo, num_hi, c = (None if num_hi is None else -num_hi), (None if num_lo is None else -num_lo), -c
                new = (None if num_lo is None else ceil_div(num_lo, c), None if num_hi is None else floor_div(num_hi, c))
                old = ranges[v]
                tight = (_tighter(old[0], new[0], max), _tighter(old[1], new[1], min))
                if tight != old:
                    ranges[v] = tight
                    changed = True
                    if is_empty(tight):
                        return ranges
        if not changed:
            break
    return ranges


# ------------------------------------------------------------------ Fourier–Motzkin

_Ineq = tuple[tuple[int, ...], int]  # coefficients a (one per variable) and b: sum(a * x) >= b
_MAX_INEQUALITIES = 600  # beyond this the projection gives up on that variable (still sound)


def _tidy(ineqs: Iterable[_Ineq]) -> dict[tuple[int, ...], int] | None:
    """Integer-tightened (divide by the coefficients' gcd, round b up), deduplicated inequalities
    keeping the strongest b per coefficient vector; None when one is infeasible (0 >= b > 0)."""
    out: dict[tuple[int, ...], int] = {}
    for a, b in ineqs:
        g = math.gcd(*a)
        if g == 0:
            if b > 0:
                return None
            continue
        if g > 1:
            a, b = tuple(x // g for x in a), ceil_div(b, g)
        if out.get(a, b) <= b:
            out[a] = b
    return out


def _eliminate(ineqs: dict[tuple[int, ...], int], k: int) -> dict[tuple[int, ...], int] | None:
    """Project out variable k: every lower bound on it combined with every upper bound."""
    pos = [(a, b) for a, b in ineqs.items() if a[k] > 0]
    neg = [(a, b) for a, b in ineqs.items() if a[k] < 0]
    keep = [(a, b) for a, b in ineqs.items() if a[k] == 0]
    if len(keep) + len(pos) * len(neg) > _MAX_INEQUALITIES:
        raise OverflowError  # caught by project(): too many to be worth it
    for ap, bp in pos:
        for an, bn in neg:
            p, n = ap[k], -an[k]
            keep.append((tuple(n * x + p * y for x, y in zip(ap, an)), n * bp + p * bn))
    return _tidy(keep)


def _inequalities(conds: Sequence[Condition], ranges: Ranges, order: list[str]) -> list[_Ineq]:
    where = {v: k for k, v in enumerate(order)}
    out: list[_Ineq] = []
    for cond in conds:
        a = [0] * len(order)
        for v, c in cond.expr.coeffs:
            a[where[v]] = c
        if cond.lo is not None:
            out.append((tuple(a), cond.lo - cond.expr.const))
        if cond.hi is not None:
            out.append((tuple(-x for x in a), cond.expr.const - cond.hi))
    for v, (lo, hi) in ranges.items():
        unit = tuple(int(u == v) for u in order)
        if lo is not None:
            out.append((unit, lo))
        if hi is not None:
            out.append((tuple(-x for x in unit), -hi))
    return out


def project(conds: Sequence[Condition], ranges: Ranges) -> Ranges:
    """Each variable that shares a condition with another bounded by Fourier–Motzkin projection of
    all conditions and the box `ranges` onto it (exact over the rationals, rounded inward to
    integers: sound). An infeasible system gives every variable an empty range."""
    order = list(ranges)
    coupled = {v for c in conds if len(c.expr.coeffs) > 1 for v in c.expr.vars}
    base = _tidy(_inequalities(conds, ranges, order))
    if base is None:
        return {v: (0, -1) for v in order}
    out = dict(ranges)
    for k, v in enumerate(order):
        if v not in coupled:
            continue
        system: dict[tuple[int, ...], int] | None = base
        try:
            for j in range(len(order)):
                if j != k and system is not None:
                    system = _eliminate(system, j)
        except OverflowError:
            continue
        if system is None:
            return {u: (0, -1) for u in order}
        lo, hi = out[v]
        for a, b in system.items():  # a[k] * v >= b, a[k] = +-1 after tidying
            if a[k] > 0:
                lo = _tighter(lo, ceil_div(b, a[k]), max)
            else:
                hi = _tighter(hi, floor_div(-b, -a[k]), min)
        out[v] = (lo, hi)
    return out


def infer_ranges(conds: Sequence[Condition], variables: Sequence[str]) -> Ranges:
    """Sound, exact-integer ranges of `variables` under `conds` (see the module docstring)."""
    ranges = propagate(conds, variables)
    if any(is_empty(r) for r in ranges.values()):
        return ranges
    if any(len(c.expr.coeffs) > 1 for c in conds):
        ranges = project(conds, ranges)
        if not any(is_empty(r) for r in ranges.values()):
            ranges = propagate(conds, variables, ranges)
    return ranges


def guards(conds: Sequence[Condition], ranges: Ranges) -> tuple[Condition, ...]:
    """The conditions (sides of them) the ranges do not already imply, deduplicated."""
    out: dict[tuple, Condition] = {}
    for cond in conds:
        lo, hi = cond.expr.interval(ranges)
        e = cond.expr
        divisible = all(c % e.divisor == 0 for _, c in e.coeffs) and e.const % e.divisor == 0
        need_lo = cond.lo is not None and (lo is None or lo < cond.lo)
        need_hi = cond.hi is not None and (hi is None or hi > cond.hi)
        if not (need_lo or need_hi or not divisible):
            continue
        key = (e.coeffs, e.const, e.divisor)
        prev = out.get(key)
        new_lo = cond.lo if need_lo else None
        new_hi = cond.hi if need_hi else None
        if prev is not None:
            new_lo, new_hi = _tighter(prev.lo, new_lo, max), _tighter(prev.hi, new_hi, min)
        out[key] = Condition(e, new_lo, new_hi)
    return tuple(out.values())


__all__ = ["Condition", "Ranges", "normalise", "propagate", "project", "infer_ranges", "guards", "is_empty"]
