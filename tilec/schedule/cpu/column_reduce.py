"""Column reductions: ``O[x] = +(A[j, x])`` with the reduction outside the vector loop.

Gradients of broadcast operands (a bias, a layer norm's gain) sum a [rows, K] tensor over its
rows. The default direct nest loops over the output cells and reduces each down a column, a
stride-K walk through memory per cell. Here the cells' accumulators are the output itself:

    for outer...:                                  (parallel: each thread its output rows)
      O[outer..., x] = identity                    (vectorised)
      for reduction vars:  for x (vectorised in blocks of `lanes`, a scalar tail):
        O[outer..., x] = O[outer..., x] (+) A[..., x]

Without outer variables the threads split the columns instead, whole vectors each.

so every load is unit-stride in x. Each cell combines its tuples in the reduction variables' loop
order, as the default nest does (the vector emitter marks the update reassociable, so LLVM may
regroup a float sum). A float32 sum adds CHUNK_ROWS rows at a time into the output row, and those
chunks into a float64 row (a workspace, rounded into the output at the end): one float32 chain
down 4096 rows ended 19 x eps x sum|A| from the exact sum, torch's cascade sum 0.9 x.

Requires: a BoundContraction. Guarantees: `match` accepts only a direct output (each index a lone
variable spanning its dimension, or 0 on an axis of size 1: torch's keepdim sums), aggregation + > or <, one operand ("single"), no guards and no
default, whose operand's last index is the output's last variable (alone) and whose other indices
do not mention it; `build` computes the default lowering's result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.dtypes import accumulator_dtype
from tilec.ir.lower import LoweredGroup, combine, identity, sum_accumulator_dtype
from tilec.ir.loop_nest import index_expr, loop_nest
from tilec.ir.rewrite import map_expr
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.target import Target


CHUNK_ROWS = 64  # rows a float32 column sum adds before its float64 total takes the chunk


@dataclass(frozen=True)
class ColumnPlan:
    outer: tuple[tuple[str, int, int], ...]  # output variables before the last, loop order
    prefix: tuple[str | None, ...]  # the output's indices before the last: a variable, or None for 0
    reduce: tuple[tuple[str, int, int], ...]  # reduction variables, loop order
    column: tuple[str, int, int]  # the output's last variable


def match(b: BoundContraction) -> ColumnPlan | None:
    if b.empty or b.guards or b.stmt.default is not None or b.stmt.agg not in "+><" or b.stmt.combo != "single":
        return None
    cell = _output_cell(b)
    if not cell or cell[-1] is None or b.shape[-1] < 2:
        return None
    out_vars = [v for v in cell if v is not None]
    col = cell[-1]
    access = b.operands[0]
    last = access.indices[-1] if access.indices else None
    if last is None or last.coeffs != ((col, 1),) or last.const or last.divisor != 1:
        return None
    if any(col in e.vars for e in access.indices[:-1]):
        return None
    ranges = {v: (v, lo, hi) for v, lo, hi in b.ranges}
    reduce = tuple(r for r in b.ranges if r[0] not in out_vars)
    if not reduce:
        return None
    return ColumnPlan(tuple(ranges[v] for v in out_vars[:-1]), cell[:-1], reduce, ranges[col])


def _output_cell(b: BoundContraction) -> tuple[str | None, ...] | None:
    """Each output index's variable (distinct, spanning its dimension), or None where the index is
    0 on an axis of size 1; None when some index is neither."""
    ranges = {v: (lo, hi) for v, lo, hi in b.ranges}
    cell: list[str | None] = []
    for e, n in zip(b.out_indices, b.shape):
        if e.lone_var is not None and e.lone_var not in cell and ranges[e.lone_var] == (0, n - 1):
            cell.append(e.lone_var)
        elif not e.coeffs and e.const == 0 and n == 1:
            cell.append(None)
        else:
            return None
    return tuple(cell)


def build(plan: ColumnPlan, b: BoundContraction, bp: BoundProgram, target: Target,
          parallel_min_cells: int) -> LoweredGroup:
    dt, agg = b.dtype, b.stmt.agg
    lanes = max(2, target.vector_bits // (64 if dt in ("float64", "int64") else 32))
    col, lo, hi = plan.column
    outer = [L.const(0) if v is None else L.Var(v) for v in plan.prefix]
    access = b.operands[0]

    def at(x: L.Expr) -> L.Stmt:
        cell = tuple(outer) + (x,)

        def place(e: L.Expr) -> L.Expr:
            return x if isinstance(e, L.Var) and e.name == col else e

        value = L.cast(dt, L.Load(access.tensor, tuple(map_expr(index_expr(i), place) for i in access.indices),
                                  bp.dtypes[access.tensor]))
        return L.Store(b.output, cell, combine(agg, L.Load(b.output, cell, dt), value))

    def init(x: L.Expr) -> L.Stmt:
        return L.Store(b.output, tuple(outer) + (x,), identity(agg, dt))

    def sweep(make: Callable[[L.Expr], L.Stmt], tag: str, begin: L.Expr, end: L.Expr) -> L.Stmt:
        """make(x) for x in [begin, end): vectors of `lanes` columns, then a scalar tail."""
        jo, ji, jt = f"{col}.{tag}o", f"{col}.{tag}i", f"{col}.{tag}t"
        blocks = L.Bin("div", L.sub(end, begin), L.const(lanes))
        x = L.add(L.add(L.mul(L.Var(jo), L.const(lanes)), L.Var(ji)), begin)
        return L.seq(L.For(jo, L.const(0), blocks, L.For(ji, L.const(0), L.const(lanes), make(x), "vectorized")),
                     L.For(jt, L.add(begin, L.mul(blocks, L.const(lanes))), end, make(L.Var(jt))))

    wide = sum_accumulator_dtype(dt, agg, single=False) != accumulator_dtype(dt)  # chunks summed in float64
    total = L.Buffer(f"{b.output}.total", "float64", b.shape)

    def total_at(x: L.Expr) -> tuple[L.Expr, ...]:
        return tuple(outer) + (x,)

    def clear_total(x: L.Expr) -> L.Stmt:
        return L.Store(total.name, total_at(x), identity("+", "float64"))

    def add_chunk(x: L.Expr) -> L.Stmt:
        chunk = L.cast("float64", L.Load(b.output, total_at(x), dt))
        return L.Store(total.name, total_at(x), L.Bin("add", L.Load(total.name, total_at(x), "float64"), chunk))

    def round_total(x: L.Expr) -> L.Stmt:
        return L.Store(b.output, total_at(x), L.cast(dt, L.Load(total.name, total_at(x), "float64")))

    def columns(begin: L.Expr, end: L.Expr) -> L.Stmt:
        if not wide:
            return L.seq(sweep(init, "z", begin, end), loop_nest(list(plan.reduce), sweep(at, "r", begin, end), []))
        *outer_reduce, (v, v_lo, v_hi) = plan.reduce
        full, tail = divmod(v_hi - v_lo + 1, CHUNK_ROWS)

        def chunk(first: L.Expr, rows: int) -> L.Stmt:
            return L.seq(sweep(init, "z", begin, end), L.For(v, first, L.add(first, L.const(rows)), sweep(at, "r", begin, end)),
                         sweep(add_chunk, "a", begin, end))

        chunks = L.seq(
            L.For(f"{v}.b", L.const(0), L.const(full), chunk(L.add(L.mul(L.Var(f"{v}.b"), L.const(CHUNK_ROWS)),
                                                                   L.const(v_lo)), CHUNK_ROWS)) if full else None,
            chunk(L.const(v_lo + full * CHUNK_ROWS), tail) if tail else None)
        return L.seq(sweep(clear_total, "c", begin, end), loop_nest(outer_reduce, chunks, []),
                     sweep(round_total, "w", begin, end))

    n = hi - lo + 1
    work = math.prod(h - low + 1 for _, low, h in b.ranges)
    parallel = target.cores >= 2 and work >= parallel_min_cells
    if plan.outer:
        nest = loop_nest(list(plan.outer), columns(L.const(lo), L.const(hi + 1)), [])
        if isinstance(nest, L.For) and parallel and plan.outer[0][2] - plan.outer[0][1] + 1 >= target.cores:
            nest = replace(nest, kind="parallel")  # each outer cell owns its own output row
    elif parallel and n >= 2 * lanes:  # each thread owns a contiguous range of whole vectors of columns
        threads = min(target.cores, n // lanes)
        per = -(-n // threads // lanes) * lanes
        t = f"{col}.t"
        begin = L.add(L.mul(L.Var(t), L.const(per)), L.const(lo))
        nest = L.For(t, L.const(0), L.const(threads),
                     columns(begin, L.Bin("min", L.add(begin, L.const(per)), L.const(hi + 1))), "parallel")
    else:
        nest = columns(L.const(lo), L.const(hi + 1))
    return LoweredGroup(nest, (total,) if wide else ())


class ColumnReduce(Template):
    name = "column_reduce"
    kind = "cpu"
    requirement = ("it needs a sum, max or min over leading axes onto a direct output whose last index is "
                   "the operand's last index alone")

    def match(self, index: int, ctx: Context) -> ColumnPlan | None:
        b = ctx.bp.statements[index]
        return match(b) if isinstance(b, BoundContraction) else None

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        b = ctx.bp.statements[choice.index]
        assert isinstance(b, BoundContraction)
        return build(choice.plan, b, ctx.bp, ctx.target, ctx.params.parallel_min_cells)


COLUMN_REDUCE = ColumnReduce()

__all__ = ["COLUMN_REDUCE", "ColumnPlan", "ColumnReduce", "build", "match"]
