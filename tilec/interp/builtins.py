"""The interpreter's numpy implementation of each elementwise builtin: one table.

Requires: arguments already cast to the call's dtype (tilec.ir.dtypes.expr_type gives it; a
conversion's arguments are cast to the type it names). Guarantees: `IMPLEMENTATIONS[name](*arrays)`
is the builtin's value as the table of tilec.ir.builtins documents it (numpy's function, integer
``pow`` with negative exponents 0, shifts as numpy's); the caller casts the result to the call's
dtype. Booleans: ``abs``, ``relu``, ``floor``, ``ceil``, ``round`` and ``sign`` leave them as they
are, the bit operations except shifts treat them as 1-bit integers, and every other builtin on
booleans is a BindError. A builtin the language gains needs only an entry here (the test
`test_every_builtin_has_an_interpretation` in tests/test_interp.py checks the table is whole).

Independent of the backends' spellings on purpose: the interpreter is their oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tilec.errors import BindError

Impl = Callable[..., np.ndarray]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1 / (1 + np.exp(-x))).astype(x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    return x if x.dtype == np.bool_ else np.maximum(x, x.dtype.type(0))


def _keeps_integers(f: Impl) -> Impl:
    """Rounding: integers and booleans are their own result."""
    return lambda x: x if x.dtype.kind in "biu" else f(x)


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """numpy.power; on integers wrapping, and a negative exponent gives 0."""
    if x.dtype.kind != "i":
        return np.power(x, y)
    negative = y < 0
    return np.where(negative, x.dtype.type(0), np.power(x, np.where(negative, y.dtype.type(0), y)))


def _shift(f: Impl, name: str) -> Impl:
    def shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype == np.bool_:
            raise BindError(f"'{name}' shifts integers; its operands here are bool")
        return f(a, b)
    return shift


def _converted(x: np.ndarray, bits: object = None) -> np.ndarray:
    """as_float / as_int / as_uint / as_bool: the caller's cast to the named type is the conversion."""
    return x


_NUMERIC_ONLY: dict[str, Impl] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sigmoid": _sigmoid, "erf": _erf, "recip": np.reciprocal,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "pow": _pow, "max": np.maximum, "min": np.minimum,
}


def _refusing_bool(name: str, f: Impl) -> Impl:
    def numeric(*args: np.ndarray) -> np.ndarray:
        if args[0].dtype == np.bool_:
            raise BindError(f"'{name}' is not defined on booleans; convert them with as_int(x, 32) first")
        return f(*args)
    return numeric


IMPLEMENTATIONS: dict[str, Impl] = {
    **{name: _refusing_bool(name, f) for name, f in _NUMERIC_ONLY.items()},
    "floor": _keeps_integers(np.floor), "ceil": _keeps_integers(np.ceil), "round": _keeps_integers(np.round),
    "sign": lambda x: x if x.dtype == np.bool_ else np.sign(x), "abs": lambda x: x if x.dtype == np.bool_ else np.abs(x), "relu": _relu,
    "bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor, "bit_not": np.invert,
    "bit_left": _shift(np.left_shift, "bit_left"), "bit_right": _shift(np.right_shift, "bit_right"),
    "as_float": _converted, "as_int": _converted, "as_uint": _converted, "as_bool": _converted, "as_bfloat16": _converted,
    "reverse_grad": lambda x, _: x,
}


__all__ = ["IMPLEMENTATIONS"]
