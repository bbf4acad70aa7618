"""One elementwise statement evaluated with numpy over whole tensors.

Requires the arrays the expression reads. Guarantees numpy broadcasting and the language's type
rules: every subexpression is computed in the dtype tilec.ir.dtypes.expr_type gives it (the
specification of promotion; literals are weak), literal-only subexpressions with Python numbers;
comparisons in the operands' common type; integer ``/`` is floor division; ``+`` and ``*`` on
booleans are ``or`` and ``and``. A bfloat16 or float16 subexpression is computed in float32 on
16-bit operands (an integer converted to the 16-bit type rounds first; a weak literal is taken at
float32's precision) and rounded where the statement stores it or an explicit cast asks, as the
compiled code does.
"""

from __future__ import annotations

import math
from typing import Any, Union

import numpy as np

from tilec.errors import BindError, TilecError
from tilec.interp.builtins import IMPLEMENTATIONS
from tilec.interp.sizes import size_of
from tilec.ir import tensor as T
from tilec.ir.builtins import BUILTINS
from tilec.ir.dtypes import LOW_PRECISION, binary, compare_dtype, computed_dtype, elementwise_dtype, expr_type, is_float, strong

Value = Union[np.ndarray, int, float]


def _cast(dtype: str, value: Value) -> np.ndarray:
    """`value` as an array of `dtype`. A weak literal must have a value of `dtype`: an integer in
    range (a float truncated toward zero first), a float within the float type's range."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        kind = np.dtype(dtype).kind
        if kind == "b":
            return np.asarray(bool(value))
        if kind in "iu":
            if isinstance(value, float) and not math.isfinite(value):
                raise BindError(f"the value {value} has no {dtype} representation")
            info = np.iinfo(dtype)
            if not info.min <= int(value) <= info.max:
                raise BindError(f"the literal {value} does not fit in {dtype}; write it as a float or use a "
                                f"wider input dtype")
            return np.asarray(int(value), dtype=dtype)
        try:
            return np.asarray(float(value), dtype=dtype)
        except OverflowError:
            raise BindError(f"the literal {value} is beyond the {dtype} range") from None
    return np.asarray(value).astype(dtype)


def _operand(dtype: str, value: Value) -> np.ndarray:
    """`value` as an operand of an operation of `dtype`: `_cast`, except that 16-bit float operations
    run in float32 (a float32 array is a 16-bit subexpression's unrounded value, a weak literal is
    taken at float32's precision; anything else converts to the 16-bit type first)."""
    if dtype not in LOW_PRECISION:
        return _cast(dtype, value)
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _cast("float32", value)
    return _cast(dtype, value).astype(np.float32)


class _Evaluator:
    def __init__(self, values: dict[str, np.ndarray], sizes: dict[str, int], what: str) -> None:
        self.values = values
        self.sizes = sizes
        self.what = what
        self.dtypes = {n: a.dtype.name for n, a in values.items()}

    def eval(self, e: T.EExpr) -> Value:
        t = expr_type(e, self.dtypes)
        if isinstance(e, T.ETensor):
            return self.values[e.name]
        if isinstance(e, T.EConst):
            return e.value
        if isinstance(t, type):
            return _literal(e, self)
        if isinstance(e, T.EUnary):
            if t == "bool":
                raise BindError("cannot negate a boolean; use 'c ? 0 : 1'")
            return _operand(t, 0) - _operand(t, self.eval(e.a))
        if isinstance(e, T.EBinary):
            a, b = _operand(t, self.eval(e.a)), _operand(t, self.eval(e.b))
            if t == "bool":
                if e.op not in "+*":
                    raise BindError(f"arithmetic '{e.op}' on booleans; convert with 'c ? 1 : 0' first")
                return a | b if e.op == "+" else a & b
            if e.op == "/":
                return a / b if is_float(t) else _trunc_divide(a, b)
            return {"+": np.add, "-": np.subtract, "*": np.multiply}[e.op](a, b)
        if isinstance(e, T.ECompare):
            common = _common(expr_type(e.a, self.dtypes), expr_type(e.b, self.dtypes))
            a, b = _operand(common, self.eval(e.a)), _operand(common, self.eval(e.b))
            return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                    "==": np.equal, "!=": np.not_equal}[e.op](a, b)
        if isinstance(e, T.ESelect):
            cond = self.eval(e.cond)
            truth = np.asarray(cond) != 0
            return np.where(truth, _operand(t, self.eval(e.a)), _operand(t, self.eval(e.b)))
        if isinstance(e, T.ECall):
            fn = IMPLEMENTATIONS.get(e.func)
            if fn is None:
                raise TilecError(f"the interpreter has no implementation of '{e.func}'")
            values = [self.eval(a) for a in e.args]
            cast = BUILTINS[e.func].kind == "cast"
            if cast:
                _check_conversion(e.func, values[0], t)
            args = [_cast(t, v) if cast and t in LOW_PRECISION and isinstance(v, (int, float)) else _operand(t, v)
                    for v in values]  # (an explicit conversion rounds a literal to the 16-bit type itself)
            try:
                return np.asarray(fn(*args)).astype(t if cast else computed_dtype(t))
            except ValueError as err:  # integers to negative integer powers
                raise BindError(f"'{e.func}' on {t} fails in numpy: {err}") from None
        raise TilecError(f"the interpreter does not know the expression {e!r}")


def _check_conversion(func: str, value: Value, dtype: str) -> None:
    """A float converts to an integer type by truncation toward zero, wrapping into the type (numpy's
    astype); NaN, infinities and values beyond 64 bits have no integer value: a BindError."""
    array = np.asarray(value)
    if not is_float(array.dtype.name) or np.dtype(dtype).kind not in "iu":
        return
    array = array.astype(np.float64)
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(array) | (np.abs(array.astype(np.float64)) >= 2.0**63)
    if bad.any():
        raise BindError(f"'{func}' converts {array[bad].flat[0]} to {dtype}: NaN, infinities and values beyond "
                        f"64 bits have no integer value")


def _common(a: Any, b: Any) -> str:
    """The type a comparison converts both operands to (tilec.ir.dtypes): compare_dtype for two
    tensors; an integer against a float literal exactly, in float64; else the operation's type."""
    if isinstance(a, str) and isinstance(b, str):
        return compare_dtype(a, b)
    if float in (a, b) and not any(isinstance(x, str) and is_float(x) for x in (a, b)):
        return "float64"
    return strong(binary(a, b))


def _trunc_divide(a: Any, b: Any) -> Any:
    """Integer ``a / b`` rounded toward zero, as PlaidML's C code divides; x / 0 is 0, as compiled."""
    q, r = np.floor_divide(a, b), np.remainder(a, b)
    return np.where((r != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)), q + 1, q).astype(np.asarray(q).dtype)


def _literal(e: T.EExpr, ev: _Evaluator) -> Union[int, float]:
    """A literal-only subexpression with Python numbers (ints stay exact)."""
    if isinstance(e, T.EConst):
        return e.value
    if isinstance(e, T.ESize):
        return size_of(e, ev.sizes, ev.what)
    if isinstance(e, T.EUnary):
        return -_literal(e.a, ev)
    if isinstance(e, T.EBinary):
        a, b = _literal(e.a, ev), _literal(e.b, ev)
        if e.op == "/":
            if isinstance(a, int) and isinstance(b, int):
                return abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1) if b else 0  # toward zero
            return a / b if b else (math.copysign(math.inf, a) * math.copysign(1, b) if a else math.nan)
        return a + b if e.op == "+" else a - b if e.op == "-" else a * b
    if isinstance(e, T.ECompare):
        a, b = _literal(e.a, ev), _literal(e.b, ev)
        return int({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op])
    if isinstance(e, T.ESelect):
        return _literal(e.a, ev) if _literal(e.cond, ev) else _literal(e.b, ev)
    if not isinstance(e, T.ECall):
        raise TilecError(f"the interpreter does not know the expression {e!r}")
    fn = IMPLEMENTATIONS.get(e.func)
    if fn is None:
        raise TilecError(f"the interpreter has no implementation of '{e.func}'")
    args = [_literal(a, ev) for a in e.args]
    kind = expr_type(e, ev.dtypes)
    wide = "float64" if kind is float else "int64"  # a builtin of literals: numpy computes, the type stays weak
    try:
        with np.errstate(all="ignore"):
            value = np.asarray(fn(*[np.asarray(a, dtype=wide) for a in args]))
    except (ValueError, OverflowError):  # numpy refuses integers to negative integer powers
        return math.nan
    return float(value) if kind is float else int(value)


def run_elementwise(stmt: T.Elementwise, values: dict[str, np.ndarray], sizes: dict[str, int],
                    store_as: str | None = None) -> np.ndarray:
    """The value of `stmt` (broadcast to its tensors' common shape, in its dtype, or `store_as`);
    size symbols read as values are weak integer literals with their bound values."""
    names = T.eexpr_tensors(stmt.expr)
    try:
        shape = np.broadcast_shapes(*[values[n].shape for n in names]) if names else ()
    except ValueError:
        listing = ", ".join(f"{n} {values[n].shape}" for n in names)
        raise BindError(f"shapes do not broadcast in '{stmt}': {listing}") from None
    dtype = store_as or elementwise_dtype(stmt.expr, {n: values[n].dtype.name for n in names})
    with np.errstate(all="ignore"):
        result = _cast(dtype, _Evaluator({n: values[n] for n in names}, sizes, f"'{stmt}'").eval(stmt.expr))
    return np.array(np.broadcast_to(result, shape), dtype=dtype)


__all__ = ["run_elementwise"]
