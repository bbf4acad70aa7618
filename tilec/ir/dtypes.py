"""Element types: the supported set and PlaidML's promotion rules.

Tensors are strongly typed. Two strong types meet by PlaidML's rule (its Tile type checker):
a float beats any integer or bool whatever their widths (``int64 + float16 -> float16``),
otherwise the wider type wins and of two of one width the *first* operand's type wins
(``int8 + uint8 -> int8``, ``uint32 + int32 -> uint32``).

Where this differs from numpy (deliberately, to run PlaidML programs unchanged):
- numpy widens to hold both operands (``int8 + uint8 -> int16``, ``int32 + float32 ->
  float64``, ``int64 + float16 -> float64``); PlaidML does not;
- float-only functions (exp, sin, ...) on integers give float32, PlaidML's default float
  (numpy: float64); PlaidML itself would keep the integer type and truncate, which no
  program wants;
- one divergence from PlaidML: bool loses a tie of widths (``bool + int8 -> int8``), where
  PlaidML keeps the first operand's bool and silently truncates the sum;
- ``bfloat16`` (numpy arrays through ``ml_dtypes``) meets ``float16`` in float32, the narrowest type
  holding both (as torch promotes), not in the first operand's type.

The 16-bit floats are storage types: an elementwise expression on them is computed in float32 and
rounded once, where its statement stores it (or at an explicit cast; numpy's float16 arithmetic,
which rounds after every operation, differs), and a contraction over them
accumulates in float32 (`accumulator_dtype`) and rounds each output cell once, as torch's CPU
kernels and fused compilers (Inductor, Triton) do. A program's temporaries (results that are not
outputs) of a 16-bit float type are held in float32 (`Widening`): a softmax's exponentials and
their sum, a norm's mean and variance are not rounded on the way to the output, which is rounded
once, as torch's single kernels round theirs. Their declared type still decides the types of the
statements that read them. A temporary keeps its 16-bit type where the program asks for it (a
statement that is an explicit conversion); where a matrix product (a product each of whose
operands has an index variable the other lacks), or a contraction comparing two operands, reads
it (there 16-bit operands are what the low-precision instructions take, and what torch's matmuls
read); where it is such a contraction's result that no elementwise statement reads (a matrix
product's cells round from its float32 accumulator, as torch's matmuls' do; one that a bias or an
activation follows is held in float32, as torch's addmm adds its bias before rounding); where
it is a contraction's default or a structural intrinsic's result or argument; and where only plain
copies into the program's outputs read it (``=``, or a ``+`` with one tuple per output cell: they
would round it as they store it, so the same bits, in half the bytes).

Literals stay weak (they adapt to the strong type they meet, as numpy >= 2 does): an integer
literal takes any tensor's type (int32 beside a bool), a float literal takes a float tensor's
type and makes an integer or bool expression float32 (PlaidML's float constants are float32);
in a bfloat16 or float16 expression, computed in float32, it keeps float32's precision (as torch
takes a Python scalar) unless an explicit conversion rounds it (tilec.ir.elementwise).
An expression of literals only is int32 or float32 (Tile's defaults). Comparisons convert
both operands to `compare_dtype`, a type that holds both exactly where one exists.
"""

from __future__ import annotations

from typing import Union

import numpy as np

import ml_dtypes  # noqa: F401  (registers numpy's "bfloat16" dtype)

from tilec.errors import BindError
from tilec.ir import tensor as T
from tilec.ir.copies import plain_copy
from tilec.ir.builtins import BUILTINS, CAST_FAMILIES

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
LOW_PRECISION = ("float16", "bfloat16")  # stored in 16 bits, computed and accumulated in float32
SUPPORTED = ("bool",) + SIGNED + UNSIGNED + FLOATS
DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int32"


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def computed_dtype(dtype: str) -> str:
    """The type an elementwise value of `dtype` is computed in: float32 for the 16-bit floats
    (rounded where stored, or where an explicit conversion asks)."""
    return "float32" if dtype in LOW_PRECISION else dtype


def accumulator_dtype(dtype: str) -> str:
    """The type a value of `dtype` is computed and accumulated in: float32 for the 16-bit floats."""
    return "float32" if dtype in LOW_PRECISION else dtype


class Widening:
    """Which of a program's 16-bit float temporaries are held in float32 (the module docstring says
    why and which): ask `held` about each statement, with its declared type."""

    def __init__(self, program: T.Program) -> None:
        self.program = program
        self.kept: set[str] = set()  # read where their 16-bit type matters
        for stmt in program.statements:
            if isinstance(stmt, T.Intrinsic):
                self.kept.update(stmt.tensors)
            elif isinstance(stmt, T.Contraction):
                if _keeps_operands(stmt):
                    self.kept.update(a.tensor for a in stmt.operands)
                if stmt.default is not None:
                    self.kept.add(stmt.default)
        self.read_elementwise = {n for s in program.statements if isinstance(s, T.Elementwise)
                                 for n in T.eexpr_tensors(s.expr)}
        self.copied_out = _copied_out(program)

    def held(self, stmt: T.Statement, declared: str) -> bool:
        """Whether `stmt`'s result, of type `declared`, is a temporary held in float32."""
        name = stmt.output
        if isinstance(stmt, T.Contraction) and _keeps_operands(stmt) and name not in self.read_elementwise:
            return False  # (a matrix product's cells round, as torch's matmuls' do)
        if declared not in LOW_PRECISION or name in self.program.outputs or name in self.kept or name in self.copied_out:
            return False
        return not isinstance(stmt, T.Intrinsic) and not (
            isinstance(stmt, T.Elementwise) and isinstance(stmt.expr, T.ECall)
            and BUILTINS[stmt.expr.func].kind == "cast")  # an explicit conversion rounds


def _copied_out(program: T.Program) -> set[str]:
    """The temporaries that only plain copies (tilec.ir.copies.plain_copy) into the program's outputs
    read (``O[n, co, x, y] = =(Yb[n, x, y, co])``, a convolution's biased channels-last result copied
    back to NCHW; ``DX[n, c, h, w] = +(DI[n, h, w, c])``, a gradient's): the copy
    would round each cell as it stores it, so rounding where the temporary is stored gives the same
    bits, and the temporary moves half the bytes (a 1 -> 64 channel 3x3 conv on 32 32 x 32 images
    wrote and read 8 MiB of float32 on the way to its 4 MiB bfloat16 result)."""
    readers: dict[str, list[T.Statement]] = {}
    for stmt in program.statements:
        for name in T.statement_reads(stmt):
            readers.setdefault(name, []).append(stmt)

    def copied_out(stmt: T.Statement) -> bool:
        return stmt.output in program.outputs and plain_copy(stmt) is not None

    return {name for name, stmts in readers.items() if all(copied_out(s) for s in stmts)}


def _keeps_operands(stmt: T.Contraction) -> bool:
    """Whether `stmt` reads its operands in their 16-bit type: a matrix product (each operand has an
    index variable the other lacks; not a sum of squares, a dot product or a vector broadcast over a
    matrix, which no low-precision instruction wants) or a comparison of operands (`==`, `? :`)."""
    if stmt.combo in ("single", "add"):
        return False
    if stmt.combo != "mul":
        return True
    first, second = ({v for i in a.indices for v in T.iexpr_vars(i)} for a in stmt.operands)
    return not (first <= second or second <= first)



def is_unsigned(dtype: str) -> bool:
    """uint8..uint64 (bool is not: it converts and compares as 0/1 on its own terms)."""
    return dtype in UNSIGNED


def is_integer(dtype: str) -> bool:
    """A signed or unsigned integer type (not bool)."""
    return dtype in SIGNED or dtype in UNSIGNED


def bit_width(dtype: str) -> int:
    """Bits of one value; bool counts 8, as PlaidML (and numpy's storage) have it."""
    return 8 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()))


def check_supported(name: str, dtype: np.dtype) -> str:
    text = np.dtype(dtype).name
    if text not in SUPPORTED:
        raise BindError(f"argument '{name}' has dtype {text}; tilec supports {', '.join(SUPPORTED)}")
    return text


def promote(*dtypes: str) -> str:
    """PlaidML's result type of strong operands, left to right (see the module doc)."""
    result = dtypes[0]
    for d in dtypes[1:]:
        if {d, result} == set(LOW_PRECISION):
            result = "float32"
        elif is_float(d) != is_float(result):
            result = d if is_float(d) else result
        elif bit_width(d) > bit_width(result) or (result == "bool" and d != "bool"):
            result = d
    return result


def compare_dtype(a: str, b: str) -> str:
    """The type two strong operands are compared in: one holding both exactly where numpy has
    one (``int8`` vs ``uint8`` in int16), so a comparison never wraps; float64 for int64 vs uint64."""
    if is_float(a) or is_float(b):
        return promote(a, b)
    return numpy_common(a, b)


def numpy_common(a: str, b: str) -> str:
    """numpy's common type of `a` and `b` (which holds both where one exists), bfloat16 counting as
    the float32 that holds its values exactly (numpy knows no promotion of ml_dtypes' bfloat16)."""
    a, b = ("float32" if d == "bfloat16" else d for d in (a, b))
    return np.result_type(np.dtype(a), np.dtype(b)).name


def contraction_dtype(combo: str, operand_dtypes: list[str], default_dtype: str | None) -> str:
    """Value dtype of a contraction: `cond` takes its third operand's type, others promote;
    the aggregation accumulates in it (int8 sums wrap in int8, as PlaidML's do)."""
    value = operand_dtypes[2] if combo == "cond" else promote(*operand_dtypes)
    return promote(value, default_dtype) if default_dtype is not None else value


# A weak type is the Python type of a literal (int or float): it adapts to the strong type it meets.
Typed = Union[str, type]


def elementwise_dtype(expr: T.EExpr, tensor_dtypes: dict[str, str]) -> str:
    return strong(expr_type(expr, tensor_dtypes))


def strong(t: Typed) -> str:
    """A type as a dtype name: weak literals take Tile's defaults."""
    if isinstance(t, str):
        return t
    return DEFAULT_FLOAT if t is float else DEFAULT_INT


def expr_type(e: T.EExpr, tensor_dtypes: dict[str, str]) -> Typed:
    """Strong dtype name, or `int` / `float` for a weak (literal-only) subexpression."""
    if isinstance(e, T.ETensor):
        return tensor_dtypes[e.name]
    if isinstance(e, T.EConst):
        return type(e.value)
    if isinstance(e, T.ESize):
        return int  # a size read as a value: an integer literal once bound

    if isinstance(e, T.ECompare):
        return "bool"
    if isinstance(e, T.EUnary):
        return expr_type(e.a, tensor_dtypes)
    if isinstance(e, T.ESelect):
        branches = binary(expr_type(e.a, tensor_dtypes), expr_type(e.b, tensor_dtypes))
        if isinstance(branches, type) and not isinstance(expr_type(e.cond, tensor_dtypes), type):
            return strong(branches)  # literal branches chosen per element by a tensor condition
        return branches
    if isinstance(e, T.EBinary):
        return binary(expr_type(e.a, tensor_dtypes), expr_type(e.b, tensor_dtypes))
    assert isinstance(e, T.ECall)
    builtin = BUILTINS[e.func]
    if builtin.kind == "cast":
        return cast_dtype(e)
    args = [expr_type(a, tensor_dtypes) for a in e.args]
    result = args[0]
    if builtin.kind == "first":
        return result
    for other in args[1:]:
        result = binary(result, other)
    if builtin.kind == "float":
        if result is int:
            return float
        if isinstance(result, str) and not is_float(result):
            return DEFAULT_FLOAT
    if builtin.kind == "bits" and (result is float or (isinstance(result, str) and is_float(result))):
        raise BindError(f"'{e.func}' works on integers and bools; its operands here are {strong(result)} "
                        f"(convert them with as_int(x, bits) first)")
    return result


def cast_dtype(e: T.ECall) -> str:
    """The result type of as_float / as_int / as_uint (bit width in the second argument, an
    integer literal that sema checked), as_bool or as_bfloat16."""
    if e.func == "as_bool":
        return "bool"
    if e.func == "as_bfloat16":
        return "bfloat16"
    width = e.args[1]
    assert isinstance(width, T.EConst)
    return f"{CAST_FAMILIES[e.func]}{int(width.value)}"


def binary(a: Typed, b: Typed) -> Typed:
    """The type of a binary operation on operands of types `a` and `b` (weak or strong)."""
    if isinstance(a, type) and isinstance(b, type):
        return float if float in (a, b) else int
    if isinstance(a, str) and isinstance(b, str):
        return promote(a, b)
    s, w = (a, b) if isinstance(a, str) else (b, a)
    assert isinstance(s, str)
    if w is float and not is_float(s):
        return DEFAULT_FLOAT
    if s == "bool" and w is int:
        return DEFAULT_INT
    return s
