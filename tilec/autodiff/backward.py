"""The backward statements of one derivation as they are built, and each tensor's gradient so far.

A tensor read in several places gets one gradient contribution per read; `contribute` records
each (summed down to the tensor's shape where the read broadcast it) and `total` adds them up
once every reader's rule has run (the driver visits the statements in reverse order, so that
is before the tensor's own statement is differentiated).

Requires: `shapes` has inferred the forward program's shapes; `needs` holds every tensor a
requested gradient depends on. Guarantees: `statements` only grows, in an order in which each
statement reads tensors defined before it (or forward tensors); names come from `shapes.fresh`.
"""

from __future__ import annotations

from tilec.autodiff.broadcast import unbroadcast
from tilec.autodiff.shapes import Shape, Shapes
from tilec.ir.tensor import EBinary, EConst, EExpr, Elementwise, ETensor, Statement


def add_terms(terms: list[EExpr]) -> EExpr:
    """``terms[0] + terms[1] + ...`` (at least one term)."""
    total = terms[0]
    for t in terms[1:]:
        total = EBinary("+", total, t)
    return total


class Backward:
    """The gradient statements under construction, with the contributions to each tensor's gradient."""

    def __init__(self, shapes: Shapes, needs: set[str]) -> None:
        self.shapes = shapes
        self.needs = needs
        self.statements: list[Statement] = []
        self.contribs: dict[str, list[str]] = {}
        self.ones: dict[str, str] = {}

    def total(self, name: str) -> str | None:
        """The name of the whole gradient of `name` (its contributions added up), or None if it is zero."""
        terms = self.contribs.get(name, [])
        if len(terms) <= 1:
            return terms[0] if terms else None
        total = self.shapes.fresh(f"D{name}")
        self.statements.append(Elementwise(total, add_terms([ETensor(t) for t in terms])))
        return total

    def contribute(self, name: str, value: str, shape: Shape) -> None:
        """Record `value` (of `shape`, which broadcasts to `name`'s shape) as part of the gradient of `name`."""
        target = self.shapes.shape(name)
        if tuple(self.shapes.resolve(d) for d in shape) != target:
            summed = unbroadcast(self.shapes, value, shape, target, name)
            self.statements.append(summed)
            value = summed.output
        self.contribs.setdefault(name, []).append(value)

    def emit(self, statement: Statement, operand: str, shape: Shape) -> None:
        """Add `statement`, whose output (of `shape`) is part of the gradient of `operand`."""
        self.statements.append(statement)
        self.contribute(operand, statement.output, shape)

    def one(self, name: str) -> str:
        """A tensor of ones shaped like `name` (an access to it only keeps the tuple's bounds)."""
        if name not in self.ones:
            self.ones[name] = self.shapes.fresh(f"ONES_{name}")
            expr = EBinary("+", EBinary("*", ETensor(name), EConst(0)), EConst(1))
            self.statements.append(Elementwise(self.ones[name], expr))
        return self.ones[name]
