"""The elementwise builtin functions: one table shared by sema, dtype rules, the constant folder,
autodiff and every backend.

Each entry names the function, its arity, its `kind` (which fixes its dtype rule) and its numpy
equivalent. Kinds and their dtype rules (tilec.ir.dtypes):

- ``float``: computes in floating point; float arguments keep their (promoted) type, integer
  and bool arguments give float32;
- ``same``: the promoted type of the arguments (PlaidML's rule);
- ``bits``: bit operations; integer or bool arguments only, the promoted type (a float
  argument is a BindError);
- ``cast``: the type the function names: ``as_float(x, 16|32|64)``, ``as_int(x, 8|16|32|64)``,
  ``as_uint(x, 8|16|32|64)`` (the width is an integer literal), ``as_bool(x)`` (x != 0; NaN is
  true), ``as_bfloat16(x)``; conversions from float to integer truncate toward zero (numpy's ``astype``);
- ``first``: the type of the first argument; ``reverse_grad(x, l)`` is ``x``, whose gradient is
  ``-l`` times the incoming one (PlaidML's gradient reversal; ``l`` matters to autodiff only);
- ``alias``: another spelling of an operator, rewritten by sema into that operator
  (``cmp_lt(a, b)`` is ``a < b``, ``cond(c, a, b)`` and ``select(c, a, b)`` are ``c ? a : b``,
  ``neg(x)`` is ``-x``, ``add/sub/mul/div`` are ``+ - * /``, ``ident(x)`` is ``x``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    name: str
    arity: int
    kind: str  # float | same | bits | cast | first | alias (see the module doc)
    group: str  # how the list of known functions is grouped in error messages
    numpy: str  # the numpy equivalent, for the reader and the tests


def _table(group: str, kind: str, arity: int, entries: list[tuple[str, str]]) -> list[Builtin]:
    return [Builtin(name, arity, kind, group, ref) for name, ref in entries]


_ENTRIES = (
    _table("exponential and logarithm", "float", 1, [
        ("exp", "numpy.exp"), ("log", "numpy.log"), ("sqrt", "numpy.sqrt"),
        ("sigmoid", "1 / (1 + numpy.exp(-x))"), ("erf", "math.erf per element"), ("recip", "1 / x"),
    ])
    + _table("trigonometric and hyperbolic", "float", 1, [
        ("sin", "numpy.sin"), ("cos", "numpy.cos"), ("tan", "numpy.tan"), ("asin", "numpy.arcsin"),
        ("acos", "numpy.arccos"), ("atan", "numpy.arctan"), ("sinh", "numpy.sinh"), ("cosh", "numpy.cosh"),
        ("tanh", "numpy.tanh"), ("asinh", "numpy.arcsinh"), ("acosh", "numpy.arccosh"),
        ("atanh", "numpy.arctanh"),
    ])
    + _table("rounding and sign", "same", 1, [
        ("floor", "numpy.floor (integers unchanged)"), ("ceil", "numpy.ceil (integers unchanged)"),
        ("round", "numpy.round: halves to even (integers unchanged)"), ("abs", "numpy.abs (wrapping)"),
        ("sign", "numpy.sign (NaN stays NaN)"), ("relu", "numpy.maximum(x, 0)"),
    ])
    + _table("two arguments", "same", 2, [
        ("pow", "numpy.power (integers: wrapping, negative exponents give 0)"),
        ("max", "numpy.maximum (NaN-propagating)"), ("min", "numpy.minimum (NaN-propagating)"),
    ])
    + _table("bit operations", "bits", 2, [
        ("bit_and", "numpy.bitwise_and; also a & b"), ("bit_or", "numpy.bitwise_or; also a | b"),
        ("bit_xor", "numpy.bitwise_xor; also a ^ b"),
        ("bit_left", "numpy.left_shift; also a << b (shifts past the width give 0)"),
        ("bit_right", "numpy.right_shift; also a >> b (arithmetic on signed types)"),
    ])
    + _table("bit operations", "bits", 1, [("bit_not", "numpy.invert; also ~a")])
    + _table("conversions", "cast", 2, [
        ("as_float", "x.astype(float<bits>)"), ("as_int", "x.astype(int<bits>)"),
        ("as_uint", "x.astype(uint<bits>)"),
    ])
    + _table("conversions", "cast", 1, [("as_bool", "x.astype(bool)"),
                                        ("as_bfloat16", "x.astype(bfloat16), rounded to nearest even")])
    + _table("operators by name", "alias", 2, [
        ("cmp_eq", "a == b"), ("cmp_ne", "a != b"), ("cmp_lt", "a < b"), ("cmp_le", "a <= b"),
        ("cmp_gt", "a > b"), ("cmp_ge", "a >= b"), ("add", "a + b"), ("sub", "a - b"), ("mul", "a * b"),
        ("div", "a / b"),
    ])
    + _table("operators by name", "alias", 3, [("cond", "numpy.where(c, a, b)"), ("select", "numpy.where(c, a, b)")])
    + _table("operators by name", "alias", 1, [("neg", "-x"), ("ident", "x")])
    + _table("gradient control", "first", 2, [("reverse_grad", "x; its gradient is -l * the incoming gradient")])
)

BUILTINS: dict[str, Builtin] = {b.name: b for b in _ENTRIES}

# as_<family>(x, bits): the dtype family each conversion names and the widths it accepts
CAST_FAMILIES = {"as_float": "float", "as_int": "int", "as_uint": "uint"}
CAST_WIDTHS = {"as_float": (16, 32, 64), "as_int": (8, 16, 32, 64), "as_uint": (8, 16, 32, 64)}


def known_functions() -> str:
    """Every builtin's name, grouped, one group per line (for 'unknown function' errors)."""
    groups: dict[str, list[str]] = {}
    for b in _ENTRIES:
        groups.setdefault(b.group, []).append(b.name)
    return "\n".join(f"  {group}: {', '.join(names)}" for group, names in groups.items())
