"""B for the direct variant (tilec.schedule.cpu.implicit_gemm.direct): the order its packed rows
follow, the reduction iterations where it is zero, and whether it is packed through its layout copy.

Requires: a GemmPlan the direct variant lowers. Guarantees: answers only; the variant builds.
"""

from __future__ import annotations

import itertools
import math

from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundContraction, Condition
from tilec.ir.loop_nest import affine_expr
from tilec.ir.rewrite import const_value, substitute_expr
from tilec.schedule.cpu.implicit_gemm.padding import Pads
from tilec.schedule.cpu.implicit_gemm.pairs import pairs
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.patterns.layout_copy import Copy, match_copy
from tilec.schedule.templates.base import Context


def b_source_order(plan: GemmPlan, ctx: Context) -> tuple[tuple[str, int, int], ...] | None:
    """The reduction variables in the order B's source (the layout copy's source where B is a folded
    copy: a convolution's OIHW filter read as K[i, j, c, co]) lays them out as its innermost
    dimensions, each alone and over the whole dimension, when there are several of them and that
    order differs from the loops': then the reduction is one flat, contiguous index of the source,
    which the packing reads as vectors. None otherwise."""
    tensor, indices = plan.b.tensor, plan.b.indices
    copy = ctx.folded.get(tensor)
    if copy is not None:
        tensor = copy.source
        indices = tuple(indices[copy.out_vars.index(var)] for var in copy.src_vars)
    red = {var: (var, lo, hi) for var, lo, hi in plan.red}
    shape = ctx.bp.shapes[tensor]
    if len(red) < 2 or len(indices) < len(red):
        return None
    inner = indices[len(indices) - len(red):]
    order = tuple(red.get(e.lone_var or "") for e in inner)
    if any(r is None for r in order) or len({r[0] for r in order if r}) != len(red):
        return None
    ranges = tuple(r for r in order if r is not None)
    if any(lo != 0 or hi + 1 != size for (_, lo, hi), size in zip(ranges, shape[len(shape) - len(red):])):
        return None
    return None if ranges == tuple(plan.red) else ranges


def _bounding_guards(plan: GemmPlan) -> list[tuple[Condition, str]]:
    """B's guards on one reduction variable (named beside each) and outer ones."""
    red = {var for var, _, _ in plan.red}
    outer = {var for var, _, _ in plan.outer}
    found = []
    for g in plan.b_guards:
        mine = [var for var in g.expr.vars if var in red]
        if g.expr.divisor == 1 and len(mine) == 1 and all(var in red or var in outer for var in g.expr.vars):
            found.append((g, mine[0]))
    return found


def b_nonzero(plan: GemmPlan, outer_env: dict[str, L.Expr]) -> dict[str, tuple[L.Expr, L.Expr]]:
    """Per reduction variable, loop bounds [begin, end) that leave out the iterations where one of B's
    guards fails (B is 0 there, so they add nothing), for each guard on that variable alone besides
    the outer ones: a stride-2 transposed convolution's phases, whose filter taps 2 t + z pass the
    filter for z = 1 (K[2 t0 + z0, ...] with t0 < 2 and KH = 3) and would otherwise be multiplied
    by zeros, 7 in 16 products."""
    red = {var: (lo, hi) for var, lo, hi in plan.red}
    bounds: dict[str, tuple[L.Expr, L.Expr]] = {}

    def floor_div(x: L.Expr, d: int) -> L.Expr:
        return L.Bin("div", x, L.const(d))

    for g, var in _bounding_guards(plan):
        terms = dict(g.expr.coeffs)
        c = terms.pop(var)
        rest = substitute_expr(affine_expr(IntAffine(tuple(sorted(terms.items())), g.expr.const)), outer_env)
        lo, hi = red[var]
        begin, end = bounds.get(var, (L.const(lo), L.const(hi + 1)))
        low = g.lo if c > 0 else g.hi  # the guard's side that bounds var from below
        high = g.hi if c > 0 else g.lo
        if low is not None:  # c var + rest >= lo (c > 0) or <= hi (c < 0): var >= ceil(...)
            num = L.sub(L.const(low), rest) if c > 0 else L.sub(rest, L.const(low))
            begin = L.Bin("max", begin, floor_div(L.add(num, L.const(abs(c) - 1)), abs(c)))
        if high is not None:  # var <= floor(...)
            num = L.sub(L.const(high), rest) if c > 0 else L.sub(rest, L.const(high))
            end = L.Bin("min", end, L.add(floor_div(num, abs(c)), L.const(1)))
        bounds[var] = (begin, end)
    return bounds


OUTER_POINTS = 1 << 16  # outer iterations beyond which their work is taken as even (not counted)


def outer_work(plan: GemmPlan) -> list[int] | None:
    """The reduction iterations each outer iteration runs (in the order of the flat outer index),
    where b_nonzero's bounds make them differ (a transposed convolution's phases: 4, 2, 2 and 1
    filter taps); None where every outer iteration runs the same (or there are too many to count).
    The bounds are evaluated once per value of the outer variables they read (a convolution's
    output row x, not each image's)."""
    guards = _bounding_guards(plan)
    read = [r for r in plan.outer if any(r[0] in g.expr.vars for g, _ in guards)]
    if not read or plan.batch > OUTER_POINTS:
        return None
    per_value: dict[tuple[int, ...], int] = {}
    for point in itertools.product(*(range(lo, hi + 1) for _, lo, hi in read)):
        bounds = b_nonzero(plan, {var: L.const(x) for (var, _, _), x in zip(read, point)})
        extents = []
        for var, lo, hi in plan.red:
            begin, end = (const_value(e) for e in bounds.get(var, (L.const(lo), L.const(hi + 1))))
            if begin is None or end is None:
                return None
            extents.append(max(0, end - begin))
        per_value[point] = math.prod(extents)
    if len(set(per_value.values())) == 1:
        return None
    at = [k for k, r in enumerate(plan.outer) if r in read]
    return [per_value[tuple(point[k] for k in at)]
            for point in itertools.product(*(range(lo, hi + 1) for _, lo, hi in plan.outer))]


def b_through(plan: GemmPlan, pads: Pads, ctx: Context, nr: int) -> bool:
    """Whether B may be packed through the layout copy that makes it (if one does): unless B is
    packed as bfloat16 pairs (which read B along its column) from a source whose innermost
    dimension is neither the column nor the innermost reduction loop's (`pair_rows_variable`), as
    a convolution's OIHW filter: that packing gathered element by element (0.35 ms of the 3x3
    64->64 conv's 5.4 on Zen 4), where the copy on its own is a permutation of a few microseconds
    and the packing then reads whole vectors."""
    how = pairs(plan, pads, ctx.bp, ctx.target, nr)
    if how is None:
        return True
    maker = next((s for s in ctx.bp.statements if s.output == plan.b.tensor), None)
    copy = match_copy(maker, ctx.bp) if isinstance(maker, BoundContraction) else None
    if copy is None:
        return True
    at = next(k for k, e in enumerate(plan.b.indices) if e.lone_var == plan.col[0])
    return copy.out_vars[at] == copy.src_vars[-1] or pair_rows_variable(plan, copy, how.var) is not None


def pair_rows_variable(plan: GemmPlan, copy: Copy, pair: str | None) -> str | None:
    """The reduction variable along which B's source (the layout copy `copy` makes B) is contiguous,
    where B's bfloat16 pairs can be packed from it as transposing tiles: alone in the dimension of
    B that is the source's innermost, the innermost reduction loop, not the `pair` variable, B
    without guards. A convolution's weight gradient, DY[n, x, y, co] read through its copy from
    DO[n, co, x, y]: y, so that tiles of the pair's rows (co, e) are read as vectors along y."""
    if plan.b_guards or not plan.red:
        return None
    dim = copy.out_vars.index(copy.src_vars[-1])
    var = plan.b.indices[dim].lone_var
    innermost, lo, hi = plan.red[-1]
    if var is None or var != innermost or var == pair or hi - lo < 1:
        return None
    if any(var in e.vars for k, e in enumerate(plan.b.indices) if k != dim):
        return None
    return var


__all__ = ["b_nonzero", "b_source_order", "b_through", "outer_work", "pair_rows_variable"]
