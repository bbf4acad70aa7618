"""Column reductions: ``O[x] = +(A[j, x])`` with the reduction outside the vector loop.

Gradients of broadcast operands (a bias, a layer norm's gain) sum a [rows, K] tensor over its
rows. The default direct nest loops over the output cells and reduces each down a column, a
stride-K walk through memory per cell. Here a strip of columns (UNITS vectors) keeps its
accumulators in registers while it walks the rows, every load a unit-stride vector in x:

    for outer...:                          (parallel: each thread its output rows)
      for each strip of columns:           (UNITS vectors, then single vectors, then single columns)
        regs = identity
        for reduction vars:  regs (+)= A[..., strip]
        O[outer..., strip] = regs

Without outer variables the threads split the columns instead, whole vectors each. When the rows
(the innermost reduction variable) outnumber BLOCK_ROWS, the walk goes BLOCK_ROWS rows at a time
across every strip, the partial sums waiting in memory between blocks (the output, or a workspace
in the accumulator type): a strip that walked all rows of a wide tensor (a [1024, 30000] LM-head
bias gradient) read a page per row, 1.9x slower than 16 rows streamed side by side.

Each cell combines its tuples in the reduction variables' loop order, as the default nest does.
The accumulators are sum_accumulator_dtype's: float64 for a float32 sum (a float32 chain down
4096 rows ended 19 x eps x sum|A| from the exact sum, torch's cascade sum 0.9 x; float32 chunks
of 64 rows, 1.6 x on 21 rows), float32 for the 16-bit floats, rounded into the output once.

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
from tilec.ir.dtypes import bit_width
from tilec.ir.lower import LoweredGroup, combine, identity, sum_accumulator_dtype
from tilec.ir.loop_nest import index_expr, loop_nest
from tilec.ir.rewrite import map_expr
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.target import Target


BLOCK_ROWS = 16  # rows a strip sums in registers before its partial sums go back to memory (16 row streams)
UNITS = 4  # vectors of accumulators a strip of columns keeps in registers while it walks the rows


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
    acc = sum_accumulator_dtype(dt, agg, single=False)  # float64 for a float32 sum
    lanes = max(2, target.vector_bits // bit_width(acc))
    col, lo, hi = plan.column
    outer = [L.const(0) if v is None else L.Var(v) for v in plan.prefix]
    access = b.operands[0]

    def operand(x: L.Expr) -> L.Expr:
        def place(e: L.Expr) -> L.Expr:
            return x if isinstance(e, L.Var) and e.name == col else e

        load = L.Load(access.tensor, tuple(map_expr(index_expr(i), place) for i in access.indices),
                      bp.dtypes[access.tensor])
        return L.cast(acc, L.cast(dt, load))

    carrier = b.output if acc == dt else f"{b.output}.total"  # where a blocked sum's partial sums wait
    workspaces = () if carrier == b.output else (L.Buffer(carrier, acc, b.shape),)

    def cell(x: L.Expr) -> tuple[L.Expr, ...]:
        return tuple(outer) + (x,)

    def strip(first: L.Expr, units: int, width: int, tag: str, start: Callable[[L.Expr], L.Expr],
              rows: Callable[[L.Stmt], L.Stmt] | None, finish: Callable[[L.Expr, L.Expr], L.Stmt]) -> L.Stmt:
        """Columns [first, first + units * width): accumulators start(x), kept in registers (a local
        buffer of `units` unrolled vectors of `width` lanes) while rows(update), the reduction loops
        around the update, walk the rows (if given), then finish(x, accumulator)."""
        regs = L.Buffer(f"{b.output}.{tag}regs", acc, (units * width,), "local")
        u, i = f"{col}.{tag}u", f"{col}.{tag}i"
        slot = L.add(L.mul(L.Var(u), L.const(width)), L.Var(i))
        x = L.add(first, slot)

        def each(body: L.Stmt) -> L.Stmt:
            return L.For(u, L.const(0), L.const(units), L.For(i, L.const(0), L.const(width), body,
                                                               "vectorized" if width > 1 else "serial"), "unrolled")

        reg = L.Load(regs.name, (slot,), acc)
        update = each(L.Store(regs.name, (slot,), combine(agg, reg, operand(x))))
        return L.Allocate(regs, L.seq(each(L.Store(regs.name, (slot,), start(x))), rows(update) if rows else None,
                                      each(finish(x, reg))))

    def over_strips(begin: L.Expr, end: L.Expr, tag: str, make: Callable[[L.Expr, int, int, str], L.Stmt]) -> L.Stmt:
        """make(first, units, width, tag) over [begin, end): strips of UNITS vectors, then single
        vectors, then one column at a time."""
        s, v, t = f"{col}.{tag}s", f"{col}.{tag}v", f"{col}.{tag}t"
        wide = UNITS * lanes
        strips = L.Bin("div", L.sub(end, begin), L.const(wide))
        after_strips = L.add(begin, L.mul(strips, L.const(wide)))
        vectors = L.Bin("div", L.sub(end, after_strips), L.const(lanes))
        after_vectors = L.add(after_strips, L.mul(vectors, L.const(lanes)))
        return L.seq(
            L.For(s, L.const(0), strips, make(L.add(begin, L.mul(L.Var(s), L.const(wide))), UNITS, lanes, tag + "s")),
            L.For(v, L.const(0), vectors, make(L.add(after_strips, L.mul(L.Var(v), L.const(lanes))), 1, lanes, tag + "v")),
            L.For(t, after_vectors, end, make(L.Var(t), 1, 1, tag + "t")))

    def to_output(x: L.Expr, reg: L.Expr) -> L.Stmt:
        return L.Store(b.output, cell(x), L.cast(dt, reg))

    *outer_reduce, (j, j_lo, j_hi) = plan.reduce
    full, tail = divmod(j_hi - j_lo + 1, BLOCK_ROWS)

    def columns(begin: L.Expr, end: L.Expr) -> L.Stmt:
        if not full or (full == 1 and not tail):  # one block of rows: the accumulators never leave registers
            return over_strips(begin, end, "", lambda f, u, w, t: strip(
                f, u, w, t, lambda x: identity(agg, acc), lambda body: loop_nest(list(plan.reduce), body, []), to_output))

        def block(first: L.Expr, count: int) -> L.Stmt:
            return over_strips(begin, end, "b", lambda f, u, w, t: strip(
                f, u, w, t, lambda x: L.Load(carrier, cell(x), acc),
                lambda body: L.For(j, first, L.add(first, L.const(count)), body),
                lambda x, reg: L.Store(carrier, cell(x), reg)))

        blocks = L.seq(
            L.For(f"{j}.b", L.const(0), L.const(full), block(L.add(L.mul(L.Var(f"{j}.b"), L.const(BLOCK_ROWS)),
                                                                    L.const(j_lo)), BLOCK_ROWS)),
            block(L.const(j_lo + full * BLOCK_ROWS), tail) if tail else None)
        clear = over_strips(begin, end, "z", lambda f, u, w, t: strip(f, u, w, t, lambda x: identity(agg, acc), None,
                                                                       lambda x, reg: L.Store(carrier, cell(x), reg)))
        rounded = None if carrier == b.output else over_strips(begin, end, "w", lambda f, u, w, t: strip(
            f, u, w, t, lambda x: L.Load(carrier, cell(x), acc), None, to_output))
        return L.seq(clear, loop_nest(outer_reduce, blocks, []), rounded)

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
        t = f"{col}.th"
        begin = L.add(L.mul(L.Var(t), L.const(per)), L.const(lo))
        nest = L.For(t, L.const(0), L.const(threads),
                     columns(begin, L.Bin("min", L.add(begin, L.const(per)), L.const(hi + 1))), "parallel")
    else:
        nest = columns(L.const(lo), L.const(hi + 1))
    return LoweredGroup(nest, workspaces)


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
