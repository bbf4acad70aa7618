"""The gradient of a contraction (PlaidML's rules), written as contractions.

- ``O[o] = +(A[a] * B[b])`` gives ``DA[a: dims(A)] = +(DO[o] * B[b])`` with the constraints
  carried over (the operand's index polynomials become the left-hand side); ``+`` combinations
  multiply by ones instead, and ``A == B ? C`` passes the gradient to C under the same condition;
- ``>`` / ``<`` give ``DI[i: dims(I)] = +(I[i] == O[o] ? DO[o])``: tied maxima all receive the
  gradient, as in PlaidML;
- a default tensor receives the gradient of the cells it initialises (and, under max/min, wins);
- ``*`` aggregation and max/min over a combination of several tensors are refused
  ("not differentiable: ..."); ``==`` combinations have zero gradient.

Requires: `g` names the whole gradient of the statement's output (Backward.total). Guarantees:
each needed operand receives its contribution through `Backward.emit`; a derived contraction
whose left-hand side is not direct is rewritten as a gather (gather_form) or, for strided
indices, as a gather into phases plus one scatter (polyphase_form), when that is exact.
"""

from __future__ import annotations

from tilec.autodiff.backward import Backward
from tilec.autodiff.gather import gather_form
from tilec.autodiff.polyphase import polyphase_form
from tilec.errors import TilecError
from tilec.ir.tensor import Access, Contraction, ECompare, EConst, EExpr, Elementwise, ESelect, ETensor


def combo_grad_position(combo: str) -> int:
    """Where `_rule` puts the output gradient among a derived contraction's operands."""
    return 2 if combo == "cond" else 0


def contraction_gradient(b: Backward, st: Contraction, g: str) -> None:
    """Add the gradients of `st`'s needed operands (and default) given `g`, the gradient of its output."""
    if st.agg == "*":
        raise TilecError(f"not differentiable: product aggregation in `{st}`; take the log and sum, "
                         f"or write the product with elementwise statements")
    grad_out = Access(g, st.indices)
    ops = st.operands
    if st.default is not None and st.default in b.needs:
        _default_gradient(b, st, g)
    if st.combo == "eq":
        return  # 0 or 1: piecewise constant
    if st.agg in "><":
        if st.combo != "single":
            raise TilecError(f"not differentiable: max/min over a '{st.combo}' combination in `{st}`; "
                             f"compute the combination in its own statement first")
        _rule(b, st, 0, (ops[0], Access(st.output, st.indices), grad_out), "cond")
        return
    if st.combo == "single":
        _rule(b, st, 0, (grad_out,), "single")
    elif st.combo == "mul":
        _rule(b, st, 0, (grad_out, ops[1]), "mul")
        _rule(b, st, 1, (grad_out, ops[0]), "mul")
    elif st.combo == "add":
        for k in (0, 1):
            other = ops[1 - k]
            _rule(b, st, k, (grad_out, Access(b.one(other.tensor), other.indices)), "mul")
    else:  # cond: A == B ? C
        _rule(b, st, 2, (ops[0], ops[1], grad_out), "cond")


def _rule(b: Backward, st: Contraction, k: int, operands: tuple[Access, ...], combo: str) -> None:
    """``D<operand k>[its indices: its dims] = +(operands)`` with the statement's constraints."""
    access = st.operands[k]
    if access.tensor not in b.needs:
        return
    shape = b.shapes.shape(access.tensor)
    out = b.shapes.fresh(f"D{access.tensor}_{len(b.statements)}")
    new = Contraction(out, access.indices, shape, "+", combo, operands, st.constraints, None, st.no_defract)
    grad = operands[combo_grad_position(combo)].tensor
    gathered = gather_form(new, grad)
    if gathered is new:  # still a scatter (a stride-2 conv's input gradient): try the phases
        split = polyphase_form(new, grad, b.shapes.fresh(f"{out}_phases"))
        if split is not None:
            b.statements.append(split[0])
            gathered = split[1]
    b.emit(gathered, access.tensor, shape)


def _default_gradient(b: Backward, st: Contraction, g: str) -> None:
    """The default tensor's gradient: the cells it initialises (and, under max/min, wins)."""
    assert st.default is not None
    expr: EExpr
    if st.agg == "+":
        expr = ETensor(g)
    elif st.agg == "=":
        mask = b.shapes.fresh(f"WRITTEN_{st.output}")
        ones = tuple(Access(b.one(a.tensor), a.indices) for a in st.operands)
        if st.combo == "cond":
            ones, combo = st.operands[:2] + ones[2:], "cond"
        elif len(ones) == 2:
            combo = "mul"
        else:
            combo = "single"
        b.statements.append(Contraction(mask, st.indices, b.shapes.shape(st.output), "=", combo, ones,
                                        st.constraints, None, st.no_defract))
        expr = ESelect(ECompare(">", ETensor(mask), EConst(0)), EConst(0), ETensor(g))
    else:
        expr = ESelect(ECompare("==", ETensor(st.default), ETensor(st.output)), ETensor(g), EConst(0))
    out = b.shapes.fresh(f"D{st.default}_{len(b.statements)}")
    b.emit(Elementwise(out, expr), st.default, b.shapes.shape(st.output))
