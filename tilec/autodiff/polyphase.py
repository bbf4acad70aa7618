"""The polyphase form of a derived contraction whose left-hand side has strided indices.

A stride-c conv's input gradient, ``DI[n, c*x + i + k, ...] = +(...)``, stays a scatter under
gather_form, whose fractional gather would waste c - 1 of every c tuples; splitting the tap by
its phase gives c plain gathers (one batched GEMM) and one scatter pass over the result.
`polyphase_form` states what it requires and guarantees.
"""

from __future__ import annotations

from fractions import Fraction

from tilec.autodiff.linear_forms import (Linear, fresh_index, iexpr_of, linear_form, lone_variable, operand_vars,
                                         substitute)
from tilec.ir.tensor import Access, Constraint, Contraction, IBin, IConst, IExpr, IVar


def polyphase_form(st: Contraction, grad: str, phases: str) -> tuple[Contraction, Contraction] | None:
    """`st` as a gather into a phase tensor `phases` and a scatter of it, when `st`'s left-hand side
    has strided indices ``c*x + i + k`` (None otherwise).

    Such an index (a stride-c conv's input gradient: ``DI[n, 2*x + i - 1, ...]``) keeps `st` a
    scatter, and its fractional gather would multiply c - 1 of every c tuples by nothing (see
    gather_form). Splitting the tap ``i = c*t + z`` by its phase z in [0, c) and writing
    ``x = u - t`` makes the index ``c*u + z + k``: for each phase, a plain gather over t in which
    no tuple is wasted. So

        phases[z, ..., u', ...] = +(operands with x -> u' + m - t, i -> c*t + z)   (direct: a batched GEMM)
        D[..., c*u' + z + k + c*m, ...] = +(phases[z, ..., u', ...])             (one pass over D)

    where m (the least u any tuple has) keeps u' >= 0. Requires: agg "+", every left-hand index a
    lone variable or such a strided form, c and k integer constants, x one of `grad`'s index
    variables and i not, each in this one left-hand index. The tuples map one to one, so the sum is
    exactly `st`'s (in another order)."""
    if st.agg != "+" or st.default is not None or st.sizes is None:
        return None
    forms = [linear_form(e) for e in st.indices]
    if any(f is None for f in forms):
        return None
    grad_vars = operand_vars(st, grad)
    used = set(st.index_vars)

    subst: dict[str, Linear] = {}
    phase_vars: list[str] = []
    phase_sizes: list[IExpr] = []
    dims: list[IExpr] = []  # the phase tensor's other indices
    sizes: list[IExpr] = []
    lhs: list[IExpr] = []
    counts: dict[str, int] = {}
    for f in forms:
        assert f is not None
        for v, _ in f:
            counts[v] = counts.get(v, 0) + 1
    for e, f, size in zip(st.indices, forms, st.sizes):
        assert f is not None
        if lone_variable(f) is not None:
            dims.append(e)
            sizes.append(size)
            lhs.append(e)
            continue
        terms = {v: c for (v, sz), c in f.items() if v and not sz}
        const = f.get(("", ()), Fraction(0))
        if len(terms) == 1 and len(f) == 1 + (("", ()) in f) and const.denominator == 1:  # c*x + k, no tap
            (x, c_x), = terms.items()
            if c_x.denominator != 1 or c_x < 2 or x not in grad_vars or counts[x] != 1:
                return None
            c, k, u = int(c_x), int(const), fresh_index("u", used)
            m = -(k // c)  # the least x whose index c*x + k is >= 0
            subst[x] = {(u, ()): Fraction(1), ("", ()): Fraction(m)} if m else {(u, ()): Fraction(1)}
            shift = k + c * m
            dims.append(IVar(u))
            sizes.append(_strided_extent(size, shift, c))
            lhs.append(iexpr_of({(u, ()): Fraction(c), **({("", ()): Fraction(shift)} if shift else {})}))
            continue
        if len(terms) != 2 or len(f) != 2 + (("", ()) in f) or const.denominator != 1:
            return None
        strided = [v for v, c in terms.items() if c.denominator == 1 and c >= 2 and v in grad_vars]
        taps = [v for v, c in terms.items() if c == 1 and v not in grad_vars]
        if len(strided) != 1 or len(taps) != 1 or counts[strided[0]] != 1 or counts[taps[0]] != 1:
            return None
        x, i, c, k = strided[0], taps[0], int(terms[strided[0]]), int(const)
        t, z, u = fresh_index("t", used), fresh_index("z", used), fresh_index("u", used)
        m = -((c - 1 + k) // c)  # ceil((1 - c - k) / c): the least u of any in-range tuple
        subst[i] = {(t, ()): Fraction(c), (z, ()): Fraction(1)}
        subst[x] = {(u, ()): Fraction(1), (t, ()): Fraction(-1), ("", ()): Fraction(m)} if m else \
            {(u, ()): Fraction(1), (t, ()): Fraction(-1)}
        shift = k + c * m  # index = c*u' + z + shift
        phase_vars.append(z)
        phase_sizes.append(IConst(c))
        dims.append(IVar(u))
        sizes.append(_strided_extent(size, shift, c))
        lhs.append(iexpr_of({(u, ()): Fraction(c), (z, ()): Fraction(1), **({("", ()): Fraction(shift)} if shift else {})}))
    if not subst:
        return None
    operands = tuple(Access(a.tensor, tuple(substitute(e, subst) for e in a.indices)) for a in st.operands)
    constraints = tuple(Constraint(substitute(c.poly, subst), c.bound) for c in st.constraints)
    phase_indices = tuple(IVar(z) for z in phase_vars) + tuple(dims)
    gather = Contraction(phases, phase_indices, tuple(phase_sizes) + tuple(sizes), "+", st.combo, operands,
                         constraints, None, st.no_defract)
    scatter = Contraction(st.output, tuple(lhs), st.sizes, "+", "single", (Access(phases, phase_indices),), (),
                          None, st.no_defract)
    return gather, scatter


def _strided_extent(size: IExpr, shift: int, c: int) -> IExpr:
    """How many u >= 0 have c*u + shift < size: (size - 1 - shift) / c + 1."""
    top = IBin("-", size, IConst(1 + shift)) if 1 + shift > 0 else \
        IBin("+", size, IConst(-(1 + shift))) if 1 + shift < 0 else size
    return IBin("+", IBin("/", top, IConst(c)), IConst(1))
