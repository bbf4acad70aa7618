"""Sizes as values: integer statements computed from size symbols, and size symbols read as values.

PlaidML's op library computes padding and output sizes as scalar statements over sizes
(``P = (K - 1) / 2;``, ``Pad = max(0, (O - 1) * S + K - I);``) and then uses them in index
polynomials and output sizes. Its type checker folds such statements at bind time
(`ConstantPropagate` in tile/lang/type.cc of plaidml/plaidml): each operation is evaluated
in double precision and an integer result is cast to int64, so integer ``/`` rounds toward
zero. This module follows that, in exact integer arithmetic.

Requires: expressions from semantic analysis (:mod:`tilec.frontend.sema`).
Guarantees:
- `is_size_expr(e)`: `e` reads no tensor and only integer literals, size symbols, ``+ - * /``,
  unary minus, comparisons, ``?:``, ``max``/``min`` and assertions (`is_assertion`); such a
  statement defines a size.
- `evaluate(e, sizes, what)`: its integer value (BindError naming `what` for an unbound symbol
  or a division by zero).
- `constant_value(e)`: its value when it reads no size symbol (None otherwise).
- `substitute(e, sizes, what)`: `e` with every size symbol replaced by its integer literal.
- `size_inputs(program)`: the inputs (declared ``S[]`` or without dims) read as sizes anywhere
  (sema makes such an input a size in every statement); their values are bound at call time.
"""

from __future__ import annotations

from dataclasses import replace

from tilec.errors import BindError
from tilec.ir import tensor as T

SIZE_FUNCTIONS = ("max", "min")


def is_assertion(name: str) -> bool:
    """PlaidML's assertions over sizes: any function named ``assert_...`` of one condition
    (``Ok = assert_winograd_valid(BI - CI + 1 == BO);``); its value is 1, or a BindError when the
    condition is false for the bound sizes."""
    return name.startswith("assert_")
_COMPARE = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__, "==": int.__eq__,
            "!=": int.__ne__}


def is_size_expr(e: T.EExpr) -> bool:
    """True when `e` is an integer expression of literals and size symbols only."""
    if isinstance(e, T.ESize):
        return True
    if isinstance(e, T.EConst):
        return isinstance(e.value, int) and not isinstance(e.value, bool)
    if isinstance(e, T.EUnary):
        return is_size_expr(e.a)
    if isinstance(e, (T.EBinary, T.ECompare)):
        return is_size_expr(e.a) and is_size_expr(e.b)
    if isinstance(e, T.ESelect):
        return is_size_expr(e.cond) and is_size_expr(e.a) and is_size_expr(e.b)
    if isinstance(e, T.ECall):
        known = e.func in SIZE_FUNCTIONS or (is_assertion(e.func) and len(e.args) == 1)
        return known and all(is_size_expr(a) for a in e.args)
    return False


def truncating_division(a: int, b: int, what: str) -> int:
    """``a / b`` rounded toward zero, as PlaidML's int64 cast of a double quotient."""
    if b == 0:
        raise BindError(f"division by zero in {what}")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def integer_op(op: str, a: int, b: int, what: str) -> int:
    """``a op b`` for a size operator (``+ - * /`` with ``/`` toward zero, ``max``, ``min``)."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op in ("max", "min"):
        return max(a, b) if op == "max" else min(a, b)
    return truncating_division(a, b, what)


def evaluate(e: T.EExpr, sizes: dict[str, int], what: str) -> int:
    """The value of a size expression (`is_size_expr(e)` holds) with bound sizes."""
    if isinstance(e, T.ESize):
        if e.name not in sizes:
            raise BindError(f"unbound size symbol '{e.name}' in {what}: declare it as an input dimension, "
                            f"define it by a statement, or pass it as a keyword (tilec.compile(src, {e.name}=...))")
        return sizes[e.name]
    if isinstance(e, T.EConst):
        return int(e.value)
    if isinstance(e, T.EUnary):
        return -evaluate(e.a, sizes, what)
    if isinstance(e, T.ECompare):
        return int(_COMPARE[e.op](evaluate(e.a, sizes, what), evaluate(e.b, sizes, what)))
    if isinstance(e, T.ESelect):
        return evaluate(e.a if evaluate(e.cond, sizes, what) else e.b, sizes, what)
    if isinstance(e, T.ECall):
        values = [evaluate(a, sizes, what) for a in e.args]
        if is_assertion(e.func):
            if values[0] == 0:
                names = {n.name for n in T.eexpr_nodes(e) if isinstance(n, T.ESize)}
                bound = ", ".join(f"{n} = {sizes[n]}" for n in sorted(names) if n in sizes)
                raise BindError(f"{e.func} failed in {what}: {T.format_eexpr(e.args[0])} does not hold ({bound})")
            return 1
        return max(values) if e.func == "max" else min(values)
    assert isinstance(e, T.EBinary), e
    return integer_op(e.op, evaluate(e.a, sizes, what), evaluate(e.b, sizes, what), what)


def constant_value(e: T.EExpr) -> int | None:
    """The value of a size expression of literals only (`is_size_expr(e)` holds), known before any
    size is bound; None when it reads a size symbol or divides by zero (reported at bind time)."""
    if any(isinstance(n, T.ESize) for n in T.eexpr_nodes(e)):
        return None
    try:
        return evaluate(e, {}, "a constant statement")
    except BindError:
        return None


def substitute(e: T.EExpr, sizes: dict[str, int], what: str) -> T.EExpr:
    """`e` with each size symbol replaced by its value (the same object when there is none)."""
    if isinstance(e, T.ESize):
        return T.EConst(evaluate(e, sizes, what))
    if isinstance(e, T.EUnary):
        a = substitute(e.a, sizes, what)
        return e if a is e.a else replace(e, a=a)
    if isinstance(e, (T.EBinary, T.ECompare)):
        a, b = substitute(e.a, sizes, what), substitute(e.b, sizes, what)
        return e if (a, b) == (e.a, e.b) else replace(e, a=a, b=b)
    if isinstance(e, T.ESelect):
        parts = tuple(substitute(x, sizes, what) for x in (e.cond, e.a, e.b))
        return e if parts == (e.cond, e.a, e.b) else T.ESelect(*parts)
    if isinstance(e, T.ECall):
        args = tuple(substitute(a, sizes, what) for a in e.args)
        return e if args == e.args else replace(e, args=args)
    return e


def size_inputs(program: T.Program) -> tuple[str, ...]:
    """Scalar inputs read as sizes (in indices, output sizes, constraints, intrinsics' sizes, or as
    values in statements), in input order; the kernel is specialised per value."""
    used: set[str] = set()
    tensors: set[str] = set()  # inputs indexed as tensors: `B` in `C[b: B] = +(B[b])` is one
    for st in program.statements:
        used |= T.statement_sizes(st)
        if isinstance(st, T.Contraction):
            tensors |= {a.tensor for a in st.operands if a.indices}
        else:
            tensors |= set(T.statement_reads(st))
    return tuple(p.name for p in program.params
                 if p.name in used and p.name not in tensors and (p.dims is None or p.dims == ()))
