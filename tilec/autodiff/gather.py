"""The gather form of a derived contraction: its left-hand side made direct, when that is exact.

The gradient rules write an operand's index polynomials as the left-hand side
(``DI[x + i] = +(DO[x] * K[i])``): a scatter, which the GEMM templates do not take. Solving the
left-hand indices for index variables turns it into a gather (``DI[x] = +(DO[x - i] * K[i])``),
the "transposed conv" form the templates handle. `gather_form` states what it requires and
guarantees.
"""

from __future__ import annotations

from fractions import Fraction

from tilec.autodiff.linear_forms import (Linear, fresh_index, iexpr_of, linear_form, lone_variable, operand_vars,
                                         substitute)
from tilec.ir.tensor import Access, Constraint, Contraction, IConst, IVar


def gather_form(st: Contraction, grad: str | None = None, fractional: bool = False) -> Contraction:
    """`st` with a direct left-hand side, when that is an exact rewrite (else `st` unchanged).

    Each left-hand index must be ``c*v + rest`` where the index variable `v` appears in no other
    left-hand index and `c` is a constant. Substituting ``v = (v' - rest) / c`` everywhere makes the
    index the lone variable ``v'`` (named `v` again, since the old `v` is gone). Tuples map one to one
    (an old tuple's `v` is an integer exactly where the new fractional index is), and every bound of
    the old tuple is kept by the accesses and constraints it moved to, so out-of-range tuples are
    still skipped. When `grad` (the output gradient) is given, `v` must be one of its index variables
    (they span the large ranges: the conv's spatial ones rather than its kernel offsets, whose
    gather would visit every output position per cell), unit coefficients first; a coefficient
    that is a size symbol (a symbolic stride) keeps the scatter form.

    Only unit coefficients are rewritten unless `fractional`: with ``c = 2`` (a stride-2 conv's
    input gradient) the gather has the fractional index ``(x - i + 1) / 2``, which is exact and
    matches the GEMM template, but the template then multiplies every tuple and discards 3 of 4
    (measured 28 ms against the scatter's 7 ms for 8x64x56x56, 3x3; a 1x1 stride-2 conv's 28 ms against
    polyphase_form's 14 ms), so such indices are left to polyphase_form. The result is the "transposed conv" the GEMM
    templates handle, instead of a scatter into the output.
    """
    maybe = [linear_form(e) for e in st.indices]
    forms = [f for f in maybe if f is not None]
    if len(forms) != len(maybe) or st.agg != "+":
        return st
    lone = [lone_variable(f) for f in forms]
    if None not in lone and len(set(lone)) == len(lone):
        return st  # already direct
    grad_vars = operand_vars(st, grad)
    subst: dict[str, Linear] = {}
    pinned: list[Constraint] = []  # a constant index k becomes a fresh variable u with u == k
    used = set(st.index_vars)
    for k, form in enumerate(forms):
        if not any(v for v, _ in form):
            u = fresh_index("u", used)
            subst[u] = {(u, ()): Fraction(1)}
            pin = iexpr_of({(u, ()): Fraction(1), **{key: -c for key, c in form.items()}})
            pinned.append(Constraint(pin, IConst(1)))
            continue
        others = {v for j, f in enumerate(forms) if j != k for (v, _) in f}
        best: tuple[int, str, Fraction] | None = None
        for (v, sizes), c in form.items():
            # a constant coefficient: v in one monomial only, not times a size symbol
            if not v or sizes or v in others or sum(key[0] == v for key in form) != 1:
                continue
            if grad is not None and v not in grad_vars and len(form) > 1:
                continue  # e.g. a kernel offset: its gather would loop over every output position
            if abs(c) != 1 and not fractional:
                continue  # a fractional gather wastes c - 1 of every c tuples: polyphase_form instead
            rank = 0 if abs(c) == 1 else 1
            if best is None or rank < best[0]:
                best = (rank, v, c)
        if best is None:
            return st
        _, v, c = best
        rest = {key: coeff for key, coeff in form.items() if key != (v, ())}
        subst[v] = {(v, ()): 1 / c, **{key: -coeff / c for key, coeff in rest.items()}}
    indices = tuple(IVar(v) for v in subst)
    operands = tuple(Access(a.tensor, tuple(substitute(i, subst) for i in a.indices)) for a in st.operands)
    constraints = tuple(Constraint(substitute(c.poly, subst), c.bound) for c in st.constraints) + tuple(pinned)
    return Contraction(st.output, indices, st.sizes, st.agg, st.combo, operands, constraints, st.default,
                       st.no_defract)
