"""The fused attention-backward template: dQ, dK, dV of attention in one kernel (CPU).

It lowers either form of tilec.schedule.patterns.attention_backward: the gradient that tilec.grad
derives from the attention chain, or the one torch's flash backward becomes under torch.compile
(the softmax shifted by the forward's logsumexp: that shift takes the maxima's place below).

One kernel, one work item per batch-and-head on the cores, that never forms an S x T matrix.
Score tiles are held transposed (bk keys by bq queries), so per-query quantities are vectors
across a tile and no step reduces across vector lanes. Q and dO are transposed once per work
item into per-thread workspaces (the score micro-GEMMs read them as vectors); queries past S
and keys past T are computed from clamped rows and get probability 0 (never stored).

- panel (the default knob; needs as many heads as cores and 2 T bq elements per thread within
  the lowering parameter attention_backward_panel_bytes): per query block, S^T and dP^T for all its keys into two panels; the exact
  max, sum and Delta = rowsum(P dP) from them; then per key block P^T, dS^T = c P^T (dP^T - Delta),
  dV += P^T dO and dK += dS^T Q and dQ += dS K (summed in the outputs, or for 16-bit ones in float32
  workspaces rounded into them at the end). Five micro-GEMMs per tile, one exp per score.
- two passes otherwise: per query block an online softmax over the key blocks (S^T and dP^T
  micro-GEMMs, running max and sums rescaled as in the forward template) stores log-sum-exp and
  Delta per query; then per key block (dK, dV in local memory), per query block from the
  diagonal on (causal) or from 0, S^T and dP^T again, P^T, dS^T, dV, dK, dQ. Seven micro-GEMMs.
  With fewer heads than cores the passes are separate parallel loops, pass 2 split over key
  blocks, each part summing its dQ apart; the parts are added at the end.

The loop IR of the pieces: .kernel. Requires: a plan of the pattern's `match` and knobs that passed
the template's checks. Guarantees: the gradients that the matched program computes (up to
rounding), every output cell written.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tilec.ir import loop as L
from tilec.ir.dtypes import accumulator_dtype
from tilec.ir.lower import LoweredGroup
from tilec.schedule.cpu.attention_backward.kernel import Kernel, Out, lanes_loop
from tilec.schedule.cpu.attention_backward.knobs import AttentionBackwardKnobs, default_knobs, knob_problems
from tilec.schedule.nest import decompose, thread_share, threads_loop
from tilec.schedule.patterns import attention_backward as pattern
from tilec.schedule.cpu.attention import gemms_of_pairs_win
from tilec.schedule.patterns.attention_backward import BackwardPlan
from tilec.schedule.templates.base import Choice, Context, Template


def build(plan: BackwardPlan, knobs: AttentionBackwardKnobs, ctx: Context) -> LoweredGroup:
    """The kernel (see the module docstring for the two variants).

    With at least as many batch-and-heads as cores, one work item is one head, start to end
    (workspaces per thread): the panel variant where the knobs ask for it and the panels fit,
    else the two passes. With fewer heads, the two passes as four parallel loops: the transposes
    per head; pass 1 per (head, query block); pass 2 per (head, every parts-th key block), each
    part adding its dQ into its own partial sum; the partial sums added into dQ per (head, row)."""
    target = ctx.target
    compute = accumulator_dtype(plan.dtype)  # 16-bit floats: float32
    columns = 4 * target.lanes(compute)  # a register block: 4 vectors
    bh_n = math.prod(hi - lo + 1 for _, lo, hi in plan.batch)
    v, c = L.Var, L.const
    if bh_n >= target.cores or target.cores == 1:
        threads = max(1, min(target.cores, bh_n))
        kernel = Kernel(plan, knobs, threads, columns)
        g = kernel.g
        x, w = g.var("x"), g.var("w")
        env = decompose(v(w), plan.batch)
        bidx = tuple(env[var] for var, _, _ in plan.batch)
        tp = kernel.k_blocks * knobs.bk
        if knobs.panel and 2 * tp * knobs.bq * (4 if compute == "float32" else 8) <= ctx.params.attention_backward_panel_bytes:
            ps = L.Buffer(f"{kernel.prefix}.panel_s", compute, (threads, tp, knobs.bq))
            pd = L.Buffer(f"{kernel.prefix}.panel_dp", compute, (threads, tp, knobs.bq))
            body = kernel.panel(v(x), bidx, ps, pd)
            main = threads_loop(x, threads, thread_share(x, threads, w, bh_n, body))
            workspaces = [kernel.qt, ps] + ([kernel.dot, pd] if kernel.need_dp else []) + list(kernel.sums.values())
            return LoweredGroup(main, tuple(workspaces), plan.consumed, plan.elided)
        dq = kernel.summed(plan.dq, bidx, v(x), None, plan.s) if plan.dq else None
        body = L.seq(kernel.transposes(v(x), bidx), kernel.zero_sum(plan.dq, bidx, v(x)) if plan.dq else None,
                     kernel.pass1(v(x), bidx, c(0), c(kernel.q_blocks)),
                     kernel.pass2(v(x), bidx, (c(0), c(kernel.k_blocks), 1), dq),
                     kernel.rounded(plan.dq, bidx, v(x)) if plan.dq else None)
        main = threads_loop(x, threads, thread_share(x, threads, w, bh_n, body))
        return LoweredGroup(main, tuple(kernel.workspaces + list(kernel.sums.values())), plan.consumed, plan.elided)
    kernel = Kernel(plan, knobs, bh_n, columns)
    g = kernel.g
    parts = min(-(-target.cores // bh_n), kernel.k_blocks)

    def parallel(items: int, body: "Callable[[L.Expr], L.Stmt]") -> L.Stmt:
        x, w = g.var("x"), g.var("w")
        threads = max(1, min(target.cores, items))
        return threads_loop(x, threads, thread_share(x, threads, w, items, body(v(w))))

    def head(bh: L.Expr) -> tuple[L.Expr, ...]:
        env = decompose(bh, plan.batch)
        return tuple(env[var] for var, _, _ in plan.batch)

    qn = kernel.q_blocks
    loops = [
        parallel(bh_n, lambda w: kernel.transposes(w, head(w))),
        parallel(bh_n * qn, lambda w: kernel.pass1(L.Bin("div", w, c(qn)), head(L.Bin("div", w, c(qn))),
                                                   L.Bin("mod", w, c(qn)), L.add(L.Bin("mod", w, c(qn)), c(1)))),
    ]
    partial = L.Buffer(f"{kernel.prefix}.dqpart", compute, (bh_n * parts, plan.s, plan.d))
    workspaces = kernel.workspaces + ([partial] if plan.dq else [])

    def key_part(w: L.Expr) -> L.Stmt:
        bh = L.Bin("div", w, c(parts))
        dq = Out(partial.name, compute, (w,), None, plan.s) if plan.dq else None
        return L.seq(kernel.zero_rows(partial.name, (w,)) if plan.dq else None,
                     kernel.pass2(bh, head(bh), (L.Bin("mod", w, c(parts)), c(kernel.k_blocks), parts), dq))

    loops.append(parallel(bh_n * parts, key_part))
    if plan.dq:
        dq_name = plan.dq

        def add_parts(w: L.Expr) -> L.Stmt:
            bh, row, e = L.Bin("div", w, c(plan.s)), L.Bin("mod", w, c(plan.s)), g.var("e")
            total: L.Expr = L.Load(partial.name, (L.mul(bh, c(parts)), row, v(e)), compute)
            for k in range(1, parts):
                total = L.Bin("add", total, L.Load(partial.name, (L.add(L.mul(bh, c(parts)), c(k)), row, v(e)),
                                                   compute))
            return lanes_loop(e, plan.d, L.Store(dq_name, head(bh) + (row, v(e)), L.cast(plan.dtype, total)))

        loops.append(parallel(bh_n * plan.s, add_parts))
    return LoweredGroup(L.seq(*loops), tuple(workspaces), plan.consumed, plan.elided)


DTYPES = ("float32", "float64", "bfloat16", "float16")  # 16-bit floats computed in float32 (kernel.py)


class AttentionBackward(Template):
    name = "attention_backward"
    kind = "cpu"
    knob_type = AttentionBackwardKnobs
    requirement = ("it must start the gradient tilec.grad derives from attention "
                   "(tilec.schedule.patterns.attention_backward)")

    def match(self, index: int, ctx: Context) -> BackwardPlan | None:
        return pattern.match(index, ctx.bp, DTYPES)

    def profitable(self, plan: BackwardPlan, ctx: Context) -> bool:
        """As the forward's (tilec.schedule.cpu.attention.gemms_of_pairs_win): B=4 H=8 S=512 D=64
        bfloat16 on Zen 5, the chain of GEMMs of pairs took 12.4-12.7 ms, this template 14.5-15.0;
        causal, this template 8.5 against 16.5; float16, this template 18.4 against 27.6."""
        return not gemms_of_pairs_win(plan.dtype, plan.causal, plan.d, plan.e, ctx.target)

    def default_knobs(self, index: int, plan: BackwardPlan, ctx: Context) -> AttentionBackwardKnobs:
        return default_knobs(plan.s, plan.t)

    def problems(self, knobs: AttentionBackwardKnobs, plan: BackwardPlan, ctx: Context) -> list[str]:
        return knob_problems(knobs)

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return build(choice.plan, choice.knobs, ctx)


ATTENTION_BACKWARD = AttentionBackward()

__all__ = ["ATTENTION_BACKWARD", "DTYPES", "AttentionBackward", "AttentionBackwardKnobs", "build", "default_knobs",
           "knob_problems"]
