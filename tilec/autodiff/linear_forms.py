"""Index polynomials as linear forms: sums of monomials with exact rational coefficients.

The gather and polyphase rewrites of a derived contraction solve its left-hand indices for
index variables (``v = (v' - rest) / c``) and substitute the solution into every access and
constraint; this module is the algebra they share, and the few questions both ask of the
contraction (`operand_vars`, `lone_variable`, `fresh_index`).

A `Linear` maps (index variable or "", sorted size symbols) to a nonzero Fraction. Requires of
`linear_form`'s input: any index expression (it returns None for one that is not such a sum).
Guarantees: `iexpr_of(linear_form(e))` equals `e` as a polynomial, written with integer terms
divided once by their common denominator; `substitute` replaces index variables by forms.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tilec.ir.tensor import Contraction, IBin, IConst, IExpr, INeg, ISize, IVar, iexpr_names

Linear = dict[tuple[str, tuple[str, ...]], Fraction]  # (index variable or "", size symbols) -> coefficient


def linear_form(e: IExpr) -> Linear | None:
    """`e` as a sum of monomials (at most one index variable times size symbols), or None if it is
    not such a sum (a division by something other than a constant)."""
    if isinstance(e, IConst):
        return {("", ()): Fraction(e.value)} if e.value else {}
    if isinstance(e, ISize):
        return {("", (e.name,)): Fraction(1)}
    if isinstance(e, IVar):
        return {(e.name, ()): Fraction(1)}
    if isinstance(e, INeg):
        a = linear_form(e.a)
        return None if a is None else {k: -c for k, c in a.items()}
    a, b = linear_form(e.a), linear_form(e.b)
    if a is None or b is None:
        return None
    if e.op in "+-":
        out = dict(a)
        for k, c in b.items():
            out[k] = out.get(k, Fraction(0)) + (c if e.op == "+" else -c)
        return {k: c for k, c in out.items() if c}
    if e.op == "/":
        if set(b) - {("", ())} or not b:
            return None
        d = b[("", ())]
        return {k: c / d for k, c in a.items()}
    # "*": at most one index variable per monomial
    out = {}
    for (va, sa), ca in a.items():
        for (vb, sb), cb in b.items():
            if va and vb:
                return None
            key = (va or vb, tuple(sorted(sa + sb)))
            out[key] = out.get(key, Fraction(0)) + ca * cb
    return {k: c for k, c in out.items() if c}


def iexpr_of(form: Linear) -> IExpr:
    """The index polynomial of `form`: integer terms, divided once by the common denominator."""
    denom = math.lcm(*(c.denominator for c in form.values())) if form else 1
    total: IExpr | None = None
    for (var, sizes), coeff in form.items():
        n = int(coeff * denom)
        factors: list[IExpr] = [ISize(s) for s in sizes]
        factors += [IVar(var)] if var else []
        term: IExpr | None = None
        for f in factors:
            term = f if term is None else IBin("*", term, f)
        if term is None:
            term = IConst(abs(n))
        elif abs(n) != 1:
            term = IBin("*", IConst(abs(n)), term)
        if total is None:
            total = term if n > 0 else INeg(term)
        else:
            total = IBin("+" if n > 0 else "-", total, term)
    total = total if total is not None else IConst(0)
    return total if denom == 1 else IBin("/", total, IConst(denom))


def substitute(e: IExpr, subst: dict[str, Linear]) -> IExpr:
    form = linear_form(e)
    assert form is not None
    out: Linear = {}
    for (var, sizes), coeff in form.items():
        if var in subst:
            assert not sizes
            for k, c in subst[var].items():
                out[k] = out.get(k, Fraction(0)) + coeff * c
        else:
            out[(var, sizes)] = out.get((var, sizes), Fraction(0)) + coeff
    return iexpr_of({k: c for k, c in out.items() if c})


def lone_variable(form: Linear) -> str | None:
    """v where `form` is the lone index variable v (coefficient 1, no size symbol), else None."""
    if len(form) != 1:
        return None
    (v, sizes), c = next(iter(form.items()))
    return v if v and not sizes and c == 1 else None


def operand_vars(st: Contraction, tensor: str | None) -> set[str]:
    """The index variables in `st`'s accesses to `tensor`."""
    return {v for a in st.operands if a.tensor == tensor for i in a.indices for v in iexpr_names(i)[0]}


def fresh_index(base: str, used: set[str]) -> str:
    """`base` + the first number that makes a name not in `used` (which then holds it)."""
    name = next(f"{base}{n}" for n in range(len(used) + 1) if f"{base}{n}" not in used)
    used.add(name)
    return name
