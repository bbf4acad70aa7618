"""Fused flash attention on the GPU: softmax(scale * Q K^T [causal]) V in one launch.

Requires: an AttentionPlan of tilec.schedule.cpu.attention.match (the Tile chain scores, scale,
optional causal mask, softmax, times V; float32 or float16, see DTYPES) that `applicable` accepts. Guarantees: one
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
from dataclasses import asdict, dataclass

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.cpu import attention
from tilec.schedule.cpu.attention import AttentionPlan
from tilec.schedule.gpu.gemm import MAX_GRID_YZ, MAX_THREADS, SHARED_LIMIT, cooperative_copy
from tilec.schedule.cpu.gemm.packed import decompose

DTYPES = ("float32", "float16")  # the dtypes of Q, K, V and O that this template takes
MAX_ROW_REGISTERS = 224  # q[D] + acc[E] + s[BK] per thread, of the 255 registers a thread may use


@dataclass(frozen=True)
class GpuAttentionKnobs:
    """bq: query rows per block (= threads per block, one row each); bk: keys per block."""

    bq: int = 128
    bk: int = 32

    @property
    def threads(self) -> int:
        return self.bq

    def problems(self, d: int, e: int) -> list[str]:
        out = []
        if self.bq < 1 or self.bk < 1:
            return ["bq and bk must be positive"]
        if self.bq > MAX_THREADS:
            out.append(f"bq = {self.bq} threads per block; CUDA allows at most {MAX_THREADS}")
        if d + e + self.bk > MAX_ROW_REGISTERS:
            out.append(f"{d + e + self.bk} registers per thread for q (D = {d}), the accumulator (E = {e}) and the "
                       f"scores (bk = {self.bk}); keep D + E + bk <= {MAX_ROW_REGISTERS} (lower bk)")
        shared = self.bk * (d + e) * 4
        if shared > SHARED_LIMIT:
            out.append(f"{shared} bytes of shared memory for the K and V tiles; at most {SHARED_LIMIT} (lower bk)")
        return out

    def to_json(self) -> dict:
        return {"template": "gpu_attention", **asdict(self)}


def _batch(plan: AttentionPlan) -> int:
    return math.prod(hi - lo + 1 for _, lo, hi in plan.batch)


def applicable(plan: AttentionPlan) -> bool:
    """Whether the default knobs fit this plan (head dimensions and batch within the limits)."""
    return not GpuAttentionKnobs().problems(plan.d, plan.e) and _batch(plan) <= MAX_GRID_YZ


def build(plan: AttentionPlan, bp: BoundProgram, knobs: GpuAttentionKnobs | None = None,
          where: str = "the attention chain") -> LoweredGroup:
    knobs = knobs or GpuAttentionKnobs()
    problems = knobs.problems(plan.d, plan.e)
    if problems:
        raise ScheduleError(f"gpu_attention knobs {knobs} for {where}: " + "; ".join(problems))
    if _batch(plan) > MAX_GRID_YZ:
        raise ScheduleError(f"gpu_attention: {_batch(plan)} batch entries for {where}; at most {MAX_GRID_YZ}")
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
    body = L.For(bh, c(0), c(_batch(plan)), body, "blockIdx.y")
    return LoweredGroup(body, (), plan.consumed, plan.elided)


def match(index: int, bp: BoundProgram) -> AttentionPlan | None:
    """The attention chain at statement `index` in a dtype this template takes (see DTYPES)."""
    return attention.match(index, bp, DTYPES)


__all__ = ["DTYPES", "GpuAttentionKnobs", "match", "applicable", "build"]
