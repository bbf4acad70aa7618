"""The packed variant on AMX tiles: where it applies, and the blocking it takes.

On a CPU with AMX-BF16 (tilec.target.has_tiles) the packed variant's micro-kernel is one TileDot
(tilec.ir.loop): the MR x NR accumulators in 16 x 16 float32 tiles, A packed in tile steps (each
step's MR rows of 32 reduction values one contiguous run, a tile row 64 bytes of it), B packed as
bfloat16 pairs (the pair dot product's layout, which is AMX's too). Only products that fill the
tiles take them (`tiles_pay`). A tile's `tdpbf16ps` does 16 x 16 x 32 products where
`vdpbf16ps` does 16 x 2.

Blocking (`tile_knobs`): 2 x 2 accumulator tiles (MR = NR = 32), the most that leave a column of
A tiles and a row of B tiles beside them in the eight registers, so each step loads four tiles
for four products; 32 x 16 where N is at most 16. KC and MC as the packed variant's model has
them (tilec.schedule.cpu.implicit_gemm.knobs), for 2-byte elements, KC a whole number of tile
steps (32 reduction values), and the packed A block in half of L2 rather than a quarter: the
B micro-panel streams from L2 either way, and each row block streams all of B from L3 again
(Xeon with AMX, 2048^3 on 2 cores: MC = 256 8.4 ms against 9.0 with the quarter's 128).
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.schedule.cpu.implicit_gemm.knobs import GemmKnobs, reduction_block, round_up, row_block
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.target import Target, has_tiles

TILE_K = 2 * L.TILE_PAIRS  # reduction values of one tile step


def uses_tiles(pairs: bool, target: Target, mr: int, nr: int) -> bool:
    """Whether the packed variant's micro-kernel with an MR x NR block runs on AMX tiles: on bfloat16
    `pairs` (packed.bf16_pairs) on a CPU with AMX-BF16, in whole 16 x 16 tiles that fit the registers."""
    host = target.host
    if not pairs or host is None or not has_tiles(host) or mr % L.TILE_ROWS or nr % L.TILE_ROWS:
        return False
    rows, cols = mr // L.TILE_ROWS, nr // L.TILE_ROWS
    return rows * cols + rows + cols <= L.AMX_TILES


def tiles_pay(plan: GemmPlan) -> bool:
    """Whether the product fills the tiles enough to pay for their packing: two tile steps of
    reduction, two tiles of columns and of rows at least. Below, K padded to whole steps and
    half-empty blocks cost more than the tiles gain (Xeon with AMX, the examples' small CNN in
    bfloat16, whose convolutions take 9 and 72 reduction values into 8 and 16 channels: a training
    step 1.54 ms on the pair dot product against 2.54 on tiles)."""
    return plan.k >= 2 * TILE_K and plan.n >= 2 * L.TILE_ROWS and plan.m >= 2 * L.TILE_ROWS


def tile_knobs(plan: GemmPlan, target: Target) -> GemmKnobs:
    """The packed variant's blocking on tiles (module doc)."""
    cpu = target.host
    assert cpu is not None
    threads = target.cores
    sharing = 1 if plan.batch >= threads else threads
    mr, nr = (32, 16) if plan.n <= L.TILE_ROWS else (32, 32)
    kc = round_up(reduction_block(plan.k, plan.n, nr, 2, cpu), TILE_K)
    mc = row_block(plan.m, mr, kc, 1, cpu, sharing)  # (as for 1-byte values: the A block in half of L2)
    return GemmKnobs(mr=mr, nr=nr, kc=kc, mc=mc, threads=threads)


__all__ = ["TILE_K", "tile_knobs", "tiles_pay", "uses_tiles"]
