"""Elementwise expressions (tensor IR) -> typed loop-IR expressions.

Types follow numpy: tensors are strongly typed, literals are weak (NEP 50) and take
the type of the tensor they meet; literal-only subexpressions are folded here.
Comparisons give bool; integer `/` rounds toward zero, as PlaidML's generated code divides
(its elementwise `div` is C's `/`; sizes fold the same way, tilec.ir.size_values), and x / 0 is 0.
"""

from __future__ import annotations

import math
from typing import Union
from collections.abc import Callable

import numpy as np

from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.ir import tensor as T
from tilec.ir.dtypes import _binary, expr_type, is_float

Weak = Union[int, float]
_CMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def lower_expression(expr: T.EExpr, dtypes: dict[str, str], load: Callable[[str], L.Expr], out_dtype: str) -> L.Expr:
    lowered = _Lowerer(dtypes, load).lower(expr)
    return _to(out_dtype, lowered)


def _to(dtype: str, value: Union[L.Expr, Weak]) -> L.Expr:
    if isinstance(value, (int, float)):
        if dtype == "bool":
            return L.Const(bool(value), "bool")
        if is_float(dtype):
            return L.Const(float(value), dtype)
        if isinstance(value, float):  # a weak float met an integer: only reachable via select folding
            value = int(value)
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise BindError(f"the literal {value} does not fit in {dtype} (numpy raises OverflowError here too); "
                            f"write it as a float or use a wider input dtype")
        return L.Const(int(value), dtype)
    return L.cast(dtype, value)


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
            ct = _binary(self.type_of(e.a), self.type_of(e.b))
            ct = ct if isinstance(ct, str) else ("float64" if ct is float else "int64")
            return L.Cmp(_CMP[e.op], _to(ct, self.lower(e.a)), _to(ct, self.lower(e.b)))
        if isinstance(e, T.ESelect):
            cond = self.lower(e.cond)
            if isinstance(cond, (int, float)):
                return _to(t, self.lower(e.a if cond else e.b))
            return L.Select(_truth(cond), _to(t, self.lower(e.a)), _to(t, self.lower(e.b)))
        assert isinstance(e, T.ECall)
        args = [_to(t, self.lower(a)) for a in e.args]
        return L.Call(e.func, tuple(args), t)


def _truncating_division(a: L.Expr, b: L.Expr) -> L.Expr:
    """Integer ``a / b`` rounded toward zero: the loop IR's floor division, plus one where the floor
    remainder is nonzero and its sign differs from a's (then a and b differ in sign). The loop IR
    gives x // 0 == 0 and x % 0 == 0, so x / 0 stays 0."""
    q = L.Bin("div", a, b)
    if a.dtype == "bool" or a.dtype.startswith("uint"):
        return q
    r, zero = L.Bin("mod", a, b), _to(a.dtype, 0)
    fix = L.Bin("or", L.Bin("and", L.Cmp("lt", a, zero), L.Cmp("gt", r, zero)),
                L.Bin("and", L.Cmp("gt", a, zero), L.Cmp("lt", r, zero)))
    return L.Select(fix, L.Bin("add", q, _to(a.dtype, 1)), q)


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
        return a / b if b != 0 else math.copysign(math.inf, a) if a != 0 else math.nan
    if isinstance(e, T.ECompare):
        a, b = _fold(e.a), _fold(e.b)
        return int({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op])
    if isinstance(e, T.ESelect):
        return _fold(e.a) if _fold(e.cond) else _fold(e.b)
    assert isinstance(e, T.ECall)
    args = [_fold(a) for a in e.args]
    fn: Callable[..., Weak] = {
        "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh, "sin": math.sin,
        "cos": math.cos, "erf": math.erf, "floor": math.floor, "ceil": math.ceil, "abs": abs,
        "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)), "relu": lambda x: max(x, 0),
        "pow": lambda x, y: x ** y, "max": max, "min": min,
    }[e.func]  # type: ignore[assignment]
    try:
        result = fn(*args)
    except (ValueError, OverflowError, ZeroDivisionError):
        return math.nan
    return float(result) if e.func not in ("abs", "relu", "pow", "max", "min") else result
