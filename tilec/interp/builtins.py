"""The interpreter's numpy implementation of each elementwise builtin: one table.

Requires: arguments already cast to the call's dtype (tilec.ir.dtypes.expr_type). Guarantees:
`IMPLEMENTATIONS[name](*arrays)` is the builtin's value as numpy computes it; the caller casts
the result to the call's dtype. A builtin the language gains needs only an entry here (the
test `test_every_builtin_has_an_interpretation` in tests/test_interp.py checks the table is whole).

Independent of the backends' spellings on purpose: the interpreter is their oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1 / (1 + np.exp(-x))).astype(x.dtype)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


IMPLEMENTATIONS: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "sigmoid": _sigmoid, "erf": _erf,
    "floor": np.floor, "ceil": np.ceil, "abs": np.abs, "relu": _relu,
    "pow": np.power, "max": np.maximum, "min": np.minimum,
}


__all__ = ["IMPLEMENTATIONS"]
