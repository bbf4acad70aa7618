"""Bind size symbols and infer index bounds: tensor IR + argument shapes -> BoundProgram.

Semantics (the README's tour of the language): a tuple of index values contributes exactly when every
access index (left and right) is inside its tensor and every constraint holds.
Each index variable gets an integer range implied by those conditions (interval
propagation to a fixpoint, which is sound: it never drops a valid tuple); the
conditions the ranges do not already imply become guards. Output sizes that are
a lone unbound size symbol over a lone index variable are bound from that
variable's range; omitted output sizes are inferred the same way.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Union

import numpy as np

from tilec.errors import BindError, SemanticError, TilecWarning, located
from tilec.ir.feasibility import check_feasible
from tilec.ir import tensor as T
from tilec.ir.affine import INF, IntAffine, evaluate_size, to_affine
from tilec.ir.dtypes import contraction_dtype, elementwise_dtype, expr_type
from tilec.ir import size_values
from tilec.ir.intrinsics import BoundIntrinsic, bind_intrinsic


@dataclass(frozen=True)
class Condition:
    """``lo <= expr.numerator <= hi`` and ``expr.divisor`` divides the numerator."""

    expr: IntAffine
    lo: float
    hi: float

    def __str__(self) -> str:
        num = IntAffine(self.expr.coeffs, self.expr.const)
        parts = []
        if self.lo != -INF:
            parts.append(f"{num} >= {int(self.lo)}")
        if self.hi != INF:
            parts.append(f"{num} <= {int(self.hi)}")
        if self.expr.divisor != 1:
            parts.append(f"{num} % {self.expr.divisor} == 0")
        return " && ".join(parts)


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
    """Bind every size symbol and infer every statement's shape, dtype, ranges and guards."""
    env = _Env(dict(sizes or {}))
    for param in program.params:
        with located(param.pos, program.source):  # call-time errors say where the input is declared
            _bind_param(param, tuple(shapes[param.name]), env)
        env.shapes[param.name] = tuple(shapes[param.name])
        env.dtypes[param.name] = dtypes[param.name]
    bound: list[BoundStatement] = []
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


def _bind_param(param: T.TensorParam, shape: tuple[int, ...], env: _Env) -> None:
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
            known = env.sizes.get(dim.name)
            if known is not None and known != extent:
                raise BindError(f"size symbol '{dim.name}' disagrees: argument '{param.name}' has shape {shape}, "
                                f"so {dim.name} = {extent} (dimension {axis}), but {dim.name} = {known} already "
                                f"(from an earlier argument or keyword)")
            env.sizes[dim.name] = extent


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
    _check_lone_extents(stmt, operands, env)
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
    _check_index_width(conds + [Condition(e, -INF, INF) for e in out_idx], what)
    ranges = _propagate(conds, variables)
    if deferred:
        shape_fix = {}
        for axis in deferred:
            lo, hi = out_idx[axis].interval(ranges)
            if any(ranges[v][0] > ranges[v][1] for v in variables):
                check_feasible(stmt.output, [env.shapes[a.tensor] for a in operands], ranges, what)
                hi = -1  # no tuple at all (an input is empty): the inferred dimension is empty
            elif hi == INF:
                raise SemanticError(f"cannot infer dimension {axis} of output '{stmt.output}' in {what}: its index "
                                    f"is unbounded; give the output sizes explicitly")
            n = max(0, int(hi) // out_idx[axis].divisor + 1)
            shape_fix[axis] = n
            size_expr = stmt.sizes[axis] if stmt.sizes is not None else None
            if isinstance(size_expr, T.ISize):
                env.sizes[size_expr.name] = n
            conds.append(Condition(out_idx[axis], 0, out_idx[axis].divisor * (n - 1)))
        known_dims.update(shape_fix)
        ranges = _propagate(conds, variables)
    shape = tuple(known_dims[a] for a in range(len(out_idx)))
    if any(n >= _INDEX_LIMIT for n in shape):
        raise BindError(f"output '{stmt.output}' would have shape {shape} in {what}: too large to index")
    if any(n < 0 for n in shape):
        raise BindError(f"output '{stmt.output}' would have negative shape {shape} in {what}")

    for v in variables:
        lo, hi = ranges[v]
        if lo == -INF or hi == INF:
            raise SemanticError(f"index variable '{v}' is unbounded in {what}: no access or constraint limits its "
                                f"range; index a tensor with it or add a constraint like '{v} < N'")
    empty = any(ranges[v][0] > ranges[v][1] for v in variables) or 0 in shape
    guards = () if empty else _guards(conds, ranges)
    int_ranges = tuple((v, int(ranges[v][0]), int(ranges[v][1])) for v in variables)
    if stmt.agg == "=" and not empty:
        _check_single_assignment(stmt, out_idx, int_ranges, guards)

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
    return BoundContraction(stmt, shape, dtype, out_idx, tuple(operands), int_ranges, guards, empty)


def _check_lone_extents(stmt: T.Contraction, operands: list[BoundAccess], env: _Env) -> None:
    """Tile semantics make an index variable used alone in dimensions of different extents run over
    their intersection. Across two different inputs that is usually a shape bug (a matmul with
    disagreeing K), so say so with a TilecWarning, unless a constraint on the variable shows the
    truncation is meant. (Within one tensor it is ordinary: the diagonal of a rectangular matrix.)"""
    constrained = {v for c in stmt.constraints for v in T.iexpr_names(c.poly)[0]}
    seen: dict[str, tuple[str, int, int]] = {}
    for access in operands:
        for axis, e in enumerate(access.indices):
            if len(e.coeffs) != 1 or e.coeffs[0][1] != 1 or e.const != 0 or e.divisor != 1:
                continue
            v = e.coeffs[0][0]
            extent = env.shapes[access.tensor][axis]
            first = seen.setdefault(v, (access.tensor, axis, extent))
            if first[2] != extent and first[0] != access.tensor and v not in constrained:
                warnings.warn(TilecWarning(
                    f"index '{v}' in '{stmt}' runs over {first[2]} values in '{first[0]}' (dimension {first[1]}, "
                    f"shape {env.shapes[first[0]]}) but over {extent} in '{access.tensor}' (dimension {axis}, shape "
                    f"{env.shapes[access.tensor]}); tilec uses the first {min(first[2], extent)} values (their "
                    f"intersection). Make the shapes agree, or add the constraint '{v} < {min(first[2], extent)}' "
                    f"to say the truncation is intended"), stacklevel=2)
                return


_INDEX_LIMIT = 2**62  # index arithmetic is int64; leave headroom for sums of terms


def _check_index_width(conds: list[Condition], what: str) -> None:
    for cond in conds:
        values = [float(abs(c)) for _, c in cond.expr.coeffs] + [float(abs(cond.expr.const))]
        values += [abs(b) for b in (cond.lo, cond.hi) if b not in (INF, -INF)]
        if max(values) >= _INDEX_LIMIT:
            raise BindError(f"index arithmetic in {what} exceeds 64 bits (a coefficient, offset or size of "
                            f"{max(values)}); use smaller sizes")


def _is_bound(size: T.IExpr, sizes: dict[str, int]) -> bool:
    return T.iexpr_names(size)[1] <= sizes.keys()


def _inferable(size: T.IExpr, index: T.IExpr) -> bool:
    return isinstance(size, T.ISize) and isinstance(index, T.IVar)


def _floor_div(x: float, c: int) -> float:
    return x / c if x in (INF, -INF) else Fraction(int(x), c).__floor__() if c else x


def _ceil_div(x: float, c: int) -> float:
    return x / c if x in (INF, -INF) else Fraction(int(x), c).__ceil__() if c else x


def _propagate(conds: list[Condition], variables: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """Tighten each variable's interval from every condition until nothing changes."""
    ranges: dict[str, tuple[float, float]] = {v: (-INF, INF) for v in variables}
    for _ in range(64):  # bounded: pathological systems stop with a sound (looser) box
        changed = False
        for cond in conds:
            for v, c in cond.expr.coeffs:
                rest = IntAffine(tuple(t for t in cond.expr.coeffs if t[0] != v), cond.expr.const)
                rlo, rhi = rest.interval(ranges)
                num_lo, num_hi = cond.lo - rhi, cond.hi - rlo  # c*v in [num_lo, num_hi]
                if c > 0:
                    new_lo, new_hi = _ceil_div(num_lo, c), _floor_div(num_hi, c)
                else:
                    new_lo, new_hi = _ceil_div(num_hi, c), _floor_div(num_lo, c)
                lo, hi = ranges[v]
                lo2, hi2 = max(lo, new_lo), min(hi, new_hi)
                if (lo2, hi2) != (lo, hi):
                    ranges[v] = (lo2, hi2)
                    changed = True
        if not changed or any(lo > hi for lo, hi in ranges.values()):
            break
    return ranges


def _guards(conds: list[Condition], ranges: dict[str, tuple[float, float]]) -> tuple[Condition, ...]:
    """The conditions the ranges do not already imply, deduplicated."""
    out: dict[tuple, Condition] = {}
    for cond in conds:
        lo, hi = cond.expr.interval(ranges)
        divisible = all(c % cond.expr.divisor == 0 for _, c in cond.expr.coeffs) and \
            cond.expr.const % cond.expr.divisor == 0
        need_lo, need_hi = lo < cond.lo, hi > cond.hi
        if not (need_lo or need_hi or not divisible):
            continue
        key = (cond.expr.coeffs, cond.expr.const, cond.expr.divisor)
        prev = out.get(key)
        new_lo = cond.lo if need_lo else -INF
        new_hi = cond.hi if need_hi else INF
        if prev is not None:
            new_lo, new_hi = max(prev.lo, new_lo), min(prev.hi, new_hi)
        out[key] = Condition(cond.expr, new_lo, new_hi)
    return tuple(out.values())


def _check_single_assignment(stmt: T.Contraction, out_idx: tuple[IntAffine, ...],
                             ranges: tuple[tuple[str, int, int], ...], guards: tuple[Condition, ...]) -> None:
    """Under '=' two tuples must not write one cell. The compiler sees it for sure when a variable
    that takes several values does not appear on the left at all (and no constraint ties it down);
    left-hand sides such as ``M*i + j`` can still be injective on the box, so they are trusted."""
    if stmt.constraints or guards:
        return
    lhs_vars = {v for e in out_idx for v in e.vars}
    free = [v for v, lo, hi in ranges if hi > lo and v not in lhs_vars]
    if free:
        raise SemanticError(f"'=' in '{stmt}' writes some output cells more than once: index variable(s) "
                            f"{', '.join(repr(v) for v in free)} do not appear on the left; use an aggregation such "
                            f"as '+' or '>' instead, or add constraints")


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


__all__ = ["bind", "BoundProgram", "BoundContraction", "BoundElementwise", "BoundIntrinsic", "BoundAccess", "Condition", "describe"]
