"""Winograd F(2x2, 3x3): a 3x3 stride-1 convolution with 2.25 times fewer multiplications.

A contraction ``O[rows..., col] = +(A[..., x + s*i + d, ..., y + t*j + e, ..., c] * B[i, j, c, col])``
(any index order; s, t = +1 or -1: an input gradient runs its taps backwards) over 3x3 taps
computes each 2x2 tile of output cells from a 4x4 patch d of A and a 3x3 slice g of B as
``Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`` (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016). Summed over the channels c, the 16 element-wise products are 16 GEMMs of
tiles x channels x columns, 16 multiplications per tile where the direct form needs 36::

    Apad[...]     = A with zero borders (tiles past the edge read zeros)
    U[ab, c, col] = (G g Gᵀ)[a, b]            for every channel and column  # filter transform
    V[ab, p, c]   = (Bᵀ d B)[a, b]            for every tile p and channel   # input transform
    M[ab, p, col] = +(V[ab, p, c] * U[ab, c, col])                           # 16 GEMMs
    O[tile p's 2x2 cells, col] = (Aᵀ M[:, p, col] A)                         # output transform

A filter gradient ``O[i, j, c, col] = +(B[batch, x, y, col] * A[.., x + i + d, .., y + j + e, .., c])``
is the same algorithm with the roles exchanged (B's 2x2 tiles the "filter", the taps the output):
``O[.., c, col] = Gᵀ [sum over tiles (A z Aᵀ) ⊙ (Bᵀ d B)] G``, z a tile of B::

    U[ab, p, col] = (A z Aᵀ)[a, b]            for every tile p and column    # gradient transform
    V[ab, p, c]   = (Bᵀ d B)[a, b]            as above
    M[ab, c, col] = +(V[ab, p, c] * U[ab, p, col])                           # 16 GEMMs over tiles
    O[taps, c, col] = (Gᵀ M[:, c, col] G)                                     # filter output

The GEMMs go through the implicit-GEMM templates (tilec.schedule.cpu.gemm.packed, direct_gemm)
with the knobs of the decision; the transforms run over tiles (or channels) split across the
threads, vectorized along the channel or column, which must be the innermost index of the
tensors they read.

Requires: a BoundContraction whose GEMM roles (implicit_gemm.match) have no outer loop, and in
one index of A each of two taps ranging over 0..2 beside one position variable with coefficient
1 (positions are output rows and taps reduction variables in a convolution, the other way round
in a filter gradient); A's other indices lone batch or channel variables, the channel innermost;
B's indices lone variables (the taps, channel and column; or the batch, positions and column,
the column innermost); only bound guards on A and none on B. Guarantees: the contraction's
result (with float rounding of the transforms: F(2x2, 3x3) loses about one decimal digit
against the direct sum).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram
from tilec.ir.lower import index_expr
from tilec.schedule.cpu.gemm.direct import Pads, access_padding, padded_index, padded_operand
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.cpu.gemm.packed import GemmKnobs, GemmPlan, Range, decompose, thread_share, threads_loop
from tilec.schedule.cpu.gemm.packed import build as build_gemm
from tilec.ir.rewrite import substitute_expr
from tilec.target import Target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tilec.schedule.cpu.copy_fold import Copy

# F(2, 3): output tile 2, taps 3, input tile 4
INPUT_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))  # Bᵀ
FILTER = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))  # G
OUTPUT_T = ((1, 1, 1, 0), (0, 1, -1, -1))  # Aᵀ
TILE, TAPS, PATCH = 2, 3, 4
POINTS = PATCH * PATCH  # the 16 GEMMs

MIN_CHANNELS = 128  # channels and columns below which the GEMMs run too slowly to gain (64 at 56x56: no gain)
MIN_TILES = 16


@dataclass(frozen=True)
class Spatial:
    """One image axis: the position variable (the output row of a convolution, the summed position
    of a filter gradient), the tap beside it in A's index, and the tap's direction."""

    row: Range  # (x, lo, hi) inclusive
    tap: str
    sign: int  # +1: A reads x + i + d; -1: x - i + d

    @property
    def tiles(self) -> int:
        return -(-(self.row[2] - self.row[1] + 1) // TILE)

    @property
    def ragged(self) -> bool:
        """The last tile's second position lies past the end."""
        return (self.row[2] - self.row[1] + 1) % TILE != 0

    def tap_at(self, e: int) -> int:
        """The tap value whose A element is the e-th of a tile's window (e = 0 first)."""
        return e if self.sign > 0 else TAPS - 1 - e


@dataclass(frozen=True)
class Image:
    """A's side of either form: two spatial axes cut into 2-wide tiles, the channel, the batch."""

    spatial: tuple[Spatial, Spatial]
    channel: Range
    batch: tuple[Range, ...]
    pads: Pads  # A's zero borders for whole tiles

    @property
    def tiles(self) -> int:
        return math.prod(hi - lo + 1 for _, lo, hi in self.batch) * self.spatial[0].tiles * self.spatial[1].tiles

    def box(self) -> dict[str, tuple[int, int]]:
        """Every variable's range, the positions extended to whole tiles."""
        box = {v: (lo, hi) for v, lo, hi in self.batch + (self.channel,)}
        for s in self.spatial:
            box[s.row[0]] = (s.row[1], s.row[1] + TILE * s.tiles - 1)
            box[s.tap] = (0, TAPS - 1)
        return box


@dataclass(frozen=True)
class WinogradPlan:
    """`weight` False: O[rows, col] = conv(A, filter B) (a forward convolution, an input gradient);
    the GEMMs are M[ab, p, col] = +(V[ab, p, c] * U[ab, c, col]), p a tile. `weight` True:
    O[i, j, c, col] = +(B[batch, x, y, col] * A[.., x + i, .., y + j, .., c]) (a filter gradient, B the
    output gradient); the GEMMs are M[ab, c, col] = +(V[ab, p, c] * U[ab, p, col]), summed over tiles."""

    conv: GemmPlan  # the contraction's GEMM roles: A the image
    image: Image
    weight: bool
    b_pads: Pads  # the weight form's zero borders of B (the output gradient) for ragged tiles
    gemm: GemmPlan  # the 16 GEMMs over workspaces


def workspace_names(out: str) -> tuple[str, str, str, str, str]:
    """B's transform, A's transform, the products, and the padded A and B of statement `out`."""
    return f"{out}.wU", f"{out}.wV", f"{out}.wM", f"{out}.wA", f"{out}.wB"


def _lone(v: str) -> IntAffine:
    return IntAffine(((v, 1),), 0)


def _image_axes(a: BoundAccess, positions: dict[str, Range], taps: dict[str, Range]) -> tuple[list[Spatial], list[str]] | None:
    """A's spatial axes (indices `x + i + d` or `x - i + d`, x among `positions`, i among `taps`
    ranging over 0..2) and its lone-variable indices; None for any other index."""
    spatial: list[Spatial] = []
    lone: list[str] = []
    for e in a.indices:
        if e.divisor != 1:
            return None
        if e.lone_var is not None:
            lone.append(e.lone_var)
            continue
        coeffs = dict(e.coeffs)
        row = [v for v in coeffs if v in positions]
        tap = [v for v in coeffs if v in taps]
        if len(coeffs) != 2 or len(row) != 1 or len(tap) != 1 or coeffs[row[0]] != 1 or abs(coeffs[tap[0]]) != 1:
            return None
        if taps[tap[0]][1:] != (0, TAPS - 1):
            return None
        spatial.append(Spatial(positions[row[0]], tap[0], coeffs[tap[0]]))
    if len(spatial) != 2 or spatial[0].row == spatial[1].row or spatial[0].tap == spatial[1].tap:
        return None
    return spatial, lone


def match(b: BoundContraction, plan: GemmPlan, bp: BoundProgram) -> WinogradPlan | None:
    """The Winograd form of `b` (whose GEMM roles are `plan`), or None: not a 3x3 stride-1
    convolution or filter gradient in a layout the transforms read contiguously, or too small
    to gain."""
    if plan.outer or plan.partial or plan.b_guards or b.dtype not in ("float32", "float64"):
        return None
    return _match_form(b, plan, bp, weight=False) or _match_form(b, plan, bp, weight=True)


def _match_form(b: BoundContraction, plan: GemmPlan, bp: BoundProgram, weight: bool) -> WinogradPlan | None:
    rows = {r[0]: r for r in plan.rows}
    red = {r[0]: r for r in plan.red}
    positions, taps = (red, rows) if weight else (rows, red)
    axes = _image_axes(plan.a, positions, taps)
    if axes is None:
        return None
    spatial, lone = axes
    tap_names = {s.tap for s in spatial}
    position_names = {s.row[0] for s in spatial}
    channels = [v for v in taps if v not in tap_names]
    batch = tuple(r for v, r in positions.items() if v not in position_names)
    if len(channels) != 1 or sorted(lone) != sorted([r[0] for r in batch] + channels):
        return None  # an index of A that is neither batch nor channel
    if plan.a.indices[-1].lone_var != channels[0]:
        return None  # the input transform reads along the channel
    b_vars = [e.lone_var for e in plan.b.indices]
    b_wanted = [r[0] for r in batch] + sorted(position_names) if weight else sorted(tap_names) + channels
    if None in b_vars or sorted(b_vars) != sorted(b_wanted + [plan.col[0]]):  # type: ignore[type-var]
        return None
    if weight and b_vars[-1] != plan.col[0]:
        return None  # the output gradient's transform reads along the column
    image = Image((spatial[0], spatial[1]), taps[channels[0]], batch, ())
    pads = access_padding(plan.a, plan.a_guards, image.box(), bp.shapes[plan.a.tensor])
    b_box = {**image.box(), plan.col[0]: plan.col[1:]}
    b_pads = access_padding(plan.b, (), b_box, bp.shapes[plan.b.tensor]) if weight else \
        tuple((0, 0) for _ in plan.b.indices)
    if pads is None or b_pads is None:
        return None
    image = replace(image, pads=pads)
    channel_count, cols = image.channel[2] - image.channel[1] + 1, plan.n
    if channel_count < MIN_CHANNELS or cols < MIN_CHANNELS or image.tiles < MIN_TILES:
        return None
    return WinogradPlan(plan, image, weight, b_pads, _gemm_plan(b.output, image.tiles, channel_count, cols, weight))


def _gemm_plan(out: str, tiles: int, channels: int, cols: int, weight: bool) -> GemmPlan:
    """The 16 GEMMs; the forward form's U laid out [point, channel, column] (build swaps it when `filter_column_inner` is False)."""
    u, v, _, _, _ = workspace_names(out)
    ab, p, c, j = (f"{out}.w{s}" for s in ("ab", "p", "c", "j"))
    outer = ((ab, 0, POINTS - 1),)
    a = BoundAccess(v, (_lone(ab), _lone(p), _lone(c)))
    if weight:
        return GemmPlan(a=a, b=BoundAccess(u, (_lone(ab), _lone(p), _lone(j))), outer=outer, rows=((c, 0, channels - 1),),
                        col=(j, 0, cols - 1), red=((p, 0, tiles - 1),), a_guards=(), b_guards=())
    return GemmPlan(a=a, b=BoundAccess(u, (_lone(ab), _lone(c), _lone(j))), outer=outer, rows=((p, 0, tiles - 1),),
                    col=(j, 0, cols - 1), red=((c, 0, channels - 1),), a_guards=(), b_guards=())


# ------------------------------------------------------------------ the transforms


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


def _memory_stride(access: BoundAccess, var: str, bp: BoundProgram, copies: "Mapping[str, Copy]") -> int:
    """The distance in memory between elements of `access` one step of lone index `var` apart,
    in the tensor the nest really reads (the source of a folded layout copy)."""
    dim = [e.lone_var for e in access.indices].index(var)
    shape = bp.shapes[access.tensor]
    copy = copies.get(access.tensor)
    if copy is not None:
        dim = copy.src_vars.index(copy.out_vars[dim])
        shape = bp.shapes[copy.source]
    return math.prod(shape[dim + 1:])


def filter_column_inner(bp: BoundProgram, wp: WinogradPlan, copies: "Mapping[str, Copy]") -> bool:
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


def _input_transform(b: BoundContraction, wp: WinogradPlan, source: str, source_dtype: str, target: Target) -> L.Stmt:
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


def _filter_transform(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target, column_inner: bool) -> L.Stmt:
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


def _gradient_transform(b: BoundContraction, wp: WinogradPlan, source: str, source_dtype: str, target: Target) -> L.Stmt:
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


def _output_transform(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target,
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


def _filter_output(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, target: Target,
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


def _operand(name: str, tensor: str, pads: Pads, bp: BoundProgram, copies: "Mapping[str, Copy]", target: Target,
             stmts: list[L.Stmt], workspaces: list[L.Buffer]) -> str:
    """The buffer a transform reads `tensor` from: a zero-padded copy (gathered from a folded layout
    copy's source) when it needs borders or is folded, else the tensor itself."""
    if all(p == (0, 0) for p in pads) and tensor not in copies:
        return tensor
    fill, buf = padded_operand(name, tensor, bp, pads, copies, target)
    stmts.append(fill)
    workspaces.append(buf)
    return name


def build(b: BoundContraction, bp: BoundProgram, wp: WinogradPlan, knobs: GemmKnobs, target: Target,
          epilogue: Epilogue | None = None, copies: "Mapping[str, Copy] | None" = None) -> tuple[L.Stmt, list[L.Buffer]]:
    """The phases and their workspaces; `knobs` are the 16 GEMMs' (of wp.gemm)."""
    copies = copies or {}
    dt, plan, image = b.dtype, wp.conv, wp.image
    u, v, m, apad, bpad = workspace_names(b.output)
    column_inner = wp.weight or filter_column_inner(bp, wp, copies)
    g = wp.gemm
    if not column_inner:  # U laid out [point, column, channel], as the filter transform stores it
        point, channel, col = g.b.indices
        g = replace(g, b=replace(g.b, indices=(point, col, channel)))
    shapes = {u: _extents(g.b, g), v: _extents(g.a, g), m: (POINTS, g.m, g.n)}
    workspaces = [L.Buffer(name, dt, shape) for name, shape in shapes.items()]
    stmts: list[L.Stmt] = []
    a_source = _operand(apad, plan.a.tensor, image.pads, bp, copies, target, stmts, workspaces)
    stmts.append(_input_transform(b, wp, a_source, bp.dtypes[plan.a.tensor], target))
    if wp.weight:
        b_source = _operand(bpad, plan.b.tensor, wp.b_pads, bp, copies, target, stmts, workspaces)
        stmts.append(_gradient_transform(b, wp, b_source, bp.dtypes[plan.b.tensor], target))
    else:
        stmts.append(_filter_transform(b, bp, wp, target, column_inner))

    gemm_b = replace(b, stmt=replace(b.stmt, output=m), shape=shapes[m],
                     out_indices=tuple(_lone(r[0]) for r in (g.outer[0], g.rows[0], g.col)),
                     operands=(g.a, g.b), ranges=g.outer + g.rows + (g.col,) + g.red, guards=(), empty=False)
    gemm_bp = replace(bp, shapes={**bp.shapes, **shapes}, dtypes={**bp.dtypes, **{n: dt for n in shapes}})
    gemm, gemm_workspaces = build_gemm(gemm_b, gemm_bp, g, knobs, target)
    stmts.append(gemm)
    workspaces += gemm_workspaces
    stmts.append(_filter_output(b, bp, wp, target, epilogue) if wp.weight else _output_transform(b, bp, wp, target, epilogue))
    return L.seq(*stmts), workspaces


def _extents(access: BoundAccess, plan: GemmPlan) -> tuple[int, ...]:
    """The shape of a workspace `access` reads whole, from the plan's variable ranges."""
    ranges = {v: hi - lo + 1 for v, lo, hi in plan.outer + plan.rows + (plan.col,) + plan.red}
    return tuple(ranges[e.lone_var] for e in access.indices)  # type: ignore[index]


__all__ = ["WinogradPlan", "build", "match", "workspace_names"]
