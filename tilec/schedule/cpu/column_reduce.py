"""Column reductions: ``O[x] = +(A[j, x])`` with the reduction outside the vector loop.

Gradients of broadcast operands (a bias, a layer norm's gain) sum a [rows, K] tensor over its
rows. The default direct nest loops over the output cells and reduces each down a column, a
stride-K walk through memory per cell. Here the cells' accumulators are the output itself:

    O[outer..., x] = identity                      (vectorised)
    for outer...:  for reduction vars:  for x (vectorised in blocks of `lanes`, a scalar tail):
        O[outer..., x] = O[outer..., x] (+) A[..., x]

so every load is unit-stride in x. Each cell combines its tuples in the reduction variables' loop
order, as the default nest does (the vector emitter marks the update reassociable, so LLVM may
regroup a float sum).

Requires: a BoundContraction. Guarantees: `match` accepts only a direct output (each index a lone
variable spanning its dimension), aggregation + > or <, one operand ("single"), no guards and no
default, whose operand's last index is the output's last variable (alone) and whose other indices
do not mention it; `build` computes the default lowering's result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup, combine, direct_output_vars, identity, index_expr, loop_nest
from tilec.ir.rewrite import map_expr
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.target import Target


@dataclass(frozen=True)
class ColumnPlan:
    outer: tuple[tuple[str, int, int], ...]  # output variables before the last, loop order
    reduce: tuple[tuple[str, int, int], ...]  # reduction variables, loop order
    column: tuple[str, int, int]  # the output's last variable


def match(b: BoundContraction) -> ColumnPlan | None:
    if b.empty or b.guards or b.stmt.default is not None or b.stmt.agg not in "+><" or b.stmt.combo != "single":
        return None
    out_vars = direct_output_vars(b)
    if not out_vars or b.shape[-1] < 2:
        return None
    col = out_vars[-1]
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
    return ColumnPlan(tuple(ranges[v] for v in out_vars[:-1]), reduce, ranges[col])


def build(plan: ColumnPlan, b: BoundContraction, bp: BoundProgram, target: Target,
          parallel_min_cells: int) -> LoweredGroup:
    dt, agg = b.dtype, b.stmt.agg
    lanes = max(2, target.vector_bits // (64 if dt in ("float64", "int64") else 32))
    col, lo, hi = plan.column
    outer = [L.Var(v) for v, _, _ in plan.outer]
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

    def sweep(make: Callable[[L.Expr], L.Stmt], tag: str) -> L.Stmt:
        n = hi - lo + 1
        blocks = n // lanes
        jo, ji, jt = f"{col}.{tag}o", f"{col}.{tag}i", f"{col}.{tag}t"
        loops: list[L.Stmt] = []
        if blocks:
            x = L.add(L.add(L.mul(L.Var(jo), L.const(lanes)), L.Var(ji)), L.const(lo)) if lo else \
                L.add(L.mul(L.Var(jo), L.const(lanes)), L.Var(ji))
            loops.append(L.For(jo, L.const(0), L.const(blocks),
                               L.For(ji, L.const(0), L.const(lanes), make(x), "vectorized")))
        if n % lanes:
            loops.append(L.For(jt, L.const(lo + blocks * lanes), L.const(hi + 1), make(L.Var(jt))))
        return L.seq(*loops)

    body = L.seq(sweep(init, "z"), loop_nest(list(plan.reduce), sweep(at, "r"), []))
    nest = loop_nest(list(plan.outer), body, [])
    work = math.prod(h - low + 1 for _, low, h in b.ranges)
    if isinstance(nest, L.For) and plan.outer and target.cores >= 2 and work >= parallel_min_cells \
            and plan.outer[0][2] - plan.outer[0][1] + 1 >= target.cores:
        nest = replace(nest, kind="parallel")  # each outer cell owns its own output row
    return LoweredGroup(nest)


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
