"""Winograd's pattern: a 3x3 stride-1 convolution or filter gradient, and its 16 GEMMs.

Requires: a BoundContraction and its GEMM roles (tilec.schedule.patterns.gemm). Guarantees:
`match` gives the WinogradPlan (the image axes cut into 2x2 tiles, the zero borders, the 16
GEMMs' roles over the workspaces) or None; `large_enough` is the heuristic's size test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram
from tilec.schedule.cpu.implicit_gemm.padding import Pads, access_padding
from tilec.schedule.params import LoweringParams
from tilec.schedule.patterns.epilogue import Epilogue
from tilec.schedule.patterns.gemm import GemmPlan, Range

# F(2, 3): output tile 2, taps 3, input tile 4
INPUT_T = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))  # Bᵀ
FILTER = ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1))  # G
OUTPUT_T = ((1, 1, 1, 0), (0, 1, -1, -1))  # Aᵀ
TILE, TAPS, PATCH = 2, 3, 4
POINTS = PATCH * PATCH  # the 16 GEMMs


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
    epilogue: Epilogue | None = None  # the elementwise statements fused into the output transform


def workspace_names(out: str) -> tuple[str, str, str, str, str]:
    """B's transform, A's transform, the products, and the padded A and B of statement `out`."""
    return f"{out}.wU", f"{out}.wV", f"{out}.wM", f"{out}.wA", f"{out}.wB"


def lone(v: str) -> IntAffine:
    """The index expression of variable `v` alone."""
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
    convolution or filter gradient in a layout the transforms read contiguously."""
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
    return WinogradPlan(plan, image, weight, b_pads,
                        _gemm_plan(b.output, image.tiles, channel_count, cols, weight, plan.dtype))


def large_enough(wp: WinogradPlan, params: LoweringParams) -> bool:
    """Channels, columns and tiles enough for the 16 GEMMs to gain over the direct form."""
    channels = wp.image.channel[2] - wp.image.channel[1] + 1
    least = params.winograd_min_channels
    return channels >= least and wp.conv.n >= least and wp.image.tiles >= params.winograd_min_tiles


def _gemm_plan(out: str, tiles: int, channels: int, cols: int, weight: bool, dtype: str) -> GemmPlan:
    """The 16 GEMMs; the forward form's U laid out [point, channel, column] (build swaps it when `filter_column_inner` is False)."""
    u, v, _, _, _ = workspace_names(out)
    ab, p, c, j = (f"{out}.w{s}" for s in ("ab", "p", "c", "j"))
    outer = ((ab, 0, POINTS - 1),)
    a = BoundAccess(v, (lone(ab), lone(p), lone(c)))
    if weight:
        return GemmPlan(a=a, b=BoundAccess(u, (lone(ab), lone(p), lone(j))), outer=outer, rows=((c, 0, channels - 1),),
                        col=(j, 0, cols - 1), red=((p, 0, tiles - 1),), a_guards=(), b_guards=(), dtype=dtype)
    return GemmPlan(a=a, b=BoundAccess(u, (lone(ab), lone(c), lone(j))), outer=outer, rows=((p, 0, tiles - 1),),
                    col=(j, 0, cols - 1), red=((c, 0, channels - 1),), a_guards=(), b_guards=(), dtype=dtype)


__all__ = ["FILTER", "INPUT_T", "OUTPUT_T", "PATCH", "POINTS", "TAPS", "TILE", "Image", "Spatial", "WinogradPlan", "large_enough", "lone", "match", "workspace_names"]
