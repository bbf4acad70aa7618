"""The fused attention template: softmax(scale * Q K^T [causal]) V without the score matrix.

It lowers the attention chain (tilec.schedule.patterns.attention: scores, scale, optional causal
mask, softmax, times V) in float32 to one flash-attention loop nest: for each block of `bq` query rows,
stream blocks of `bk` keys (AttentionKnobs); a register-blocked micro-GEMM gives the scores, an online
softmax keeps a running max m and sum l per row (rescaling the accumulator by
exp(m_old - m_new)), a second micro-GEMM accumulates P V. Causal attention stops at the
diagonal block (masked blocks are never visited). K is transposed once per batch so the
score micro-GEMM reads it with vector loads.

Requires: an AttentionPlan and knobs that passed the template's checks. Guarantees: the chain's
output, every other tensor of the chain never materialised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import Any, Mapping

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.nest import decompose, thread_share, threads_loop
from tilec.schedule.patterns import attention as pattern
from tilec.schedule.patterns.attention import AttentionPlan
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.schedule.templates.knobs import knob
from tilec.schedule.templates.space import Config, Constraint, Knob, choices_with, log_feature
from tilec.target import Target

LANES = 16  # width of the partial row maxima and sums
DTYPES = ("float32", "bfloat16", "float16")  # 16-bit inputs are read into float32 (the whole chain runs in it)


@dataclass(frozen=True)
class AttentionKnobs:
    """The template's tunable knobs (a schedule record)."""

    bq: int = knob(6, 1, 32, "query rows per block: the register block's height")
    bk: int = knob(64, LANES, 1024, f"keys per block: the register block's width, a multiple of {LANES}")


def build(plan: AttentionPlan, bp: BoundProgram, target: Target, knobs: AttentionKnobs = AttentionKnobs()) -> LoweredGroup:
    BQ, BK = knobs.bq, knobs.bk  # noqa: N806 - the names of the algorithm's block sizes
    assert BK % LANES == 0, "bk must be a multiple of LANES"
    v, c, f32 = L.Var, L.const, "float32"
    name = plan.output
    bh_n = plan.batch_size
    tp = -(-plan.t // BK) * BK
    q_blocks = -(-plan.s // BQ)
    kt = L.Buffer(f"{name}.Kt", f32, (bh_n, plan.d, tp))
    bh, tt, dd, w, qb, kb, ii, j, e, x = (f"{name}.{s}" for s in ("bh", "t", "d", "w", "qb", "kb", "ii", "j", "e", "x"))
    neg_inf = L.Const(-math.inf, f32)

    def access(op: BoundAccess, batch_env: dict[str, L.Expr], tail: tuple[L.Expr, ...]) -> L.Expr:
        return L.cast(f32, L.Load(op.tensor, tuple(batch_env[var] for var, _, _ in plan.batch) + tail, bp.dtypes[op.tensor]))

    # -- prologue: Kt[bh, d, t] = K[.., t, d] (zero past T), once per batch
    env_bh = decompose(v(bh), plan.batch)
    k_copy = L.If(L.Cmp("lt", v(tt), c(plan.t)),
                  L.Store(kt.name, (v(bh), v(dd), v(tt)), access(plan.k, env_bh, (v(tt), v(dd)))),
                  L.Store(kt.name, (v(bh), v(dd), v(tt)), L.Const(0.0, f32)))
    prologue = L.For(bh, c(0), c(bh_n), L.For(tt, c(0), c(tp), L.For(dd, c(0), c(plan.d), k_copy)),
                     "parallel" if bh_n >= target.cores > 1 else "serial")

    # -- per work item: batch bh = w / q_blocks, query block qb = w % q_blocks
    bh_of_w = L.Bin("div", v(w), c(q_blocks))
    env = decompose(bh_of_w, plan.batch)
    q0 = L.mul(L.Bin("mod", v(w), c(q_blocks)), c(BQ))
    row = L.Bin("min", L.add(q0, v(ii)), c(plan.s - 1))  # rows past S are computed, never stored
    key = L.add(L.mul(v(kb), c(BK)), v(j))
    sacc = L.Buffer(f"{name}.sacc", f32, (BQ, BK), "local")  # the score register block
    sblk = L.Buffer(f"{name}.p", f32, (BQ, BK), "local")  # scores, then probabilities, in memory
    acc = L.Buffer(f"{name}.acc", f32, (BQ, plan.e), "local")
    run_max = L.Buffer(f"{name}.m", f32, (BQ,), "local")
    run_sum = L.Buffer(f"{name}.l", f32, (BQ,), "local")
    new_max = L.Buffer(f"{name}.mnew", f32, (BQ,), "local")
    alpha = L.Buffer(f"{name}.alpha", f32, (BQ,), "local")
    block_sum = L.Buffer(f"{name}.rs", f32, (BQ,), "local")
    lanes_max = L.Buffer(f"{name}.vmax", f32, (LANES,), "local")  # per-lane partial max / sum of a row
    lanes_sum = L.Buffer(f"{name}.vsum", f32, (LANES,), "local")
    jc, lane = f"{name}.jc", f"{name}.lane"

    def rows(body: L.Stmt, unrolled: bool = True) -> L.Stmt:
        return L.For(ii, c(0), c(BQ), body, "unrolled" if unrolled else "serial")

    def lanes(var: str, n: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(n), body, "vectorized")

    def ld(buf: L.Buffer, *idx: L.Expr) -> L.Expr:
        return L.Load(buf.name, tuple(idx), buf.dtype)

    init = L.seq(rows(L.seq(L.Store(run_max.name, (v(ii),), neg_inf), L.Store(run_sum.name, (v(ii),), L.Const(0.0, f32)),
                            lanes(e, plan.e, L.Store(acc.name, (v(ii), v(e)), L.Const(0.0, f32))))))
    score_update = L.Store(sacc.name, (v(ii), v(j)), L.Bin(
        "add", ld(sacc, v(ii), v(j)), L.Bin("mul", access(plan.q, env, (row, v(dd))), ld(kt, bh_of_w, v(dd), key))))
    scores = L.seq(
        rows(lanes(j, BK, L.Store(sacc.name, (v(ii), v(j)), L.Const(0.0, f32)))),
        L.For(dd, c(0), c(plan.d), rows(lanes(j, BK, score_update))),
    )
    valid: L.Expr = L.Cmp("lt", key, c(plan.t))
    if plan.causal:
        valid = L.Bin("and", valid, L.Cmp("le", key, L.add(q0, v(ii))))
    scaled = L.Bin("mul", ld(sacc, v(ii), v(j)), L.Const(plan.scale, f32))
    mask = rows(lanes(j, BK, L.Store(sblk.name, (v(ii), v(j)), L.Select(valid, scaled, neg_inf))))
    def row_reduce(partial: L.Buffer, op: str, start: L.Expr, into: L.Buffer) -> L.Stmt:
        """into[ii] = op(start, sblk[ii, :]): LANES-wide partial results, then one short scalar chain
        (a scalar chain over all BK keys would be BK dependent operations)."""
        element = ld(sblk, v(ii), L.add(L.mul(v(jc), c(LANES)), v(lane)))
        return L.seq(
            lanes(lane, LANES, L.Store(partial.name, (v(lane),), start)),
            L.For(jc, c(0), c(BK // LANES), lanes(lane, LANES, L.Store(
                partial.name, (v(lane),), L.Bin(op, ld(partial, v(lane)), element)))),
            L.Store(into.name, (v(ii),), start),
            L.For(lane, c(0), c(LANES), L.Store(into.name, (v(ii),), L.Bin(op, ld(into, v(ii)), ld(partial, v(lane))))))

    row_max = rows(row_reduce(lanes_max, "max", ld(run_max, v(ii)), new_max), unrolled=False)
    rescale_factor = rows(L.seq(
        L.Store(alpha.name, (v(ii),), L.Call("exp", (L.Bin("sub", ld(run_max, v(ii)), ld(new_max, v(ii))),), f32)),
        L.Store(run_max.name, (v(ii),), ld(new_max, v(ii)))), unrolled=False)
    probabilities = rows(lanes(j, BK, L.Store(sblk.name, (v(ii), v(j)), L.Call(
        "exp", (L.Bin("sub", ld(sblk, v(ii), v(j)), ld(new_max, v(ii))),), f32))))
    sums = rows(L.seq(row_reduce(lanes_sum, "add", L.Const(0.0, f32), block_sum),
                      L.Store(run_sum.name, (v(ii),), L.Bin("add", L.Bin("mul", ld(run_sum, v(ii)), ld(alpha, v(ii))),
                                                              ld(block_sum, v(ii))))), unrolled=False)
    rescale = rows(lanes(e, plan.e, L.Store(acc.name, (v(ii), v(e)),
                                            L.Bin("mul", ld(acc, v(ii), v(e)), ld(alpha, v(ii))))))
    key_clamped = L.Bin("min", key, c(plan.t - 1))  # p is 0 there; the load must stay in bounds
    pv = L.For(j, c(0), c(BK), rows(lanes(e, plan.e, L.Store(acc.name, (v(ii), v(e)), L.Bin(
        "add", ld(acc, v(ii), v(e)), L.Bin("mul", ld(sblk, v(ii), v(j)), access(plan.v, env, (key_clamped, v(e)))))))))
    k_blocks: L.Expr = c(tp // BK)
    if plan.causal:  # blocks right of the diagonal are all masked: never visit them
        last_row = L.Bin("min", L.add(q0, c(BQ - 1)), c(plan.s - 1))
        k_blocks = L.Bin("min", k_blocks, L.add(L.Bin("div", last_row, c(BK)), c(1)))
    stream = L.For(kb, c(0), k_blocks, L.seq(scores, mask, row_max, rescale_factor, probabilities, sums, rescale, pv))
    out_row = L.add(q0, v(ii))
    finish = rows(L.If(L.Cmp("lt", out_row, c(plan.s)), lanes(e, plan.e, L.Store(
        plan.output, tuple(env[var] for var, _, _ in plan.batch) + (out_row, v(e)),
        L.cast(bp.dtypes[plan.output], L.Bin("div", ld(acc, v(ii), v(e)), ld(run_sum, v(ii))))))))
    body: L.Stmt = L.seq(init, stream, finish)
    for buf in (sacc, sblk, acc, run_max, run_sum, new_max, alpha, block_sum, lanes_max, lanes_sum):
        body = L.Allocate(buf, body)
    items = bh_n * q_blocks
    threads = max(1, min(target.cores, items))
    main = threads_loop(x, threads, thread_share(x, threads, w, items, body))
    return LoweredGroup(L.seq(prologue, main), (kt,), plan.consumed, plan.elided)


NAMES = ("log_bq", "log_bk", "reg_use", "log_block", "intensity", "q_waste", "t_waste", "imbalance",
         "log_s", "log_t", "log_d", "causal", "kt_tile_l1")


class Attention(Template):
    name = "attention"
    kind = "cpu"
    knob_type = AttentionKnobs
    tunable = True
    requirement = ("it must start the chain scores, softmax, times V (tilec.schedule.patterns.attention) "
                   "in float32, or bfloat16 or float16 inputs read into float32")
    feature_names = NAMES

    def match(self, index: int, ctx: Context) -> AttentionPlan | None:
        return pattern.match(index, ctx.bp, DTYPES)

    def default_knobs(self, index: int, plan: AttentionPlan, ctx: Context) -> AttentionKnobs:
        """6 x 64 score blocks, fewer rows where that holds more vectors than `problems` allows
        (with 8-lane vectors and 16 registers, AVX2: 4 x 64)."""
        assert ctx.target.host is not None
        base = AttentionKnobs()
        vectors = -(-base.bk // ctx.target.lanes("float32"))
        return AttentionKnobs(bq=max(1, min(base.bq, 2 * ctx.target.host.vector_registers // vectors)), bk=base.bk)

    def problems(self, knobs: AttentionKnobs, plan: AttentionPlan, ctx: Context) -> list[str]:
        problems = []
        if knobs.bk % LANES:
            problems.append(f"bk ({knobs.bk}) must be a multiple of {LANES}")
        assert ctx.target.host is not None
        vectors = -(-knobs.bk // ctx.target.lanes("float32"))
        limit = 2 * ctx.target.host.vector_registers
        if knobs.bq * vectors > limit:
            problems.append(f"the bq x bk = {knobs.bq}x{knobs.bk} score block holds {knobs.bq * vectors} vectors; "
                            f"at most {limit} compile in reasonable time")
        return problems

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return build(choice.plan, ctx.bp, ctx.target, choice.knobs)

    def space(self, index: int, plan: AttentionPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        assert ctx.target.host is not None
        regs = ctx.target.host.vector_registers
        lanes = ctx.target.lanes("float32")
        t_up = LANES * -(-plan.t // LANES)
        knobs = (Knob("bq", choices_with((1, 2, 3, 4, 6, 8, 10, 12, 16), default["bq"])),
                 Knob("bk", choices_with(tuple(b for b in (16, 32, 48, 64, 96, 128, 192, 256) if b <= max(16, t_up)),
                                         default["bk"])))

        def multiple(c: Config) -> str | None:
            return None if c["bk"] % LANES == 0 else f"bk ({c['bk']}) must be a multiple of {LANES}"

        def registers(c: Config) -> str | None:
            used = c["bq"] * -(-c["bk"] // lanes) + -(-c["bk"] // lanes) + 1
            return None if used <= regs else f"the {c['bq']}x{c['bk']} score block needs {used} vector registers, " \
                                             f"more than the {regs} there are"

        def rows(c: Config) -> str | None:
            return None if c["bq"] <= plan.s else f"bq ({c['bq']}) exceeds the {plan.s} query rows"

        return knobs, (Constraint("bk_multiple", multiple), Constraint("registers", registers), Constraint("rows", rows))

    def features(self, index: int, p: AttentionPlan, ctx: Context, c: Mapping[str, Any]) -> list[float]:
        t = ctx.target
        assert t.host is not None
        lanes = t.lanes("float32")
        bq, bk = c["bq"], c["bk"]
        vectors = -(-bk // lanes)
        regs = (bq * vectors + vectors + 1) / t.host.vector_registers
        units = p.batch_size * -(-p.s // bq)
        per = -(-units // t.cores)
        return [log_feature(bq), log_feature(bk), regs, log_feature(bq * bk), bq * bk / (bq + bk), -(-p.s // bq) * bq / p.s,
                -(-p.t // bk) * bk / p.t, per * min(t.cores, units) / units, log_feature(p.s), log_feature(p.t), log_feature(p.d),
                float(p.causal), p.d * bk * 4 / t.host.l1d_bytes]

    def flops(self, p: AttentionPlan) -> float:
        return 2.0 * p.batch_size * p.s * p.t * (p.d + p.e)


ATTENTION = Attention()

__all__ = ["ATTENTION", "Attention", "AttentionKnobs", "LANES", "build"]
