"""Semantic analysis: syntax tree -> tensor IR (:mod:`tilec.ir.tensor`).

Checks every name: tensors and size symbols are capitalised, index variables are
lower-case; tensors are defined before use and assigned once; ranks agree between
declarations and accesses; index expressions are affine; builtins exist with the
right arity. Errors are :class:`~tilec.errors.SemanticError` naming the culprit
and its position.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections.abc import Iterable

from tilec.errors import SemanticError, caret_snippet
from tilec.frontend import ast
from tilec.frontend.size_uses import expr_names, scalar_bound_by_own_range, scalar_size_inputs
from tilec.frontend.names import IDENTIFIER, fresh_name, is_capitalised
from tilec.frontend.calls import analyse_call
from tilec.frontend.intrinsics import (STATEMENT_INTRINSICS, Hooks, analyse_intrinsic, is_statement_intrinsic,
                                      tensor_arguments)
from tilec.ir import tensor as T
from tilec.ir.size_values import SIZE_FUNCTIONS, constant_value, is_size_expr


@dataclass
class _Scope:
    source: str
    sizes: set[str]  # size symbols known so far (declared dims, output sizes, keywords)
    ranks: dict[str, int | None] = field(default_factory=dict)  # defined tensors -> rank
    inputs: set[str] = field(default_factory=set)
    taken: set[str] = field(default_factory=set)  # every name in the source: temporaries avoid them
    constants: dict[str, int] = field(default_factory=dict)  # size statements of literals only (`D = 0;`)
    tuples: dict[str, tuple[ast.Name, ...]] = field(default_factory=dict)  # `T = tuple(A, B);`

    def fresh(self, base: str) -> str:
        """A tensor name for a temporary (desugaring, intrinsics) that no source name and no earlier
        temporary uses."""
        name = fresh_name(base, self.taken, self.ranks, self.sizes)
        self.taken.add(name)
        return name

    def error(self, message: str, pos: ast.Pos) -> SemanticError:
        line, col = pos
        snippet = caret_snippet(self.source, line, col) if self.source else ""
        return SemanticError(f"{message} (line {line}, column {col})\n{snippet}".rstrip())


def analyse(node: ast.ProgramNode, source: str = "", size_names: Iterable[str] = ()) -> T.Program:
    """Check `node` and build its tensor IR. `size_names` are sizes given by keyword."""
    scope = _Scope(source, set(size_names), taken=set(IDENTIFIER.findall(source)))
    if node.single_statement:
        node = _as_function(node)
    params = tuple(_param(p, scope) for p in node.params)
    for name in scalar_size_inputs(node):  # a scalar input read as a size anywhere is a size everywhere
        scope.sizes.add(name)
        scope.ranks[name] = 0
    statements = tuple(out for s in node.statements for out in _statement(s, scope))
    outputs: list[str] = []
    for out in node.outputs:
        if out.name in scope.inputs:
            raise scope.error(f"output '{out.name}' is an input; an output must be computed by a statement", out.pos)
        if out.name in scope.tuples:
            raise scope.error(f"output '{out.name}' is a tuple; list its elements as outputs instead", out.pos)
        if out.name not in scope.ranks:
            raise scope.error(f"output '{out.name}' is never assigned; add a statement that computes it", out.pos)
        if out.name in outputs:
            raise scope.error(f"output '{out.name}' is listed twice", out.pos)
        outputs.append(out.name)
    if not outputs:  # the empty output list has no node: point at the arrow before it
        at = max(source.find("->"), 0)
        raise scope.error("the function has no outputs; list them after '->', e.g. '-> (C)'",
                          (source.count("\n", 0, at) + 1, at - source.rfind("\n", 0, at)))
    return T.Program(params, tuple(outputs), statements, source)


def _as_function(node: ast.ProgramNode) -> ast.ProgramNode:
    """Single-statement form: inputs are the tensors read on the right, in order."""
    (stmt,) = node.statements
    read: list[ast.Name] = []
    if isinstance(stmt, ast.ContractionNode):
        read = [a.tensor for a in stmt.operands]
        if isinstance(stmt.default, ast.Name):
            read.append(stmt.default)
        target = stmt.lhs.tensor
    else:
        names = tensor_arguments(stmt.expr) if is_statement_intrinsic(stmt.expr) else expr_names([stmt.expr])
        read = [n for n in names if is_capitalised(n.name)]
        target = stmt.target
    params: list[ast.ParamNode] = []
    for name in read:
        if name.name != target.name and all(p.name.name != name.name for p in params):
            params.append(ast.ParamNode(name, None))
    return ast.ProgramNode(tuple(params), (target,), node.statements, single_statement=False)


def _param(p: ast.ParamNode, scope: _Scope) -> T.TensorParam:
    name = p.name
    if not is_capitalised(name.name):
        raise scope.error(f"input '{name.name}' must be capitalised (tensor names start with an upper-case letter)", name.pos)
    if name.name in scope.ranks:
        raise scope.error(f"input '{name.name}' is declared twice", name.pos)
    dims: tuple[T.IExpr, ...] | None = None
    if p.dims is not None:
        out: list[T.IExpr] = []
        for d in p.dims:
            if isinstance(d, ast.Int):
                out.append(T.IConst(d.value))
            elif isinstance(d, ast.Name) and is_capitalised(d.name):
                scope.sizes.add(d.name)
                out.append(T.ISize(d.name))
            else:
                raise scope.error(
                    f"dimension of input '{name.name}' must be a size symbol (capitalised name) or an integer", ast.expr_pos(d))
        dims = tuple(out)
    scope.ranks[name.name] = None if dims is None else len(dims)
    scope.inputs.add(name.name)
    return T.TensorParam(name.name, dims, name.pos)


def _statement(s: ast.StatementNode, scope: _Scope) -> list[T.Statement]:
    """The statement's tensor IR, after the temporaries its scalar operands desugar to."""
    attributes = tuple(T.Attribute(a.name.name, tuple(p.name for p in a.params)) for a in s.attributes)
    if isinstance(s, ast.ContractionNode):
        before, s = _desugar_scalars(s, scope)
    else:
        before = []
    pos = s.lhs.tensor.pos if isinstance(s, ast.ContractionNode) else s.target.pos
    statements = [replace(st, pos=pos) for st in before + list(_plain_statement(s, scope))]
    if statements:  # a tuple's definition has none
        statements[-1] = replace(statements[-1], attributes=attributes)
    return statements


def _desugar_scalars(s: ast.ContractionNode, scope: _Scope) -> tuple[list[T.Statement], ast.ContractionNode]:
    """A scalar combined with the access (`+(A[i] * 0.125)`) becomes an elementwise temporary over the
    whole tensor (`T = A * 0.125; +(T[i])`), and a literal default a 0-d temporary: the rest of the
    compiler (templates, autodiff) sees plain contractions. Exact for every dtype, since the
    elementwise statement applies the same operation to each element the access reads."""
    before: list[T.Statement] = []
    if s.scalar is not None:
        _check_scalar_is_bound(s, scope)
        access = s.operands[0]
        _check_defined(access.tensor, scope)
        tensor, value = T.ETensor(access.tensor.name), _eexpr(s.scalar.value, scope)
        a, b = (value, tensor) if s.scalar.left else (tensor, value)
        name = scope.fresh(f"{s.lhs.tensor.name}_Operand")
        before.append(T.Elementwise(name, T.EBinary(s.scalar.op, a, b)))
        scope.ranks[name] = scope.ranks[access.tensor.name]
        s = replace(s, operands=(replace(access, tensor=ast.Name(name, access.tensor.pos)),), scalar=None)
    if s.default is not None and not isinstance(s.default, ast.Name):
        name = scope.fresh(f"{s.lhs.tensor.name}_Default")
        before.append(T.Elementwise(name, _eexpr(s.default, scope)))
        scope.ranks[name] = 0
        s = replace(s, default=ast.Name(name, ast.expr_pos(s.default)))
    return before, s


def _check_scalar_is_bound(s: ast.ContractionNode, scope: _Scope) -> None:
    name = scalar_bound_by_own_range(s, scope.sizes)
    if name is not None:
        raise scope.error(
            f"size '{name.name}' is bound by this statement's own output range, so it is not known yet where "
            f"the combination uses it (the combination is applied first); name it as an input's dimension "
            f"(e.g. 'A[{name.name}]'), or pass it as a keyword (tilec.compile(..., {name.name}=...))", name.pos)


def _plain_statement(s: ast.StatementNode, scope: _Scope) -> tuple[T.Statement, ...]:
    target = s.lhs.tensor if isinstance(s, ast.ContractionNode) else s.target
    if not is_capitalised(target.name):
        raise scope.error(f"'{target.name}' cannot be assigned: tensor names start with an upper-case letter", target.pos)
    if target.name in scope.inputs:
        raise scope.error(f"tensor '{target.name}' is an input and cannot be assigned", target.pos)
    if target.name in scope.ranks:
        raise scope.error(f"tensor '{target.name}' is assigned twice; give the second result a new name", target.pos)
    if target.name in scope.sizes:
        raise scope.error(f"'{target.name}' is a size symbol and cannot also name a tensor", target.pos)
    if isinstance(s, ast.ContractionNode):
        contraction = _contraction(s, scope)
        scope.ranks[target.name] = len(contraction.indices)
        return (contraction,)
    if isinstance(s.expr, ast.Call) and s.expr.func.name in ("tuple", "element"):
        return _tuple_statement(s.target, s.expr, scope)
    if is_statement_intrinsic(s.expr):
        return _intrinsic(s, scope)
    expr = _eexpr(s.expr, scope)
    scope.ranks[target.name] = _elementwise_rank(expr, scope)
    if is_size_expr(expr):  # an integer computed from sizes: also a size (tilec.ir.size_values)
        scope.sizes.add(target.name)
        if (value := constant_value(expr)) is not None:  # literals only: known now
            scope.constants[target.name] = value
    return (T.Elementwise(target.name, expr),)


def _tuple_statement(target: ast.Name, call: ast.Call, scope: _Scope) -> tuple[T.Statement, ...]:
    """PlaidML's tuples: ``T = tuple(A, B);`` names tensors together (no statement of its own);
    ``C = element(T, 1);`` is the copy ``C = B``."""
    if call.func.name == "tuple":
        names = [a for a in call.args if isinstance(a, ast.Name)]
        if len(names) != len(call.args) or not names:
            raise scope.error("a tuple's elements are tensor names: T = tuple(A, B)", call.func.pos)
        for name in names:
            _check_defined(name, scope)
        scope.tuples[target.name] = tuple(names)
        return ()
    tup, k = (call.args + (None, None))[:2]
    if len(call.args) != 2 or not isinstance(tup, ast.Name) or not isinstance(k, ast.Int):
        raise scope.error("element takes a tuple and an integer literal: element(T, 0)", call.func.pos)
    items = scope.tuples.get(tup.name)
    if items is None:
        raise scope.error(f"'{tup.name}' is not a tuple; define it first with '{tup.name} = tuple(A, B);'", tup.pos)
    if not 0 <= k.value < len(items):
        raise scope.error(f"tuple '{tup.name}' has {len(items)} elements; there is no element {k.value}", k.pos)
    scope.ranks[target.name] = scope.ranks[items[k.value].name]
    return (T.Elementwise(target.name, T.ETensor(items[k.value].name)),)


def _intrinsic(s: ast.ElementwiseNode, scope: _Scope) -> tuple[T.Statement, ...]:
    """A statement whose right-hand side is one intrinsic call (tilec.frontend.intrinsics)."""
    call = s.expr
    assert isinstance(call, ast.Call)
    if call.func.name == "index":  # the dimension may be a constant statement (`_X4 = 0; index(_X3, _X4)`)
        call = replace(call, args=tuple(
            ast.Int(scope.constants[a.name], a.pos) if isinstance(a, ast.Name) and a.name in scope.constants and k
            else a for k, a in enumerate(call.args)))
    hooks = Hooks(scope.error, scope.ranks, scope.sizes, scope.fresh, lambda n: _check_defined(n, scope),
                  lambda e, what: _size_expr(e, scope, what))
    statements, rank = analyse_intrinsic(s.target, call, hooks)
    scope.ranks[s.target.name] = rank
    return statements


def _elementwise_rank(expr: T.EExpr, scope: _Scope) -> int | None:
    ranks = [scope.ranks[n] for n in T.eexpr_tensors(expr)]
    if any(r is None for r in ranks):
        return None
    return max([r for r in ranks if r is not None], default=0)


# ------------------------------------------------------------------ contractions


def _contraction(s: ast.ContractionNode, scope: _Scope) -> T.Contraction:
    out = s.lhs.tensor
    sizes = None
    if s.lhs.sizes is not None:
        if len(s.lhs.sizes) != len(s.lhs.indices):
            raise scope.error(
                f"output '{out.name}' has {len(s.lhs.indices)} indices but {len(s.lhs.sizes)} sizes; give one size per index",
                out.pos)
        # A lone new size symbol over a lone index variable is bound from that variable's range.
        for index, e in zip(s.lhs.indices, s.lhs.sizes):
            if isinstance(e, ast.Name) and is_capitalised(e.name) and isinstance(index, ast.Name) \
                    and not is_capitalised(index.name):
                scope.sizes.add(e.name)
        sizes = tuple(_size_expr(e, scope, f"size of output '{out.name}'") for e in s.lhs.sizes)
    indices = tuple(_index_expr(e, scope) for e in s.lhs.indices)
    operands = tuple(_access(a, scope) for a in s.operands)
    constraints = tuple(
        T.Constraint(_index_expr(c.poly, scope), _size_expr(c.bound, scope, "constraint bound"))
        for c in s.constraints)
    default = None
    if s.default is not None:
        assert isinstance(s.default, ast.Name), "literal defaults are desugared first"
        _check_defined(s.default, scope)
        rank = scope.ranks[s.default.name]
        if rank is not None and rank > len(indices):
            raise scope.error(
                f"default tensor '{s.default.name}' has rank {rank}, more than output '{out.name}' (rank {len(indices)})",
                s.default.pos)
        default = s.default.name
    return T.Contraction(out.name, indices, sizes, s.agg, s.combo, operands, constraints, default, s.no_defract)


def _check_defined(name: ast.Name, scope: _Scope) -> None:
    if not is_capitalised(name.name):
        raise scope.error(f"'{name.name}' is used as a tensor but tensor names are capitalised", name.pos)
    if name.name in scope.tuples:
        raise scope.error(f"'{name.name}' is a tuple, not a tensor; read its elements with element({name.name}, k)",
                          name.pos)
    if name.name not in scope.ranks:
        known = ", ".join(sorted(scope.ranks)) or "none"
        raise scope.error(f"undefined tensor '{name.name}' (defined so far: {known})", name.pos)


def _access(a: ast.AccessNode, scope: _Scope) -> T.Access:
    _check_defined(a.tensor, scope)
    rank = scope.ranks[a.tensor.name]
    if rank is None:  # declared without dims: the first access fixes the rank
        scope.ranks[a.tensor.name] = len(a.indices)
    elif rank != len(a.indices):
        raise scope.error(
            f"rank mismatch: tensor '{a.tensor.name}' has rank {rank} but is indexed with {len(a.indices)} indices",
            a.tensor.pos)
    return T.Access(a.tensor.name, tuple(_index_expr(e, scope) for e in a.indices))


def _index_expr(e: ast.Expr, scope: _Scope) -> T.IExpr:
    """An affine polynomial in index variables with integer/size-symbol coefficients."""
    result = _iexpr(e, scope, allow_vars=True, what="index expression")
    _check_affine(result, e, scope)
    return result


def _size_expr(e: ast.Expr, scope: _Scope, what: str) -> T.IExpr:
    return _iexpr(e, scope, allow_vars=False, what=what)


def _iexpr(e: ast.Expr, scope: _Scope, allow_vars: bool, what: str) -> T.IExpr:
    if isinstance(e, ast.Int):
        return T.IConst(e.value)
    if isinstance(e, ast.Name):
        if is_capitalised(e.name):
            if e.name in scope.sizes:
                return T.ISize(e.name)
            if e.name in scope.inputs and scope.ranks[e.name] in (0, None):
                scope.ranks[e.name] = 0  # a scalar input read as a size: bound from its value per call
                return T.ISize(e.name)
            if allow_vars:
                raise scope.error(
                    f"index variable '{e.name}' is upper-case: upper-case names are size symbols and no size "
                    f"'{e.name}' is declared; index variables must be lower-case (did you mean '{e.name.lower()}'?)",
                    e.pos)
            raise scope.error(f"unbound size symbol '{e.name}' in {what}; declare it as an input dimension "
                              f"or pass it as a keyword (tilec.compile(..., {e.name}=...))", e.pos)
        if not allow_vars:
            raise scope.error(f"index variable '{e.name}' cannot appear in a {what}; use size symbols and integers", e.pos)
        return T.IVar(e.name)
    if isinstance(e, ast.Neg):
        return T.INeg(_iexpr(e.a, scope, allow_vars, what))
    if isinstance(e, ast.Bin):
        return T.IBin(e.op, _iexpr(e.a, scope, allow_vars, what), _iexpr(e.b, scope, allow_vars, what))
    if isinstance(e, ast.Call):
        if e.func.name not in SIZE_FUNCTIONS or len(e.args) != 2:
            raise scope.error(f"'{e.func.name}' cannot appear in a {what}: the functions allowed there are "
                              f"max(a, b) and min(a, b)", e.func.pos)
        a, b = (_iexpr(x, scope, allow_vars, what) for x in e.args)
        if T.iexpr_names(a)[0] or T.iexpr_names(b)[0]:
            raise scope.error(f"'{e.func.name}' of index variables is not affine; use it on sizes only", e.func.pos)
        return T.IBin(e.func.name, a, b)
    raise scope.error(f"a {what} must be an integer expression", ast.expr_pos(e))


def _check_affine(e: T.IExpr, node: ast.Expr, scope: _Scope) -> None:
    if isinstance(e, T.IBin) and e.op in SIZE_FUNCTIONS:
        return  # max/min of sizes: checked by _iexpr
    if isinstance(e, T.IBin):
        _check_affine(e.a, node.a, scope)  # type: ignore[union-attr]
        _check_affine(e.b, node.b, scope)  # type: ignore[union-attr]
        a_vars = T.iexpr_names(e.a)[0]
        b_vars = T.iexpr_names(e.b)[0]
        if e.op == "*" and a_vars and b_vars:
            raise scope.error(
                f"index expression is not affine: product of index variables {sorted(a_vars)} and {sorted(b_vars)}",
                ast.expr_pos(node))
        if e.op == "/" and b_vars:
            raise scope.error(f"index expression is not affine: division by index variable(s) {sorted(b_vars)}",
                              ast.expr_pos(node))
    elif isinstance(e, T.INeg):
        _check_affine(e.a, node.a, scope)  # type: ignore[union-attr]


# ------------------------------------------------------------------ elementwise


def _eexpr(e: ast.Expr, scope: _Scope) -> T.EExpr:
    if isinstance(e, ast.Int):
        return T.EConst(e.value)
    if isinstance(e, ast.Float):
        return T.EConst(e.value)
    if isinstance(e, ast.Name):
        if not is_capitalised(e.name):
            raise scope.error(
                f"'{e.name}' is lower-case: elementwise statements work on whole tensors (capitalised names) and take "
                f"no index variables; use a contraction 'O[i, ...] = ...' for indexed access", e.pos)
        if e.name in scope.sizes:  # sizes are integer values (statements computed from sizes included)
            return T.ESize(e.name)
        if e.name in scope.ranks:
            return T.ETensor(e.name)
        _check_defined(e, scope)
    if isinstance(e, ast.Neg):
        inner = _eexpr(e.a, scope)
        if isinstance(inner, T.EConst):
            return T.EConst(-inner.value)
        return T.EUnary("-", inner)
    if isinstance(e, ast.Bin):
        return T.EBinary(e.op, _eexpr(e.a, scope), _eexpr(e.b, scope))
    if isinstance(e, ast.Compare):
        return T.ECompare(e.op, _eexpr(e.a, scope), _eexpr(e.b, scope))
    if isinstance(e, ast.Select):
        return T.ESelect(_eexpr(e.cond, scope), _eexpr(e.a, scope), _eexpr(e.b, scope))
    if isinstance(e, ast.Call):
        if e.func.name in STATEMENT_INTRINSICS:
            raise scope.error(f"'{e.func.name}' must be the whole right-hand side of its own statement, e.g. "
                              f"'X = {e.func.name}(...);', then use X here", e.func.pos)
        return analyse_call(e, scope.error, scope.constants, lambda x: _eexpr(x, scope))
    raise scope.error("unsupported expression", ast.expr_pos(e))
