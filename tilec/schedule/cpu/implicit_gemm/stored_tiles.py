"""Where the direct variant's tiles land when a layout copy alone reads its result (a convolution
computed channels-last and copied back to NCHW): the tiles are stored straight into the copy's
output, each tile's rows within one run of rows that output holds back to back, so that the code
generator stores each of its columns as one vector (tilec.schedule.cpu.implicit_gemm.direct).

Requires: a GemmPlan, its statement and the copy. Guarantees: answers only.
"""

from __future__ import annotations

import math

import numpy as np

from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.cpu.permute import LINE_BYTES
from tilec.schedule.patterns.layout_copy import Copy
from tilec.target import CpuInfo


def tile_rows(plan: GemmPlan, b: BoundContraction, out_copy: Copy | None, bp: BoundProgram) -> int:
    """How many of the plan's last row variables a tile's rows may span: all of them, unless the
    tiles are stored into `out_copy`'s output and it holds only the last few back to back (as its
    innermost dimensions, in the rows' order, each whole), as NCHW holds one image's pixels."""
    if out_copy is None:
        return len(plan.rows)
    out_vars = tuple(e.lone_var for e in b.out_indices)
    dest_vars = out_copy.dest_cell(out_vars)  # type: ignore[arg-type]
    shape = bp.shapes[out_copy.output]
    k = 0
    while k < len(plan.rows) and k < len(dest_vars):
        var, lo, hi = plan.rows[len(plan.rows) - 1 - k]
        if dest_vars[len(dest_vars) - 1 - k] != var or lo != 0 or hi + 1 != shape[len(shape) - 1 - k]:
            break
        k += 1
    return k or len(plan.rows)


def stores_well(plan: GemmPlan, b: BoundContraction, out_copy: Copy, mr: int, nr: int, bp: BoundProgram,
                cpu: CpuInfo) -> bool:
    """Whether the tiles land in `out_copy`'s output as whole vectors: its innermost dimension is
    the column, or rows (`tile_rows`) of which there are at least two tiles' worth, and the tile's
    columns do not crowd into a few sets of the L1 cache (`columns_alias`)."""
    out_vars = tuple(e.lone_var for e in b.out_indices)
    dest: tuple[str, ...] = out_copy.dest_cell(out_vars)  # type: ignore[arg-type,assignment]
    if dest[-1] == plan.col[0]:
        return True
    k = tile_rows(plan, b, out_copy, bp)
    run = math.prod(hi - lo + 1 for _, lo, hi in plan.rows[len(plan.rows) - k:])
    return dest[-1] == plan.rows[-1][0] and run >= 2 * mr and not columns_alias(plan, dest, out_copy, nr, bp, cpu)


def columns_alias(plan: GemmPlan, dest: tuple[str, ...], out_copy: Copy, nr: int, bp: BoundProgram,
                  cpu: CpuInfo) -> bool:
    """Whether a tile's columns, stored into `out_copy`'s output one column stride apart, fall into
    fewer sets of the L1 data cache than half its ways can hold. Each column's stores fill part of
    a line; where the lines of a tile's columns share a few sets, they are evicted before the next
    tiles fill the rest of them, and every line comes from L2 again for each tile. NCHW planes of
    32 x 32 pixels lie 2 KiB (bfloat16) or 4 KiB (float32) apart, a multiple of Zen 5's way (48 KiB,
    12 ways: 64 sets of 64-byte lines): a 1 -> 64 channel 3x3 conv, batch 32, took 1.8 ms storing
    its tiles there, 0.34 ms computing channels-last and copying back."""
    col = plan.col[0]
    if col not in dest:
        return False
    shape = bp.shapes[out_copy.output]
    stride = math.prod(shape[dest.index(col) + 1:]) * np.dtype(bp.dtypes[out_copy.output]).itemsize
    sets = max(1, cpu.l1d_bytes // (LINE_BYTES * cpu.l1d_ways))
    if stride % LINE_BYTES:
        return False  # the columns' lines step through the sets unevenly: no worse than random
    distinct = sets // math.gcd(sets, stride // LINE_BYTES)
    columns = min(nr, plan.col[2] - plan.col[1] + 1)
    return -(-columns // distinct) > cpu.l1d_ways // 2


__all__ = ["columns_alias", "stores_well", "tile_rows"]
