"""The fused attention template on AMX tiles: bfloat16 Q, K and V on a CPU with AMX-BF16.

The chain (tilec.schedule.patterns.attention) as one flash-attention nest whose two products are
TileDots (tilec.ir.loop) on 32 x 32 blocks, the online softmax between them in float32 vectors::

    parallel over batches bh:                                  # prologue
      Kp[bh, kb, r, j, p] = K[.., 32 kb + j, 2 r + p] (0 past T)  # K^T in pairs over d, per key block
      Vp[bh, kb, r, e, p] = V[.., 32 kb + 2 r + p, e] (0 past T)  # V in pairs over the keys
    parallel over work items (bh, a block of 32 query rows):
      Qa[s, i, q] = Q[.., row i, 32 s + q]                      # rows past S read the last row
      m = -inf, l = 0, O = 0
      tiles configured:
        for kb over the key blocks (causal: up to the diagonal):
          S = Qa Kp[bh, kb]                                      # TileDot, fresh
          S = scale S, -inf past T (and above the diagonal)
          mnew = max(m, rowmax S); alpha = exp(m - mnew); m = mnew
          S = exp(S - mnew); Pa[kb % 2] = bfloat16(S); l = alpha l + rowsum S
          if kb > 0: O = alpha0 O + Pa[(kb - 1) % 2] Vp[bh, kb - 1]  # TileDots, then vectors
          alpha0 = alpha
        O = alpha0 O + Pa[last % 2] Vp[bh, last]
      out = O / l for rows < S (and the rows' logsumexp m + log l where the plan asks)

The probabilities are summed in float32 and multiplied by V rounded to bfloat16 (as torch's
bfloat16 attention does). Row maxima and sums reduce 16 lanes at a time, then halve the partial
vector (tilec.schedule.nest.lane_reduce, as the float32 template does).

Requires: an AttentionPlan whose Q, K and V are bfloat16 and whose head dimensions are multiples
of 32 (`applies`), a CPU with AMX-BF16. Guarantees: the chain's output (and logsumexp), none of
its other tensors materialised; the knobs of the float32 template do not apply (fixed 32 x 32
blocks).
"""

from __future__ import annotations

import math
from typing import Callable

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.nest import decompose, exp_nonpositive, lane_reduce, larger, thread_share, threads_loop
from tilec.schedule.patterns.attention import AttentionPlan
from tilec.target import Target, has_tiles

BLOCK = 32  # query rows and keys of a block: 2 x 2 accumulator tiles
LANES = 16  # float32 lanes of the softmax's vectors


def applies(plan: AttentionPlan, dtypes: dict[str, str], target: Target) -> bool:
    """Whether the chain runs on tiles: bfloat16 Q, K, V, head dimensions in whole tile steps
    (multiples of 32), a CPU with AMX-BF16."""
    host = target.host
    return (host is not None and has_tiles(host) and plan.d % BLOCK == 0 and plan.e % BLOCK == 0
            and all(dtypes[op.tensor] == "bfloat16" for op in (plan.q, plan.k, plan.v)))


def build(plan: AttentionPlan, bp: BoundProgram, target: Target) -> LoweredGroup:
    v, c, f32, bf16 = L.Var, L.const, "float32", "bfloat16"
    name, bh_n, d, e_n = plan.output, plan.batch_size, plan.d, plan.e
    k_blocks_n = -(-plan.t // BLOCK)
    q_blocks = -(-plan.s // BLOCK)
    kp = L.Buffer(f"{name}.Kp", bf16, (bh_n, k_blocks_n, d // 2, BLOCK, 2))
    vp = L.Buffer(f"{name}.Vp", bf16, (bh_n, k_blocks_n, BLOCK // 2, e_n, 2))
    bh, kb, r, j, p, ee, w, x, ii, st, q, lane, jc = (f"{name}.{s}" for s in (
        "bh", "kb", "r", "j", "p", "e", "w", "x", "ii", "st", "q", "lane", "jc"))
    neg_inf = L.Const(-math.inf, f32)

    def load(op: BoundAccess, batch: L.Expr, tail: tuple[L.Expr, ...]) -> L.Expr:
        env = decompose(batch, plan.batch)
        return L.Load(op.tensor, tuple(env[var] for var, _, _ in plan.batch) + tail, bp.dtypes[op.tensor])

    def ld(buf: L.Buffer, *idx: L.Expr) -> L.Expr:
        return L.Load(buf.name, tuple(idx), buf.dtype)

    zero16 = L.cast(bf16, c(0))
    # -- prologue, per batch: K^T and V as pairs (keys past T zero)
    key = L.add(L.mul(v(kb), c(BLOCK)), v(j))
    def k_row(value: L.Expr | None) -> L.Stmt:  # key j's pairs, or zeros past T (the test hoisted out of the copy)
        return L.For(r, c(0), c(d // 2), L.For(p, c(0), c(2), L.Store(
            kp.name, (v(bh), v(kb), v(r), v(j), v(p)),
            value if value is not None else zero16), "unrolled"))

    k_pack = L.For(kb, c(0), c(k_blocks_n), L.For(j, c(0), c(BLOCK), L.If(
        L.Cmp("lt", key, c(plan.t)), k_row(load(plan.k, v(bh), (key, L.add(L.mul(v(r), c(2)), v(p))))), k_row(None))))
    pair_key = L.add(L.mul(v(kb), c(BLOCK)), L.add(L.mul(v(r), c(2)), v(p)))
    v_pack = L.For(kb, c(0), c(k_blocks_n), L.For(r, c(0), c(BLOCK // 2), L.For(p, c(0), c(2), L.For(ee, c(0), c(e_n), L.Store(
        vp.name, (v(bh), v(kb), v(r), v(ee), v(p)),
        L.Select(L.Cmp("lt", pair_key, c(plan.t)), load(plan.v, v(bh), (L.Bin("min", pair_key, c(plan.t - 1)), v(ee))),
                 zero16)), "vectorized"), "unrolled")))  # (a pair's two rows of V interleaved in registers)
    prologue = L.For(bh, c(0), c(bh_n), L.seq(k_pack, v_pack), "parallel" if bh_n >= target.cores > 1 else "serial")

    # -- per work item: batch w / q_blocks, query rows q0 .. q0 + 31
    batch = L.Bin("div", v(w), c(q_blocks))
    q0 = L.mul(L.Bin("mod", v(w), c(q_blocks)), c(BLOCK))
    items = bh_n * q_blocks
    threads = max(1, min(target.cores, items))
    # the tiles' bfloat16 operands are workspaces, a slice per thread (a local 16-bit buffer holds float32)
    qa = L.Buffer(f"{name}.Qa", bf16, (threads, d // BLOCK, BLOCK, BLOCK))
    pa = L.Buffer(f"{name}.Pa", bf16, (threads, 2, 1, BLOCK, BLOCK))  # two key blocks' P: see `stream`
    s_blk = L.Buffer(f"{name}.S", f32, (BLOCK, BLOCK), "local")
    acc = L.Buffer(f"{name}.O", f32, (BLOCK, e_n), "local")
    block_pv = L.Buffer(f"{name}.PV", f32, (BLOCK, e_n), "local")  # this key block's P V
    run_max, run_sum, new_max, alpha, alpha_prev, block_sum = (L.Buffer(f"{name}.{s}", f32, (BLOCK,), "local")
                                                               for s in ("m", "l", "mnew", "alpha", "alpha0", "rs"))
    partial = L.Buffer(f"{name}.part", f32, (LANES,), "local")

    def rows(body: L.Stmt, kind: str = "serial") -> L.Stmt:
        return L.For(ii, c(0), c(BLOCK), body, kind)

    def lanes(var: str, n: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(n), body, "vectorized")

    row = L.Bin("min", L.add(q0, v(ii)), c(plan.s - 1))  # rows past S are computed, never stored
    pack_q = rows(L.For(st, c(0), c(d // BLOCK), lanes(q, BLOCK, L.Store(
        qa.name, (v(x), v(st), v(ii), v(q)), load(plan.q, batch, (row, L.add(L.mul(v(st), c(BLOCK)), v(q))))))))
    init = L.seq(lanes(ii, BLOCK, L.Store(run_max.name, (v(ii),), neg_inf)),
                 lanes(ii, BLOCK, L.Store(run_sum.name, (v(ii),), L.Const(0.0, f32))),
                 rows(lanes(ee, e_n, L.Store(acc.name, (v(ii), v(ee)), L.Const(0.0, f32)))))
    zero = L.const(0)
    scores = L.TileDot(s_blk.name, (zero, zero), qa.name, (v(x), zero, zero, zero), kp.name, (batch, v(kb), zero, zero, zero),
                       c(d // 2), L.Const(True, "bool"), BLOCK, BLOCK)
    key_j = L.add(L.mul(v(kb), c(BLOCK)), v(j))
    valid: L.Expr = L.Cmp("lt", key_j, c(plan.t))
    if plan.causal:
        valid = L.Bin("and", valid, L.Cmp("le", key_j, L.add(q0, v(ii))))
    mask = rows(lanes(j, BLOCK, L.Store(s_blk.name, (v(ii), v(j)), L.Select(
        valid, L.Bin("mul", ld(s_blk, v(ii), v(j)), L.Const(plan.scale, f32)), neg_inf))))

    def row_reduce(op: "str | Callable[[L.Expr, L.Expr], L.Expr]", start: L.Expr, into: L.Buffer) -> L.Stmt:
        """into[ii] = op(start, S[ii, :]) for every row, LANES lanes at a time (nest.lane_reduce)."""
        stmts, last4 = lane_reduce(op, start, lambda key_: ld(s_blk, v(ii), key_), partial, lane, jc, BLOCK // LANES,
                                   "unrolled")
        return rows(L.seq(stmts, L.Store(into.name, (v(ii),), last4)))

    new_maxima = row_reduce(larger, ld(run_max, v(ii)), new_max)  # (NaN-blind: a NaN score's probability is NaN)
    rescale = L.seq(lanes(ii, BLOCK, L.Store(alpha.name, (v(ii),), exp_nonpositive(
        L.Bin("sub", ld(run_max, v(ii)), ld(new_max, v(ii)))))),
        lanes(ii, BLOCK, L.Store(run_max.name, (v(ii),), ld(new_max, v(ii)))))
    prob = exp_nonpositive(L.Bin("sub", ld(s_blk, v(ii), v(j)), ld(new_max, v(ii))))
    probabilities = rows(L.seq(lanes(j, BLOCK, L.Store(s_blk.name, (v(ii), v(j)), prob)),
                               lanes(j, BLOCK, L.Store(pa.name, (v(x), L.Bin("mod", v(kb), c(2)), zero, v(ii), v(j)), L.cast(bf16, ld(s_blk, v(ii), v(j)))))))
    sums = L.seq(row_reduce("add", L.Const(0.0, f32), block_sum),
                 lanes(ii, BLOCK, L.Store(run_sum.name, (v(ii),), L.Bin(
                     "add", L.Bin("mul", ld(run_sum, v(ii)), ld(alpha, v(ii))), ld(block_sum, v(ii))))))
    # P V on fresh tiles, added to O by the vectors that rescale it, one key block late: a tile load
    # of memory that vector stores have just written waits for them to reach the cache (a tile load
    # of O right after its rescale took 18% of the samples, one of P right after its conversion 14%)

    def pv(block: L.Expr) -> L.Stmt:
        """O = alpha0 O + P V of key block `block` (its P in Pa's slot block % 2)."""
        dots = [L.TileDot(block_pv.name, (zero, c(e0)), pa.name, (v(x), L.Bin("mod", block, c(2)), zero, zero, zero),
                          vp.name, (batch, block, zero, c(e0), zero), c(BLOCK // 2), L.Const(True, "bool"), BLOCK, BLOCK)
                for e0 in range(0, e_n, BLOCK)]
        return L.seq(*dots, rows(lanes(ee, e_n, L.Store(acc.name, (v(ii), v(ee)), L.Bin(
            "add", L.Bin("mul", ld(acc, v(ii), v(ee)), ld(alpha_prev, v(ii))), ld(block_pv, v(ii), v(ee)))))))
    k_blocks: L.Expr = c(k_blocks_n)
    if plan.causal:  # blocks right of the diagonal are all masked: never visited
        last_row = L.Bin("min", L.add(q0, c(BLOCK - 1)), c(plan.s - 1))
        k_blocks = L.Bin("min", k_blocks, L.add(L.Bin("div", last_row, c(BLOCK)), c(1)))
    previous = L.If(L.Cmp("gt", v(kb), c(0)), pv(L.sub(v(kb), c(1))))
    keep_alpha = lanes(ii, BLOCK, L.Store(alpha_prev.name, (v(ii),), ld(alpha, v(ii))))
    stream = L.TileRegion(L.seq(
        L.For(kb, c(0), k_blocks, L.seq(scores, mask, new_maxima, rescale, probabilities, sums, previous, keep_alpha)),
        pv(L.sub(k_blocks, c(1)))))
    out_row = L.add(q0, v(ii))
    out_batch = tuple(decompose(batch, plan.batch)[var] for var, _, _ in plan.batch)
    results: L.Stmt = lanes(ee, e_n, L.Store(plan.output, out_batch + (out_row, v(ee)), L.cast(
        bp.dtypes[plan.output], L.Bin("div", ld(acc, v(ii), v(ee)), ld(run_sum, v(ii))))))
    if plan.lse is not None:  # the row's logsumexp: its running max and sum are the softmax's M and R
        lse = L.Bin("add", ld(run_max, v(ii)), L.Call("log", (ld(run_sum, v(ii)),), f32))
        results = L.seq(results, L.Store(plan.lse, out_batch + (out_row, c(0)), L.cast(bp.dtypes[plan.lse], lse)))
    finish = rows(L.If(L.Cmp("lt", out_row, c(plan.s)), results))
    body: L.Stmt = L.seq(pack_q, init, stream, finish)
    for buf in (s_blk, acc, block_pv, run_max, run_sum, new_max, alpha, alpha_prev, block_sum, partial):
        body = L.Allocate(buf, body)
    main = threads_loop(x, threads, thread_share(x, threads, w, items, body))
    return LoweredGroup(L.seq(prologue, main), (kp, vp, qa, pa), plan.consumed, plan.elided)


__all__ = ["BLOCK", "applies", "build"]
