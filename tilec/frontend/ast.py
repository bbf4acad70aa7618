"""Syntax tree of a Tile program, straight from the grammar, with source positions.

Index expressions and elementwise expressions share the expression nodes; semantic
analysis (:mod:`tilec.frontend.sema`) tells them apart and checks names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Pos = tuple[int, int]  # (line, column), 1-based


@dataclass(frozen=True)
class Name:
    name: str
    pos: Pos


@dataclass(frozen=True)
class Int:
    value: int
    pos: Pos


@dataclass(frozen=True)
class Float:
    value: float
    pos: Pos


@dataclass(frozen=True)
class Bin:
    op: str  # + - * /
    a: "Expr"
    b: "Expr"
    pos: Pos


@dataclass(frozen=True)
class Neg:
    a: "Expr"
    pos: Pos


@dataclass(frozen=True)
class Compare:
    op: str
    a: "Expr"
    b: "Expr"
    pos: Pos


@dataclass(frozen=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"
    pos: Pos


@dataclass(frozen=True)
class Call:
    func: Name
    args: tuple["Expr", ...]
    pos: Pos


Expr = Union[Name, Int, Float, Bin, Neg, Compare, Select, Call]


@dataclass(frozen=True)
class AccessNode:
    tensor: Name
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class LhsNode:
    tensor: Name
    indices: tuple[Expr, ...]
    sizes: tuple[Expr, ...] | None


@dataclass(frozen=True)
class ConstraintNode:
    poly: Expr
    bound: Expr


@dataclass(frozen=True)
class ScalarOperandNode:
    """A literal or size symbol combined with the one access: ``A[i] op value`` (or ``value op A[i]``
    when `left`)."""

    op: str  # + - * /
    value: Expr
    left: bool


@dataclass(frozen=True)
class AttributeNode:
    """``[[name(param, ...)]]`` before a statement."""

    name: Name
    params: tuple[Name, ...]


@dataclass(frozen=True)
class ContractionNode:
    lhs: LhsNode
    agg: str
    combo: str
    operands: tuple[AccessNode, ...]
    constraints: tuple[ConstraintNode, ...]
    default: Expr | None  # a tensor's Name, or a literal
    no_defract: bool
    scalar: ScalarOperandNode | None = None
    attributes: tuple[AttributeNode, ...] = ()


@dataclass(frozen=True)
class ElementwiseNode:
    target: Name
    expr: Expr
    attributes: tuple[AttributeNode, ...] = ()


StatementNode = Union[ContractionNode, ElementwiseNode]


@dataclass(frozen=True)
class ParamNode:
    name: Name
    dims: tuple[Expr, ...] | None  # None: declared without brackets


@dataclass(frozen=True)
class ProgramNode:
    params: tuple[ParamNode, ...]
    outputs: tuple[Name, ...]
    statements: tuple[StatementNode, ...]
    single_statement: bool


def expr_pos(e: Expr) -> Pos:
    return e.pos
