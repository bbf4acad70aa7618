"""Where the direct variant's tiles land when a layout copy alone reads its result (a convolution
computed channels-last and copied back to NCHW): the tiles are stored straight into the copy's
output, each tile's rows within one run of rows that output holds back to back, so that the code
generator stores each of its columns as one vector (tilec.schedule.cpu.implicit_gemm.direct).

Requires: a GemmPlan, its statement and the copy. Guarantees: answers only.
"""

from __future__ import annotations

import math

from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.patterns.layout_copy import Copy


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


def stores_well(plan: GemmPlan, b: BoundContraction, out_copy: Copy, mr: int, bp: BoundProgram) -> bool:
    """Whether the tiles land in `out_copy`'s output as whole vectors: its innermost dimension is
    the column, or rows (`tile_rows`) of which there are at least two tiles' worth."""
    out_vars = tuple(e.lone_var for e in b.out_indices)
    innermost = out_copy.dest_cell(out_vars)[-1]  # type: ignore[arg-type]
    if innermost == plan.col[0]:
        return True
    k = tile_rows(plan, b, out_copy, bp)
    run = math.prod(hi - lo + 1 for _, lo, hi in plan.rows[len(plan.rows) - k:])
    return innermost == plan.rows[-1][0] and run >= 2 * mr


__all__ = ["stores_well", "tile_rows"]
