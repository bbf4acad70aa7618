"""The GPU GEMM template (CUDA cores): any sum-of-products contraction that the GEMM pattern
(tilec.schedule.patterns.gemm) accepts, as one launch of shared-memory tiles.

Requires: a BoundContraction with a GemmPlan whose every output cell gets a tuple (not
``partial``), float32 or float64. Guarantees: a launch in the GPU conventions of
tilec/ir/loop.py computing what the default lowering computes (up to the order of the
additions), with the elementwise statements after it fused in as an epilogue::

    for bz in blockIdx.z [0, outer):  for by in blockIdx.y [0, N / BN):  for bx in blockIdx.x [0, M / BM):
      shared sA[stages, BM, BK], sB[stages, BK, BN]
      for ty in threadIdx.y [0, BM / TM):  for tx in threadIdx.x [0, BN / TN):
        acc[TM, TN] = 0                                     # registers (cache_write style)
        for ko in K / BK:
          sA <- A tile, sB <- B tile                        # cooperative loads by all threads
          Barrier
          for kk in BK: ra[i] = sA[.., ty + i * BM/TM, kk]; rb[j] = sB[.., kk, tx + j * BN/TN]
                        acc[i, j] += ra[i] * rb[j]
          Barrier
        C[row, col] = epilogue(acc[i, j])                   # row = by.. + ty + i*BM/TM, col likewise

Each thread owns rows and columns strided by the thread counts, so the threads of a warp read
consecutive words of sB (no bank conflicts) and store consecutive columns (coalesced). A tile
element is read from global memory once per block; consecutive threads load consecutive
elements of A's reduction run and of B's columns (coalesced), four at a time (128-bit loads)
where the tile needs no guard and the layout allows (the CUDA backend proves the alignment).
The A tile computes the operand's indices from the flat row and reduction indices on the fly,
so a convolution is an implicit GEMM (im2col indexing, padding as guarded zero loads).
Guards only where shapes do not divide the tiles. With ``double_buffer`` the tiles have two
stages: the next tile is loaded while the current one is multiplied, one barrier per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.nest import decompose, guarded_store
from tilec.schedule.patterns import gemm as gemm_pattern
from tilec.schedule.patterns.epilogue import Epilogue, covered, epilogue_value, find_epilogue, fused_group
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.schedule.templates.knobs import knob
from tilec.schedule.templates.space import Config, Constraint, Knob, choices_with
from tilec.target import GpuInfo

MAX_ACC_REGISTERS = 128  # accumulators + operand registers per thread, of the 255 a thread may use
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class GpuGemmKnobs:
    """The template's knobs: block tile BM x BN, reduction step BK, per-thread tile TM x TN."""

    bm: int = knob(64, 1, 1024, "rows of the block tile")
    bn: int = knob(64, 1, 1024, "columns of the block tile")
    bk: int = knob(16, 1, 256, "reduction step")
    tm: int = knob(4, 1, 64, "rows of a thread's tile")
    tn: int = knob(4, 1, 64, "columns of a thread's tile")
    double_buffer: bool = knob(True, doc="two stages of tiles: the next loads while the current multiplies")

    @property
    def threads(self) -> int:
        return (self.bm // max(1, self.tm)) * (self.bn // max(1, self.tn))

    def shared_bytes(self, itemsize: int) -> int:
        return (2 if self.double_buffer else 1) * (self.bm * self.bk + self.bk * self.bn) * itemsize

    def problems(self, gpu: GpuInfo, itemsize: int = 4) -> list[str]:
        """Why this record cannot be built on `gpu` (empty when it can)."""
        out = []
        if min(self.bm, self.bn, self.bk, self.tm, self.tn) < 1:
            return ["every tile size must be positive"]
        if self.bm % self.tm or self.bn % self.tn:
            out.append(f"the thread tile {self.tm}x{self.tn} must divide the block tile {self.bm}x{self.bn}")
        elif not 1 <= self.threads <= gpu.max_threads:
            out.append(f"{self.threads} threads per block ((bm/tm) x (bn/tn)); CUDA allows at most {gpu.max_threads}")
        regs = self.tm * self.tn + self.tm + self.tn
        if regs > MAX_ACC_REGISTERS:
            out.append(f"{regs} registers per thread for the {self.tm}x{self.tn} tile and its operands; keep "
                       f"tm * tn + tm + tn <= {MAX_ACC_REGISTERS} or the registers spill")
        if self.shared_bytes(itemsize) > gpu.shared_bytes:
            out.append(f"{self.shared_bytes(itemsize)} bytes of shared memory for the tiles; at most {gpu.shared_bytes} "
                       f"(lower bk, the block tile, or turn double_buffer off)")
        return out


# Candidates of the heuristic, biggest first: (bm, bn, bk, tm, tn).
_CANDIDATES = ((128, 128, 8, 8, 8), (64, 64, 16, 4, 4), (32, 32, 16, 2, 2))


def default_knobs(plan: GemmPlan, gpu: GpuInfo) -> GpuGemmKnobs:
    """The biggest block tile that still gives every SM a block (big tiles reuse more per load)."""
    n_outer = plan.batch
    for bm, bn, bk, tm, tn in _CANDIDATES:
        if n_outer * -(-plan.m // bm) * -(-plan.n // bn) >= gpu.sms:
            return GpuGemmKnobs(bm, bn, bk, tm, tn, True)
    return GpuGemmKnobs(*_CANDIDATES[-1], True)


def grid_fits(plan: GemmPlan, bn: int, gpu: GpuInfo) -> bool:
    """Whether the batch and the column tiles fit gridDim.z and gridDim.y."""
    return plan.batch <= gpu.max_grid_yz and -(-plan.n // bn) <= gpu.max_grid_yz


def build(b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: GpuGemmKnobs,
          epilogue: Epilogue | None = None) -> L.Stmt:
    """The launch of the template (see the module doc); the template checked `knobs` and the grid."""
    dt = b.dtype
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    bm, bn, bk, tm, tn = knobs.bm, knobs.bn, knobs.bk, knobs.tm, knobs.tn
    m, n, k = plan.m, plan.n, plan.k
    ty_n, tx_n = bm // tm, bn // tn
    threads = ty_n * tx_n
    stages = 2 if knobs.double_buffer else 1
    k_steps = -(-k // bk)
    v, c = L.Var, L.const
    bx, by, bz, ty, tx, ko, kk, i, j = (f"{out}.{s}" for s in ("bx", "by", "bz", "ty", "tx", "ko", "kk", "i", "j"))
    sa = L.Buffer(f"{out}.sA", dt, (stages, bm, bk), "shared")
    sb = L.Buffer(f"{out}.sB", dt, (stages, bk, bn), "shared")
    acc = L.Buffer(f"{out}.acc", dt, (tm, tn), "local")
    ra = L.Buffer(f"{out}.ra", dt, (tm,), "local")
    rb = L.Buffer(f"{out}.rb", dt, (tn,), "local")
    outer_env = decompose(v(bz), plan.outer) if plan.outer else {}
    row0 = L.mul(v(bx), c(bm))
    col0 = L.mul(v(by), c(bn))
    tid = L.add(L.mul(v(ty), c(tx_n)), v(tx))
    col_var, col_lo, _ = plan.col

    def load_a(step: L.Expr, stage: L.Expr) -> L.Stmt:
        def store(r: L.Expr, q: L.Expr) -> L.Stmt:
            row, kidx = L.add(row0, r), L.add(L.mul(step, c(bk)), q)
            env = {**outer_env, **decompose(row, plan.rows), **decompose(kidx, plan.red)}
            extra = ragged_edges((row, m, bm), (kidx, k, bk))
            return guarded_store(sa.name, (stage, r, q), plan.a, plan.a_guards, env, dt, bp.dtypes[plan.a.tensor],
                                  extra)
        unguarded = not plan.a_guards and not m % bm and not k % bk
        return cooperative_copy(f"{out}.la", (bm, bk), store, tid, threads, 4 if unguarded and bk % 4 == 0 else 1)

    def load_b(step: L.Expr, stage: L.Expr) -> L.Stmt:
        def store(r: L.Expr, q: L.Expr) -> L.Stmt:
            kidx, col = L.add(L.mul(step, c(bk)), r), L.add(col0, q)
            env = {**outer_env, **decompose(kidx, plan.red), col_var: L.add(col, c(col_lo))}
            extra = ragged_edges((kidx, k, bk), (col, n, bn))
            return guarded_store(sb.name, (stage, r, q), plan.b, plan.b_guards, env, dt, bp.dtypes[plan.b.tensor],
                                  extra)
        unguarded = not plan.b_guards and not n % bn and not k % bk
        return cooperative_copy(f"{out}.lb", (bk, bn), store, tid, threads, 4 if unguarded and bn % 4 == 0 else 1)

    def unrolled(var: str, extent: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(extent), body, "unrolled")

    def multiply(stage: L.Expr) -> L.Stmt:
        a_row = L.add(v(ty), L.mul(v(i), c(ty_n)))
        b_col = L.add(v(tx), L.mul(v(j), c(tx_n)))
        fma = L.Store(acc.name, (v(i), v(j)), L.Bin("add", L.Load(acc.name, (v(i), v(j)), dt), L.Bin(
            "mul", L.Load(ra.name, (v(i),), dt), L.Load(rb.name, (v(j),), dt))))
        step = L.seq(unrolled(i, tm, L.Store(ra.name, (v(i),), L.Load(sa.name, (stage, a_row, v(kk)), dt))),
                     unrolled(j, tn, L.Store(rb.name, (v(j),), L.Load(sb.name, (stage, v(kk), b_col), dt))),
                     unrolled(i, tm, unrolled(j, tn, fma)))
        return L.Allocate(ra, L.Allocate(rb, unrolled(kk, bk, step)))

    if knobs.double_buffer:
        nxt = L.add(v(ko), c(1))
        main = L.seq(
            load_a(c(0), c(0)), load_b(c(0), c(0)), L.Barrier(),
            L.For(ko, c(0), c(k_steps), L.seq(
                L.If(L.Cmp("lt", nxt, c(k_steps)), L.seq(load_a(nxt, L.Bin("mod", nxt, c(2))),
                                                         load_b(nxt, L.Bin("mod", nxt, c(2))))),
                multiply(L.Bin("mod", v(ko), c(2))),
                L.Barrier())))
    else:
        main = L.For(ko, c(0), c(k_steps), L.seq(load_a(v(ko), c(0)), load_b(v(ko), c(0)), L.Barrier(),
                                                 multiply(c(0)), L.Barrier()))

    # -- the epilogue: each thread's cells, guarded only where the tiles overhang the output
    row = L.add(row0, L.add(v(ty), L.mul(v(i), c(ty_n))))
    col = L.add(col0, L.add(v(tx), L.mul(v(j), c(tx_n))))
    cell_env = {**outer_env, **decompose(row, plan.rows), col_var: L.add(col, c(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    value: L.Expr = L.Load(acc.name, (v(i), v(j)), dt)
    if epilogue is not None:
        value = epilogue_value(epilogue, bp, out, value, out_cell)
    store = guard_edges(L.Store(dest, out_cell, value), row, col, (m, n), (bm, bn))
    zero = unrolled(i, tm, unrolled(j, tn, L.Store(acc.name, (v(i), v(j)), L.cast(dt, c(0)))))
    per_thread = L.Allocate(acc, L.seq(zero, main, unrolled(i, tm, unrolled(j, tn, store))))
    body: L.Stmt = L.For(ty, c(0), c(ty_n), L.For(tx, c(0), c(tx_n), per_thread, "threadIdx.x"), "threadIdx.y")
    body = L.Allocate(sa, L.Allocate(sb, body))
    n_outer = plan.batch
    body = L.For(bx, c(0), c(-(-m // bm)), body, "blockIdx.x")
    body = L.For(by, c(0), c(-(-n // bn)), body, "blockIdx.y")
    return L.For(bz, c(0), c(n_outer), body, "blockIdx.z")


def ragged_edges(*axes: tuple[L.Expr, int, int]) -> list[L.Expr]:
    """`index < extent` for each (index, extent, tile) whose extent the tile does not divide: the
    only bounds tests a tiled loop needs (interior tiles need none)."""
    return [L.Cmp("lt", index, L.const(extent)) for index, extent, tile in axes if extent % tile]


def guard_edges(store: L.Stmt, row: L.Expr, col: L.Expr, extents: tuple[int, int], tiles: tuple[int, int]) -> L.Stmt:
    """`store` of output cell (row, col), guarded along the axes whose extent the tile does not divide."""
    (m, n), (bm, bn) = extents, tiles
    inside = L.logical_and(ragged_edges((row, m, bm), (col, n, bn)))
    return store if inside is None else L.If(inside, store)


def cooperative_copy(var: str, shape: tuple[int, int], store: Callable[[L.Expr, L.Expr], L.Stmt], tid: L.Expr, threads: int,
                     vec: int = 1) -> L.Stmt:
    """Every element (r, q) of a rows x cols tile stored once by `store(r, q)`: the
    `threads` threads take consecutive runs of `vec` elements along q (vec lanes: one 128-bit load
    where the backend proves it aligned), the tile in row-major order, all threads busy."""
    rows, cols = shape
    assert cols % vec == 0
    runs = rows * cols // vec
    e = L.add(L.mul(L.Var(var), L.const(threads)), tid)
    r = L.Bin("div", e, L.const(cols // vec)) if cols != vec else e
    q_run = L.mul(L.Bin("mod", e, L.const(cols // vec)), L.const(vec)) if cols != vec else L.const(0)
    if vec > 1:
        lane = f"{var}.v"
        body: L.Stmt = L.For(lane, L.const(0), L.const(vec), store(r, L.add(q_run, L.Var(lane))),
                             "vectorized")
    else:
        body = store(r, q_run)
    if runs % threads:
        body = L.If(L.Cmp("lt", e, L.const(runs)), body)
    return L.For(var, L.const(0), L.const(-(-runs // threads)), body, "unrolled")


class FusedGemmTemplate(Template):
    """What the GPU's GEMM templates share: the GEMM pattern in the dtypes they take, every output
    cell written, with the elementwise statements after it fused as an epilogue into one launch."""

    kind = "gpu"
    tunable = True
    dtypes: ClassVar[tuple[str, ...]]

    def match(self, index: int, ctx: Context) -> GemmPlan | None:
        return fused_gemm(index, ctx, self.dtypes)

    def consumed(self, plan: GemmPlan) -> int:
        return covered(plan.epilogue)

    def launch(self, b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: Any) -> L.Stmt:
        raise NotImplementedError

    def tile_problems(self, knobs: Any, plan: GemmPlan, gpu: GpuInfo) -> list[str]:
        """What the block tile cannot do on `gpu` (threads, registers, shared memory)."""
        raise NotImplementedError

    def tile_columns(self, knobs: Any) -> int:
        raise NotImplementedError

    def problems(self, knobs: Any, plan: GemmPlan, ctx: Context) -> list[str]:
        gpu = ctx.target.gpu
        assert gpu is not None
        problems = self.tile_problems(knobs, plan, gpu)
        if not grid_fits(plan, self.tile_columns(knobs), gpu):
            problems.append(f"more than {gpu.max_grid_yz} blocks along the batch or column axis; a wider tile")
        return problems

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        b = ctx.bp.statements[choice.index]
        assert isinstance(b, BoundContraction)
        return fused_group(self.launch(b, ctx.bp, choice.plan, choice.knobs), b, choice.plan.epilogue)

    def flops(self, plan: GemmPlan) -> float:
        return 2.0 * plan.m * plan.n * plan.k * plan.batch


class GpuGemm(FusedGemmTemplate):
    name = "gpu_gemm"
    knob_type = GpuGemmKnobs
    dtypes = DTYPES
    requirement = ("it needs a float32 or float64 sum of products onto a direct output, every cell written, whose "
                   "last index only one operand reads (float16: gpu_tensorcore)")

    def profitable(self, plan: GemmPlan, ctx: Context) -> bool:
        """Tiny products stay on the default binding (a thread per output cell)."""
        assert ctx.target.gpu is not None
        return plan.m * plan.n * plan.k >= ctx.params.gemm_min_work and grid_fits(plan, self.default_knobs(0, plan, ctx).bn,
                                                                ctx.target.gpu)

    def default_knobs(self, index: int, plan: GemmPlan, ctx: Context) -> GpuGemmKnobs:
        assert ctx.target.gpu is not None
        return default_knobs(plan, ctx.target.gpu)

    def tile_problems(self, knobs: GpuGemmKnobs, plan: GemmPlan, gpu: GpuInfo) -> list[str]:
        return knobs.problems(gpu, itemsize(plan.dtype))

    def tile_columns(self, knobs: GpuGemmKnobs) -> int:
        return knobs.bn

    def launch(self, b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: GpuGemmKnobs) -> L.Stmt:
        return build(b, bp, plan, knobs, plan.epilogue)

    def space(self, index: int, plan: GemmPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        knobs = (Knob("bm", choices_with((16, 32, 64, 128), default["bm"])),
                 Knob("bn", choices_with((16, 32, 64, 128), default["bn"])),
                 Knob("bk", choices_with((8, 16, 32), default["bk"])), Knob("tm", choices_with((1, 2, 4, 8), default["tm"])),
                 Knob("tn", choices_with((1, 2, 4, 8), default["tn"])), Knob("double_buffer", (False, True)))
        gpu = ctx.target.gpu
        assert gpu is not None

        def limits(c: Config) -> str | None:
            return "; ".join(GpuGemmKnobs(**c).problems(gpu, itemsize(plan.dtype))) or None

        return knobs, (Constraint("limits", limits),)


def itemsize(dtype: str) -> int:
    return {"float16": 2, "float32": 4, "float64": 8}[dtype]


def fused_gemm(index: int, ctx: Context, dtypes: tuple[str, ...]) -> GemmPlan | None:
    """The GEMM roles of statement `index` in one of `dtypes`, every output cell written, with the
    elementwise statements after it that fuse as its epilogue."""
    b = ctx.bp.statements[index]
    plan = gemm_pattern.match(b, dtypes) if isinstance(b, BoundContraction) else None
    if plan is None or plan.partial:
        return None
    return replace(plan, epilogue=find_epilogue(index, ctx.bp))


GPU_GEMM = GpuGemm()

__all__ = ["DTYPES", "GPU_GEMM", "FusedGemmTemplate", "GpuGemm", "GpuGemmKnobs", "build", "cooperative_copy", "default_knobs", "grid_fits",
           "fused_gemm", "guard_edges", "itemsize", "ragged_edges"]
