"""The gradient of an elementwise statement: the chain rule over its expression tree.

Each needed tensor in the expression receives the adjoint of its occurrence; several
occurrences are added up. Builtins have their derivative rules here (`call_adjoints`); floor,
ceil, round, sign, integer conversions, bit operations, comparisons and constants have zero
gradient (as in PlaidML), as_float passes the gradient on, and max/min give ties to the first
argument.

Requires: `g` names the whole gradient of the statement's output (Backward.total). Guarantees:
one elementwise statement per needed tensor of the expression, contributed through
`Backward.emit` with the output's shape (so a broadcast read is summed back down); a builtin
with no derivative rule is a TilecError ("not differentiable: ...").
"""

from __future__ import annotations

from collections.abc import Callable

from tilec.autodiff.backward import Backward, add_terms
from tilec.errors import TilecError
from tilec.ir.tensor import (EBinary, ECall, ECompare, EConst, EExpr, Elementwise, ESelect, ETensor, EUnary,
                             eexpr_tensors)


def elementwise_gradient(b: Backward, st: Elementwise, g: str) -> None:
    """Add the gradients of the needed tensors `st` reads given `g`, the gradient of its output."""
    found: dict[str, list[EExpr]] = {}
    _adjoints(b.needs, st.expr, ETensor(g), found)
    for name, terms in found.items():
        out = b.shapes.fresh(f"D{name}_{len(b.statements)}")
        b.emit(Elementwise(out, add_terms(terms)), name, b.shapes.shape(st.output))


def _adjoints(needs: set[str], e: EExpr, g: EExpr, found: dict[str, list[EExpr]]) -> None:
    """Add to `found` the adjoint of every needed tensor in `e`, given the adjoint `g` of `e`."""
    if not any(t in needs for t in eexpr_tensors(e)):
        return
    if isinstance(e, ETensor):
        found.setdefault(e.name, []).append(g)
    elif isinstance(e, EUnary):
        _adjoints(needs, e.a, EUnary("-", g), found)
    elif isinstance(e, EBinary):
        a, b = e.a, e.b
        if e.op in "+-":
            _adjoints(needs, a, g, found)
            _adjoints(needs, b, g if e.op == "+" else EUnary("-", g), found)
        elif e.op == "*":
            _adjoints(needs, a, EBinary("*", g, b), found)
            _adjoints(needs, b, EBinary("*", g, a), found)
        else:
            _adjoints(needs, a, EBinary("/", g, b), found)
            _adjoints(needs, b, EUnary("-", EBinary("/", EBinary("*", g, a), EBinary("*", b, b))), found)
    elif isinstance(e, ESelect):
        _adjoints(needs, e.a, ESelect(e.cond, g, EConst(0)), found)
        _adjoints(needs, e.b, ESelect(e.cond, EConst(0), g), found)
    elif isinstance(e, ECall):
        for arg, adj in zip(e.args, call_adjoints(e, g)):
            if adj is not None:
                _adjoints(needs, arg, adj, found)
    # ECompare and constants: zero gradient


def _sqrt(x: EExpr) -> EExpr:
    return ECall("sqrt", (x,))


def _square(x: EExpr) -> EExpr:
    return EBinary("*", x, x)


# d/dx f(x) for one-argument functions, as the adjoint of x given `g` (a: the argument, y: f(a))
_UNARY_RULES: dict[str, Callable[[EExpr, EExpr, EExpr], EExpr]] = {
    "tan": lambda a, y, g: EBinary("*", g, EBinary("+", EConst(1), _square(y))),
    "asin": lambda a, y, g: EBinary("/", g, _sqrt(EBinary("-", EConst(1), _square(a)))),
    "acos": lambda a, y, g: EUnary("-", EBinary("/", g, _sqrt(EBinary("-", EConst(1), _square(a))))),
    "atan": lambda a, y, g: EBinary("/", g, EBinary("+", EConst(1), _square(a))),
    "sinh": lambda a, y, g: EBinary("*", g, ECall("cosh", (a,))),
    "cosh": lambda a, y, g: EBinary("*", g, ECall("sinh", (a,))),
    "asinh": lambda a, y, g: EBinary("/", g, _sqrt(EBinary("+", _square(a), EConst(1)))),
    "acosh": lambda a, y, g: EBinary("/", g, _sqrt(EBinary("-", _square(a), EConst(1)))),
    "atanh": lambda a, y, g: EBinary("/", g, EBinary("-", EConst(1), _square(a))),
    "recip": lambda a, y, g: EUnary("-", EBinary("*", g, _square(y))),
}
# piecewise constant (or integer-valued) functions: zero gradient, as PlaidML has it
_ZERO_GRADIENT = {"floor", "ceil", "round", "sign", "as_int", "as_uint", "as_bool",
                  "bit_and", "bit_or", "bit_xor", "bit_not", "bit_left", "bit_right"}


def call_adjoints(e: ECall, g: EExpr) -> list[EExpr | None]:
    """The adjoint of each argument of a builtin call, given the adjoint `g` of the call."""
    a = e.args[0]

    def mul(*xs: EExpr) -> EExpr:
        out = g
        for x in xs:
            out = EBinary("*", out, x)
        return out

    def sub(x: EExpr, y: EExpr) -> EExpr:
        return EBinary("-", x, y)

    zero, one = EConst(0), EConst(1)
    f = e.func
    if f == "reverse_grad":  # the value is the first argument; its gradient is reversed and scaled
        return [EUnary("-", mul(e.args[1])), None]
    if f == "exp":
        return [mul(e)]
    if f == "log":
        return [EBinary("/", g, a)]
    if f == "sqrt":
        return [EBinary("/", mul(EConst(0.5)), e)]
    if f == "tanh":
        return [mul(sub(one, EBinary("*", e, e)))]
    if f == "sigmoid":
        return [mul(e, sub(one, e))]
    if f == "sin":
        return [mul(ECall("cos", (a,)))]
    if f == "cos":
        return [EUnary("-", mul(ECall("sin", (a,))))]
    if f == "erf":
        return [mul(EConst(1.1283791670955126), ECall("exp", (EUnary("-", EBinary("*", a, a)),)))]
    if f in _UNARY_RULES:
        return [_UNARY_RULES[f](a, e, g)]
    if f in _ZERO_GRADIENT:
        return [None] * len(e.args)
    if f == "as_float":  # a float-to-float conversion passes the gradient on (integers have none)
        return [g, None]
    if f == "as_bfloat16":
        return [g]
    if f == "abs":
        return [ESelect(ECompare(">", a, zero), g, ESelect(ECompare("<", a, zero), EUnary("-", g), zero))]
    if f == "relu":  # 0 where a <= 0: NaN passes the gradient on, as torch's threshold_backward does
        return [ESelect(ECompare("<=", a, zero), zero, g)]
    b = e.args[1]
    if f == "pow":
        da = mul(b, ECall("pow", (a, sub(b, one))))
        db = ESelect(ECompare(">", a, zero), mul(e, ECall("log", (a,))), zero)
        return [da, db]
    if f in ("max", "min"):  # ties go to the first argument
        first = ECompare(">=" if f == "max" else "<=", a, b)
        return [ESelect(first, g, zero), ESelect(first, zero, g)]
    raise TilecError(f"not differentiable: builtin '{f}' has no derivative rule")
