"""Sizes the interpreter binds while it runs: scalar integer inputs read as sizes, and integer
statements computed from sizes (``P = (K - 1) / 2;``, ``Pad = max(0, (O - 1) * S + K - I);``).

A statement whose right-hand side reads only integer literals and size symbols (the
classification is sema's, tilec.ir.size_values.is_size_expr) defines a size of that name, and
its result is a 0-d int32 tensor holding the same integer. Its value follows PlaidML's constant
folding: exact integer arithmetic, ``/`` rounded toward zero, comparisons give 0 or 1, ``?:``,
``max`` and ``min``. Evaluated here with Python ints, independently of the compiler's folding.

Requires: bound sizes by name. Guarantees: the integer, or a BindError naming the statement
(an unbound size symbol, a division by zero, a value that disagrees with a keyword size).
"""

from __future__ import annotations

import numpy as np

from tilec.errors import BindError
from tilec.ir import tensor as T

_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def size_of(e: T.EExpr, sizes: dict[str, int], what: str) -> int:
    """The integer value of a size expression (literals, size symbols, + - * /, ?:, max, min)."""
    if isinstance(e, T.ESize):
        if e.name not in sizes:
            raise BindError(f"unbound size symbol '{e.name}' in {what}: it is not an input dimension or a "
                            f"statement computed before; pass it as a keyword, e.g. tilec.compile(src, {e.name}=...)")
        return sizes[e.name]
    if isinstance(e, T.EConst):
        return int(e.value)
    if isinstance(e, T.EUnary):
        return -size_of(e.a, sizes, what)
    if isinstance(e, T.ECompare):
        return int(_COMPARE[e.op](size_of(e.a, sizes, what), size_of(e.b, sizes, what)))
    if isinstance(e, T.ESelect):
        return size_of(e.a, sizes, what) if size_of(e.cond, sizes, what) != 0 else size_of(e.b, sizes, what)
    if isinstance(e, T.ECall):
        args = [size_of(a, sizes, what) for a in e.args]
        if e.func.startswith("assert_"):  # PlaidML's assertions over sizes: 1, or an error when false
            if args[0] == 0:
                raise BindError(f"{e.func} failed in {what}: {T.format_eexpr(e.args[0])} does not hold")
            return 1
        return {"max": max, "min": min}[e.func](args)
    assert isinstance(e, T.EBinary), e
    a, b = size_of(e.a, sizes, what), size_of(e.b, sizes, what)
    if e.op == "/":
        if b == 0:
            raise BindError(f"division by zero in {what}")
        quotient = abs(a) // abs(b)  # toward zero, as PlaidML's double quotient cast to int64
        return quotient if (a < 0) == (b < 0) else -quotient
    return a + b if e.op == "+" else a - b if e.op == "-" else a * b


def define_size(stmt: T.Elementwise, sizes: dict[str, int]) -> np.ndarray:
    """Bind the size `stmt` defines (`sizes` gains it) and return it as a 0-d int32 tensor."""
    what = f"statement '{stmt}'"
    value = size_of(stmt.expr, sizes, what)
    known = sizes.get(stmt.output)
    if known is not None and known != value:
        raise BindError(f"size '{stmt.output}' is given as {known} but {what} computes {value}")
    sizes[stmt.output] = value
    info = np.iinfo(np.int32)
    if not info.min <= value <= info.max:
        raise BindError(f"{what} computes {value}, which does not fit in int32 (the type of its result)")
    return np.asarray(value, dtype=np.int32)


def bind_size_inputs(names: tuple[str, ...], values: dict[str, np.ndarray], sizes: dict[str, int]) -> None:
    """Bind each input of `names` (scalar inputs read as sizes) to its argument's value."""
    for name in names:
        array = values[name]
        if array.shape != () or array.dtype.kind not in "iu":
            raise BindError(f"argument '{name}' is used as a size, so it must be an integer scalar; got "
                            f"{array.dtype.name} of shape {array.shape}")
        value = int(array)
        if sizes.get(name, value) != value:
            raise BindError(f"argument '{name}' is {value} but the keyword {name}={sizes[name]} was given")
        sizes[name] = value


__all__ = ["bind_size_inputs", "define_size", "size_of"]
