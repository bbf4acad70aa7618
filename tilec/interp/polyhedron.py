"""Exact index arithmetic for the interpreter: affine forms with rational coefficients, the
conditions a tuple must meet, and a finite box that holds every tuple meeting them.

Nothing here uses floating point or fixed-width integers: coefficients are `Fraction`s, values
Python ints, so huge coefficients (2**61 * i) and exact rational indices (``(i + j) / 2``) are
handled as the language defines them. The box is derived by Fourier–Motzkin elimination over the
rationals, which gives each variable its exact rational projection: sound (no tuple meeting the
conditions lies outside it) and finite whenever the conditions bound the variable at all.

Independent of tilec.ir.affine and tilec.ir.conditions on purpose: the interpreter is their oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tilec.errors import BindError, TilecError
from tilec.ir import tensor as T
from tilec.ir.size_values import truncating_division

MAX_INEQUALITIES = 20_000  # Fourier–Motzkin can blow up; refuse rather than hang


@dataclass(frozen=True)
class Form:
    """``sum(coeff * var) + const`` with exact rational coefficients (no zero coefficients)."""

    coeffs: tuple[tuple[str, Fraction], ...]
    const: Fraction

    @staticmethod
    def make(coeffs: dict[str, Fraction], const: Fraction) -> "Form":
        return Form(tuple(sorted((v, c) for v, c in coeffs.items() if c != 0)), Fraction(const))

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.coeffs)

    def plus(self, other: "Form", sign: int = 1) -> "Form":
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs:
            coeffs[v] = coeffs.get(v, Fraction(0)) + sign * c
        return Form.make(coeffs, self.const + sign * other.const)

    def times(self, k: Fraction) -> "Form":
        return Form.make({v: c * k for v, c in self.coeffs}, self.const * k)

    def value(self, point: dict[str, int]) -> Fraction:
        return self.const + sum((c * point[v] for v, c in self.coeffs), Fraction(0))


def size_value(e: T.IExpr, sizes: dict[str, int], what: str) -> int:
    """A size expression's value: Python ints, ``/`` rounds toward zero, ``max`` and ``min``."""
    if isinstance(e, T.IConst):
        return e.value
    if isinstance(e, T.ISize):
        if e.name not in sizes:
            raise BindError(f"unbound size symbol '{e.name}' in {what}: it is not an input dimension and cannot be "
                            f"inferred; pass it as a keyword, e.g. tilec.compile(src, {e.name}=...)")
        return sizes[e.name]
    if isinstance(e, T.INeg):
        return -size_value(e.a, sizes, what)
    if isinstance(e, T.IBin):
        a, b = size_value(e.a, sizes, what), size_value(e.b, sizes, what)
        if e.op == "/":  # toward zero, as PlaidML folds sizes (tilec.ir.size_values)
            return truncating_division(a, b, what)
        if e.op in ("max", "min"):
            return max(a, b) if e.op == "max" else min(a, b)
        return a + b if e.op == "+" else a - b if e.op == "-" else a * b
    raise BindError(f"index variable '{getattr(e, 'name', e)}' in {what}, where only sizes may appear")


def form_of(e: T.IExpr, sizes: dict[str, int], what: str) -> Form:
    """An index polynomial as a Form; ``/`` is exact rational division by a constant."""
    if isinstance(e, T.IVar):
        return Form.make({e.name: Fraction(1)}, Fraction(0))
    if isinstance(e, (T.IConst, T.ISize)):
        return Form.make({}, Fraction(size_value(e, sizes, what)))
    if isinstance(e, T.INeg):
        return form_of(e.a, sizes, what).times(Fraction(-1))
    if not isinstance(e, T.IBin):
        raise TilecError(f"the interpreter does not know the index expression {e!r} in {what}")
    if e.op in ("max", "min"):  # over sizes only (sema)
        return Form.make({}, Fraction(size_value(e, sizes, what)))
    a, b = form_of(e.a, sizes, what), form_of(e.b, sizes, what)
    if e.op in "+-":
        return a.plus(b, 1 if e.op == "+" else -1)
    if e.op == "*":
        if a.coeffs and b.coeffs:
            raise TilecError(f"the product of two index variables in {what} is not affine")
        return b.times(a.const) if not a.coeffs else a.times(b.const)
    if b.coeffs:
        raise TilecError(f"division by an index variable in {what} is not affine")
    if b.const == 0:
        raise BindError(f"division by zero in {what}")
    return a.times(1 / b.const)


@dataclass(frozen=True)
class Condition:
    """A tuple meets it when ``form`` is an integer in ``[0, extent - 1]``."""

    form: Form
    extent: int
    what: str  # for messages: "A dimension 1", "constraint i < 3", "output dimension 0"

    def inequalities(self) -> list[Form]:
        """``form >= 0`` and ``extent - 1 - form >= 0``."""
        upper = Form.make({}, Fraction(self.extent - 1)).plus(self.form, -1)
        return [self.form, upper]


def _normalised(f: Form) -> Form:
    """``f >= 0`` with integer coefficients of gcd 1 and its constant rounded down: the same integer
    points (the variables are integers, so ``sum(c * v) >= -const`` means ``>= ceil(-const)``), one
    canonical form for deduplication, and the rounding that proves ``2**61 * (j - k) = -1`` empty."""
    if not f.coeffs:
        return f
    scale = math.lcm(*(c.denominator for _, c in f.coeffs))
    ints = [int(c * scale) for _, c in f.coeffs]
    g = math.gcd(*ints)
    return Form(tuple((v, Fraction(c, g)) for (v, _), c in zip(f.coeffs, ints)),
                Fraction(math.floor(f.const * scale / g)))


def _eliminate(inequalities: set[Form], v: str) -> set[Form]:
    pos = [f for f in inequalities if dict(f.coeffs).get(v, 0) > 0]
    neg = [f for f in inequalities if dict(f.coeffs).get(v, 0) < 0]
    out = {f for f in inequalities if v not in dict(f.coeffs)}
    for p in pos:
        cp = dict(p.coeffs)[v]
        for n in neg:
            cn = -dict(n.coeffs)[v]
            out.add(_normalised(p.times(cn).plus(n.times(cp))))
            if len(out) > MAX_INEQUALITIES:
                raise TilecError("the statement's index conditions are too complex for the interpreter "
                                 f"(over {MAX_INEQUALITIES} inequalities while eliminating '{v}')")
    return out


def _project(inequalities: set[Form], variables: tuple[str, ...], keep: tuple[str, ...]) -> set[Form]:
    """Eliminate every variable not in `keep`, cheapest first (fewest new inequalities), which keeps
    Fourier–Motzkin's growth down."""
    ineqs = set(inequalities)
    left = [u for u in variables if u not in keep]
    while left:
        u = min(left, key=lambda w: _elimination_cost(ineqs, w))
        left.remove(u)
        ineqs = _eliminate(ineqs, u)
    return ineqs


def _elimination_cost(inequalities: set[Form], v: str) -> int:
    """How many inequalities eliminating `v` creates (positive times negative coefficients)."""
    signs = [dict(f.coeffs).get(v, 0) for f in inequalities]
    return sum(c > 0 for c in signs) * sum(c < 0 for c in signs)


def _substitute_unit_equalities(inequalities: set[Form], variables: tuple[str, ...]) -> tuple[set[Form], tuple[str, ...]]:
    """Solve equalities ``f = 0`` (``f >= 0`` and ``-f >= 0`` both present) for a variable with a unit
    coefficient and substitute it everywhere: the integer rounding of `_normalised` then sees
    ``2*(j + k) + i + 1 = 0`` with ``i = 0`` as empty, which eliminating ``j`` first would lose."""
    ineqs, left = set(inequalities), list(variables)
    while True:
        found = next(((f, v, c) for f in ineqs if _normalised(f.times(Fraction(-1))) in ineqs
                      for v, c in f.coeffs if abs(c) == 1 and v in left), None)
        if found is None:
            return ineqs, tuple(left)
        f, v, c = found
        ineqs = {_normalised(g.plus(f.times(-dict(g.coeffs)[v] / c))) if v in dict(g.coeffs) else g for g in ineqs}
        left.remove(v)


def _feasible_constants(inequalities: set[Form]) -> bool:
    return all(f.const >= 0 for f in inequalities if not f.coeffs)


Box = dict[str, tuple[int, int]]  # inclusive integer ranges; lo > hi means empty
UNBOUNDED = None


def rational_box(variables: tuple[str, ...], conditions: list[Condition]) -> Box | None:
    """Each variable's integer range inside the rational projection of the conditions.

    Returns an empty box (some ``lo > hi``) when the conditions have no solution (rational, after
    rounding each inequality for integer variables: `_normalised`), and None
    when some variable is unbounded. Every integer tuple meeting the conditions lies in the box.
    Conditions without variables are not decided here (with no variables the box is ``{}``, one
    empty tuple): the enumeration checks every condition of every tuple.
    """
    base: set[Form] = {_normalised(f) for c in conditions for f in c.inequalities()}
    try:  # first: is there any solution at all? (if not, no range is needed)
        reduced, left = _substitute_unit_equalities(base, variables)
        feasible = _feasible_constants(_project(reduced, left, ()))
    except TilecError:  # too complex to decide at once: each projection below still decides it
        feasible = True
    if not feasible:
        return {v: (0, -1) for v in variables}
    box: Box = {}
    for v in variables:
        ineqs = _project(base, variables, (v,))
        if not _feasible_constants(ineqs):
            return {w: (0, -1) for w in variables}
        lows = [-f.const / c for f in ineqs for w, c in f.coeffs if c > 0]
        highs = [-f.const / c for f in ineqs for w, c in f.coeffs if c < 0]
        if not lows or not highs:
            return UNBOUNDED
        box[v] = (math.ceil(max(lows)), math.floor(min(highs)))
    return box


def box_size(box: Box) -> int:
    return math.prod(max(0, hi - lo + 1) for lo, hi in box.values())


__all__ = ["Box", "Condition", "Form", "box_size", "form_of", "rational_box", "size_value"]
