"""Epilogue fusion: elementwise statements applied while a contraction's results are in registers.

A chain ``C = contraction; R = f(C, ...); O = g(R, ...)`` fuses when every link has
the contraction's shape and dtype (or a 16-bit float type where the contraction's result is held
in float32: the link rounds it), reads the previous link, and the previous link is
a temporary no other statement reads. The fused kernel writes only the last link
(partial sums of blocked reductions go to that buffer too); C and R never exist.
Operands other than the chain broadcast against the output cell (a bias vector, a
scalar).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundProgram, BoundStatement
from tilec.ir.dtypes import LOW_PRECISION
from tilec.ir.elementwise import lower_expression
from tilec.ir.lower import LoweredGroup
from tilec.ir.loop_nest import broadcast_indices
from tilec.schedule.patterns.dataflow import reader_counts


@dataclass(frozen=True)
class Epilogue:
    links: tuple[BoundElementwise, ...]

    @property
    def dest(self) -> str:
        return self.links[-1].output


def covered(epilogue: "Epilogue | None") -> int:
    """Statements a contraction and its fused epilogue (if any) lower together."""
    return 1 + (len(epilogue.links) if epilogue is not None else 0)


def fused_group(stmt: L.Stmt, b: BoundContraction, epilogue: "Epilogue | None",
                workspaces: tuple[L.Buffer, ...] = ()) -> LoweredGroup:
    """What a template made of contraction `b` and its fused epilogue: the group covers the epilogue's
    statements too, and every tensor but the last link's result is never materialised."""
    if epilogue is None:
        return LoweredGroup(stmt, workspaces)
    elided = (b.output,) + tuple(link.output for link in epilogue.links[:-1])
    return LoweredGroup(stmt, workspaces, covered(epilogue), elided)


def find_epilogue(index: int, bp: BoundProgram) -> Epilogue | None:
    """The longest fusable chain of elementwise statements after statements[index]."""
    producer = bp.statements[index]
    readers = reader_counts(bp)
    links: list[BoundElementwise] = []
    prev = producer.output
    for s in bp.statements[index + 1:]:
        if not isinstance(s, BoundElementwise) or prev in bp.program.outputs or readers.get(prev) != 1:
            break
        if prev not in T.eexpr_tensors(s.stmt.expr) or s.shape != producer.shape or not _same_type(s, producer):
            break
        links.append(s)
        prev = s.output
    return Epilogue(tuple(links)) if links else None


def _same_type(link: BoundElementwise, producer: BoundStatement) -> bool:
    """Whether `link` has the producer's dtype, or rounds the float32 a 16-bit product is held in
    (tilec.ir.dtypes.Widening) to its 16-bit type."""
    return link.dtype == producer.dtype or (producer.dtype == "float32" and link.dtype in LOW_PRECISION)


def epilogue_value(epilogue: Epilogue, bp: BoundProgram, producer: str, value: L.Expr,
                   cell: tuple[L.Expr, ...]) -> L.Expr:
    """The last link's value at output `cell`, given the producer's `value` there."""
    shape = bp.shapes[producer]
    values = {producer: value}

    def load(name: str) -> L.Expr:
        if name in values:
            return values[name]
        return L.Load(name, broadcast_indices(bp.shapes[name], shape, list(cell)), bp.dtypes[name])

    for link in epilogue.links:
        values[link.output] = lower_expression(link.stmt.expr, bp.dtypes, load, link.dtype)
    return values[epilogue.dest]
