"""Elementwise expressions (tensor IR) -> typed loop-IR expressions.

Types follow tilec.ir.dtypes (PlaidML's promotion; literals are weak and take the type of
the tensor they meet); literal-only subexpressions are folded here, every builtin included.
Comparisons give bool; integer `/` rounds toward zero, as PlaidML's generated code divides
(its elementwise `div` is C's `/`; sizes fold the same way, tilec.ir.size_values), and x / 0 is 0. Builtins lower to loop-IR operations
where one exists (bit operations, conversions, recip, sign) and to `L.Call` otherwise.

Requires: a tensor-IR expression that sema built (calls exist with their arity, conversion
widths are literals). Guarantees: a loop-IR expression of the output dtype; a type error
that only the argument dtypes reveal (a bit operation on floats, a literal that does not fit)
is a BindError.
"""

from __future__ import annotations

import math
from typing import Union
from collections.abc import Callable

import numpy as np

from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.ir import tensor as T
from tilec.ir.builtins import BUILTINS
from tilec.ir.dtypes import LOW_PRECISION, binary, compare_dtype, expr_type, is_float, is_unsigned, strong

Weak = Union[int, float]
_CMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def _fold_pow(x: Weak, y: Weak) -> Weak:
    """x ** y, exactly for small integers; as float64 where an exact power would be enormous, and
    for floats (numpy's power: a negative base to a fractional exponent is NaN)."""
    if isinstance(x, int) and isinstance(y, int) and y < 0:
        return 0  # integer powers with a negative exponent give 0 (the builtin's rule, as compiled code does)
    if isinstance(x, int) and isinstance(y, int) and y >= 0 and abs(x) > 1 and y * abs(x).bit_length() > 256:
        try:
            return math.pow(x, y)
        except OverflowError:
            return math.inf if x > 0 or y % 2 == 0 else -math.inf
    if isinstance(x, int) and isinstance(y, int):
        return x ** y
    with np.errstate(all="ignore"):  # a float power as compiled code computes it: NaN, not complex, for
        return float(np.power(np.float64(x), np.float64(y)))  # a negative base; inf for 0 ** -1


def lower_expression(expr: T.EExpr, dtypes: dict[str, str], load: Callable[[str], L.Expr], out_dtype: str) -> L.Expr:
    lowered = _Lowerer(dtypes, load).lower(expr)
    return _to(out_dtype, lowered)


def _to(dtype: str, value: Union[L.Expr, Weak]) -> L.Expr:
    """`value` as `dtype`; a weak literal becomes a constant of `dtype`, which for the 16-bit floats
    holds the literal's float32 value (their operations run in float32 and take a literal at that precision,
    as torch's kernels take a Python scalar; an explicit conversion rounds it: _Lowerer.call)."""
    if isinstance(value, (int, float)):
        if dtype == "bool":
            return L.Const(bool(value), "bool")
        if is_float(dtype):
            try:
                return L.Const(float(value), dtype)
            except OverflowError:
                raise BindError(f"the literal {_digits(value)} is beyond the {dtype} range (numpy raises "
                                f"OverflowError here too)") from None
        if isinstance(value, float):  # a weak float met an integer: only reachable via select folding
            if not math.isfinite(value):
                raise BindError(f"the value {value} has no {dtype} representation")
            value = int(value)
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise BindError(f"the literal {_digits(value)} does not fit in {dtype} (numpy raises OverflowError here "
                            f"too); write it as a float or use a wider input dtype")
        return L.Const(int(value), dtype)
    return L.cast(dtype, value)


def _rounded_value(value: Weak, dtype: str) -> float:
    """A literal converted to the 16-bit float `dtype` (to nearest, ties to even), as a Python float."""
    with np.errstate(all="ignore"):
        return float(np.asarray(value, dtype=np.float64).astype(np.dtype(dtype)).astype(np.float64))


def _digits(value: Weak) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} digits)"


def _truth(value: L.Expr) -> L.Expr:
    if value.dtype == "bool":
        return value
    return L.Cmp("ne", value, _to(value.dtype, 0))


class _Lowerer:
    def __init__(self, dtypes: dict[str, str], load: Callable[[str], L.Expr]) -> None:
        self.dtypes = dtypes
        self.load = load

    def type_of(self, e: T.EExpr) -> Union[str, type]:
        return expr_type(e, self.dtypes)

    def lower(self, e: T.EExpr) -> Union[L.Expr, Weak]:
        t = self.type_of(e)
        if isinstance(t, type):
            return _fold(e)
        if isinstance(e, T.ETensor):
            return self.load(e.name)
        if isinstance(e, T.EUnary):
            a = _to(t, self.lower(e.a))
            if t == "bool":
                raise BindError("cannot negate a boolean; use 'c ? 0 : 1'")
            return L.Bin("sub", _to(t, 0), a)
        if isinstance(e, T.EBinary):
            a, b = _to(t, self.lower(e.a)), _to(t, self.lower(e.b))
            if t == "bool":
                if e.op not in ("+", "*"):
                    raise BindError(f"arithmetic '{e.op}' on booleans; convert with 'c ? 1 : 0' first")
                return L.Bin("or" if e.op == "+" else "and", a, b)
            if e.op == "/" and not is_float(t):
                return _truncating_division(a, b)
            return L.Bin(_ARITH[e.op], a, b)
        if isinstance(e, T.ECompare):
            ta, tb = self.type_of(e.a), self.type_of(e.b)
            if isinstance(ta, str) and isinstance(tb, str):
                ct = compare_dtype(ta, tb)
            elif float in (ta, tb) and not any(isinstance(x, str) and is_float(x) for x in (ta, tb)):
                ct = "float64"  # an integer against a float literal: compared exactly, as numpy does
            else:
                ct = strong(binary(ta, tb))
            return L.Cmp(_CMP[e.op], _to(ct, self.lower(e.a)), _to(ct, self.lower(e.b)))
        if isinstance(e, T.ESelect):
            cond = self.lower(e.cond)
            if isinstance(cond, (int, float)):  # a literal condition picks a branch; both must type-check
                a, b = _to(t, self.lower(e.a)), _to(t, self.lower(e.b))
                return a if cond else b
            return L.Select(_truth(cond), _to(t, self.lower(e.a)), _to(t, self.lower(e.b)))
        assert isinstance(e, T.ECall)
        return self.call(e, t)

    def call(self, e: T.ECall, t: str) -> L.Expr:
        kind = BUILTINS[e.func].kind
        if kind in ("cast", "first"):  # a conversion, or reverse_grad's value: its first argument
            value = self.lower(e.args[0])
            if kind == "cast" and t in LOW_PRECISION and isinstance(value, (int, float)):
                value = _rounded_value(value, t)  # (a 16-bit constant is otherwise held in float32: _to)
            return _to(t, value)
        args = [_to(t, self.lower(a)) for a in e.args]
        if kind == "bits":
            return _bits(e.func, args, t)
        if e.func == "recip":
            return L.Bin("div", _to(t, 1.0), args[0])
        if e.func == "sign":
            return _sign(args[0])
        if not is_float(t) and e.func in ("floor", "ceil", "round"):
            return args[0]
        if (t == "bool" or is_unsigned(t)) and e.func in ("abs", "relu"):
            return args[0]
        if t == "bool":
            raise BindError(f"'{e.func}' is not defined on booleans; convert them with as_int(x, 32) first")
        return L.Call(e.func, tuple(args), t)


def _truncating_division(a: L.Expr, b: L.Expr) -> L.Expr:
    """Integer ``a / b`` rounded toward zero: the loop IR's floor division, plus one where the floor
    remainder is nonzero and its sign differs from a's (then a and b differ in sign). The loop IR
    gives x // 0 == 0 and x % 0 == 0, so x / 0 stays 0."""
    q = L.Bin("div", a, b)
    if a.dtype == "bool" or is_unsigned(a.dtype):
        return q
    r, zero = L.Bin("mod", a, b), _to(a.dtype, 0)
    fix = L.Bin("or", L.Bin("and", L.Cmp("lt", a, zero), L.Cmp("gt", r, zero)),
                L.Bin("and", L.Cmp("gt", a, zero), L.Cmp("lt", r, zero)))
    return L.Select(fix, L.Bin("add", q, _to(a.dtype, 1)), q)


_BIT_OPS = {"bit_and": "and", "bit_or": "or", "bit_xor": "xor", "bit_left": "shl", "bit_right": "shr"}


def _bits(func: str, args: list[L.Expr], t: str) -> L.Expr:
    if func == "bit_not":
        if t == "bool":
            return L.Not(args[0])
        return L.Bin("xor", args[0], L.Const(np.iinfo(t).max if is_unsigned(t) else -1, t))
    if t == "bool" and func in ("bit_left", "bit_right"):
        raise BindError(f"'{func}' shifts integers; its operands here are bool")
    return L.Bin(_BIT_OPS[func], args[0], args[1])


def _sign(a: L.Expr) -> L.Expr:
    """numpy.sign: -1, 0 or 1 in a's type; NaN stays NaN (and the zeros keep themselves)."""
    if a.dtype == "bool":
        return a
    zero = _to(a.dtype, 0)
    negative = L.Select(L.Cmp("lt", a, zero), _to(a.dtype, -1), a) if not is_unsigned(a.dtype) else a
    return L.Select(L.Cmp("gt", a, zero), _to(a.dtype, 1), negative)


def _fold(e: T.EExpr) -> Weak:
    """Evaluate a literal-only expression with Python numbers."""
    if isinstance(e, T.EConst):
        return e.value
    if isinstance(e, T.EUnary):
        return -_fold(e.a)
    if isinstance(e, T.EBinary):
        a, b = _fold(e.a), _fold(e.b)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if isinstance(a, int) and isinstance(b, int):
            return 0 if b == 0 else abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)  # toward zero
        if b == 0:
            return math.copysign(math.inf, a) if a != 0 else math.nan
        try:
            return a / b
        except OverflowError:  # an integer quotient beyond float64: the nearest float64 is infinite
            return math.copysign(math.inf, a) * math.copysign(1, b)
    if isinstance(e, T.ECompare):
        a, b = _fold(e.a), _fold(e.b)
        return int({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op])
    if isinstance(e, T.ESelect):
        return _fold(e.a) if _fold(e.cond) else _fold(e.b)
    assert isinstance(e, T.ECall)
    args = [_fold(a) for a in e.args]
    try:
        result = _FOLD[e.func](*args)
    except (ValueError, OverflowError, ZeroDivisionError):  # a domain edge: numpy's float64 answer (inf, nan)
        with np.errstate(all="ignore"):
            return float(_EDGE.get(e.func, lambda *a: math.nan)(*[np.float64(a) for a in args]))
    if BUILTINS[e.func].kind == "float":
        return float(result)
    return result


def _round_half_even(x: Weak) -> Weak:
    return x if isinstance(x, int) else float(round(x)) if math.isfinite(x) else x


def _floor(x: Weak) -> Weak:
    return x if isinstance(x, int) or not math.isfinite(x) else float(math.floor(x))


def _ceil(x: Weak) -> Weak:
    return x if isinstance(x, int) or not math.isfinite(x) else float(math.ceil(x))


def _sign_of(x: Weak) -> Weak:
    if isinstance(x, float) and math.isnan(x):
        return x
    s = (x > 0) - (x < 0)
    return float(s) if isinstance(x, float) else s


def _shift_left(a: int, b: int) -> int:
    return a << b if 0 <= b < 64 else 0


def _shift_right(a: int, b: int) -> int:
    return a >> b if 0 <= b < 64 else (-1 if a < 0 else 0)


def _nan_max(a: Weak, b: Weak) -> Weak:
    return a if (a != a or a > b) else b


def _nan_min(a: Weak, b: Weak) -> Weak:
    return a if (a != a or a < b) else b


# Where Python's math raises (log(0), atanh(1), 1/0, exp(1000)), numpy's float64 gives inf or nan.
_EDGE: dict[str, Callable[..., float]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "recip": np.reciprocal, "tan": np.tan, "sin": np.sin,
    "cos": np.cos, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "pow": np.power,
}


# Literal-only calls, with Python numbers (ints stay ints where the builtin keeps the type).
_FOLD: dict[str, Callable[..., Weak]] = {
    "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "erf": math.erf, "recip": lambda x: 1.0 / x,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)), "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan, "sinh": math.sinh, "cosh": math.cosh,
    "tanh": math.tanh, "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh,
    "floor": _floor, "ceil": _ceil, "round": _round_half_even, "abs": abs, "sign": _sign_of,
    "relu": lambda x: _nan_max(x, 0 if isinstance(x, int) else 0.0), "pow": _fold_pow,
    "max": _nan_max, "min": _nan_min,
    "bit_and": lambda a, b: a & b, "bit_or": lambda a, b: a | b, "bit_xor": lambda a, b: a ^ b,
    "bit_not": lambda a: ~a, "reverse_grad": lambda x, _: x, "bit_left": _shift_left, "bit_right": _shift_right,
}
