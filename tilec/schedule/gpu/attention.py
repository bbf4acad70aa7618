"""Fused flash attention on the GPU: softmax(scale * Q K^T [causal]) V in one launch.

Requires: an AttentionPlan of tilec.schedule.patterns.attention.match (the Tile chain scores, scale,
optional causal mask, softmax, times V; float32 or float16, see DTYPES) whose head dimensions fit
the default knobs. Guarantees: one
launch in the GPU conventions of tilec/ir/loop.py computing what the chain computes without
materialising the scores::

    for bh in blockIdx.y [0, batch):  for qb in blockIdx.x [0, S / BQ):
      shared sK[BK, D], sV[BK, E]
      for t in threadIdx.x [0, BQ):                 # one query row per thread: row = qb * BQ + t
        q[D] = Q[bh, row]; m = -inf; l = 0; acc[E] = 0          # registers
        for kb in key blocks (causal: up to the block's last row only; the rest are never visited):
          sK, sV <- the K and V rows of the block (cooperative, zero past T); Barrier
          s[j] = scale * q . sK[j] (-inf where masked); m' = max(m, s); p = exp(s - m')
          l = l * exp(m - m') + sum p;  acc = acc * exp(m - m') + p sV;  m = m'
          Barrier
        O[bh, row] = acc / l                         # rows past S computed on a clamped row, not stored

All threads of a block read the same sK/sV element at a time (a shared-memory broadcast).
float16 Q/K/V/O: loads convert to float32 (q, sK, sV, the scores, the softmax statistics and
the accumulator are all float32) and the output is rounded to float16 once per cell. The
products run on the CUDA cores in float32 (no tensor cores yet).
Knobs (GpuAttentionKnobs): bq (query rows per block, one thread each) and bk (keys per block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.gpu.gemm import cooperative_copy
from tilec.schedule.nest import decompose
from tilec.schedule.patterns import attention
from tilec.schedule.patterns.attention import AttentionPlan
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.schedule.templates.knobs import knob
from tilec.schedule.templates.space import Config, Constraint, Knob, choices_with
from tilec.target import GpuInfo

DTYPES = ("float32", "float16")  # the dtypes of Q, K, V and O that this template takes
MAX_ROW_REGISTERS = 224  # q[D] + acc[E] + s[BK] per thread, of the 255 registers a thread may use


@dataclass(frozen=True)
class GpuAttentionKnobs:
    """bq: query rows per block (= threads per block, one row each); bk: keys per block."""

    bq: int = knob(128, 1, 4096, "query rows per block: one thread each")
    bk: int = knob(32, 1, 4096, "keys per block")

    @property
    def threads(self) -> int:
        return self.bq

    def problems(self, d: int, e: int, gpu: GpuInfo) -> list[str]:
        out = []
        if self.bq < 1 or self.bk < 1:
            return ["bq and bk must be positive"]
        if self.bq > gpu.max_threads:
            out.append(f"bq = {self.bq} threads per block; CUDA allows at most {gpu.max_threads}")
        if d + e + self.bk > MAX_ROW_REGISTERS:
            out.append(f"{d + e + self.bk} registers per thread for q (D = {d}), the accumulator (E = {e}) and the "
                       f"scores (bk = {self.bk}); keep D + E + bk <= {MAX_ROW_REGISTERS} (lower bk)")
        shared = self.bk * (d + e) * 4
        if shared > gpu.shared_bytes:
            out.append(f"{shared} bytes of shared memory for the K and V tiles; at most {gpu.shared_bytes} (lower bk)")
        return out


def build(plan: AttentionPlan, bp: BoundProgram, knobs: GpuAttentionKnobs) -> LoweredGroup:
    """The launch (see the module doc); the template checked `knobs` and the batch."""
    bq, bk = knobs.bq, knobs.bk
    v, c, f32 = L.Var, L.const, "float32"
    name = plan.output
    bh, qb, t, kb, j, dd, ee = (f"{name}.{s}" for s in ("bh", "qb", "t", "kb", "j", "d", "e"))
    env = decompose(v(bh), plan.batch)
    neg_inf = L.Const(-math.inf, f32)
    sk = L.Buffer(f"{name}.sK", f32, (bk, plan.d), "shared")
    sv = L.Buffer(f"{name}.sV", f32, (bk, plan.e), "shared")
    q = L.Buffer(f"{name}.q", f32, (plan.d,), "local")
    acc = L.Buffer(f"{name}.acc", f32, (plan.e,), "local")
    s = L.Buffer(f"{name}.s", f32, (bk,), "local")
    stats = L.Buffer(f"{name}.ml", f32, (4,), "local")  # running max, running sum, block max, rescale factor
    m_run, l_run, m_new, alpha = (c(i) for i in range(4))

    def access(op: BoundAccess, *tail: L.Expr) -> L.Expr:
        return L.cast(f32, L.Load(op.tensor, tuple(env[var] for var, _, _ in plan.batch) + tail, bp.dtypes[op.tensor]))

    def ld(buf: L.Buffer, *idx: L.Expr) -> L.Expr:
        return L.Load(buf.name, tuple(idx), f32)

    def st(buf: L.Buffer, idx: tuple[L.Expr, ...], value: L.Expr) -> L.Stmt:
        return L.Store(buf.name, idx, value)

    q0 = L.mul(v(qb), c(bq))
    row = L.add(q0, v(t))
    row_c = L.Bin("min", row, c(plan.s - 1))
    key = L.add(L.mul(v(kb), c(bk)), v(j))
    tid = v(t)

    def load_tile(buf: L.Buffer, op: BoundAccess, width: int, var: str) -> L.Stmt:
        def store(r: L.Expr, col: L.Expr) -> L.Stmt:
            k_row = L.add(L.mul(v(kb), c(bk)), r)
            load = st(buf, (r, col), access(op, k_row, col))
            if plan.t % bk == 0:
                return load
            return L.If(L.Cmp("lt", k_row, c(plan.t)), load, st(buf, (r, col), L.Const(0.0, f32)))
        return cooperative_copy(var, (bk, width), store, tid, bq)

    init = L.seq(
        L.For(dd, c(0), c(plan.d), st(q, (v(dd),), access(plan.q, row_c, v(dd)))),
        st(stats, (m_run,), neg_inf), st(stats, (l_run,), L.Const(0.0, f32)),
        L.For(ee, c(0), c(plan.e), st(acc, (v(ee),), L.Const(0.0, f32))))
    dot = L.seq(st(s, (v(j),), L.Const(0.0, f32)), L.For(dd, c(0), c(plan.d), st(s, (v(j),), L.Bin(
        "add", ld(s, v(j)), L.Bin("mul", ld(q, v(dd)), ld(sk, v(j), v(dd)))))))
    valid: L.Expr = L.Cmp("lt", key, c(plan.t))
    if plan.causal:
        valid = L.Bin("and", valid, L.Cmp("le", key, row))
    scores = L.For(j, c(0), c(bk), L.seq(
        dot, st(s, (v(j),), L.Select(valid, L.Bin("mul", ld(s, v(j)), L.Const(plan.scale, f32)), neg_inf))))
    block_max = L.seq(st(stats, (m_new,), ld(stats, m_run)), L.For(j, c(0), c(bk), st(
        stats, (m_new,), L.Bin("max", ld(stats, m_new), ld(s, v(j))))))
    rescale = L.seq(
        st(stats, (alpha,), L.Call("exp", (L.Bin("sub", ld(stats, m_run), ld(stats, m_new)),), f32)),
        st(stats, (l_run,), L.Bin("mul", ld(stats, l_run), ld(stats, alpha))),
        L.For(ee, c(0), c(plan.e), st(acc, (v(ee),), L.Bin("mul", ld(acc, v(ee)), ld(stats, alpha)))))
    p = L.Call("exp", (L.Bin("sub", ld(s, v(j)), ld(stats, m_new)),), f32)
    accumulate = L.For(j, c(0), c(bk), L.seq(
        st(s, (v(j),), p),
        st(stats, (l_run,), L.Bin("add", ld(stats, l_run), ld(s, v(j)))),
        L.For(ee, c(0), c(plan.e), st(acc, (v(ee),), L.Bin(
            "add", ld(acc, v(ee)), L.Bin("mul", ld(s, v(j)), ld(sv, v(j), v(ee))))))))
    step = L.seq(
        load_tile(sk, plan.k, plan.d, f"{name}.lk"), load_tile(sv, plan.v, plan.e, f"{name}.lv"), L.Barrier(),
        L.Allocate(s, L.seq(scores, block_max, rescale, accumulate)),
        st(stats, (m_run,), ld(stats, m_new)),
        L.Barrier())
    k_blocks: L.Expr = c(-(-plan.t // bk))
    if plan.causal:  # blocks right of the diagonal are all masked: never visit them (the same for all threads)
        last_row = L.Bin("min", L.add(q0, c(bq - 1)), c(plan.s - 1))
        k_blocks = L.Bin("min", k_blocks, L.add(L.Bin("div", last_row, c(bk)), c(1)))
    finish = L.If(L.Cmp("lt", row, c(plan.s)), L.For(ee, c(0), c(plan.e), L.Store(
        plan.output, tuple(env[var] for var, _, _ in plan.batch) + (row, v(ee)),
        L.cast(bp.dtypes[plan.output], L.Bin("div", ld(acc, v(ee)), ld(stats, l_run))))))
    per_thread = L.Allocate(q, L.Allocate(acc, L.Allocate(stats, L.seq(
        init, L.For(kb, c(0), k_blocks, step), finish))))
    body: L.Stmt = L.For(t, c(0), c(bq), per_thread, "threadIdx.x")
    body = L.Allocate(sk, L.Allocate(sv, body))
    body = L.For(qb, c(0), c(-(-plan.s // bq)), body, "blockIdx.x")
    body = L.For(bh, c(0), c(plan.batch_size), body, "blockIdx.y")
    return LoweredGroup(body, (), plan.consumed, plan.elided)


class GpuAttention(Template):
    name = "gpu_attention"
    kind = "gpu"
    knob_type = GpuAttentionKnobs
    tunable = True
    requirement = ("it must start the chain scores, softmax, times V (tilec.schedule.patterns.attention) in float32 "
                   "or float16, its head dimensions and batch within the GPU's limits")

    def match(self, index: int, ctx: Context) -> AttentionPlan | None:
        """The attention chain at statement `index` in a dtype this template takes (DTYPES), where
        the default knobs fit (head dimensions and batch within the limits)."""
        gpu = ctx.target.gpu
        assert gpu is not None
        plan = attention.match(index, ctx.bp, DTYPES)
        if plan is None or GpuAttentionKnobs().problems(plan.d, plan.e, gpu) or plan.batch_size > gpu.max_grid_yz:
            return None
        return plan

    def problems(self, knobs: GpuAttentionKnobs, plan: AttentionPlan, ctx: Context) -> list[str]:
        assert ctx.target.gpu is not None
        return knobs.problems(plan.d, plan.e, ctx.target.gpu)

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return build(choice.plan, ctx.bp, choice.knobs)

    def space(self, index: int, plan: AttentionPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        gpu = ctx.target.gpu
        assert gpu is not None
        knobs = (Knob("bq", choices_with((32, 64, 128, 256), default["bq"])),
                 Knob("bk", choices_with((8, 16, 32, 64, 128), default["bk"])))

        def limits(c: Config) -> str | None:
            return "; ".join(GpuAttentionKnobs(**c).problems(plan.d, plan.e, gpu)) or None

        return knobs, (Constraint("limits", limits),)

    def flops(self, p: AttentionPlan) -> float:
        return 2.0 * p.batch_size * p.s * p.t * (p.d + p.e)


GPU_ATTENTION = GpuAttention()

__all__ = ["DTYPES", "GPU_ATTENTION", "GpuAttention", "GpuAttentionKnobs", "build"]
