"""Layout permutations (NCHW <-> NHWC, OIHW <-> HWIO, ...) as a nest that uses whole cache lines.

A permutation ``O[p..: ...] = =(S[q..])`` (or a single-operand ``+``) whose source indices are a
permutation of the output's, each a distinct lone variable spanning its dimension, no guards and no
default, walks one side against its layout in the default nest (the output's order): its inner loop
reads the source with a large stride, so each source line is fetched once per element it holds
(from L2 at best; a power-of-two-ish row stride also maps the lines onto a few L1 sets).

When the output's and the source's innermost dimensions both span 8 elements or more (NCHW <->
NHWC of real tensors), the nest is made of transposing tiles: blocks of a line of each of the two
innermost variables, the other variables outside in the output's order,

    I[n, h, w, c] = X[n, c, h, w]   ->  for n: for h: for w.o: for c.o:
                                          for c.i unrolled 16: for w.i vectorized 16: ...

which the code generator turns into 16 row loads, shuffles in registers and 16 row stores
(tilec.codegen.llvm.transpose); the short last blocks are tiles of their own. On the 56^2 conv
gradient's NCHW <-> NHWC copies (1.6M cells) this took the gathers from 1.0 ms to 0.35-0.45 ms.

Otherwise the source's trailing run of at most a cache line (`LINE` elements: the longest suffix of
its dimensions whose product fits, or the innermost dimension split into blocks of `LINE`) is the
innermost loop, and every other variable keeps the output's order (a split variable's block loop at
its output position):

    DF[co, c, i, j] = DK[i, j, c, co]    ->  for co.o: for c: for i: for j: for co.i in 16:
    K[i, j, c, co]  = F[co, c, i, j]     ->  for c: for co: for i: for j:

so the inner loop reads one source line and writes a few output streams, each advancing by one
element per outer iteration, and a line of either side is used whole while it is in L1.

Requires: a BoundProgram. Guarantees: `match` accepts only such permutations whose source and
output innermost variables differ (otherwise the default nest is unit-stride on both sides already)
and, for the line order, at most `permute_max_cells` cells (a lowering parameter) whose split dimension, if any, is a whole number
of lines (the short last blocks of a ragged split made NCHW -> NHWC of 56 x 56 planes 1.6x slower
than the default nest); `build` computes exactly the default lowering's values (the same value
expression per cell).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup, combine, identity
from tilec.ir.legality import check_parallel
from tilec.schedule.patterns.layout_copy import match_copy
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.target import Target

LINE_BYTES = 64  # a cache line, on every x86-64 and AArch64 core


@dataclass(frozen=True)
class PermutePlan:
    out_vars: tuple[str, ...]  # the output's variables, in its dimension order
    src_vars: tuple[str, ...]  # the source's variables, in its dimension order
    extents: tuple[tuple[str, int], ...]  # each variable's extent


def match(b: BoundContraction, bp: BoundProgram, max_cells: int) -> PermutePlan | None:
    """The permutation `b` copies, or None: not a layout copy, or (in line order) larger than
    `max_cells` cells or in ragged line blocks, where the default nest is as fast."""
    copy = match_copy(b, bp, rounding=True)  # (a 16-bit temporary, held in float32, rounds as it is copied)
    if copy is None or len(b.shape) < 2 or copy.out_vars[-1] == copy.src_vars[-1]:
        return None
    out_vars, src_vars, src = copy.out_vars, copy.src_vars, b.operands[0]
    extent = dict(zip(out_vars, b.shape))
    plan = PermutePlan(tuple(out_vars), tuple(src_vars), tuple(extent.items()))  # type: ignore[arg-type]
    line = max(1, LINE_BYTES // np.dtype(bp.dtypes[src.tensor]).itemsize)
    merged, _ = coalesce(plan)
    if transposing(merged, line):
        return plan
    if math.prod(b.shape) > max_cells:
        # measured: in the 3x3 64->64 56^2 conv gradient the NHWC -> NCHW permutation of dX (1.6M
        # cells) cost 1.2-1.8 ms more in line order than the default nest, though alone it was as
        # fast; the 14^2 gradient's permutations (0.4-0.6M cells) gained ~0.4 ms.
        return None
    _, split = loop_order(merged, line)
    if split is not None and dict(merged.extents)[split] % line:
        return None  # ragged blocks (NCHW -> NHWC of 56 x 56 planes: 1.6x slower than the default nest)
    return plan


def loop_order(plan: PermutePlan, line: int) -> tuple[list[tuple[str, int]], str | None]:
    """The loops outermost first as (variable, extent), and the variable split into blocks of
    `line` (its block loop is `<var>.o` of extent ceil(n / line), its inner loop `<var>.i`)."""
    extent = dict(plan.extents)
    run: list[str] = []
    cells = 1
    for v in reversed(plan.src_vars):
        if cells * extent[v] > line:
            break
        run.insert(0, v)
        cells *= extent[v]
    split = None
    if not run:  # the innermost dimension alone is longer than a line
        split = plan.src_vars[-1]
        run = [split]
    outer: list[tuple[str, int]] = []
    for v in plan.out_vars:
        if v == split:
            outer.append((f"{v}.o", -(-extent[v] // line)))
        elif v not in run:
            outer.append((v, extent[v]))
    inner = [(f"{v}.i", min(line, extent[v])) if v == split else (v, extent[v]) for v in run]
    return outer + inner, split


def nest(plan: PermutePlan, itemsize: int, body: Callable[[dict[str, L.Expr]], L.Stmt], cores: int,
         parallel: bool, alone: frozenset[str] = frozenset()) -> L.Stmt:
    """The loops around `body(index of each variable)`: transposing tiles when both innermost
    dimensions are long enough, else the loops of `loop_order`; the outermost loop with an
    iteration per core parallel if `parallel`. Variables in `alone` are not merged into the one
    before them (see coalesce)."""
    line = max(1, LINE_BYTES // itemsize)
    plan, expand = coalesce(plan, alone)

    def merged_body(where: dict[str, L.Expr]) -> L.Stmt:
        return body(expand(where))

    if transposing(plan, line):
        stmt = _tiles(plan, line, merged_body)
    else:
        stmt = _line_nest(plan, line, merged_body)
    return parallel_outermost(stmt, cores) if parallel and cores >= 2 and isinstance(stmt, L.For) else stmt


def coalesce(plan: PermutePlan, alone: frozenset[str] = frozenset()
             ) -> tuple[PermutePlan, Callable[[dict[str, L.Expr]], dict[str, L.Expr]]]:
    """The permutation with every run of variables that are adjacent, in the same order, on both
    sides merged into one (named by joining theirs with '.'; its extent their product), and the
    function from an index of each merged variable to an index of each original one (a run
    (v1, ..., vk) at index q: vk = q % ek, ..., v1 = q / (e2 ... ek), the digits that
    tilec.codegen.llvm.vector.element_stride recombines). OIHW <- HWIO of a 3x3 kernel,
    DF[co, c, i, j] = DK[i, j, c, co], becomes DF[co, c, ij] = DK[ij, c, co]: a 9-wide innermost side,
    long enough for transposing tiles. A variable in `alone` starts a run of its own: one whose
    destination dimension is wider than its extent (a zero-bordered copy's) is not contiguous
    with the dimension before it there."""
    extent = dict(plan.extents)
    runs: list[tuple[str, ...]] = []
    k = 0
    while k < len(plan.out_vars):
        run = [plan.out_vars[k]]
        at = plan.src_vars.index(run[0])
        while (k + len(run) < len(plan.out_vars) and at + len(run) < len(plan.src_vars)
               and plan.src_vars[at + len(run)] == plan.out_vars[k + len(run)]
               and plan.out_vars[k + len(run)] not in alone):
            run.append(plan.out_vars[k + len(run)])
        runs.append(tuple(run))
        k += len(run)
    if all(len(r) == 1 for r in runs):
        return plan, lambda where: where
    name = {r: ".".join(r) for r in runs}
    first = {r[0]: r for r in runs}
    merged = PermutePlan(tuple(name[r] for r in runs), tuple(name[first[v]] for v in plan.src_vars if v in first),
                         tuple((name[r], math.prod(extent[v] for v in r)) for r in runs))

    def expand(where: dict[str, L.Expr]) -> dict[str, L.Expr]:
        out: dict[str, L.Expr] = {}
        for r in runs:
            q = where[name[r]]
            below = 1
            for v in reversed(r):
                digit = q if below == 1 else L.Bin("div", q, L.const(below))
                out[v] = digit if v == r[0] else L.Bin("mod", digit, L.const(extent[v]))
                below *= extent[v]
        return out

    return merged, expand


MIN_TILE_SIDE = 8  # a transposing tile needs both innermost dimensions this long at least


def transposing(plan: PermutePlan, line: int) -> bool:
    """Whether the permutation runs as tiles transposed in registers: the output's and the source's
    innermost dimensions differ and each spans `MIN_TILE_SIDE` elements at least."""
    extent = dict(plan.extents)
    t, s = plan.out_vars[-1], plan.src_vars[-1]
    return t != s and min(extent[t], extent[s], line) >= MIN_TILE_SIDE


def _tiles(plan: PermutePlan, line: int, body: Callable[[dict[str, L.Expr]], L.Stmt]) -> L.Stmt:
    """The other variables in the output's order, then blocks of `line` of the source's innermost
    variable s, then blocks of the output's innermost t, each block a tile

        for t.i unrolled: for s.i vectorized: body      # tilec.codegen.llvm.transpose

    with the short last blocks of s and t as tiles of their own (constant extents, so that the
    code generator can transpose them too)."""
    extent = dict(plan.extents)
    t, s = plan.out_vars[-1], plan.src_vars[-1]
    v = L.Var

    def blocks(var: str) -> list[tuple[str | None, int, int]]:
        """(block loop variable or None, first element of the inner loop, elements): the whole blocks
        (their inner loop from 0, offset by the block loop), then the rest."""
        whole, rest = divmod(extent[var], line)
        out: list[tuple[str | None, int, int]] = [(f"{var}.o", 0, line)] if whole else []
        return out + ([(None, whole * line, rest)] if rest else [])

    def index(var: str, block: str | None) -> L.Expr:
        inner = v(f"{var}.i")
        return L.add(L.mul(v(block), L.const(line)), inner) if block else inner

    def block_loop(var: str, block: str | None, stmt: L.Stmt) -> L.Stmt:
        return L.For(block, L.const(0), L.const(extent[var] // line), stmt) if block else stmt

    where: dict[str, L.Expr] = {u: v(u) for u in plan.out_vars}
    s_parts = []
    for s_block, s_first, s_count in blocks(s):
        t_parts = []
        for t_block, t_first, t_count in blocks(t):
            at = {**where, s: index(s, s_block), t: index(t, t_block)}
            tile = L.For(f"{t}.i", L.const(t_first), L.const(t_first + t_count), L.For(
                f"{s}.i", L.const(s_first), L.const(s_first + s_count), body(at), "vectorized"), "unrolled")
            t_parts.append(block_loop(t, t_block, tile))
        s_parts.append(block_loop(s, s_block, L.seq(*t_parts)))
    stmt = L.seq(*s_parts)
    for u in reversed([u for u in plan.out_vars if u not in (s, t)]):
        stmt = L.For(u, L.const(0), L.const(extent[u]), stmt)
    return stmt


def _line_nest(plan: PermutePlan, line: int, body: Callable[[dict[str, L.Expr]], L.Stmt]) -> L.Stmt:
    """The loops of `loop_order` around `body`."""
    loops, split = loop_order(plan, line)
    extent = dict(plan.extents)
    where: dict[str, L.Expr] = {v: L.Var(v) for v in plan.out_vars}
    ends: dict[str, L.Expr] = {v: L.const(n) for v, n in loops}
    if split is not None:
        n = extent[split]
        base = L.mul(L.Var(f"{split}.o"), L.const(line))
        where[split] = L.add(base, L.Var(f"{split}.i"))
        if n % line:  # the last block is short
            ends[f"{split}.i"] = L.Bin("min", L.const(line), L.sub(L.const(n), base))
    stmt = body(where)
    for v, _ in reversed(loops):
        stmt = L.For(v, L.const(0), ends[v], stmt)
    return stmt


def build(plan: PermutePlan, b: BoundContraction, bp: BoundProgram, target: Target,
          parallel_min_cells: int) -> L.Stmt:
    src = b.operands[0]

    def body(where: dict[str, L.Expr]) -> L.Stmt:
        value = L.cast(b.dtype, L.Load(src.tensor, tuple(where[v] for v in plan.src_vars), bp.dtypes[src.tensor]))
        value = combine(b.stmt.agg, identity(b.stmt.agg, b.dtype), value)  # as the default nest: 0 + x for '+'
        return L.Store(b.output, tuple(where[v] for v in plan.out_vars), value)

    itemsize = np.dtype(bp.dtypes[src.tensor]).itemsize
    return nest(plan, itemsize, body, target.cores, math.prod(b.shape) >= parallel_min_cells)


MAX_POOL_STARTS = 16  # a parallel loop inside serial ones starts the threads this often at most


def parallel_outermost(nest: L.For, cores: int, starts: int = 1) -> L.Stmt:
    """The outermost loop with an iteration per core made parallel (loops outside it stay serial)."""
    n = int(nest.end.value) if isinstance(nest.end, L.Const) else 0
    if n >= cores:
        try:
            check_parallel(nest)
            return replace(nest, kind="parallel")
        except ScheduleError:
            return nest
    if isinstance(nest.body, L.For) and starts * max(1, n) <= MAX_POOL_STARTS:
        return replace(nest, body=parallel_outermost(nest.body, cores, starts * max(1, n)))
    return nest


class Permute(Template):
    name = "permute"
    kind = "cpu"
    requirement = "it needs a layout copy whose innermost index changes (tilec.schedule.patterns.layout_copy)"

    def match(self, index: int, ctx: Context) -> PermutePlan | None:
        b = ctx.bp.statements[index]
        return match(b, ctx.bp, ctx.params.permute_max_cells) if isinstance(b, BoundContraction) else None

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        b = ctx.bp.statements[choice.index]
        assert isinstance(b, BoundContraction)
        return LoweredGroup(build(choice.plan, b, ctx.bp, ctx.target, ctx.params.parallel_min_cells))


PERMUTE = Permute()

__all__ = ["PERMUTE", "Permute", "PermutePlan", "build", "coalesce", "loop_order", "match", "nest", "parallel_outermost"]
