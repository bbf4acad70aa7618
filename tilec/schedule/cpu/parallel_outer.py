"""The "parallel_outer" template (CPU): a statement's default nests, their outer loops on all cores.

Requires: a statement. Guarantees: the default lowering's nests, each top-level loop that the
parallel legality check (tilec.ir.legality.check_parallel) proves writes disjoint elements made
parallel when it has an iteration per core; the heuristic takes it for statements with at least
the lowering parameter `parallel_min_cells` iterations, on two cores or more.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundStatement
from tilec.ir.legality import check_parallel
from tilec.ir.lower import LoweredGroup, lower_statement
from tilec.schedule.templates.base import Choice, Context, Template


class ParallelOuter(Template):
    """The default nest(s) of a statement with each top-level loop spread over the cores where the
    parallel legality check proves its iterations write disjoint elements (an elementwise or
    direct statement, the init/update/final nests of a keep-dim reduction, ...) and it is big enough."""

    name = "parallel_outer"
    kind = "cpu"
    requirement = "it needs a statement with some output cells"

    def match(self, index: int, ctx: Context) -> int | None:
        """The statement's iterations (None for a contraction no tuple contributes to)."""
        b = ctx.bp.statements[index]
        return None if isinstance(b, BoundContraction) and b.empty else _work(b)

    def profitable(self, work: int, ctx: Context) -> bool:
        return ctx.target.cores >= 2 and work >= ctx.params.parallel_min_cells

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        workspaces: list[L.Buffer] = []
        stmt = lower_statement(ctx.bp.statements[choice.index], ctx.bp, workspaces, wide_sums=not ctx.target.is_gpu)
        nests = stmt.stmts if isinstance(stmt, L.Seq) else (stmt,)
        changed = [_parallel_outer(nest, ctx.target.cores) for nest in nests]
        return LoweredGroup(L.seq(*changed), tuple(workspaces))


def _work(b: BoundStatement) -> int:
    if not isinstance(b, BoundContraction):  # elementwise, intrinsic: one iteration per output cell
        return math.prod(b.shape)
    return math.prod(hi - lo + 1 for _, lo, hi in b.ranges)


def _parallel_outer(nest: L.Stmt, cores: int) -> L.Stmt:
    if not isinstance(nest, L.For) or not isinstance(nest.begin, L.Const) or not isinstance(nest.end, L.Const):
        return nest
    if nest.end.value - nest.begin.value < cores:
        return nest
    try:
        check_parallel(nest)
    except ScheduleError:
        return nest
    return replace(nest, kind="parallel")


PARALLEL_OUTER = ParallelOuter()

__all__ = ["PARALLEL_OUTER", "ParallelOuter"]
