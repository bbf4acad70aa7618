"""A shared-memory tiled schedule (ordinary primitives) for plain matrix products on GPU targets too small
for the GEMM template of tilec.schedule.gpu.gemm.

Requires: a default-lowered nest (tilec.ir.lower) of the shape
``for i: for j: allocate acc: acc = 0; for k: acc = acc + X[..] * Y[..]; O[i, j] = acc``
where X and Y are two different buffers (a batched or transposed matmul qualifies, as long as
the nest is the two cell loops around one reduction loop).
Guarantees: a Schedule (ordinary primitives, so every step is checked by them) that binds
``i``/``j`` tiles of `TiledMatmulKnobs` to blocks, the cells of a tile to threads (one output per
thread), splits ``k`` by ``tile_k`` and stages the X and Y tiles of each ``k`` step in shared
memory; None when the nest does not have that shape. The caller falls back to the default
binding when the primitives refuse (tiles that do not divide the extents: guards would put the
barriers under conditions). A register tile per thread is not done yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.rewrite import const_value
from tilec.schedule.primitives.apply import apply_schedule
from tilec.schedule.primitives.records import Schedule
from tilec.target import GpuInfo


def tile_matmuls(func: L.PrimFunc, gpu: GpuInfo) -> L.PrimFunc:
    """Plain matrix products get the shared-memory tiled schedule where its primitives accept it."""
    nests = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    for k, nest in enumerate(nests):
        s = gemm_schedule(nest, k)
        if s is None:
            continue
        try:
            func = apply_schedule(func, s, gpu=gpu)
        except ScheduleError:
            continue  # tiles that do not divide the extents: the default binding
    return func


@dataclass(frozen=True)
class TiledMatmulKnobs:
    tile_m: int = 16  # rows of the output tile of a block (threadIdx.y extent)
    tile_n: int = 16  # columns of the output tile of a block (threadIdx.x extent)
    tile_k: int = 16  # reduction step staged in shared memory


def gemm_schedule(nest: L.Stmt, index: int, knobs: TiledMatmulKnobs = TiledMatmulKnobs()) -> Schedule | None:
    """The tiled schedule of nest `index` (see the module doc), or None if it is not a plain product."""
    shape = _match(nest)
    if shape is None:
        return None
    i, j, k, x, y = shape
    s = Schedule()
    io, ii = s.split(i, knobs.tile_m, index)
    jo, ji = s.split(j, knobs.tile_n, index)
    s.reorder(io, jo, ii, ji, nest=index)
    s.bind(io, "blockIdx.y", index)
    s.bind(jo, "blockIdx.x", index)
    s.bind(ii, "threadIdx.y", index)
    s.bind(ji, "threadIdx.x", index)
    ko, _ = s.split(k, knobs.tile_k, index)
    s.cache_read(x, ko, index, scope="shared")
    s.cache_read(y, ko, index, scope="shared")
    return s


def _match(nest: L.Stmt) -> tuple[str, str, str, str, str] | None:
    if not (isinstance(nest, L.For) and isinstance(nest.body, L.For)):
        return None
    inner = nest.body
    if not (isinstance(inner.body, L.Allocate) and isinstance(inner.body.body, L.Seq)):
        return None
    acc = inner.body.buffer.name
    reductions = [s for s in inner.body.body.stmts if isinstance(s, L.For)]
    if len(reductions) != 1 or const_value(reductions[0].begin) is None or const_value(reductions[0].end) is None:
        return None
    red = reductions[0]
    update = red.body
    if not (isinstance(update, L.Store) and update.buffer == acc and isinstance(update.value, L.Bin)
            and update.value.op == "add" and isinstance(update.value.b, L.Bin) and update.value.b.op == "mul"):
        return None
    x, y = update.value.b.a, update.value.b.b
    if not (isinstance(x, L.Load) and isinstance(y, L.Load)) or x.buffer == y.buffer:
        return None
    return nest.var, inner.var, red.var, x.buffer, y.buffer


__all__ = ["TiledMatmulKnobs", "gemm_schedule", "tile_matmuls"]
