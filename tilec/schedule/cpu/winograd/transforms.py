"""Winograd's transforms: the filter (or output gradient), the input and the output, as loop IR.

Each runs over tiles or channels spread across the threads, vectorized along the channel or the
column, whichever is contiguous in the memory it reads (the source of a folded layout copy).

Requires: a WinogradPlan (tilec.schedule.cpu.winograd.plan). Guarantees: each nest stores its
transform of every tile (or channel and column) into its workspace, or (the output transforms)
the result, through a fused epilogue, into the statement's output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.patterns.layout_copy import Copy
from tilec.schedule.cpu.implicit_gemm.padding import padded_index
from tilec.schedule.cpu.winograd.plan import (FILTER, INPUT_T, OUTPUT_T, PATCH, TAPS, TILE, Image, WinogradPlan,
                                              workspace_names)
from tilec.schedule.nest import decompose, thread_share, threads_loop
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.target import Target

def _combination(coeffs: Sequence[float], values: Sequence[L.Expr], dtype: str) -> L.Expr:
    """sum(c * v), written with adds and subtracts where c is +1 or -1."""
    terms = sorted(((c, v) for c, v in zip(coeffs, values) if c != 0), key=lambda cv: cv[0] < 0)
    out: L.Expr | None = None
    for c, v in terms:
        term = v if abs(c) == 1 else L.Bin("mul", L.const(float(abs(c)), dtype), v)
        if out is None:
            out = term if c > 0 else L.Bin("sub", L.const(0.0, dtype), term)
        else:
            out = L.Bin("add" if c > 0 else "sub", out, term)
    assert out is not None
    return out


def _transform(matrix: Sequence[Sequence[float]], grid: Sequence[Sequence[L.Expr]], dtype: str) -> list[list[L.Expr]]:
    """matrix @ grid @ matrixᵀ, column pass first (LLVM shares the repeated subexpressions)."""
    half = [[_combination(row, [grid[k][col] for k in range(len(grid))], dtype) for col in range(len(grid[0]))]
            for row in matrix]
    return [[_combination(row, half[a], dtype) for row in matrix] for a in range(len(matrix))]


def _vector_width(extent: int, target: Target, dtype: str) -> int:
    return math.gcd(extent, target.lanes(dtype))


def _spread(name: str, outer: int, inner: int, width: int, threads: int, body: Callable[[L.Expr, L.Expr], L.Stmt]) -> L.Stmt:
    """for each `outer` (a contiguous share per thread): for each `inner` in vectors of `width`:
    body(outer index, inner index)."""
    t, o, ib, il = (f"{name}.{s}" for s in ("t", "o", "ib", "il"))
    threads = max(1, min(threads, outer))
    inner_index = L.add(L.mul(L.Var(ib), L.const(width)), L.Var(il))
    lanes = L.For(il, L.const(0), L.const(width), body(L.Var(o), inner_index), "vectorized" if width > 1 else "serial")
    return threads_loop(t, threads, thread_share(t, threads, o, outer, L.For(ib, L.const(0), L.const(inner // width), lanes)))


def _memory_stride(access: BoundAccess, var: str, bp: BoundProgram, copies: Mapping[str, Copy]) -> int:
    """The distance in memory between elements of `access` one step of lone index `var` apart,
    in the tensor the nest really reads (the source of a folded layout copy)."""
    dim = [e.lone_var for e in access.indices].index(var)
    shape = bp.shapes[access.tensor]
    copy = copies.get(access.tensor)
    if copy is not None:
        dim = copy.src_vars.index(copy.out_vars[dim])
        shape = bp.shapes[copy.source]
    return math.prod(shape[dim + 1:])


def filter_column_inner(bp: BoundProgram, wp: WinogradPlan, copies: Mapping[str, Copy]) -> bool:
    """Whether the forward form's filter transform vectorizes along the column (else along the
    channel): the one closer together in the filter's memory. U is laid out [point, channel,
    column] or [point, column, channel] to match, so its stores are contiguous."""
    b, col, channel = wp.conv.b, wp.conv.col[0], wp.image.channel[0]
    return _memory_stride(b, col, bp, copies) <= _memory_stride(b, channel, bp, copies)


def _tile_env(image: Image, p: L.Expr, out: str) -> tuple[dict[str, L.Expr], L.Expr, L.Expr]:
    """The batch variables of tile `p` and its first cell's two positions."""
    sx, sy = image.spatial
    tx, ty = f"{out}.wtx", f"{out}.wty"
    env = decompose(p, image.batch + ((tx, 0, sx.tiles - 1), (ty, 0, sy.tiles - 1)))
    x0 = L.add(L.mul(env.pop(tx), L.const(TILE)), L.const(sx.row[1]))
    y0 = L.add(L.mul(env.pop(ty), L.const(TILE)), L.const(sy.row[1]))
    return env, x0, y0


def _stores(name: str, cell: Callable[[int], tuple[L.Expr, ...]], grid: list[list[L.Expr]]) -> L.Stmt:
    """name[cell(point)] = grid's value at each point (row-major)."""
    return L.seq(*(L.Store(name, cell(a * len(row) + c), value) for a, row in enumerate(grid) for c, value in enumerate(row)))


def _transposed(matrix: Sequence[Sequence[float]]) -> list[list[float]]:
    return [list(col) for col in zip(*matrix)]


def input_transform(b: BoundContraction, wp: WinogradPlan, source: str, source_dtype: str, target: Target) -> L.Stmt:
    """V[ab, p, c] = (Bᵀ d B)[a, b], d tile p's 4x4 window of A at channel c."""
    dt, image = b.dtype, wp.image
    v = workspace_names(b.output)[1]
    cv, clo, chi = image.channel
    sx, sy = image.spatial
    offsets = [lo for lo, _ in image.pads]

    def body(p: L.Expr, channel: L.Expr) -> L.Stmt:
        env, x0, y0 = _tile_env(image, p, b.output)
        env[cv] = L.add(channel, L.const(clo))

        def element(k: int, m: int) -> L.Expr:
            at = {**env, sx.row[0]: L.add(x0, L.const(k)), sx.tap: L.const(sx.tap_at(0)),
                  sy.row[0]: L.add(y0, L.const(m)), sy.tap: L.const(sy.tap_at(0))}
            return L.cast(dt, L.Load(source, padded_index(wp.conv.a.indices, offsets, at), source_dtype))

        d = [[element(k, m) for m in range(PATCH)] for k in range(PATCH)]
        return _stores(v, lambda point: (L.const(point), p, channel), _transform(INPUT_T, d, dt))

    channels = chi - clo + 1
    return _spread(f"{v}.i", image.tiles, channels, _vector_width(channels, target, dt), target.cores, body)


def filter_transform(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target, column_inner: bool) -> L.Stmt:
    """Forward form: U[ab, c, col] = (G g Gᵀ)[a, b], g the 3x3 taps of B at (c, col)."""
    dt, plan = b.dtype, wp.conv
    u = workspace_names(b.output)[0]
    (cv, clo, chi), (jv, jlo, jhi) = wp.image.channel, plan.col
    sx, sy = wp.image.spatial

    def body(channel: L.Expr, col: L.Expr) -> L.Stmt:
        env = {cv: L.add(channel, L.const(clo)), jv: L.add(col, L.const(jlo))}

        def tap(e: int, f: int) -> L.Expr:
            at = {**env, sx.tap: L.const(sx.tap_at(e)), sy.tap: L.const(sy.tap_at(f))}
            index = tuple(substitute_expr(index_expr(i), at) for i in plan.b.indices)
            return L.cast(dt, L.Load(plan.b.tensor, index, bp.dtypes[plan.b.tensor]))

        g = [[tap(e, f) for f in range(TAPS)] for e in range(TAPS)]
        cell = (channel, col) if column_inner else (col, channel)
        return _stores(u, lambda point: (L.const(point), *cell), _transform(FILTER, g, dt))

    channels, cols = chi - clo + 1, jhi - jlo + 1
    if column_inner:
        return _spread(f"{u}.f", channels, cols, _vector_width(cols, target, dt), target.cores, body)
    return _spread(f"{u}.f", cols, channels, _vector_width(channels, target, dt), target.cores,
                   lambda col, channel: body(channel, col))


def gradient_transform(b: BoundContraction, wp: WinogradPlan, source: str, source_dtype: str, target: Target) -> L.Stmt:
    """Weight form: U[ab, p, col] = (A z Aᵀ)[a, b], z tile p's 2x2 cells of B (the output
    gradient) at column col."""
    dt, plan, image = b.dtype, wp.conv, wp.image
    u = workspace_names(b.output)[0]
    jv, jlo, jhi = plan.col
    sx, sy = image.spatial
    offsets = [lo for lo, _ in wp.b_pads]
    expand = _transposed(OUTPUT_T)

    def body(p: L.Expr, col: L.Expr) -> L.Stmt:
        env, x0, y0 = _tile_env(image, p, b.output)
        env[jv] = L.add(col, L.const(jlo))

        def cell(k: int, m: int) -> L.Expr:
            at = {**env, sx.row[0]: L.add(x0, L.const(k)), sy.row[0]: L.add(y0, L.const(m))}
            return L.cast(dt, L.Load(source, padded_index(plan.b.indices, offsets, at), source_dtype))

        z = [[cell(k, m) for m in range(TILE)] for k in range(TILE)]
        return _stores(u, lambda point: (L.const(point), p, col), _transform(expand, z, dt))

    cols = jhi - jlo + 1
    return _spread(f"{u}.g", image.tiles, cols, _vector_width(cols, target, dt), target.cores, body)


def _store_out(b: BoundContraction, bp: BoundProgram, epilogue: Epilogue | None, env: dict[str, L.Expr],
               value: L.Expr, inside: list[L.Expr]) -> L.Stmt:
    cell = tuple(substitute_expr(index_expr(e), env) for e in b.out_indices)
    final = value if epilogue is None else epilogue_value(epilogue, bp, b.output, value, cell)
    store: L.Stmt = L.Store(epilogue.dest if epilogue is not None else b.output, cell, final)
    cond = L.logical_and(inside)
    return store if cond is None else L.If(cond, store)


def output_transform(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target,
                      epilogue: Epilogue | None) -> L.Stmt:
    """Forward form: tile p's 2x2 output cells at column col = (Aᵀ m A), m = M[:, p, col]."""
    dt, image = b.dtype, wp.image
    m_name = workspace_names(b.output)[2]
    jv, jlo, jhi = wp.conv.col
    sx, sy = image.spatial

    def body(p: L.Expr, col: L.Expr) -> L.Stmt:
        env, x0, y0 = _tile_env(image, p, b.output)
        env[jv] = L.add(col, L.const(jlo))
        m = [[L.Load(m_name, (L.const(a * PATCH + c), p, col), dt) for c in range(PATCH)] for a in range(PATCH)]
        stores: list[L.Stmt] = []
        for u, row in enumerate(_transform(OUTPUT_T, m, dt)):
            for w, value in enumerate(row):
                x, y = L.add(x0, L.const(u)), L.add(y0, L.const(w))
                inside: list[L.Expr] = [L.Cmp("le", x, L.const(sx.row[2]))] if u and sx.ragged else []
                if w and sy.ragged:
                    inside.append(L.Cmp("le", y, L.const(sy.row[2])))
                stores.append(_store_out(b, bp, epilogue, {**env, sx.row[0]: x, sy.row[0]: y}, value, inside))
        return L.seq(*stores)

    cols = jhi - jlo + 1
    return _spread(f"{m_name}.o", image.tiles, cols, _vector_width(cols, target, dt), target.cores, body)


def filter_output(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target,
                   epilogue: Epilogue | None) -> L.Stmt:
    """Weight form: the 3x3 taps at (c, col) = (Gᵀ s G), s = M[:, c, col]."""
    dt, image = b.dtype, wp.image
    m_name = workspace_names(b.output)[2]
    (cv, clo, chi), (jv, jlo, jhi) = image.channel, wp.conv.col
    sx, sy = image.spatial
    reduce = _transposed(FILTER)

    def body(channel: L.Expr, col: L.Expr) -> L.Stmt:
        env = {cv: L.add(channel, L.const(clo)), jv: L.add(col, L.const(jlo))}
        s = [[L.Load(m_name, (L.const(a * PATCH + c), channel, col), dt) for c in range(PATCH)] for a in range(PATCH)]
        return L.seq(*(_store_out(b, bp, epilogue, {**env, sx.tap: L.const(sx.tap_at(e)), sy.tap: L.const(sy.tap_at(f))},
                                  value, [])
                       for e, row in enumerate(_transform(reduce, s, dt)) for f, value in enumerate(row)))

    channels, cols = chi - clo + 1, jhi - jlo + 1
    return _spread(f"{m_name}.o", channels, cols, _vector_width(cols, target, dt), target.cores, body)
