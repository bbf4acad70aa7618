"""The elementwise builtin functions: one table shared by sema, dtype rules and backends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    name: str
    arity: int
    float_only: bool  # integer arguments are promoted to float64, as numpy does
    doc: str


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in [
        Builtin("exp", 1, True, "e ** x"),
        Builtin("log", 1, True, "natural logarithm"),
        Builtin("sqrt", 1, True, "square root"),
        Builtin("tanh", 1, True, "hyperbolic tangent"),
        Builtin("sigmoid", 1, True, "1 / (1 + exp(-x))"),
        Builtin("sin", 1, True, "sine"),
        Builtin("cos", 1, True, "cosine"),
        Builtin("erf", 1, True, "error function"),
        Builtin("floor", 1, False, "round down"),
        Builtin("ceil", 1, False, "round up"),
        Builtin("abs", 1, False, "absolute value"),
        Builtin("relu", 1, False, "max(x, 0)"),
        Builtin("pow", 2, False, "x ** y (numpy.power)"),
        Builtin("max", 2, False, "numpy.maximum (NaN-propagating)"),
        Builtin("min", 2, False, "numpy.minimum (NaN-propagating)"),
    ]
}
