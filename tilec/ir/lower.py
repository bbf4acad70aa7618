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
* With `wide_sums` (the CPU templates' nests; not a user's Schedule, which names the plain nest's
  loops, nor a GPU), a float32 sum accumulates in float64 (sum_accumulator_dtype).

`lower(bp, groups)` also assembles the groups that templates built for some statements
(tilec.schedule.lowering chooses and builds them first): lowering never calls the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundProgram, BoundStatement
from tilec.ir.elementwise import lower_expression
from tilec.ir.intrinsics import BoundIntrinsic
from tilec.ir.lower_intrinsics import lower_intrinsic
from tilec.ir.loop_nest import broadcast_indices, cell_loops, condition_expr, index_expr, loop_nest
from tilec.ir.dtypes import accumulator_dtype, is_float, numpy_common

KERNEL_NAME = "tilec_kernel"


@dataclass(frozen=True)
class LoweredGroup:
    """What a template made of statements[start : start + consumed]."""

    stmt: L.Stmt
    workspaces: tuple[L.Buffer, ...] = ()
    consumed: int = 1  # statements covered, the first one included
    elided: tuple[str, ...] = ()  # temporaries the group never materialises


def lower(bp: BoundProgram, groups: Mapping[int, LoweredGroup] | None = None, name: str = KERNEL_NAME,
          wide_sums: bool = False) -> L.PrimFunc:
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
        stmts.append(lower_statement(bp.statements[k], bp, workspaces, wide_sums))
        k += 1
    body = L.seq(*stmts)
    temporaries = [t for t in bp.temporaries if t not in elided]
    names = list(bp.program.input_names) + list(bp.program.outputs) + temporaries
    params = [L.Buffer(n, bp.dtypes[n], bp.shapes[n]) for n in names] + workspaces
    return L.PrimFunc(name, tuple(params), body)


# ------------------------------------------------------------------ contractions


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


def tuple_operand(x: L.Expr, dtype: str, acc: str) -> L.Expr:
    """Operand `x` of a contraction of type `dtype` that accumulates in `acc`: converted to `dtype`,
    then (exactly) to `acc`; a value already in `acc` (a 16-bit temporary held in float32) goes
    unrounded."""
    return L.cast(acc, x if x.dtype == acc else L.cast(dtype, x))


@dataclass(frozen=True)
class _Parts:
    """What every contraction form needs: the value of one tuple and its condition."""

    value: L.Expr
    cond: L.Expr | None  # the '==' of a ternary combination


def _tuple_value(b: BoundContraction, bp: BoundProgram, dt: str) -> _Parts:
    """Each tuple's value, in the type `dt` the contraction accumulates in, and the condition under which it counts."""
    loads = [L.Load(a.tensor, tuple(index_expr(i) for i in a.indices), bp.dtypes[a.tensor]) for a in b.operands]

    def operand(x: L.Expr) -> L.Expr:
        return tuple_operand(x, b.dtype, dt)

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


def lower_statement(s: BoundStatement, bp: BoundProgram, workspaces: list[L.Buffer], wide_sums: bool = False) -> L.Stmt:
    """The default loop nest of one statement (appending any workspace it needs); with `wide_sums`,
    float32 sums accumulate in float64 (sum_accumulator_dtype)."""
    if isinstance(s, BoundElementwise):
        return _lower_elementwise(s, bp)
    if isinstance(s, BoundIntrinsic):
        return lower_intrinsic(s, bp.shapes, bp.dtypes)
    return _lower_contraction(s, bp, workspaces, wide_sums)


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
    cells, cell = cell_loops(shape, f"{name}.z")
    nest = loop_nest(cells, L.Store(name, tuple(cell), L.cast(dtype, L.const(0))), [])
    if parallel and isinstance(nest, L.For):
        return replace(nest, kind="parallel")
    return nest


def _lower_contraction(b: BoundContraction, bp: BoundProgram, workspaces: list[L.Buffer], wide_sums: bool) -> L.Stmt:
    out = b.output
    if b.empty:  # no tuple contributes: the output is its default, or 0
        cells, cell = cell_loops(b.shape, f"{out}.c")
        fill = _default_value(b, bp, cell) or L.cast(b.dtype, L.const(0))
        return loop_nest(cells, L.Store(out, tuple(cell), L.cast(b.dtype, fill)), [])
    if direct_output_vars(b) is not None:
        return _lower_direct(b, bp, wide_sums)
    return _lower_scatter(b, bp, workspaces, wide_sums)


def _needs_written_flag(b: BoundContraction, always_written: bool) -> bool:
    return b.stmt.agg in ("*", ">", "<") and b.stmt.default is None and not always_written


def _lower_direct(b: BoundContraction, bp: BoundProgram, wide_sums: bool) -> L.Stmt:
    out, dt = b.output, accumulator_dtype(b.dtype)
    out_vars = [e.coeffs[0][0] for e in b.out_indices]
    reduce = [(v, lo, hi) for v, lo, hi in b.ranges if v not in out_vars]
    cell: list[L.Expr] = [L.Var(v) for v in out_vars]
    outer_guards = [g for g in b.guards if set(g.expr.vars) <= set(out_vars)]
    inner_guards = [g for g in b.guards if g not in outer_guards]
    parts = _tuple_value(b, bp, dt)
    flagged = _needs_written_flag(b, always_written=not b.guards and parts.cond is None)

    acc = L.Buffer(f"{out}.acc", dt, (), "local")
    flag = L.Buffer(f"{out}.written", "bool", (), "local")
    acc_now = L.Load(acc.name, (), dt)
    update = L.seq(L.Store(acc.name, (), combine(b.stmt.agg, acc_now, parts.value)),
                   L.Store(flag.name, (), L.Const(True, "bool")) if flagged else None)
    if parts.cond is not None:
        update = L.If(parts.cond, update)
    split = _chunk_split(b, reduce) if wide_sums else None
    if split is None:
        reduction = loop_nest(reduce, update, inner_guards)
    else:  # float32 chunks over the inner loops, their sum in float64 (sum_accumulator_dtype)
        inner_vars = {v for v, _, _ in reduce[split:]}
        chunk_guards = [g for g in inner_guards if inner_vars & set(g.expr.vars)]
        total = L.Buffer(f"{out}.total", "float64", (), "local")
        total_now = L.Load(total.name, (), "float64")
        chunk = L.seq(L.Store(acc.name, (), identity("+", dt)),
                      loop_nest(reduce[split:], update, chunk_guards),
                      L.Store(total.name, (), L.Bin("add", total_now, L.cast("float64", acc_now))))
        reduction = L.Allocate(total, L.seq(
            L.Store(total.name, (), identity("+", "float64")),
            loop_nest(reduce[:split], chunk, [g for g in inner_guards if g not in chunk_guards]),
            L.Store(acc.name, (), L.cast(dt, total_now))))
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


def _chunk_split(b: BoundContraction, reduce: list[tuple[str, int, int]]) -> int | None:
    """Where a float32 sum's reduction loops split into chunks (reduce[split:], summed in float32,
    which the innermost loop's vector partial sums keep accurate) and the loops over chunks
    (reduce[:split], whose chunk sums add up in float64); None where the sum is not float32 or
    all its loops but the innermost one of more than one value run once."""
    if sum_accumulator_dtype(b.dtype, b.stmt.agg, single=not reduce) == accumulator_dtype(b.dtype) \
            or b.stmt.default is not None:
        return None
    long = [k for k, (_, lo, hi) in enumerate(reduce) if hi > lo]
    if len(long) < 2:
        return None
    return long[-1]


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


def sum_accumulator_dtype(dtype: str, agg: str, single: bool) -> str:
    """The type the default nest of a contraction of `dtype` sums its cells in: float64 for a
    float32 sum unless each cell gets one tuple at most (`single`), else accumulator_dtype. A
    default nest adds a cell's tuples in its loop order; in float32 a chain of thousands of terms
    drifts several ulp from the exact sum, further than torch's cascade sums do (a normalisation's
    statistics, a weight gradient's sum over batch and space). A scatter sums into a float64
    workspace (the output's size); a direct nest sums float32 chunks, one per pass of its innermost
    reduction loop, in float64 (_chunk_split). Templates keep their own blocked float32 sums; a
    user's Schedule and GPU kernels the plain float32 nest."""
    if dtype == "float32" and agg == "+" and not single:
        return "float64"
    return accumulator_dtype(dtype)


def _lower_scatter(b: BoundContraction, bp: BoundProgram, workspaces: list[L.Buffer], wide_sums: bool) -> L.Stmt:
    """Initialise, scatter every tuple, then (where needed) zero the unwritten cells; a 16-bit float
    output is accumulated in a float32 workspace and rounded once per cell, unless each cell gets
    one tuple at most (one_tuple_per_cell; its identity initial value is exact in any dtype)."""
    out = b.output
    flagged = _needs_written_flag(b, always_written=False)
    single = one_tuple_per_cell(b)
    dt = sum_accumulator_dtype(b.dtype, b.stmt.agg, single) if wide_sums else accumulator_dtype(b.dtype)
    once = dt != b.dtype and not flagged and b.stmt.default is None and single
    into = out if dt == b.dtype or once else f"{out}.acc"
    flag_name = f"{out}.written"
    cells, cell = cell_loops(b.shape, f"{out}.c")
    default = _default_value(b, bp, cell)
    init = L.seq(L.Store(into, tuple(cell), L.cast(dt, default) if default is not None
                         else identity(b.stmt.agg, b.dtype if once else dt)),
                 L.Store(flag_name, tuple(cell), L.Const(False, "bool")) if flagged else None)
    parts = _tuple_value(b, bp, dt)
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
    cells, cell = cell_loops(b.shape, "i")

    def load(name: str) -> L.Expr:
        return L.Load(name, broadcast_indices(bp.shapes[name], b.shape, cell), bp.dtypes[name])

    try:
        value = lower_expression(b.stmt.expr, bp.dtypes, load, b.dtype)
    except BindError as err:
        raise BindError(f"{err} in '{b.stmt}'") from None
    return loop_nest(cells, L.Store(b.output, tuple(cell), value), [])


__all__ = ["KERNEL_NAME", "LoweredGroup", "lower", "lower_statement"]
