"""Copy elimination on the tensor IR: drop statements `A = B` that only rename a tensor.

Derived gradient programs (tilec.autodiff) are full of them (`DY_1 = DYb_0`, `DX = DX_7`), and
each costs a loop nest: a pass over memory and, for a parallel nest, one more synchronisation of
the worker pool, which for small kernels costs more than the arithmetic.

Requires: every tensor is defined by at most one statement (Tile programs are single assignment).
Guarantees: the program computes the same outputs, under the same names and in the same order;
a copy `A = B` is removed when A is a temporary (its reads then read B) or when A is an output
and B a temporary (B's statement then defines A directly). Copies of an input into an output stay.
The program is returned unchanged (the same object) when it holds no such copy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tilec.ir.tensor import (EBinary, ECall, ECompare, EExpr, Elementwise, ESelect, ETensor, EUnary, Intrinsic,
                             Program, Statement)


def eliminate_copies(program: Program) -> Program:
    statements = list(program.statements)
    inputs, outputs = set(program.input_names), set(program.outputs)
    while True:
        defined = Counter(st.output for st in statements)
        found = None
        for k, st in enumerate(statements):
            if not (isinstance(st, Elementwise) and isinstance(st.expr, ETensor)):
                continue
            a, b = st.output, st.expr.name
            if a == b or defined[a] != 1 or not (b in inputs or defined[b] == 1) or a in inputs:
                continue
            if a not in outputs:
                found = (k, a, b)  # reads of the temporary A read B
            elif b not in inputs and b not in outputs:
                found = (k, b, a)  # B's statement writes the output A directly
            if found:
                break
        if found is None:
            return program if len(statements) == len(program.statements) else replace(
                program, statements=tuple(statements))
        k, old, new = found
        statements = [_rename(st, old, new) for i, st in enumerate(statements) if i != k]


def _rename(st: Statement, old: str, new: str) -> Statement:
    def name(n: str) -> str:
        return new if n == old else n

    if isinstance(st, Elementwise):
        return Elementwise(name(st.output), _rename_expr(st.expr, old, new))
    if isinstance(st, Intrinsic):
        return replace(st, output=name(st.output), tensors=tuple(name(t) for t in st.tensors))
    operands = tuple(a if a.tensor != old else replace(a, tensor=new) for a in st.operands)
    default = st.default if st.default is None else name(st.default)
    if operands == st.operands and default == st.default and st.output != old:
        return st
    return replace(st, output=name(st.output), operands=operands, default=default)


def _rename_expr(e: EExpr, old: str, new: str) -> EExpr:
    if isinstance(e, ETensor):
        return ETensor(new) if e.name == old else e
    if isinstance(e, EUnary):
        return replace(e, a=_rename_expr(e.a, old, new))
    if isinstance(e, (EBinary, ECompare)):
        return replace(e, a=_rename_expr(e.a, old, new), b=_rename_expr(e.b, old, new))
    if isinstance(e, ESelect):
        return ESelect(_rename_expr(e.cond, old, new), _rename_expr(e.a, old, new), _rename_expr(e.b, old, new))
    if isinstance(e, ECall):
        return replace(e, args=tuple(_rename_expr(a, old, new) for a in e.args))
    return e
