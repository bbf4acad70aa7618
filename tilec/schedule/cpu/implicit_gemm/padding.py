"""Operands in other buffers: zero-padded copies, gathers through layout copies, zeroed borders.

The GEMM templates that read an operand in place (tilec.schedule.cpu.implicit_gemm.direct, .inplace) and
Winograd's transforms read it from a copy with zero borders wherever its accesses run past its
bounds, so that the hot loops need no guard. When the operand is itself a folded layout copy
(tilec.schedule.cpu.copy_fold), the padded buffer is gathered straight from the copy's source in
the permutation's cache-friendly order (tilec.schedule.cpu.permute).

Requires: accesses whose only guards are their tensor's own bounds (`access_padding` says which
borders make them redundant). Guarantees: each helper's buffer holds the operand at its indices
shifted by the border, and zero in the border.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundAccess, Condition
from tilec.ir.conditions import normalise
from tilec.ir.loop_nest import affine_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.patterns.layout_copy import Copy
from tilec.schedule.cpu.permute import LINE_BYTES, PermutePlan, nest, parallel_outermost
from tilec.schedule.nest import in_blocks, transposing_tiles
from tilec.schedule.templates.base import Context

Pads = tuple[tuple[int, int], ...]  # per dimension of a tensor, its zero border (before, after)


def access_padding(access: BoundAccess, guards: tuple[Condition, ...], box: Mapping[str, tuple[int, int]],
                   shape: tuple[int, ...]) -> Pads | None:
    """Per dimension of `access`'s tensor, the zero border that makes every guard on it redundant
    when its variables range over `box`; None when a guard is not one of the tensor's own bounds,
    or an index is fractional."""
    if any(e.divisor != 1 for e in access.indices):
        return None
    bounds = [normalise(Condition(e, 0, n - 1)) for e, n in zip(access.indices, shape)]  # as guards are
    for g in guards:
        if not any(g.expr == b.expr and g.lo in (b.lo, None) and g.hi in (b.hi, None) for b in bounds):
            return None
    pads = []
    for e, n in zip(access.indices, shape):
        lo, hi = e.interval(box)
        assert lo is not None and hi is not None  # the box is bounded
        pads.append((max(0, -lo), max(0, hi - (n - 1))))
    return tuple(pads)


def padded_operand(name: str, tensor: str, pads: Pads, ctx: Context,
                   dtype: str | None = None) -> tuple[L.Stmt, L.Buffer]:
    """The nest filling buffer `name` with `tensor` and zero borders `pads`, and the buffer: gathered
    straight from the source when `tensor` is a folded layout copy (tilec.schedule.cpu.copy_fold).
    The buffer holds `dtype` where given (a wider type, which holds each value exactly), else the
    tensor's."""
    through = ctx.folded.get(tensor)
    if through is not None:
        return _padded_gather(name, through, ctx.bp.shapes[tensor], pads, ctx.target.cores, dtype or through.dtype)
    source = ctx.bp.dtypes[tensor]
    return _padded_copy(name, tensor, ctx.bp.shapes[tensor], source, pads, ctx.target.cores,
                        ctx.params.parallel_min_cells, dtype or source)


def _padded_copy(name: str, source: str, shape: tuple[int, ...], source_dtype: str,
                 pads: tuple[tuple[int, int], ...], cores: int, min_cells: int, dtype: str) -> tuple[L.Stmt, L.Buffer]:
    """dest (of `dtype`) = source with zero borders; the innermost loop is vectorized when that dim
    has none, the outermost with an iteration per core parallel."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape, pads))
    buf = L.Buffer(name, dtype, padded)
    names = [f"{name}.p{d}" for d in range(len(shape))]
    cell = tuple(L.Var(v) for v in names)
    src = tuple(L.sub(L.Var(v), L.const(lo)) for v, (lo, _) in zip(names, pads))
    inside: list[L.Expr] = [L.Bin("and", L.Cmp("ge", s, L.const(0)), L.Cmp("lt", s, L.const(n)))
                            for s, n in zip(src, shape)]
    copy = L.Store(name, cell, L.cast(dtype, L.Load(source, src, source_dtype)))
    zero = L.Store(name, cell, L.cast(dtype, L.const(0)))
    inner_padded = pads[-1] != (0, 0)
    if inner_padded:
        body: L.Stmt = L.If(L.logical_and(inside), copy, zero)  # type: ignore[arg-type]
        stmt = body
        for v, n in reversed(list(zip(names, padded))):
            stmt = L.For(v, L.const(0), L.const(n), stmt)
    else:
        last = names[-1]
        vec = "vectorized" if padded[-1] <= 1024 else "serial"
        inner_copy = L.For(last, L.const(0), L.const(padded[-1]), copy, vec)
        inner_zero = L.For(last, L.const(0), L.const(padded[-1]), zero, vec)
        outer_inside = L.logical_and(list(inside[:-1]))
        stmt = inner_copy if outer_inside is None else L.If(outer_inside, inner_copy, inner_zero)
        for v, n in reversed(list(zip(names[:-1], padded[:-1]))):
            stmt = L.For(v, L.const(0), L.const(n), stmt)
    if cores >= 2 and isinstance(stmt, L.For) and math.prod(padded) >= min_cells:
        stmt = parallel_outermost(stmt, cores)
    return stmt, buf


def padded_index(indices: "tuple[IntAffine, ...]", offsets: "tuple[int, ...] | list[int]",
                 env: dict[str, L.Expr]) -> tuple[L.Expr, ...]:
    """An access's indices into its zero-padded copy (each shifted by its border), the index
    variables replaced by `env`."""
    return tuple(substitute_expr(L.add(affine_expr(e), L.const(off)), env) for e, off in zip(indices, offsets))


def gathered(name: str, copy: Copy, shape: tuple[int, ...], cores: int,
             cell: Callable[[dict[str, L.Expr]], tuple[L.Expr, ...]], origin: Mapping[str, int] | None = None,
             alone: frozenset[str] = frozenset(), dtype: str | None = None) -> L.Stmt:
    """The nest storing every element of `copy` (a permutation of its source) in the box of `shape`
    starting at `origin` (per output variable, 0 where not given) into buffer `name` at
    `cell(index of each of the copy's output variables)`, read straight from the source in the
    permutation's cache-friendly order (tilec.schedule.cpu.permute.nest); the output variables in
    `alone` are not merged with the one before them (their dimension of `name` is wider)."""
    names = {v: f"{name}.{v}" for v in copy.out_vars}
    plan = PermutePlan(tuple(names[v] for v in copy.out_vars), tuple(names[v] for v in copy.src_vars),
                       tuple((names[v], n) for v, n in zip(copy.out_vars, shape)))
    origin = origin or {}

    def body(where: dict[str, L.Expr]) -> L.Stmt:
        at = {v: L.add(where[names[v]], L.const(origin[v])) if origin.get(v) else where[names[v]]
              for v in copy.out_vars}
        return L.Store(name, cell(at), L.cast(dtype or copy.dtype, copy.value(at)))

    return nest(plan, np.dtype(copy.dtype).itemsize, body, cores, True, frozenset(names[v] for v in alone))


def zero_slabs(name: str, dtype: str, shape: tuple[int, ...], slabs: list[tuple[int, int, int]]) -> list[L.Stmt]:
    """``name[...] = 0`` over each slab (dimension, begin, end) of a buffer of `shape`, its other
    dimensions whole; the innermost loop vectorized when it is whole and 2 to 1024 long."""
    loop_vars = [f"{name}.z{k}" for k in range(len(shape))]
    nests: list[L.Stmt] = []
    for d, begin, end in slabs:
        if begin == end:
            continue
        zero: L.Stmt = L.Store(name, tuple(L.Var(v) for v in loop_vars), L.cast(dtype, L.const(0)))
        for k in reversed(range(len(shape))):
            b, e = (begin, end) if k == d else (0, shape[k])
            vec = k == len(shape) - 1 and k != d and 2 <= e - b <= 1024
            zero = L.For(loop_vars[k], L.const(b), L.const(e), zero, "vectorized" if vec else "serial")
        nests.append(zero)
    return nests


def _padded_gather(name: str, copy: Copy, shape: tuple[int, ...], pads: tuple[tuple[int, int], ...],
                   cores: int, dtype: str) -> tuple[L.Stmt, L.Buffer]:
    """dest (of `dtype`) = copy (a permutation of its source, tilec.schedule.cpu.copy_fold) with zero
    borders, read straight from the source: the interior gathered, then the border slabs zeroed."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape, pads))
    buf = L.Buffer(name, dtype, padded)
    bordered = frozenset(v for v, pad in zip(copy.out_vars, pads) if pad != (0, 0))
    interior = gathered(name, copy, shape, cores,
                        lambda at: tuple(L.add(at[v], L.const(lo)) for v, (lo, _) in zip(copy.out_vars, pads)), None, bordered,
                        dtype)
    slabs = [(d, b, e) for d, (lo, _) in enumerate(pads) for b, e in ((0, lo), (lo + shape[d], padded[d]))]
    return L.seq(interior, *zero_slabs(name, dtype, padded, slabs)), buf


def interleaved_pairs(name: str, source: str, shape: tuple[int, ...], pads: Pads, dtype: str, step: tuple[int, ...],
                      cores: int) -> tuple[L.Stmt, L.Buffer]:
    """The nest filling buffer `name`[cell..., e] = source[cell - border + e * step] for e in {0, 1} (0
    where that is outside `source`, of `shape`), and the buffer (`pads` wider than `source`, and a
    last dimension of 2): a zero-bordered copy holding the values of a reduction variable's
    neighbouring iterations side by side, for the bfloat16 pair dot product where `source` holds
    them `step` apart (a weight gradient's input, read at 2y + j and 2y + 2 + j). Where the
    innermost dimension neither steps nor has a border, whole rows are interleaved as transposing
    tiles (2 x up to TRANSPOSE_MAX_SIDE), else cell by cell."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape, pads))
    buf = L.Buffer(name, dtype, padded + (2,))
    names = [f"{name}.q{d}" for d in range(len(shape))]
    e = f"{name}.e"

    def at(cell: list[L.Expr], element: L.Expr) -> list[L.Expr]:
        """The source cell of `cell` and pair element `element`."""
        return [L.add(L.sub(c, L.const(lo)), L.mul(element, L.const(s)) if s else L.const(0))
                for c, (lo, _), s in zip(cell, pads, step)]

    def inside(cell: list[L.Expr], element: L.Expr) -> L.Expr | None:
        return L.logical_and([L.Bin("and", L.Cmp("ge", x, L.const(0)), L.Cmp("lt", x, L.const(n)))
                              for x, n, s, pad in zip(at(cell, element), shape, step, pads) if s or pad != (0, 0)])

    def store(cell: list[L.Expr], element: L.Expr, guarded: bool) -> L.Stmt:
        target = tuple(cell) + (element,)
        copy = L.Store(name, target, L.Load(source, tuple(at(cell, element)), dtype))
        cond = inside(cell, element) if guarded else None
        return copy if cond is None else L.If(cond, copy, L.Store(name, target, L.cast(dtype, L.const(0))))

    cell: list[L.Expr] = [L.Var(v) for v in names]
    last, n_last = names[-1], padded[-1]
    side = min(n_last, L.TRANSPOSE_MAX_SIDE)
    edge: L.Stmt = L.For(last, L.const(0), L.const(n_last), L.For(e, L.const(0), L.const(2), store(cell, L.Var(e), True)))
    body = edge
    if step[-1] == 0 and pads[-1] == (0, 0) and n_last % side == 0 and side >= 2:
        rows, within = f"{name}.qo", f"{name}.qi"
        tile_cell = cell[:-1] + [L.add(L.mul(L.Var(rows), L.const(side)), L.Var(within))]
        tile = L.For(rows, L.const(0), L.const(n_last // side), L.For(e, L.const(0), L.const(2), L.For(
            within, L.const(0), L.const(side), store(tile_cell, L.Var(e), False), "vectorized"), "unrolled"))
        row = cell[:-1] + [L.const(0)]
        cond = L.logical_and([c for c in (inside(row, L.const(0)), inside(row, L.const(1))) if c is not None])
        body = tile if cond is None else L.If(cond, tile, edge)
    stmt = body
    for v, n in reversed(list(zip(names[:-1], padded[:-1]))):
        stmt = L.For(v, L.const(0), L.const(n), stmt)
    if cores >= 2 and isinstance(stmt, L.For):
        stmt = parallel_outermost(stmt, cores)
    return stmt, buf


def halved_pairs(name: str, source: str, shape: tuple[int, ...], pads: Pads, dtype: str, dim: int,
                 through: Copy | None, cores: int) -> tuple[L.Stmt, L.Buffer]:
    """The nest filling buffer `name`[cell..., e] = source[cell - border, its index in `dim` 2 q + e
    for the cell's q] (0 in the border), and the buffer: `source` (of `shape`) with zero borders
    `pads` (none in `dim`), dimension `dim` halved and a last dimension of 2, each pair of
    neighbouring indices of `dim` side by side for the bfloat16 pair dot product
    (tilec.schedule.cpu.implicit_gemm.pairs.halved_variable); every element once, so the copy is
    the source's size. Read through the layout copy `through` (its output is `source`) when given.

    The interior is copied as transposing tiles (tilec.codegen.llvm.transpose) where the rows can
    be read whole: each tile's rows are the pairs of the innermost dimension (t, e) as one flat
    index, read as vectors along the dimension the values lie contiguous in (the innermost of
    `through`'s source: NCHW's pixels for an NHWC copy), so the copy reads and writes whole lines;
    where that is the innermost dimension itself, tiles of the pair's two rows (2 x up to
    TRANSPOSE_MAX_SIDE); else cell by cell. The borders are zeroed as slabs."""
    rank = len(shape)
    assert pads[dim] == (0, 0) and shape[dim] % 2 == 0
    dest = [n + lo + hi for n, (lo, hi) in zip(shape, pads)]
    dest[dim] = shape[dim] // 2
    buf = L.Buffer(name, dtype, tuple(dest) + (2,))
    names = [f"{name}.q{d}" for d in range(rank)]
    v = L.Var

    def store(cell: list[L.Expr], element: L.Expr) -> L.Stmt:
        """Cell `cell` (interior, in the buffer's coordinates) and pair element `element`."""
        at = [L.add(L.mul(c, L.const(2)), element) if d == dim else L.sub(c, L.const(pads[d][0]))
              for d, c in enumerate(cell)]
        value = L.Load(source, tuple(at), dtype) if through is None else \
            through.value(dict(zip(through.out_vars, at)))
        return L.Store(name, tuple(cell) + (element,), value)

    def interior(d: int) -> tuple[L.Expr, L.Expr]:
        lo = pads[d][0]
        return L.const(lo), L.const(lo + (shape[d] // 2 if d == dim else shape[d]))

    def around(body: L.Stmt, dims: list[int]) -> L.Stmt:
        for d in reversed(dims):
            body = L.For(names[d], *interior(d), body)
        return body

    t = rank - 1  # the rows' dimension: pairs (t, e) lie back to back in the buffer
    fast = through.out_vars.index(through.src_vars[-1]) if through is not None else t  # contiguous in memory
    side = max(2, LINE_BYTES // np.dtype(dtype).itemsize)  # a tile's side: a cache line of either side's
    e = f"{name}.e"

    def at(d: int, first: L.Expr, var: str) -> L.Expr:
        """Dimension d's buffer index in a block starting at source index `first`."""
        return L.add(L.add(first, v(var)), L.const(pads[d][0]))

    if t != dim and pads[t] == (0, 0) and fast not in (t, dim):
        def pair_row(flat: L.Expr, at_fast: L.Expr) -> L.Stmt:  # row flat = (t, e), column at_fast
            cell = [L.add(at_fast, L.const(pads[fast][0])) if d == fast else v(names[d]) for d in range(rank - 1)]
            return store(cell + [L.Bin("div", flat, L.const(2))], L.Bin("mod", flat, L.const(2)))

        stmt = around(transposing_tiles(f"{name}.r", 2 * shape[t], f"{name}.s", shape[fast], side, pair_row),
                      [d for d in range(rank - 1) if d != fast])
    elif t != dim and pads[t] == (0, 0):  # tiles of the pair's two rows, interleaved
        ti = f"{names[t]}.i"

        def pair_tile(t0: L.Expr, cols: int) -> L.Stmt:
            cell = [v(x) for x in names[:-1]] + [at(t, t0, ti)]
            return L.For(e, L.const(0), L.const(2), L.For(ti, L.const(0), L.const(cols), store(cell, v(e)), "vectorized"),
                         "unrolled")

        stmt = around(in_blocks(names[t], shape[t], side, pair_tile), list(range(rank - 1)))
    else:
        stmt = around(L.For(e, L.const(0), L.const(2), store([v(x) for x in names], v(e))), list(range(rank)))
    if cores >= 2 and isinstance(stmt, L.For):
        stmt = parallel_outermost(stmt, cores)
    slabs = [(d, b, end) for d, (lo, hi) in enumerate(pads) for b, end in ((0, lo), (dest[d] - hi, dest[d]))]
    return L.seq(stmt, *zero_slabs(name, dtype, tuple(dest) + (2,), slabs)), buf


__all__ = ["Pads", "access_padding", "gathered", "halved_pairs", "interleaved_pairs", "padded_index", "padded_operand",
           "zero_slabs"]
