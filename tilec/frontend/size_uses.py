"""Which names a program uses as sizes, found before semantic analysis reads any statement.

A scalar input (``S[]``, or an input without dims) read as a size anywhere -- in an index, an
output size, a constraint, an intrinsic's size argument, or in an integer statement whose result
is used so -- is a size everywhere, also in the statements before that use
(``PX = max(0, (N - 1) / S); O[x: ...] = +(I[S*x - PX])``). Sema must know it when it reads the
first statement, so this pass looks at the whole program first.

Requires: a syntax tree from the parser. Guarantees: `names_used_as_sizes` returns every
capitalised name in a size position, closed backwards over elementwise statements (the names a
statement reads when its own result is used as a size); iterative, so deep nesting costs no
Python recursion. `scalar_bound_by_own_range` finds a combination's scalar that reads a size its
own statement binds (known only once that statement is bound).
"""

from __future__ import annotations

from collections.abc import Container

from tilec.frontend import ast
from tilec.frontend.intrinsics import is_statement_intrinsic, size_arguments
from tilec.frontend.names import is_capitalised


def expr_names(exprs: "list[ast.Expr] | tuple[ast.Expr, ...]") -> list[ast.Name]:
    """Every name in `exprs` (function names excluded), in source order."""
    out: list[ast.Name] = []
    stack = list(reversed(exprs))
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e)
        elif isinstance(e, (ast.Bin, ast.Compare)):
            stack += [e.b, e.a]
        elif isinstance(e, ast.Neg):
            stack.append(e.a)
        elif isinstance(e, ast.Select):
            stack += [e.b, e.a, e.cond]
        elif isinstance(e, ast.Call):
            stack += reversed(e.args)
    return out


def _size_positions(s: ast.StatementNode) -> list[ast.Expr]:
    if isinstance(s, ast.ContractionNode):
        out = list(s.lhs.indices) + list(s.lhs.sizes or ())
        out += [e for a in s.operands for e in a.indices]
        out += [e for c in s.constraints for e in (c.poly, c.bound)]
        return out
    if is_statement_intrinsic(s.expr):
        return list(size_arguments(s.expr))
    return []


def names_used_as_sizes(node: ast.ProgramNode) -> set[str]:
    """The capitalised names `node` reads as sizes, directly or through integer statements."""
    used = {n.name for s in node.statements for n in expr_names(_size_positions(s)) if is_capitalised(n.name)}
    for s in reversed(node.statements):
        if isinstance(s, ast.ElementwiseNode) and s.target.name in used and not is_statement_intrinsic(s.expr):
            used |= {n.name for n in expr_names([s.expr]) if is_capitalised(n.name)}
    return used


def scalar_bound_by_own_range(s: ast.ContractionNode, known: Container[str]) -> ast.Name | None:
    """The size symbol in the scalar of `+(A[i] / N)` that `s` itself binds from its output range
    (`O[i: N]`, N not `known` yet), if any: the scalar is applied to A before the statement runs, so
    such a size cannot be known where it is used."""
    if s.scalar is None or s.lhs.sizes is None:
        return None
    own = {e.name for index, e in zip(s.lhs.indices, s.lhs.sizes)
           if isinstance(e, ast.Name) and is_capitalised(e.name) and e.name not in known
           and isinstance(index, ast.Name) and not is_capitalised(index.name)}
    return next((n for n in expr_names([s.scalar.value]) if n.name in own), None)


def scalar_size_inputs(node: ast.ProgramNode) -> list[str]:
    """The scalar inputs (``S[]``, or without dims) that `node` reads as sizes somewhere, and never
    indexes as a tensor (`B[b, k, j]` names a tensor even where `B` also sizes an output)."""
    used = names_used_as_sizes(node)
    indexed = {a.tensor.name for s in node.statements if isinstance(s, ast.ContractionNode)
               for a in s.operands if a.indices}
    return [p.name.name for p in node.params if p.dims in (None, ()) and p.name.name in used - indexed]
