"""Semantic analysis of statement-level intrinsics: ``O = gather(T, I);``, ``O = builtin_softmax(X, N, M);``.

The structural intrinsics (index, gather, scatter, reshape, shape; tilec.ir.intrinsics) become one
tensor-IR Intrinsic statement. PlaidML's ``builtin_*`` library functions, which PlaidML defines
as small Tile programs, are expanded here into ordinary contraction and elementwise statements
with fresh names (``O_max``, ``O_exp``, ...), so that templates and autodiff handle them as any
other program:

* ``builtin_softmax(X, R, C)``: the softmax of each row of the R x C matrix X (max-shifted);
* ``builtin_logsoftmax(X, R, C)``: its logarithm, ``X - (max + log(sum(exp(X - max))))``;
* ``builtin_binary_crossentropy(P, T, S)``: ``-T*log(P) - (1-T)*log(1-P)``; PlaidML uses S, a
  size, only to scale its hand-written derivative, so it is checked and otherwise ignored
  (tilec.grad gives the true derivative of the forward value).

Requires: the statement's target checked by sema; `hooks` give sema's checks of tensor names and
size expressions. Guarantees: the statements, or a SemanticError with line and column naming the
call and the argument at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from tilec.errors import SemanticError
from tilec.frontend import ast
from tilec.frontend.names import is_capitalised
from tilec.ir import tensor as T
from tilec.ir.intrinsics import SIGNATURES

LIBRARY = ("builtin_softmax", "builtin_logsoftmax", "builtin_binary_crossentropy")
STATEMENT_INTRINSICS = tuple(SIGNATURES) + LIBRARY


@dataclass(frozen=True)
class Hooks:
    """What this module needs of sema's scope (passed in, so that sema imports this module only)."""

    error: Callable[[str, ast.Pos], SemanticError]
    ranks: dict[str, int | None]  # defined tensors -> rank, updated for fresh names
    sizes: set[str]
    fresh: Callable[[str], str]  # a tensor name no source name or earlier temporary uses
    check_defined: Callable[[ast.Name], None]
    size_expr: Callable[[ast.Expr, str], T.IExpr]


def is_statement_intrinsic(expr: ast.Expr) -> TypeGuard[ast.Call]:
    return isinstance(expr, ast.Call) and expr.func.name in STATEMENT_INTRINSICS


def tensor_arguments(call: ast.Call) -> list[ast.Name]:
    """The arguments of a statement intrinsic that name tensors (the single-statement form's inputs):
    not the dimensions of index and reshape, nor the sizes the builtin_* functions take."""
    return [a for a in call.args[:_tensor_count(call)] if isinstance(a, ast.Name)]


def size_arguments(call: ast.Call) -> tuple[ast.Expr, ...]:
    """The arguments of a statement intrinsic that are sizes (index's dimension, reshape's
    dimensions, the builtin_* functions' row and column counts)."""
    return call.args[_tensor_count(call):]


def _tensor_count(call: ast.Call) -> int:
    name = call.func.name
    return 2 if name == "builtin_binary_crossentropy" else 1 if name in LIBRARY else SIGNATURES[name][0]


def analyse_intrinsic(target: ast.Name, call: ast.Call, hooks: Hooks) -> tuple[tuple[T.Statement, ...], int | None]:
    """The statements computing ``target = call`` and the target's rank (None: unknown yet)."""
    name = call.func.name
    if name in LIBRARY:
        return _library(target.name, call, hooks)
    count, params = SIGNATURES[name]
    if name == "reshape":
        if not call.args:
            raise hooks.error("'reshape' takes a tensor and its new dimensions, got no arguments", call.func.pos)
    elif len(call.args) != count + (1 if params else 0):
        wanted = f"{count} tensor(s)" + (f" and {params}" if params else "")
        raise hooks.error(f"'{name}' takes {wanted}: {count + (1 if params else 0)} argument(s), got "
                          f"{len(call.args)}", call.func.pos)
    tensors = tuple(_tensor_arg(a, name, k, hooks) for k, a in enumerate(call.args[:count]))
    ranks = [hooks.ranks[t] for t in tensors]
    rest = call.args[count:]
    if name == "index":
        (dim,) = rest
        if not isinstance(dim, ast.Int):
            raise hooks.error("'index' takes the dimension as an integer literal, e.g. index(T, 0)", ast.expr_pos(dim))
        if ranks[0] is not None and dim.value >= ranks[0]:
            raise hooks.error(f"'index': dimension {dim.value} is out of range for '{tensors[0]}' of rank "
                              f"{ranks[0]}", dim.pos)
        return (T.Intrinsic(target.name, name, tensors, (T.IConst(dim.value),)),), ranks[0]
    if name == "reshape":
        dims = tuple(hooks.size_expr(d, "dimension of 'reshape'") for d in rest)
        return (T.Intrinsic(target.name, name, tensors, dims),), len(dims)
    if name == "shape":
        return (T.Intrinsic(target.name, name, tensors),), 1
    data, indices = ranks[0], ranks[1]
    if name == "gather":
        if data == 0:
            raise hooks.error(f"'gather' needs a tensor of rank 1 or more; '{tensors[0]}' is a scalar",
                              ast.expr_pos(call.args[0]))
        rank = None if data is None or indices is None else indices + data - 1
    else:
        rank = None if data is None or indices is None else 1 + data - indices
        if rank is not None and rank < 1:
            raise hooks.error(f"'scatter': the values '{tensors[0]}' (rank {data}) must have at least the rank "
                              f"of the indices '{tensors[1]}' (rank {indices})", ast.expr_pos(call.args[0]))
    return (T.Intrinsic(target.name, name, tensors),), rank


def _tensor_arg(arg: ast.Expr, func: str, k: int, hooks: Hooks) -> str:
    if not isinstance(arg, ast.Name) or not is_capitalised(arg.name) or arg.name in hooks.sizes:
        raise hooks.error(f"argument {k + 1} of '{func}' must be a tensor name; give the expression its own "
                          f"statement first", ast.expr_pos(arg))
    hooks.check_defined(arg)
    return arg.name


def _library(out: str, call: ast.Call, hooks: Hooks) -> tuple[tuple[T.Statement, ...], int | None]:
    name = call.func.name
    if len(call.args) != 3:
        raise hooks.error(f"'{name}' takes 3 arguments, got {len(call.args)}", call.func.pos)
    first = _tensor_arg(call.args[0], name, 0, hooks)
    if name == "builtin_binary_crossentropy":
        target = _tensor_arg(call.args[1], name, 1, hooks)
        hooks.size_expr(call.args[2], f"third argument of '{name}'")
        p, t, one = T.ETensor(first), T.ETensor(target), T.EConst(1)
        loss = T.EBinary("-", T.EBinary("*", T.EUnary("-", t), T.ECall("log", (p,))),
                         T.EBinary("*", T.EBinary("-", one, t), T.ECall("log", (T.EBinary("-", one, p),))))
        ranks = [hooks.ranks[first], hooks.ranks[target]]
        rank = None if None in ranks else max(r for r in ranks if r is not None)
        return (T.Elementwise(out, loss),), rank
    rank = hooks.ranks[first]
    if rank is not None and rank != 2:
        raise hooks.error(f"'{name}' takes a matrix (rank 2); '{first}' has rank {rank}", ast.expr_pos(call.args[0]))
    hooks.ranks[first] = 2
    rows = hooks.size_expr(call.args[1], f"second argument of '{name}' (the number of rows)")
    hooks.size_expr(call.args[2], f"third argument of '{name}' (the number of columns)")
    names = {}
    for part in ("max", "exp", "sum"):
        names[part] = hooks.fresh(f"{out}_{part}")
        hooks.ranks[names[part]] = 2
    i, j = T.IVar("i"), T.IVar("j")
    row_max = T.Contraction(names["max"], (i, T.IConst(0)), (rows, T.IConst(1)), ">", "single",
                            (T.Access(first, (i, j)),))
    shifted = T.Elementwise(names["exp"], T.ECall("exp", (T.EBinary("-", T.ETensor(first), T.ETensor(names["max"])),)))
    row_sum = T.Contraction(names["sum"], (i, T.IConst(0)), (rows, T.IConst(1)), "+", "single",
                            (T.Access(names["exp"], (i, j)),))
    if name == "builtin_softmax":
        result = T.EBinary("/", T.ETensor(names["exp"]), T.ETensor(names["sum"]))
    else:
        log_sum = T.EBinary("+", T.ETensor(names["max"]), T.ECall("log", (T.ETensor(names["sum"]),)))
        result = T.EBinary("-", T.ETensor(first), log_sum)
    return (row_max, shifted, row_sum, T.Elementwise(out, result)), 2


__all__ = ["LIBRARY", "STATEMENT_INTRINSICS", "Hooks", "analyse_intrinsic", "is_statement_intrinsic", "size_arguments",
           "tensor_arguments"]
