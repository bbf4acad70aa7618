"""Concrete affine forms over index variables, once size symbols are bound.

`Affine` has rational coefficients (Tile allows ``(x + i) / 2``). `IntAffine` is the
integer form every condition is normalised to: a rational index ``e / m`` becomes
the integer affine `e` with divisor `m` (the index is valid only where m divides e).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from tilec.errors import BindError
from tilec.ir import tensor as T
from tilec.ir.size_values import integer_op

Bound = Optional[int]  # an exact integer bound; None where that side is unbounded
Interval = tuple[Bound, Bound]  # (lo, hi) inclusive; empty where lo > hi


@dataclass(frozen=True)
class Affine:
    coeffs: tuple[tuple[str, Fraction], ...]  # sorted by name, no zero coefficients
    const: Fraction

    @staticmethod
    def make(coeffs: dict[str, Fraction], const: Fraction) -> "Affine":
        return Affine(tuple(sorted((k, v) for k, v in coeffs.items() if v != 0)), Fraction(const))

    def scale(self, k: Fraction) -> "Affine":
        return Affine.make({v: c * k for v, c in self.coeffs}, self.const * k)

    def add(self, other: "Affine", sign: int = 1) -> "Affine":
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs:
            coeffs[v] = coeffs.get(v, Fraction(0)) + sign * c
        return Affine.make(coeffs, self.const + sign * other.const)

    @property
    def is_constant(self) -> bool:
        return not self.coeffs

    def to_int(self) -> "IntAffine":
        """Scale to integer coefficients: returns IntAffine whose `divisor` restores the value."""
        denom = 1
        for _, c in self.coeffs:
            denom = math.lcm(denom, c.denominator)
        denom = math.lcm(denom, self.const.denominator)
        return IntAffine(tuple((v, int(c * denom)) for v, c in self.coeffs), int(self.const * denom), denom)


@dataclass(frozen=True)
class IntAffine:
    """``(sum(c * v) + const) / divisor``, with the division exact where valid."""

    coeffs: tuple[tuple[str, int], ...]
    const: int
    divisor: int = 1

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.coeffs)

    @property
    def lone_var(self) -> str | None:
        """The variable when the expression is one variable alone (`i`, not `2i`, `i + 1` or `i / 2`)."""
        if self.divisor == 1 and self.const == 0 and len(self.coeffs) == 1 and self.coeffs[0][1] == 1:
            return self.coeffs[0][0]
        return None

    @property
    def content(self) -> int:
        """The gcd of the coefficients (0 for a constant)."""
        return math.gcd(*(c for _, c in self.coeffs))

    def substitute(self, values: Mapping[str, int]) -> "IntAffine":
        """The form with the variables in `values` replaced by those integers."""
        const = self.const + sum(c * values[v] for v, c in self.coeffs if v in values)
        return IntAffine(tuple((v, c) for v, c in self.coeffs if v not in values), const, self.divisor)

    def interval(self, ranges: Mapping[str, Interval]) -> Interval:
        """Exact range of the numerator (sum + const) over the box `ranges` (None: unbounded).
        Requires every box interval to be non-empty."""
        lo: Bound = self.const
        hi: Bound = self.const
        for v, c in self.coeffs:
            term = scale_interval(ranges[v], c)
            lo = None if lo is None or term[0] is None else lo + term[0]
            hi = None if hi is None or term[1] is None else hi + term[1]
        return lo, hi

    def __str__(self) -> str:
        terms = [(f"{v}" if c == 1 else f"-{v}" if c == -1 else f"{c}*{v}") for v, c in self.coeffs]
        if self.const or not terms:
            terms.append(str(self.const))
        text = " + ".join(terms).replace("+ -", "- ")
        return f"({text}) / {self.divisor}" if self.divisor != 1 else text


def scale_interval(iv: Interval, c: int) -> Interval:
    """{c * x : x in iv} as an interval (c may be negative)."""
    if c == 0:
        return 0, 0
    lo, hi = (None if b is None else c * b for b in iv)
    return (lo, hi) if c >= 0 else (hi, lo)


def floor_div(x: int, d: int) -> int:
    return x // d


def ceil_div(x: int, d: int) -> int:
    return -((-x) // d)


def evaluate_size(e: T.IExpr, sizes: dict[str, int], what: str) -> int:
    """Evaluate a size expression with bound size symbols. Its ``/`` rounds toward zero: PlaidML
    parses output sizes and constraint bounds as expressions folded like integer statements
    (ConstantPropagate in tile/lang/type.cc of plaidml/plaidml: a double quotient cast to int64),
    so ``(0 - 7) / 2`` is -3 here as in ``P = (0 - 7) / 2;`` (tilec.ir.size_values)."""
    if isinstance(e, T.IConst):
        return e.value
    if isinstance(e, T.ISize):
        if e.name not in sizes:
            raise BindError(f"unbound size symbol '{e.name}' in {what}: it is not an input dimension and cannot be "
                            f"inferred; pass it as a keyword, e.g. tilec.compile(src, {e.name}=...)")
        return sizes[e.name]
    if isinstance(e, T.INeg):
        return -evaluate_size(e.a, sizes, what)
    if isinstance(e, T.IBin):
        return integer_op(e.op, evaluate_size(e.a, sizes, what), evaluate_size(e.b, sizes, what), what)
    raise BindError(f"index variable in {what}")


def to_affine(e: T.IExpr, sizes: dict[str, int], what: str) -> Affine:
    """Evaluate an (already checked) affine index polynomial with bound sizes."""
    if isinstance(e, T.IConst):
        return Affine.make({}, Fraction(e.value))
    if isinstance(e, T.ISize):
        return Affine.make({}, Fraction(evaluate_size(e, sizes, what)))
    if isinstance(e, T.IVar):
        return Affine.make({e.name: Fraction(1)}, Fraction(0))
    if isinstance(e, T.INeg):
        return to_affine(e.a, sizes, what).scale(Fraction(-1))
    assert isinstance(e, T.IBin)
    if e.op in ("max", "min"):  # sema allows them over sizes only
        return Affine.make({}, Fraction(evaluate_size(e, sizes, what)))
    a, b = to_affine(e.a, sizes, what), to_affine(e.b, sizes, what)
    if e.op == "+":
        return a.add(b)
    if e.op == "-":
        return a.add(b, -1)
    if e.op == "*":
        if a.is_constant:
            return b.scale(a.const)
        return a.scale(b.const)  # sema guarantees one side is constant
    if b.const == 0:
        raise BindError(f"division by zero in {what}")
    return a.scale(1 / b.const)
