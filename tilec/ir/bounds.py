"""Bind size symbols and infer index bounds: tensor IR + argument shapes -> BoundProgram.

Semantics (the README's tour of the language): a tuple of index values contributes exactly when every
access index (left and right) is inside its tensor and every constraint holds.
Each index variable gets an integer range implied by those conditions, computed in exact
Python-int arithmetic over the whole statement (tilec.ir.conditions: gcd-normalised conditions,
interval propagation and Fourier–Motzkin projection; sound: it never drops a valid tuple); the
conditions the ranges do not already imply become guards, and tilec.ir.index_width proves the
index arithmetic lowering emits fits int64 (or refuses the statement). Output sizes that are
a lone unbound size symbol over a lone index variable are bound from that
variable's range; omitted output sizes are inferred the same way, beside any variable whose
range is empty (such a dimension keeps its extent; the output is then all default). An empty
output needs no ranges.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Union

import numpy as np

from tilec.errors import BindError, SemanticError, located
from tilec.ir.contraction_checks import check_single_assignment, warn_lone_extents
from tilec.ir.feasibility import check_feasible
from tilec.ir import tensor as T
from tilec.ir import index_width, size_values
from tilec.ir.affine import IntAffine, evaluate_size, to_affine
from tilec.ir.conditions import Condition, Ranges, guards, infer_ranges, is_empty, normalise, propagate
from tilec.ir.dtypes import contraction_dtype, elementwise_dtype, expr_type, Widening
from tilec.ir.intrinsics import BoundIntrinsic, bind_intrinsic


@dataclass(frozen=True)
class BoundAccess:
    tensor: str
    indices: tuple[IntAffine, ...]


@dataclass(frozen=True)
class BoundContraction:
    stmt: T.Contraction
    shape: tuple[int, ...]
    dtype: str
    out_indices: tuple[IntAffine, ...]
    operands: tuple[BoundAccess, ...]
    ranges: tuple[tuple[str, int, int], ...]  # (var, lo, hi) inclusive, loop order
    guards: tuple[Condition, ...]
    empty: bool  # some index range is empty: no tuple contributes

    @property
    def output(self) -> str:
        return self.stmt.output


@dataclass(frozen=True)
class BoundElementwise:
    stmt: T.Elementwise
    shape: tuple[int, ...]
    dtype: str

    @property
    def output(self) -> str:
        return self.stmt.output


BoundStatement = Union[BoundContraction, BoundElementwise, BoundIntrinsic]


@dataclass(frozen=True)
class BoundProgram:
    program: T.Program
    sizes: dict[str, int]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    statements: tuple[BoundStatement, ...]

    @property
    def temporaries(self) -> tuple[str, ...]:
        """Tensors computed by the program that are not outputs."""
        return tuple(s.output for s in self.statements if s.output not in self.program.outputs)


@dataclass
class _Env:
    sizes: dict[str, int]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    weak: set[str] = field(default_factory=set)  # 0-d results of literal-only statements (a literal default)


def bind(program: T.Program, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
         sizes: dict[str, int] | None = None) -> BoundProgram:
    """Bind every size symbol and infer every statement's shape, dtype, ranges and guards (the
    dtypes of the 16-bit float temporaries held in float32 are float32: tilec.ir.dtypes)."""
    env = _Env(dict(sizes or {}))
    for param in program.params:
        with located(param.pos, program.source):  # call-time errors say where the input is declared
            bind_param(param, tuple(shapes[param.name]), env.sizes)
        env.shapes[param.name] = tuple(shapes[param.name])
        env.dtypes[param.name] = dtypes[param.name]
    bound: list[BoundStatement] = []
    widening, widened = Widening(program), set()  # 16-bit temporaries held in float32
    for stmt in program.statements:
        b: BoundStatement
        with located(stmt.pos, program.source):  # ... and where the statement is
            if isinstance(stmt, T.Contraction):
                b = _bind_contraction(stmt, env)
            elif isinstance(stmt, T.Intrinsic):
                b = bind_intrinsic(stmt, env.shapes, env.dtypes, env.sizes)
            else:
                b = _bind_elementwise(stmt, env)
        env.shapes[stmt.output] = b.shape
        env.dtypes[stmt.output] = b.dtype
        bound.append(b)
        if widening.held(stmt, b.dtype):
            widened.add(stmt.output)
    if widened:  # (after every statement is typed: their declared types decide the readers' types)
        bound = [replace(b, dtype="float32") if b.output in widened else b for b in bound]
        env.dtypes.update(dict.fromkeys(widened, "float32"))
    _check_memory(bound)
    return BoundProgram(program, env.sizes, env.shapes, env.dtypes, tuple(bound))


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**62


def _check_memory(statements: list[BoundStatement]) -> None:
    """Refuse results larger than the machine: Linux would hand out the memory lazily and kill
    the process when the kernel touches it, instead of raising."""
    need = sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize for s in statements)
    have = _physical_memory()
    if need > have:
        listing = ", ".join(f"{s.output} {s.dtype}{list(s.shape)}" for s in statements)
        raise BindError(f"the program's results need {need / 2**30:.1f} GiB but this machine has "
                        f"{have / 2**30:.1f} GiB ({listing}); check the output sizes")


def bind_param(param: T.TensorParam, shape: tuple[int, ...], sizes: dict[str, int]) -> None:
    """Bind the size symbols of an input's declared dims to its shape into `sizes` (a BindError
    where the rank, a literal dim or an earlier binding disagrees)."""
    if param.dims is None:
        return
    if len(shape) != len(param.dims):
        raise BindError(f"argument '{param.name}' has shape {shape} (rank {len(shape)}) but is declared as "
                        f"{param} (rank {len(param.dims)})")
    for axis, (dim, extent) in enumerate(zip(param.dims, shape)):
        if isinstance(dim, T.IConst):
            if dim.value != extent:
                raise BindError(f"argument '{param.name}' has shape {shape}, but dimension {axis} is declared as "
                                f"{dim.value}")
        elif isinstance(dim, T.ISize):
            known = sizes.get(dim.name)
            if known is not None and known != extent:
                raise BindError(f"size symbol '{dim.name}' disagrees: argument '{param.name}' has shape {shape}, "
                                f"so {dim.name} = {extent} (dimension {axis}), but {dim.name} = {known} already "
                                f"(from an earlier argument or keyword)")
            sizes[dim.name] = extent


def _check_rank(access: T.Access, env: _Env) -> tuple[int, ...]:
    shape = env.shapes[access.tensor]
    if len(shape) != len(access.indices):
        raise BindError(f"tensor '{access.tensor}' has shape {shape} (rank {len(shape)}) but the program indexes "
                        f"it as {access} (rank {len(access.indices)})")
    return shape


def _access_conditions(indices: tuple[IntAffine, ...], shape: tuple[int, ...]) -> list[Condition]:
    return [Condition(e, 0, e.divisor * (n - 1)) for e, n in zip(indices, shape)]


def _bind_contraction(stmt: T.Contraction, env: _Env) -> BoundContraction:
    what = f"statement '{stmt}'"
    operands = []
    conds: list[Condition] = []
    for access in stmt.operands:
        shape = _check_rank(access, env)
        idx = tuple(to_affine(e, env.sizes, what).to_int() for e in access.indices)
        operands.append(BoundAccess(access.tensor, idx))
        conds += _access_conditions(idx, shape)
    warn_lone_extents(stmt, [(o.tensor, o.indices) for o in operands], env.shapes)
    for c in stmt.constraints:
        bound = evaluate_size(c.bound, env.sizes, f"constraint '{c}'")
        e = to_affine(c.poly, env.sizes, what).to_int()
        conds.append(Condition(e, 0, e.divisor * (bound - 1)))
    out_idx = tuple(to_affine(e, env.sizes, what).to_int() for e in stmt.indices)

    # Output dims whose size is known now constrain the tuples; others are inferred.
    known_dims: dict[int, int] = {}
    deferred: list[int] = []
    for axis in range(len(out_idx)):
        size_expr = stmt.sizes[axis] if stmt.sizes is not None else None
        if size_expr is None or (_inferable(size_expr, stmt.indices[axis]) and not _is_bound(size_expr, env.sizes)):
            deferred.append(axis)
        else:  # raises a clear error if a symbol is unbound
            known_dims[axis] = evaluate_size(size_expr, env.sizes, f"size of output '{stmt.output}'")
    for axis, n in known_dims.items():
        conds.append(Condition(out_idx[axis], 0, out_idx[axis].divisor * (n - 1)))

    variables = stmt.index_vars
    conds = [normalise(c) for c in conds]
    ranges = infer_ranges(conds, variables)
    if deferred:
        known_dims.update(_infer_dims(stmt, deferred, out_idx, conds, ranges, env, what))
        check_feasible(stmt, [known_dims[a] for a in deferred], [env.shapes[a.tensor] for a in operands],
                       lambda e: evaluate_size(e, env.sizes, what), what)
        for axis in deferred:
            conds.append(normalise(Condition(out_idx[axis], 0, out_idx[axis].divisor * (known_dims[axis] - 1))))
        ranges = infer_ranges(conds, variables)
    shape = tuple(known_dims[a] for a in range(len(out_idx)))
    if any(n >= _INDEX_LIMIT for n in shape):
        raise BindError(index_width.abbreviate_numbers(
            f"index arithmetic exceeds 64 bits in {what}: output '{stmt.output}' would have shape {shape}, too large "
            f"to index"))
    if any(n < 0 for n in shape):
        raise BindError(f"output '{stmt.output}' would have negative shape {shape} in {what}")

    empty = any(is_empty(r) for r in ranges.values()) or 0 in shape
    for v in variables:  # an empty output needs no ranges
        lo, hi = ranges[v]
        if not empty and (lo is None or hi is None):
            raise SemanticError(f"index variable '{v}' is unbounded in {what}: no access or constraint limits its "
                                f"range; index a tensor with it or add a constraint like '{v} < N'")
    kept = () if empty else guards(conds, ranges)
    int_ranges = tuple((v, lo, hi) if lo is not None and hi is not None and not empty else (v, 0, -1)
                       for v, (lo, hi) in ((v, ranges[v]) for v in variables))
    if not empty:
        operands, out_idx, kept = _fit_index_width(operands, out_idx, shape, kept, int_ranges, env, what)
    if stmt.agg == "=" and not empty:
        check_single_assignment(stmt, out_idx, int_ranges, kept)

    default_dtype = None
    if stmt.default is not None:
        dshape = env.shapes[stmt.default]
        try:
            np.broadcast_shapes(dshape, shape)
        except ValueError:
            raise BindError(f"default tensor '{stmt.default}' has shape {dshape}, which does not broadcast to "
                            f"output '{stmt.output}' of shape {shape}") from None
        default_dtype = None if stmt.default in env.weak else env.dtypes[stmt.default]
    dtype = contraction_dtype(stmt.combo, [env.dtypes[a.tensor] for a in stmt.operands], default_dtype)
    return BoundContraction(stmt, shape, dtype, out_idx, tuple(operands), int_ranges, kept, empty)


def contraction_shape(stmt: T.Contraction, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
                      sizes: dict[str, int]) -> tuple[int, ...]:
    """The output shape of `stmt` over tensors of these shapes, by the language's shape rule (explicit
    sizes evaluated, the others inferred from the index ranges); binds the size symbols it infers
    into `sizes`. For the reference interpreter, which computes every value itself."""
    return _bind_contraction(stmt, _Env(sizes, dict(shapes), dict(dtypes))).shape


def _infer_dims(stmt: T.Contraction, deferred: list[int], out_idx: tuple[IntAffine, ...], conds: list[Condition],
                ranges: Ranges, env: _Env, what: str) -> dict[int, int]:
    """The extents of the output dimensions without a known size, from their indices' ranges (the
    ranges beside any empty variable's: a dimension indexed by an empty variable is 0), binding a
    lone size symbol given for one."""
    dead: set[str] = set()
    no_tuple = any(is_empty(r) for r in ranges.values())
    if no_tuple:
        ranges, dead = _ranges_beside_empty(conds, stmt.index_vars)
    dims: dict[int, int] = {}
    for axis in deferred:
        e = out_idx[axis]
        if set(e.vars) & dead:
            n = 0
        else:
            lo, hi = e.interval(ranges)
            if hi is None:
                if no_tuple:  # nothing bounds it, and nothing is written anyway
                    hi = -1
                else:
                    raise SemanticError(f"cannot infer dimension {axis} of output '{stmt.output}' in {what}: its "
                                        f"index is unbounded; give the output sizes explicitly")
            n = max(0, hi // e.divisor + 1)
        dims[axis] = n
        size_expr = stmt.sizes[axis] if stmt.sizes is not None else None
        if isinstance(size_expr, T.ISize):
            env.sizes[size_expr.name] = n
    return dims


_INDEX_LIMIT = 2**62  # output dimensions at or above this cannot be indexed


def _is_bound(size: T.IExpr, sizes: dict[str, int]) -> bool:
    return T.iexpr_names(size)[1] <= sizes.keys()


def _inferable(size: T.IExpr, index: T.IExpr) -> bool:
    return isinstance(size, T.ISize) and isinstance(index, T.IVar)


def _fit_index_width(operands: list[BoundAccess], out_idx: tuple[IntAffine, ...], shape: tuple[int, ...],
                     kept: tuple[Condition, ...], ranges: tuple[tuple[str, int, int], ...], env: _Env,
                     what: str) -> tuple[list[BoundAccess], tuple[IntAffine, ...], tuple[Condition, ...]]:
    """The accesses, output indices and guards, proven to fit int64 (tilec.ir.index_width); where they
    do not as written, the same with every variable that takes a single value replaced by it (an
    enormous coefficient times a variable fixed at 0 is just 0), or a BindError."""
    box = {v: (lo, hi) for v, lo, hi in ranges}

    def extents(ops: list[BoundAccess], out: tuple[IntAffine, ...]) -> list[tuple[IntAffine, int]]:
        pairs = [(e, n) for a in ops for e, n in zip(a.indices, env.shapes[a.tensor])]
        return pairs + list(zip(out, shape))

    try:
        index_width.check(extents(operands, out_idx), kept, box, what)
        return operands, out_idx, kept
    except BindError:
        points = {v: lo for v, lo, hi in ranges if lo == hi}
        if not points:
            raise
    ops = [BoundAccess(a.tensor, tuple(e.substitute(points) for e in a.indices)) for a in operands]
    out = tuple(e.substitute(points) for e in out_idx)
    fixed = tuple(normalise(Condition(g.expr.substitute(points), g.lo, g.hi)) for g in kept)
    index_width.check(extents(ops, out), fixed, box, what)
    return ops, out, fixed


def _ranges_beside_empty(conds: list[Condition], variables: tuple[str, ...]) -> tuple[Ranges, set[str]]:
    """For a statement without any tuple: the variables whose own (single-variable) conditions are
    empty, and the ranges the others get from the conditions that do not mention those (an output
    dimension takes its variable's range even when another variable has none); where the rest
    still contradict each other, each variable's own range. Deterministic, order-free."""
    own = propagate([c for c in conds if len(c.expr.coeffs) == 1], variables)
    dead = {v for v in variables if is_empty(own[v])}
    ranges = infer_ranges([c for c in conds if not set(c.expr.vars) & dead], variables)
    if any(is_empty(ranges[v]) for v in variables if v not in dead):
        ranges = own
    return ranges, dead


def _bind_elementwise(stmt: T.Elementwise, env: _Env) -> BoundElementwise:
    """A statement computed from sizes defines a size too (PlaidML's rounding: tilec.ir.size_values);
    sizes read as values become integer literals."""
    what = f"statement '{stmt}'"
    if size_values.is_size_expr(stmt.expr):
        value = size_values.evaluate(stmt.expr, env.sizes, what)
        known = env.sizes.get(stmt.output)
        if known is not None and known != value:
            raise BindError(f"size '{stmt.output}' is given as {known} but {what} computes {value}")
        env.sizes[stmt.output] = value
        stmt = replace(stmt, expr=T.EConst(value))
    else:
        stmt = replace(stmt, expr=size_values.substitute(stmt.expr, env.sizes, what))
    if isinstance(expr_type(stmt.expr, env.dtypes), type):
        env.weak.add(stmt.output)
    names = T.eexpr_tensors(stmt.expr)
    try:
        shape = tuple(np.broadcast_shapes(*[env.shapes[n] for n in names])) if names else ()
    except ValueError:
        listing = ", ".join(f"{n} {env.shapes[n]}" for n in names)
        raise BindError(f"shapes do not broadcast in '{stmt}': {listing}") from None
    dtype = elementwise_dtype(stmt.expr, env.dtypes)
    return BoundElementwise(stmt, shape, dtype)


def describe(b: BoundContraction) -> str:
    """One line per range and guard, for `tilec explain`."""
    ranges = ", ".join(f"{v} in [{lo}, {hi}]" for v, lo, hi in b.ranges)
    guards = "; ".join(str(g) for g in b.guards) or "none"
    return f"ranges: {ranges or '(scalar)'}; guards: {guards}"


__all__ = ["bind", "bind_param", "contraction_shape", "BoundProgram", "BoundContraction", "BoundElementwise", "BoundIntrinsic", "BoundAccess", "Condition", "describe"]
