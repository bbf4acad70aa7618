"""The "parallel_outer" template (CPU): a statement's default nests, their outer loops on all cores.

Requires: a statement. Guarantees: the default lowering's nests, each top-level loop that the
parallel legality check (tilec.ir.legality.check_parallel) proves writes disjoint elements made
parallel when it has an iteration per core; the heuristic takes it for statements with at least
the lowering parameter `parallel_min_cells` iterations, on two cores or more.

An elementwise statement over one axis (a line: the torch ops' activations run on their tensors
flattened) has its loop cut into vectors as well, `for parallel i.o: for vectorized i.i` and a
scalar tail (the rowwise template vectorises the last axis of two or more; a plain scalar loop
leaves LLVM a call to libm's expf or erff per element). The heuristic takes it for any line of at
least two vectors, in parallel where it is big enough. Measured on Zen 3 (AVX2, both cores), GELU
of a transposed 512 x 3072 tensor (a line of 1,572,864 floats): 12.2 ms as a scalar loop, 1.8 in
vectors, torch 2.1.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundStatement
from tilec.ir.legality import check_parallel
from tilec.ir.lower import LoweredGroup, lower_statement
from tilec.ir.rewrite import loops_in, substitute
from tilec.schedule.cpu.rowwise import vector_lanes
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

    def heuristic(self, index: int, ctx: Context) -> Choice | None:
        b = ctx.bp.statements[index]
        if _line(b) and _work(b) >= 2 * vector_lanes(b.dtype, ctx.target):  # vectors pay on one core too
            return self.chosen(index, _work(b), None)
        return super().heuristic(index, ctx)

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        workspaces: list[L.Buffer] = []
        b = ctx.bp.statements[choice.index]
        stmt = lower_statement(b, ctx.bp, workspaces, wide_sums=not ctx.target.is_gpu)
        nests = stmt.stmts if isinstance(stmt, L.Seq) else (stmt,)
        parallel = self.profitable(_work(b), ctx)
        if _line(b) and len(nests) == 1:
            changed = [_vector_line(nests[0], vector_lanes(b.dtype, ctx.target), ctx.target.cores if parallel else 1)]
        else:
            changed = [_parallel_outer(nest, ctx.target.cores) for nest in nests]
        return LoweredGroup(L.seq(*changed), tuple(workspaces))


def _work(b: BoundStatement) -> int:
    if not isinstance(b, BoundContraction):  # elementwise, intrinsic: one iteration per output cell
        return math.prod(b.shape)
    return math.prod(hi - lo + 1 for _, lo, hi in b.ranges)


def _line(b: BoundStatement) -> bool:
    """An elementwise statement over one axis."""
    return isinstance(b, BoundElementwise) and len(b.shape) == 1


def _vector_line(nest: L.Stmt, lanes: int, cores: int) -> L.Stmt:
    """A line's loop `for i in [0, n)` as `for i.o: for vectorized i.i in [0, lanes)` (parallel on
    `cores` > 1 where it has an iteration per core) and the scalar tail `for i in [n - n % lanes, n)`;
    unchanged where the legality check cannot prove its iterations independent (a vector of them
    runs at once, as parallel ones may) or it is not such a loop."""
    if not isinstance(nest, L.For) or not isinstance(nest.begin, L.Const) or not isinstance(nest.end, L.Const) \
            or nest.begin.value != 0 or loops_in(nest.body):
        return nest
    try:
        check_parallel(nest)
    except ScheduleError:
        return nest
    n, var = nest.end.value, nest.var
    outer, inner = f"{var}.o", f"{var}.i"
    blocks = n // lanes
    body = substitute(nest.body, {var: L.add(L.mul(L.Var(outer), L.const(lanes)), L.Var(inner))})
    kind = "parallel" if cores > 1 and blocks >= cores else "serial"
    main = L.For(outer, L.const(0), L.const(blocks), L.For(inner, L.const(0), L.const(lanes), body, "vectorized"), kind)
    tail = [replace(nest, begin=L.const(blocks * lanes))] if n % lanes else []
    return L.seq(main, *tail) if blocks else nest


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
