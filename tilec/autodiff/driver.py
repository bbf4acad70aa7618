"""`derive`: the derivation pass, from a forward program to its gradient program.

It infers every tensor's shape (tilec.autodiff.shapes), finds the tensors the requested
gradients depend on, then visits the forward statements in reverse order, each adding the
gradients of the tensors it reads (contraction_rules, elementwise_rules) once its own output's
gradient is complete (backward.Backward.total).

Requires: a checked tensor-IR program and names of its inputs. Guarantees: the program returned
takes the forward inputs followed by one ``D<Output>`` per forward output and returns ``D<Name>``
for each name in `wrt`, in order (zero for an input no output depends on); it recomputes only the
forward statements the backward reads, and holds no renaming copies unless `keep_copies`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilec.autodiff.backward import Backward, add_terms
from tilec.autodiff.contraction_rules import contraction_gradient
from tilec.autodiff.elementwise_rules import elementwise_gradient
from tilec.autodiff.intrinsic_rules import intrinsic_gradient
from tilec.autodiff.shapes import Shapes
from tilec.errors import TilecError
from tilec.ir.copies import eliminate_copies, hoist_copies
from tilec.ir.tensor import (Contraction, EBinary, EConst, EExpr, Elementwise, ETensor, Intrinsic, Program,
                             Statement, statement_reads, statement_sizes)


def derive(program: Program, wrt: Sequence[str], keep_copies: bool = False) -> Program:
    """The gradient program of `program` with respect to the inputs named in `wrt`, without the
    renaming copies the derivation leaves (`DX = DX_4`: each would be one more pass over memory)
    and with each other copy right after the statement it copies (tilec.ir.copies.hoist_copies)
    unless `keep_copies`."""
    derived = _derive(program, list(wrt))
    return derived if keep_copies else hoist_copies(eliminate_copies(derived))


def _derive(program: Program, wrt: list[str]) -> Program:
    for w in wrt:
        if w not in program.input_names:
            raise TilecError(f"grad: '{w}' is not an input of the program; its inputs are "
                             f"{', '.join(program.input_names) or '(none)'}")
    shapes = Shapes(program)
    params = shapes.infer()
    needs = set(wrt)
    for st in program.statements:
        if any(t in needs for t in statement_reads(st)):
            needs.add(st.output)
    backward = Backward(shapes, needs)
    grad_params = []
    for out in program.outputs:
        given = shapes.fresh(f"D{out}")
        grad_params.append(shapes.param(given, shapes.shape(out)))
        backward.contribs.setdefault(out, []).append(given)
    results = [shapes.fresh(f"D{w}") for w in wrt]
    for st in reversed(program.statements):
        g = backward.total(st.output) if st.output in needs else None
        if g is None:
            continue
        if isinstance(st, Contraction):
            contraction_gradient(backward, st, g)
        elif isinstance(st, Intrinsic):
            intrinsic_gradient(backward, st, g)
        else:
            elementwise_gradient(backward, st, g)
    for w, name in zip(wrt, results):
        terms: list[EExpr] = [ETensor(c) for c in backward.contribs.get(w, [])]
        zero = EBinary("*", EConst(0), ETensor(w))
        backward.statements.append(Elementwise(name, add_terms(terms) if terms else zero))
    statements = _live(program.statements + tuple(backward.statements), results)
    return Program(params + tuple(grad_params), tuple(results), statements)


def _live(statements: tuple[Statement, ...], results: list[str]) -> tuple[Statement, ...]:
    """`statements` without those whose output nothing needed reads (forward values a linear
    backward does not use, such as the conv's own output when only its inputs' gradients are asked)."""
    needed = set(results)
    keep: list[Statement] = []
    for st in reversed(statements):
        if st.output in needed:
            keep.append(st)
            needed |= set(statement_reads(st)) | statement_sizes(st)  # sizes computed by statements too
    return tuple(reversed(keep))
