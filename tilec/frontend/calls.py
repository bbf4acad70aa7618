"""Semantic analysis of an elementwise builtin call: ``exp(X)``, ``as_int(X, 16)``, ``cmp_lt(A, B)``,
``assert_ok(N > 0)``.

Requires: a call that is not a statement intrinsic (tilec.frontend.intrinsics). Guarantees: its
tensor-IR expression — PlaidML's operator names (``cmp_*``, ``add``, ``cond``, ``neg``, ``ident``,
...) rewritten into the operators, conversions with a literal bit width, assertions over sizes
(tilec.ir.size_values) — or a SemanticError with the position of the name or argument at fault.
"""

from __future__ import annotations

from collections.abc import Callable

from tilec.errors import SemanticError
from tilec.frontend import ast
from tilec.frontend.intrinsics import STATEMENT_INTRINSICS
from tilec.ir import tensor as T
from tilec.ir.builtins import BUILTINS, CAST_WIDTHS, known_functions
from tilec.ir.size_values import is_assertion, is_size_expr

_OPERATOR_ALIASES = {"cmp_eq": "==", "cmp_ne": "!=", "cmp_lt": "<", "cmp_le": "<=", "cmp_gt": ">", "cmp_ge": ">=",
                     "add": "+", "sub": "-", "mul": "*", "div": "/"}


def analyse_call(e: ast.Call, error: Callable[[str, ast.Pos], SemanticError], constants: dict[str, int],
                 eexpr: Callable[[ast.Expr], T.EExpr]) -> T.EExpr:
    """A builtin call; PlaidML's names for operators become those operators. `constants` are the
    program's constant statements so far (a cast's width may name one); `eexpr` analyses an argument."""
    name = e.func.name
    if is_assertion(name):
        if len(e.args) != 1:
            raise error(f"'{name}' takes one argument, a condition on sizes, got {len(e.args)}", e.func.pos)
        call = T.ECall(name, (eexpr(e.args[0]),))
        if not is_size_expr(call):
            raise error(f"'{name}' is an assertion: its argument must be a condition on sizes and integers "
                              f"(e.g. {name}(N > 0)), checked when the sizes are bound", e.func.pos)
        return call
    builtin = BUILTINS.get(name)
    if builtin is None:
        raise error(f"unknown function '{name}'; the known functions are:\n{known_functions()}\n"
                          f"and, each as the whole right-hand side of its own statement: "
                          f"{', '.join(sorted(STATEMENT_INTRINSICS))}", e.func.pos)
    if len(e.args) != builtin.arity:
        raise error(f"'{name}' takes {builtin.arity} argument(s), got {len(e.args)}", e.func.pos)
    if name in CAST_WIDTHS:
        width = e.args[1]  # a literal, or a constant statement as PlaidML's EDSL prints it (`_X7 = 32;`)
        if isinstance(width, ast.Name) and width.name in constants:
            width = ast.Int(constants[width.name], width.pos)
        if not (isinstance(width, ast.Int) and width.value in CAST_WIDTHS[name]):
            allowed = ", ".join(map(str, CAST_WIDTHS[name]))
            raise error(f"the bit width of '{name}' must be an integer literal, one of {allowed}",
                              ast.expr_pos(width))
        return T.ECall(name, (eexpr(e.args[0]), T.EConst(width.value)))
    args = tuple(eexpr(a) for a in e.args)
    if name in _OPERATOR_ALIASES:
        op = _OPERATOR_ALIASES[name]
        return T.ECompare(op, *args) if op in ("==", "!=", "<", "<=", ">", ">=") else T.EBinary(op, *args)
    if name in ("cond", "select"):
        return T.ESelect(*args)
    if name == "neg":
        return T.EConst(-args[0].value) if isinstance(args[0], T.EConst) else T.EUnary("-", args[0])
    if name == "ident":
        return args[0]
    return T.ECall(name, args)
