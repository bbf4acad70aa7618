"""Tensor IR: a Tile program as immutable statements over whole tensors.

This is what semantic analysis produces and what autodiff and bounds inference
consume. Index expressions stay symbolic (size symbols are bound at call time,
see :mod:`tilec.ir.bounds`). ``str(program)`` prints canonical Tile source that
parses back to an equal program.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Union

Pos = tuple[int, int]  # a (line, column) in the source, 1-based
# `pos` fields say where a statement or input was written, for call-time errors; they are left out
# of equality, hashing and printing (an autodiff-derived statement may have none)

# ---------------------------------------------------------------- index expressions


@dataclass(frozen=True)
class IConst:
    value: int


@dataclass(frozen=True)
class ISize:
    """A size symbol (capitalised), bound to an integer at call time."""

    name: str


@dataclass(frozen=True)
class IVar:
    """An index variable (lower-case); lives for one statement."""

    name: str


@dataclass(frozen=True)
class IBin:
    """``a op b`` with op in ``+ - * /``, or ``max(a, b)`` / ``min(a, b)`` (size expressions only).

    In an index polynomial ``/`` is exact rational division by a constant (a tuple
    whose index is not an integer does not contribute); in a size expression it rounds
    toward zero, as PlaidML folds sizes.
    """

    op: str
    a: "IExpr"
    b: "IExpr"


@dataclass(frozen=True)
class INeg:
    a: "IExpr"


IExpr = Union[IConst, ISize, IVar, IBin, INeg]

_IPREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def format_iexpr(e: IExpr, parent_prec: int = 0, right: bool = False) -> str:
    if isinstance(e, IConst):
        return str(e.value) if e.value >= 0 or parent_prec == 0 else f"({e.value})"
    if isinstance(e, (ISize, IVar)):
        return e.name
    if isinstance(e, INeg):
        return f"-{format_iexpr(e.a, 3)}"
    if e.op in ("max", "min"):
        return f"{e.op}({format_iexpr(e.a)}, {format_iexpr(e.b)})"
    prec = _IPREC[e.op]
    text = f"{format_iexpr(e.a, prec)} {e.op} {format_iexpr(e.b, prec, right=True)}"
    if prec < parent_prec or (right and prec == parent_prec):
        return f"({text})"
    return text


def iexpr_names(e: IExpr) -> tuple[set[str], set[str]]:
    """(index variable names, size symbol names) used in `e`."""
    idx: set[str] = set()
    sizes: set[str] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, IVar):
            idx.add(node.name)
        elif isinstance(node, ISize):
            sizes.add(node.name)
        elif isinstance(node, IBin):
            stack += [node.a, node.b]
        elif isinstance(node, INeg):
            stack.append(node.a)
    return idx, sizes


# ---------------------------------------------------------------- elementwise expressions


@dataclass(frozen=True)
class ETensor:
    name: str


@dataclass(frozen=True)
class EConst:
    """A literal; `value` is an int or a float (its Python type is its weak type)."""

    value: Union[int, float]


@dataclass(frozen=True)
class ESize:
    """A size symbol used as a value: an integer, known once sizes are bound
    (:func:`tilec.ir.size_values.substitute` replaces it by its value in bind)."""

    name: str


@dataclass(frozen=True)
class EUnary:
    op: str  # "-"
    a: "EExpr"


@dataclass(frozen=True)
class EBinary:
    op: str  # + - * /
    a: "EExpr"
    b: "EExpr"


@dataclass(frozen=True)
class ECompare:
    op: str  # < > <= >= == !=
    a: "EExpr"
    b: "EExpr"


@dataclass(frozen=True)
class ESelect:
    cond: "EExpr"
    a: "EExpr"
    b: "EExpr"


@dataclass(frozen=True)
class ECall:
    func: str
    args: tuple["EExpr", ...]


EExpr = Union[ETensor, EConst, ESize, EUnary, EBinary, ECompare, ESelect, ECall]

_EPREC = {"?": 1, "cmp": 2, "+": 3, "-": 3, "*": 4, "/": 4, "neg": 5}


def format_eexpr(e: EExpr, parent_prec: int = 0, right: bool = False) -> str:
    if isinstance(e, (ETensor, ESize)):
        return e.name
    if isinstance(e, EConst):
        text = repr(e.value)
        return f"({text})" if e.value < 0 else text
    if isinstance(e, ECall):
        return f"{e.func}({', '.join(format_eexpr(a) for a in e.args)})"
    if isinstance(e, EUnary):
        return f"-{format_eexpr(e.a, _EPREC['neg'])}"
    if isinstance(e, ESelect):
        prec = _EPREC["?"]
        text = f"{format_eexpr(e.cond, prec + 1)} ? {format_eexpr(e.a)} : {format_eexpr(e.b)}"
    elif isinstance(e, ECompare):
        prec = _EPREC["cmp"]
        text = f"{format_eexpr(e.a, prec + 1)} {e.op} {format_eexpr(e.b, prec + 1)}"
    else:
        prec = _EPREC[e.op]
        text = f"{format_eexpr(e.a, prec)} {e.op} {format_eexpr(e.b, prec, right=True)}"
    if prec < parent_prec or (right and prec == parent_prec):
        return f"({text})"
    return text


def eexpr_nodes(e: EExpr) -> Iterator[EExpr]:
    """Every node of `e`, pre-order, left to right; iterative, so any depth."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, EUnary):
            stack.append(node.a)
        elif isinstance(node, (EBinary, ECompare)):
            stack += [node.b, node.a]
        elif isinstance(node, ESelect):
            stack += [node.b, node.a, node.cond]
        elif isinstance(node, ECall):
            stack += reversed(node.args)


def eexpr_tensors(e: EExpr) -> list[str]:
    """Tensor names read by `e`, in order of first appearance."""
    return list(dict.fromkeys(n.name for n in eexpr_nodes(e) if isinstance(n, ETensor)))


# ---------------------------------------------------------------- statements

@dataclass(frozen=True)
class Attribute:
    """A statement attribute ``[[name(param, ...)]]`` (PlaidML's syntax, tile/lang/tile.y in
    plaidml/plaidml: `attribute_list stmt`); kept for `explain`, otherwise ignored."""

    name: str
    params: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"[[{self.name}({', '.join(self.params)})]]" if self.params else f"[[{self.name}]]"


def format_attributes(attributes: tuple[Attribute, ...]) -> str:
    return "".join(f"{a} " for a in attributes)


AGGREGATIONS = {"+": "sum", "*": "product", ">": "max", "<": "min", "=": "assign"}
COMBINATIONS = {"single": 1, "mul": 2, "add": 2, "eq": 2, "cond": 3}


@dataclass(frozen=True)
class Access:
    tensor: str
    indices: tuple[IExpr, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(format_iexpr(i) for i in self.indices)}]"


@dataclass(frozen=True)
class Constraint:
    """``poly < bound`` meaning ``0 <= poly < bound``."""

    poly: IExpr
    bound: IExpr

    def __str__(self) -> str:
        return f"{format_iexpr(self.poly)} < {format_iexpr(self.bound)}"


@dataclass(frozen=True)
class Contraction:
    output: str
    indices: tuple[IExpr, ...]
    sizes: tuple[IExpr, ...] | None  # None: sizes inferred from the index ranges
    agg: str  # one of AGGREGATIONS
    combo: str  # one of COMBINATIONS
    operands: tuple[Access, ...]
    constraints: tuple[Constraint, ...] = ()
    default: str | None = None
    no_defract: bool = False
    attributes: tuple[Attribute, ...] = ()
    pos: Pos | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        idx = ", ".join(format_iexpr(i) for i in self.indices)
        if self.sizes is not None and self.indices:
            idx += ": " + ", ".join(format_iexpr(s) for s in self.sizes)
        ops = [str(a) for a in self.operands]
        body = {
            "single": lambda: ops[0],
            "mul": lambda: f"{ops[0]} * {ops[1]}",
            "add": lambda: f"{ops[0]} + {ops[1]}",
            "eq": lambda: f"{ops[0]} == {ops[1]}",
            "cond": lambda: f"{ops[0]} == {ops[1]} ? {ops[2]}",
        }[self.combo]()
        text = f"{format_attributes(self.attributes)}{self.output}[{idx}] = {self.agg}({body})"
        for c in self.constraints:
            text += f", {c}"
        if self.default is not None:
            text += f" default {self.default}"
        if self.no_defract:
            text += " no_defract"
        return text

    @property
    def index_vars(self) -> tuple[str, ...]:
        """Every index variable of the statement, in order of first appearance (LHS first)."""
        order: list[str] = []
        exprs = list(self.indices) + [i for a in self.operands for i in a.indices]
        exprs += [c.poly for c in self.constraints]
        for e in exprs:
            for name in iexpr_vars(e):
                if name not in order:
                    order.append(name)
        return tuple(order)


def iexpr_vars(e: IExpr) -> list[str]:
    """The index variables `e` reads, in order of appearance (with repeats)."""
    if isinstance(e, IVar):
        return [e.name]
    if isinstance(e, IBin):
        return iexpr_vars(e.a) + iexpr_vars(e.b)
    if isinstance(e, INeg):
        return iexpr_vars(e.a)
    return []


@dataclass(frozen=True)
class Elementwise:
    output: str
    expr: EExpr
    attributes: tuple[Attribute, ...] = ()
    pos: Pos | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{format_attributes(self.attributes)}{self.output} = {format_eexpr(self.expr)}"


@dataclass(frozen=True)
class Intrinsic:
    """``O = func(T, ..., p, ...)``: a structural intrinsic of PlaidML (see tilec.ir.intrinsics).

    `tensors` are its tensor arguments (index, reshape, shape: one; gather: data, indices;
    scatter: values, indices, the tensor whose first dimension sizes the result); `params` its
    integer arguments (index: the dimension, a literal; reshape: the new dims, size expressions).
    """

    output: str
    func: str
    tensors: tuple[str, ...]
    params: tuple[IExpr, ...] = ()
    attributes: tuple[Attribute, ...] = ()
    pos: Pos | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        args = list(self.tensors) + [format_iexpr(p) for p in self.params]
        return f"{format_attributes(self.attributes)}{self.output} = {self.func}({', '.join(args)})"


Statement = Union[Contraction, Elementwise, Intrinsic]


def statement_reads(st: Statement) -> list[str]:
    """The tensors `st` reads: a contraction's operands and its default, an elementwise
    statement's or an intrinsic's tensors (in order of first appearance)."""
    if isinstance(st, Elementwise):
        return eexpr_tensors(st.expr)
    if isinstance(st, Intrinsic):
        return list(dict.fromkeys(st.tensors))
    return [a.tensor for a in st.operands] + ([st.default] if st.default else [])


def statement_sizes(st: Statement) -> set[str]:
    """The size symbols `st` reads (in indices, sizes, constraints, or as values): a statement
    computed from sizes that defines one of them must run before `st`."""
    if isinstance(st, Elementwise):
        return {n.name for n in eexpr_nodes(st.expr) if isinstance(n, ESize)}
    if isinstance(st, Intrinsic):
        return {name for e in st.params for name in iexpr_names(e)[1]}
    exprs = list(st.indices) + list(st.sizes or ()) + [i for a in st.operands for i in a.indices]
    exprs += [x for c in st.constraints for x in (c.poly, c.bound)]
    return {name for e in exprs for name in iexpr_names(e)[1]}


@dataclass(frozen=True)
class TensorParam:
    """An input. `dims` is None when declared without brackets (any shape)."""

    name: str
    dims: tuple[IExpr, ...] | None
    pos: Pos | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        if self.dims is None:
            return self.name
        return f"{self.name}[{', '.join(format_iexpr(d) for d in self.dims)}]"


@dataclass(frozen=True)
class Program:
    params: tuple[TensorParam, ...]
    outputs: tuple[str, ...]
    statements: tuple[Statement, ...]
    source: str = field(default="", compare=False, repr=False)  # the Tile text, for call-time errors

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __str__(self) -> str:
        params = ", ".join(str(p) for p in self.params)
        lines = [f"function ({params}) -> ({', '.join(self.outputs)}) {{"]
        lines += [f"    {s};" for s in self.statements]
        lines.append("}")
        return "\n".join(lines)
