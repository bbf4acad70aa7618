"""Lowering: BoundProgram -> PrimFunc (loop IR) with the default schedule.

Requires: a BoundProgram (sizes bound, ranges and guards inferred).
Guarantees: a PrimFunc whose params are inputs, outputs, temporaries and workspaces
(in that order) and that computes exactly the Tile semantics:

* A contraction whose output indices are distinct lone variables spanning the
  whole output ("direct" form) loops over the output cells, accumulates the
  reduction in a local register and stores each cell once.
* Any other contraction ("scatter" form: complex left-hand sides, partial
  coverage) initialises the output, scatters every tuple into it, and, where an
  aggregation has no neutral "unwritten" value, tracks written cells in a
  workspace so unwritten cells end up 0.
* A guard on the innermost variable it mentions becomes that loop's bounds
  (``max``/``min`` of affine expressions), so padding and triangular domains cost
  no branch in the inner loop; divisibility guards stay as ``if``.

`lower(bp, groups)` also assembles the groups that templates built for some statements
(tilec.schedule.lowering chooses and builds them first): lowering never calls the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundProgram, BoundStatement, Condition
from tilec.ir.index_width import INT64_MAX
from tilec.ir.elementwise import lower_expression
from tilec.ir.intrinsics import BoundIntrinsic
from tilec.ir.lower_intrinsics import lower_intrinsic
from tilec.ir.dtypes import accumulator_dtype, is_float, numpy_common

KERNEL_NAME = "tilec_kernel"


@dataclass(frozen=True)
class LoweredGroup:
    """What a template made of statements[start : start + consumed]."""

    stmt: L.Stmt
    workspaces: tuple[L.Buffer, ...] = ()
    consumed: int = 1  # statements covered, the first one included
    elided: tuple[str, ...] = ()  # temporaries the group never materialises


def lower(bp: BoundProgram, groups: Mapping[int, LoweredGroup] | None = None, name: str = KERNEL_NAME) -> L.PrimFunc:
    """The kernel of `bp`: at each statement index in `groups` the group a template built (covering
    `consumed` statements), the default nest of every other statement."""
    groups = groups or {}
    workspaces: list[L.Buffer] = []
    stmts: list[L.Stmt] = []
    elided: set[str] = set()
    k = 0
    while k < len(bp.statements):
        group = groups.get(k)
        if group is not None:
            stmts.append(group.stmt)
            workspaces += group.workspaces
            elided.update(group.elided)
            k += group.consumed
            continue
        stmts.append(lower_statement(bp.statements[k], bp, workspaces))
        k += 1
    body = L.seq(*stmts)
    temporaries = [t for t in bp.temporaries if t not in elided]
    names = list(bp.program.input_names) + list(bp.program.outputs) + temporaries
    params = [L.Buffer(n, bp.dtypes[n], bp.shapes[n]) for n in names] + workspaces
    return L.PrimFunc(name, tuple(params), body)


# ------------------------------------------------------------------ helpers


def affine_expr(e: IntAffine) -> L.Expr:
    """The integer numerator of `e` as an int64 expression: the constant plus each term in turn, or
    with g > 1 the gcd of the coefficients, ``g * (sum of (c/g) * v) + const``. That is the order
    tilec.ir.index_width proves free of overflow (keep the two in step)."""
    g = e.content or 1
    out: L.Expr = L.const(e.const if g == 1 else 0)
    for v, c in e.coeffs:
        term = L.mul(L.const(c // g), L.Var(v))
        out = L.add(term, out) if not (isinstance(out, L.Const) and out.value == 0) else term
    if g == 1:
        return out
    return L.add(L.mul(L.const(g), out), L.const(e.const))


def index_expr(e: IntAffine) -> L.Expr:
    """The index `e` (exact where its condition holds). A divisor beyond int64 exceeds every
    numerator there (index_width proves them below 2**63), so the index is 0 where it is valid."""
    num = affine_expr(e)
    if e.divisor == 1:
        return num
    return L.const(0) if e.divisor > INT64_MAX else L.Bin("div", num, L.const(e.divisor))


def condition_expr(c: Condition) -> L.Expr:
    num = affine_expr(c.expr)
    parts: list[L.Expr] = []
    if c.lo is not None:
        parts.append(L.Cmp("ge", num, L.const(c.lo)))
    if c.hi is not None:
        parts.append(L.Cmp("le", num, L.const(c.hi)))
    if c.expr.divisor > INT64_MAX:  # divides a numerator below 2**63 only when it is 0
        parts.append(L.Cmp("eq", num, L.const(0)))
    elif c.expr.divisor != 1:
        parts.append(L.Cmp("eq", L.Bin("mod", num, L.const(c.expr.divisor)), L.const(0)))
    return L.logical_and(parts) or L.Const(True, "bool")


def broadcast_indices(shape: tuple[int, ...], out_shape: tuple[int, ...], out_vars: list[L.Expr]) -> tuple[L.Expr, ...]:
    """Indices into a tensor of `shape` broadcast (numpy rules) against `out_shape`."""
    offset = len(out_shape) - len(shape)
    return tuple(L.const(0) if n == 1 and out_shape[offset + k] != 1 else out_vars[offset + k]
                 for k, n in enumerate(shape))


def identity(agg: str, dtype: str) -> L.Const:
    if agg in ("+", "=", "*"):
        return L.cast(dtype, L.Const(int(agg == "*"), "int64"))  # type: ignore[return-value]
    if dtype == "bool":
        return L.Const(agg == "<", dtype)
    if is_float(dtype):
        return L.Const(-np.inf if agg == ">" else np.inf, dtype)
    info = np.iinfo(dtype)
    return L.Const(int(info.min) if agg == ">" else int(info.max), dtype)


def combine(agg: str, acc: L.Expr, value: L.Expr) -> L.Expr:
    if agg == "=":
        return value
    if acc.dtype == "bool":
        return L.Bin("or" if agg in ("+", ">") else "and", acc, value)
    return L.Bin({"+": "add", "*": "mul", ">": "max", "<": "min"}[agg], acc, value)


def loop_nest(variables: list[tuple[str, int, int]], body: L.Stmt, guards: list[Condition]) -> L.Stmt:
    """Nest loops (outermost first) around `body`, turning guards into loop bounds where possible."""
    order = [v for v, _, _ in variables]
    lower: dict[str, list[L.Expr]] = {v: [] for v in order}
    upper: dict[str, list[L.Expr]] = {v: [] for v in order}
    ifs: dict[str | None, list[L.Expr]] = {}
    for g in guards:
        inner = max((v for v in g.expr.vars if v in order), key=order.index, default=None)
        if inner is None or g.expr.divisor != 1:
            ifs.setdefault(inner, []).append(condition_expr(g))
            continue
        c = dict(g.expr.coeffs)[inner]
        rest = IntAffine(tuple(t for t in g.expr.coeffs if t[0] != inner), g.expr.const)
        rest_expr, lo, hi = affine_expr(rest), g.lo, g.hi
        if c < 0:  # normalise to a positive coefficient: -|c| v + r in [lo, hi]  <=>  |c| v - r in [-hi, -lo]
            c, rest_expr = -c, L.neg(rest_expr)
            lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
        if lo is not None:  # v >= ceil((lo - r) / c) == -floor((r - lo) / c)
            num = L.sub(L.const(lo), rest_expr)
            lower[inner].append(num if c == 1 else L.neg(L.Bin("div", L.neg(num), L.const(c))))
        if hi is not None:  # v <= floor((hi - r) / c)
            num = L.sub(L.const(hi), rest_expr)
            upper[inner].append(num if c == 1 else L.Bin("div", num, L.const(c)))
    stmt = body
    if None in ifs:
        stmt = L.If(L.logical_and(ifs[None]), stmt)  # type: ignore[arg-type]
    for v, lo, hi in reversed(variables):
        if v in ifs:
            stmt = L.If(L.logical_and(ifs[v]), stmt)  # type: ignore[arg-type]
        begin: L.Expr = L.const(lo)
        for e in lower[v]:
            begin = L.Bin("max", begin, e)
        end: L.Expr = L.const(hi)
        for e in upper[v]:
            end = L.Bin("min", end, e)
        stmt = L.For(v, begin, L.add(end, L.const(1)), stmt)
    return stmt


def _cell_loops(shape: tuple[int, ...], prefix: str) -> tuple[list[tuple[str, int, int]], list[L.Expr]]:
    names = [f"{prefix}{k}" for k in range(len(shape))]
    return [(n, 0, d - 1) for n, d in zip(names, shape)], [L.Var(n) for n in names]


# ------------------------------------------------------------------ contractions


@dataclass(frozen=True)
class _Parts:
    """What every contraction form needs: the value of one tuple and its condition."""

    value: L.Expr
    cond: L.Expr | None  # the '==' of a ternary combination


def _tuple_value(b: BoundContraction, bp: BoundProgram) -> _Parts:
    """Each tuple's value, in the type the contraction accumulates in, and the condition under which it counts."""
    loads = [L.Load(a.tensor, tuple(index_expr(i) for i in a.indices), bp.dtypes[a.tensor]) for a in b.operands]
    dt = accumulator_dtype(b.dtype)

    def operand(x: L.Expr) -> L.Expr:  # converted to the contraction's type, then (exactly) to the accumulator's
        return L.cast(dt, L.cast(b.dtype, x))

    combo = b.stmt.combo
    if combo == "single":
        return _Parts(operand(loads[0]), None)
    if combo in ("mul", "add"):
        op = {"mul": "*", "add": "+"}[combo]
        return _Parts(combine(op, operand(loads[0]), operand(loads[1])), None)
    ct = numpy_common(loads[0].dtype, loads[1].dtype)
    equal = L.Cmp("eq", L.cast(ct, loads[0]), L.cast(ct, loads[1]))
    if combo == "eq":
        return _Parts(L.cast(dt, equal), None)
    return _Parts(operand(loads[2]), equal)


def _default_value(b: BoundContraction, bp: BoundProgram, cell: list[L.Expr]) -> L.Expr | None:
    d = b.stmt.default
    if d is None:
        return None
    return L.cast(b.dtype, L.Load(d, broadcast_indices(bp.shapes[d], b.shape, cell), bp.dtypes[d]))


def lower_statement(s: BoundStatement, bp: BoundProgram, workspaces: list[L.Buffer]) -> L.Stmt:
    """The default loop nest of one statement (appending any workspace it needs)."""
    if isinstance(s, BoundElementwise):
        return _lower_elementwise(s, bp)
    if isinstance(s, BoundIntrinsic):
        return lower_intrinsic(s, bp.shapes, bp.dtypes)
    return _lower_contraction(s, bp, workspaces)


def lone_output_vars(b: BoundContraction) -> list[str] | None:
    """The output's index variables when each output index is a distinct lone variable whose range
    lies inside its dimension (every tuple writes its own cell); None otherwise."""
    ranges = {v: (lo, hi) for v, lo, hi in b.ranges}
    out_vars: list[str] = []
    for e, n in zip(b.out_indices, b.shape):
        v = e.lone_var
        if v is None:
            return None
        lo, hi = ranges[v]
        if v in out_vars or lo < 0 or hi > n - 1:
            return None
        out_vars.append(v)
    return out_vars


def direct_output_vars(b: BoundContraction) -> list[str] | None:
    """Like lone_output_vars, and each range spans its whole dimension (every cell is one iteration)."""
    out_vars = lone_output_vars(b)
    ranges = {v: (lo, hi) for v, lo, hi in b.ranges}
    if out_vars is None or any(ranges[v] != (0, n - 1) for v, n in zip(out_vars, b.shape)):
        return None
    return out_vars


def zero_fill(name: str, shape: tuple[int, ...], dtype: str, parallel: bool = False) -> L.Stmt:
    """name[...] = 0 over the whole buffer (the outermost loop parallel if asked)."""
    cells, cell = _cell_loops(shape, f"{name}.z")
    nest = loop_nest(cells, L.Store(name, tuple(cell), L.cast(dtype, L.const(0))), [])
    if parallel and isinstance(nest, L.For):
        return replace(nest, kind="parallel")
    return nest


def _lower_contraction(b: BoundContraction, bp: BoundProgram, workspaces: list[L.Buffer]) -> L.Stmt:
    out = b.output
    if b.empty:  # no tuple contributes: the output is its default, or 0
        cells, cell = _cell_loops(b.shape, f"{out}.c")
        fill = _default_value(b, bp, cell) or L.cast(b.dtype, L.const(0))
        return loop_nest(cells, L.Store(out, tuple(cell), L.cast(b.dtype, fill)), [])
    if direct_output_vars(b) is not None:
        return _lower_direct(b, bp)
    return _lower_scatter(b, bp, workspaces)


def _needs_written_flag(b: BoundContraction, always_written: bool) -> bool:
    return b.stmt.agg in ("*", ">", "<") and b.stmt.default is None and not always_written


def _lower_direct(b: BoundContraction, bp: BoundProgram) -> L.Stmt:
    out, dt = b.output, accumulator_dtype(b.dtype)
    out_vars = [e.coeffs[0][0] for e in b.out_indices]
    reduce = [(v, lo, hi) for v, lo, hi in b.ranges if v not in out_vars]
    cell: list[L.Expr] = [L.Var(v) for v in out_vars]
    outer_guards = [g for g in b.guards if set(g.expr.vars) <= set(out_vars)]
    inner_guards = [g for g in b.guards if g not in outer_guards]
    parts = _tuple_value(b, bp)
    flagged = _needs_written_flag(b, always_written=not b.guards and parts.cond is None)

    acc = L.Buffer(f"{out}.acc", dt, (), "local")
    flag = L.Buffer(f"{out}.written", "bool", (), "local")
    acc_now = L.Load(acc.name, (), dt)
    update = L.seq(L.Store(acc.name, (), combine(b.stmt.agg, acc_now, parts.value)),
                   L.Store(flag.name, (), L.Const(True, "bool")) if flagged else None)
    if parts.cond is not None:
        update = L.If(parts.cond, update)
    reduction = loop_nest(reduce, update, inner_guards)
    if outer_guards:
        reduction = L.If(L.logical_and([condition_expr(g) for g in outer_guards]), reduction)  # type: ignore[arg-type]
    default = _default_value(b, bp, cell)
    init = L.cast(dt, default) if default is not None else identity(b.stmt.agg, dt)
    result: L.Expr = acc_now
    if flagged:
        result = L.Select(L.Load(flag.name, (), "bool"), acc_now, L.cast(dt, L.const(0)))
    per_cell = L.seq(L.Store(acc.name, (), init),
                     L.Store(flag.name, (), L.Const(False, "bool")) if flagged else None,
                     reduction,
                     L.Store(out, tuple(cell), L.cast(b.dtype, result)))
    cell_ranges = [(v, lo, hi) for v, lo, hi in b.ranges if v in out_vars]
    cell_ranges.sort(key=lambda r: out_vars.index(r[0]))
    body: L.Stmt = L.Allocate(acc, L.Allocate(flag, per_cell) if flagged else per_cell)
    return loop_nest(cell_ranges, body, [])


def one_tuple_per_cell(b: BoundContraction) -> bool:
    """Whether no two tuples of `b` land in the same output cell: every index variable in exactly one
    output index, whose terms are digits of a mixed radix (each coefficient larger than the span of
    the smaller ones: 2 u + z with z in [0, 2), a stride-2 transposed convolution's phases merged)."""
    extent = {v: hi - lo + 1 for v, lo, hi in b.ranges}
    seen: set[str] = set()
    for e in b.out_indices:
        if e.divisor != 1:
            return False
        span = 0
        for v, c in sorted(e.coeffs, key=lambda t: (abs(t[1]), extent.get(t[0], 1))):
            if v in seen:
                return False
            seen.add(v)
            if extent.get(v, 1) == 1:  # a lone value spans nothing (2 u + z with u in [0, 0] and z in [0, 3))
                continue
            if abs(c) <= span:
                return False
            span += abs(c) * (extent.get(v, 1) - 1)
    return all(v in seen or n == 1 for v, n in extent.items())


def _lower_scatter(b: BoundContraction, bp: BoundProgram, workspaces: list[L.Buffer]) -> L.Stmt:
    """Initialise, scatter every tuple, then (where needed) zero the unwritten cells; a 16-bit float
    output is accumulated in a float32 workspace and rounded once per cell, unless each cell gets
    one tuple at most (one_tuple_per_cell; its identity initial value is exact in any dtype)."""
    out, dt = b.output, accumulator_dtype(b.dtype)
    flagged = _needs_written_flag(b, always_written=False)
    once = dt != b.dtype and not flagged and b.stmt.default is None and one_tuple_per_cell(b)
    into = out if dt == b.dtype or once else f"{out}.acc"
    flag_name = f"{out}.written"
    cells, cell = _cell_loops(b.shape, f"{out}.c")
    default = _default_value(b, bp, cell)
    init = L.seq(L.Store(into, tuple(cell), L.cast(dt, default) if default is not None
                         else identity(b.stmt.agg, b.dtype if once else dt)),
                 L.Store(flag_name, tuple(cell), L.Const(False, "bool")) if flagged else None)
    parts = _tuple_value(b, bp)
    target = tuple(index_expr(e) for e in b.out_indices)
    now = identity(b.stmt.agg, dt) if once else L.Load(into, target, dt)  # once: the cell still holds its initial value
    update = L.seq(L.Store(into, target, L.cast(b.dtype, combine(b.stmt.agg, now, parts.value)) if once
                           else combine(b.stmt.agg, now, parts.value)),
                   L.Store(flag_name, target, L.Const(True, "bool")) if flagged else None)
    if parts.cond is not None:
        update = L.If(parts.cond, update)
    stmts = [loop_nest(cells, init, []), loop_nest(list(b.ranges), update, list(b.guards))]
    final: L.Expr | None = None
    if into != out:
        workspaces.append(L.Buffer(into, dt, b.shape))
        final = L.Load(into, tuple(cell), dt)
    if flagged:
        workspaces.append(L.Buffer(flag_name, "bool", b.shape))
        final = L.Select(L.Load(flag_name, tuple(cell), "bool"), L.Load(into, tuple(cell), dt), L.cast(dt, L.const(0)))
    if final is not None:
        stmts.append(loop_nest(cells, L.Store(out, tuple(cell), L.cast(b.dtype, final)), []))
    return L.seq(*stmts)


# ------------------------------------------------------------------ elementwise


def _lower_elementwise(b: BoundElementwise, bp: BoundProgram) -> L.Stmt:
    cells, cell = _cell_loops(b.shape, "i")

    def load(name: str) -> L.Expr:
        return L.Load(name, broadcast_indices(bp.shapes[name], b.shape, cell), bp.dtypes[name])

    try:
        value = lower_expression(b.stmt.expr, bp.dtypes, load, b.dtype)
    except BindError as err:
        raise BindError(f"{err} in '{b.stmt}'") from None
    return loop_nest(cells, L.Store(b.output, tuple(cell), value), [])


__all__ = ["KERNEL_NAME", "LoweredGroup", "lower", "lower_statement"]
