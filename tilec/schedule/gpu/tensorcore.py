"""The GPU GEMM template on tensor cores: float16 sums of products, float32 accumulation (WMMA).

Requires: a float16 BoundContraction with a GemmPlan (tilec.schedule.patterns.gemm: GEMM in any
layout, batched GEMM, conv2d as implicit GEMM), every output cell written. Guarantees: one launch in the GPU conventions of tilec/ir/loop.py (WMMA
statements) computing the contraction with float32 accumulation, rounded to float16 once per
output cell, as the default lowering's (their sums differ in order only);
the elementwise statements after it fuse in as an epilogue. Knobs: WmmaGemmConfig
(tilec.schedule.gpu.tensorcore_knobs) - the block tile and the warp grid::

    for bz (batch), by (column tiles), bx (row tiles):  shared sA[BM, BK], sB[BK, BN] (float16), sC[warps, 16, 16]
      for warps x 32 lanes:
        acc fragments = 0
        for ko in K / BK:
          sA <- A tile, sB <- B tile (cooperative, guarded zero loads at ragged edges and padding)
          Barrier; fragments from sA/sB, mma_sync into acc; Barrier
        per accumulator fragment: store it to the warp's sC window; Barrier;
          each lane converts 8 of its cells to float16 (epilogue, guards at ragged edges); Barrier

Unlike tilec.schedule.gpu.tensorcore_knobs.wmma_gemm (float32 C, shapes multiples of the tile), any
shape works: the tiles are zero-padded in shared memory and only the cells inside C are stored.
"""

from __future__ import annotations


from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.gpu.gemm import FusedGemmTemplate, cooperative_copy, guard_edges, ragged_edges
from tilec.schedule.gpu.tensorcore_knobs import WmmaGemmConfig
from tilec.schedule.nest import decompose, guarded_store
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Context
from tilec.schedule.templates.space import Config, Constraint, Knob, choices_with
from tilec.target import GpuInfo

F16, F32 = "float16", "float32"
DTYPES = (F16,)


def shared_bytes(cfg: WmmaGemmConfig) -> int:
    return (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * 2 + cfg.warps_m * cfg.warps_n * 16 * 16 * 4


def problems(cfg: WmmaGemmConfig, gpu: GpuInfo) -> list[str]:
    """Why `cfg` cannot be built on `gpu` (empty when it can)."""
    out = cfg.problems(gpu.max_threads)
    if shared_bytes(cfg) > gpu.shared_bytes:
        out.append(f"{shared_bytes(cfg)} bytes of shared memory; at most {gpu.shared_bytes} (lower block_k or the block tile)")
    return out


def default_config(plan: GemmPlan, gpu: GpuInfo) -> WmmaGemmConfig:
    """128x128 tiles of 8 warps where that still gives every SM a block, else 64x64 of 4 warps."""
    n_outer = plan.batch
    if n_outer * -(-plan.m // 128) * -(-plan.n // 128) >= gpu.sms:
        return WmmaGemmConfig(128, 128, 32, 2, 4)
    return WmmaGemmConfig(64, 64, 32, 2, 2)


def build(b: BoundContraction, bp: BoundProgram, plan: GemmPlan, cfg: WmmaGemmConfig,
          epilogue: Epilogue | None = None) -> L.Stmt:
    """The launch of the template (see the module doc); the template checked `cfg` and the grid."""
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    bm, bn, bk, wm, wn = cfg.block_m, cfg.block_n, cfg.block_k, cfg.warps_m, cfg.warps_n
    m, n, k = plan.m, plan.n, plan.k
    n_outer = plan.batch
    frag_m, frag_n = bm // (16 * wm), bn // (16 * wn)
    threads = 32 * wm * wn
    v, c = L.Var, L.const
    bx, by, bz, ty, tx, ko, kk, fi, fj, e = (f"{out}.{s}" for s in ("bx", "by", "bz", "ty", "tx", "ko", "kk", "fi",
                                                                     "fj", "e"))
    sa = L.Buffer(f"{out}.sA", F16, (bm, bk), "shared")
    sb = L.Buffer(f"{out}.sB", F16, (bk, bn), "shared")
    sc = L.Buffer(f"{out}.sC", F32, (wm * wn, 16, 16), "shared")
    acc = L.Buffer(f"{out}.acc", F32, (frag_m, frag_n, 16, 16), "wmma.accumulator")
    fa = L.Buffer(f"{out}.fa", F16, (frag_m, 16, 16), "wmma.matrix_a")
    fb = L.Buffer(f"{out}.fb", F16, (frag_n, 16, 16), "wmma.matrix_b")
    warp_m, warp_n = v(ty), L.Bin("div", v(tx), c(32))
    warp = L.add(L.mul(v(ty), c(wn)), warp_n)
    lane = L.Bin("mod", v(tx), c(32))
    tid = L.add(L.mul(v(ty), c(32 * wn)), v(tx))
    outer_env = decompose(v(bz), plan.outer) if plan.outer else {}
    row0, col0 = L.mul(v(bx), c(bm)), L.mul(v(by), c(bn))
    col_var, col_lo, _ = plan.col

    def store_a(r: L.Expr, q: L.Expr) -> L.Stmt:
        row, kidx = L.add(row0, r), L.add(L.mul(v(ko), c(bk)), q)
        env = {**outer_env, **decompose(row, plan.rows), **decompose(kidx, plan.red)}
        return guarded_store(sa.name, (r, q), plan.a, plan.a_guards, env, F16, bp.dtypes[plan.a.tensor],
                              ragged_edges((row, m, bm), (kidx, k, bk)))

    def store_b(r: L.Expr, q: L.Expr) -> L.Stmt:
        kidx, col = L.add(L.mul(v(ko), c(bk)), r), L.add(col0, q)
        env = {**outer_env, **decompose(kidx, plan.red), col_var: L.add(col, c(col_lo))}
        return guarded_store(sb.name, (r, q), plan.b, plan.b_guards, env, F16, bp.dtypes[plan.b.tensor],
                              ragged_edges((kidx, k, bk), (col, n, bn)))

    def unrolled(var: str, extent: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(extent), body, "unrolled")

    multiply = unrolled(kk, bk // 16, L.seq(
        unrolled(fi, frag_m, L.WmmaLoad(fa.name, (v(fi),), sa.name, (
            L.add(L.mul(warp_m, c(16 * frag_m)), L.mul(v(fi), c(16))), L.mul(v(kk), c(16))))),
        unrolled(fj, frag_n, L.WmmaLoad(fb.name, (v(fj),), sb.name, (
            L.mul(v(kk), c(16)), L.add(L.mul(warp_n, c(16 * frag_n)), L.mul(v(fj), c(16)))))),
        unrolled(fi, frag_m, unrolled(fj, frag_n, L.WmmaMma(acc.name, (v(fi), v(fj)), fa.name, (v(fi),),
                                                            fb.name, (v(fj),))))))
    main = L.For(ko, c(0), c(-(-k // bk)), L.seq(
        cooperative_copy(f"{out}.la", (bm, bk), store_a, tid, threads),
        cooperative_copy(f"{out}.lb", (bk, bn), store_b, tid, threads),
        L.Barrier(), multiply, L.Barrier()))

    # -- results: fragment -> the warp's sC window -> float16 cells of C (8 per lane)
    cell = L.add(L.mul(v(e), c(32)), lane)
    r, q = L.Bin("div", cell, c(16)), L.Bin("mod", cell, c(16))
    row = L.add(row0, L.add(L.add(L.mul(warp_m, c(16 * frag_m)), L.mul(v(fi), c(16))), r))
    col = L.add(col0, L.add(L.add(L.mul(warp_n, c(16 * frag_n)), L.mul(v(fj), c(16))), q))
    cell_env = {**outer_env, **decompose(row, plan.rows), col_var: L.add(col, c(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(x), cell_env) for x in b.out_indices)
    value: L.Expr = L.cast(F16, L.Load(sc.name, (warp, r, q), F32))
    if epilogue is not None:
        value = epilogue_value(epilogue, bp, out, value, out_cell)
    store = guard_edges(L.Store(dest, out_cell, value), row, col, (m, n), (bm, bn))
    results = unrolled(fi, frag_m, unrolled(fj, frag_n, L.seq(
        L.WmmaStore(sc.name, (warp, c(0), c(0)), acc.name, (v(fi), v(fj))), L.Barrier(),
        unrolled(e, 8, store), L.Barrier())))

    per_thread = L.Allocate(acc, L.Allocate(fa, L.Allocate(fb, L.seq(
        unrolled(fi, frag_m, unrolled(fj, frag_n, L.WmmaFill(acc.name, (v(fi), v(fj)), L.const(0.0, F32)))),
        main, results))))
    body: L.Stmt = L.For(ty, c(0), c(wm), L.For(tx, c(0), c(32 * wn), per_thread, "threadIdx.x"), "threadIdx.y")
    body = L.Allocate(sa, L.Allocate(sb, L.Allocate(sc, body)))
    body = L.For(bx, c(0), c(-(-m // bm)), body, "blockIdx.x")
    body = L.For(by, c(0), c(-(-n // bn)), body, "blockIdx.y")
    return L.For(bz, c(0), c(n_outer), body, "blockIdx.z")


class GpuTensorcore(FusedGemmTemplate):
    name = "gpu_tensorcore"
    knob_type = WmmaGemmConfig
    dtypes = DTYPES
    requirement = ("it needs float16 operands: a float16 sum of products onto a direct output, every cell written, "
                   "whose last index only one operand reads (float32 stays on the CUDA cores: gpu_gemm)")

    def profitable(self, plan: GemmPlan, ctx: Context) -> bool:
        return plan.m * plan.n * plan.k >= ctx.params.gemm_min_work

    def default_knobs(self, index: int, plan: GemmPlan, ctx: Context) -> WmmaGemmConfig:
        assert ctx.target.gpu is not None
        return default_config(plan, ctx.target.gpu)

    def tile_problems(self, knobs: WmmaGemmConfig, plan: GemmPlan, gpu: GpuInfo) -> list[str]:
        return problems(knobs, gpu)

    def tile_columns(self, knobs: WmmaGemmConfig) -> int:
        return knobs.block_n

    def launch(self, b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: WmmaGemmConfig) -> L.Stmt:
        return build(b, bp, plan, knobs, plan.epilogue)

    def space(self, index: int, plan: GemmPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        knobs = (Knob("block_m", choices_with((32, 64, 128), default["block_m"])),
                 Knob("block_n", choices_with((32, 64, 128), default["block_n"])),
                 Knob("block_k", choices_with((16, 32, 64), default["block_k"])),
                 Knob("warps_m", choices_with((1, 2, 4), default["warps_m"])),
                 Knob("warps_n", choices_with((1, 2, 4), default["warps_n"])))
        gpu = ctx.target.gpu
        assert gpu is not None

        def limits(c: Config) -> str | None:
            return "; ".join(problems(WmmaGemmConfig(**c), gpu)) or None

        return knobs, (Constraint("limits", limits),)


GPU_TENSORCORE = GpuTensorcore()

__all__ = ["DTYPES", "GPU_TENSORCORE", "GpuTensorcore", "build", "default_config", "problems", "shared_bytes"]
