"""Element types: the supported set and numpy's promotion rules (NEP 50 for literals)."""

from __future__ import annotations

from typing import Union

import numpy as np

from tilec.errors import BindError
from tilec.ir import tensor as T
from tilec.ir.builtins import BUILTINS

SUPPORTED = ("bool", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
FLOATS = ("float16", "float32", "float64")


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def check_supported(name: str, dtype: np.dtype) -> str:
    text = np.dtype(dtype).name
    if text not in SUPPORTED:
        raise BindError(f"argument '{name}' has dtype {text}; tilec supports {', '.join(SUPPORTED)}")
    return text


def promote(*dtypes: str) -> str:
    return np.result_type(*[np.dtype(d) for d in dtypes]).name


def contraction_dtype(combo: str, operand_dtypes: list[str], default_dtype: str | None) -> str:
    """Value dtype of a contraction: `cond` takes its third operand's type, others promote."""
    value = operand_dtypes[2] if combo == "cond" else promote(*operand_dtypes)
    return promote(value, default_dtype) if default_dtype is not None else value


# A weak type is the Python type of a literal (int or float): it adapts to the
# strong (tensor) type it meets, as numpy >= 2 does.
Typed = Union[str, type]


def elementwise_dtype(expr: T.EExpr, tensor_dtypes: dict[str, str]) -> str:
    t = expr_type(expr, tensor_dtypes)
    if isinstance(t, str):
        return t
    return "float32" if t is float else "int32"  # an all-literal expression: Tile's defaults


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
        branches = _binary(expr_type(e.a, tensor_dtypes), expr_type(e.b, tensor_dtypes))
        if isinstance(branches, type) and not isinstance(expr_type(e.cond, tensor_dtypes), type):
            return "float64" if branches is float else "int64"  # like numpy.where with Python scalars
        return branches
    if isinstance(e, T.EBinary):
        return _binary(expr_type(e.a, tensor_dtypes), expr_type(e.b, tensor_dtypes))
    assert isinstance(e, T.ECall)
    args = [expr_type(a, tensor_dtypes) for a in e.args]
    result = args[0] if len(args) == 1 else _binary(args[0], args[1])
    if BUILTINS[e.func].float_only:
        if result is int:
            return float
        if isinstance(result, str) and not is_float(result):
            return "float64"
    return result


def _binary(a: Typed, b: Typed) -> Typed:
    if isinstance(a, type) and isinstance(b, type):
        return float if float in (a, b) else int
    return np.result_type(*[np.dtype(x) if isinstance(x, str) else x(0) for x in (a, b)]).name
