"""The fused attention template: softmax(scale * Q K^T [causal]) V without the score matrix.

It lowers the attention chain (tilec.schedule.patterns.attention: scores, scale, optional causal
mask, softmax, times V) in float32 to one flash-attention loop nest: for each block of `bq` query rows,
stream blocks of `bk` keys (AttentionKnobs), each key block taken by `groups` query blocks in
turn while its tiles are in cache; a register-blocked micro-GEMM gives the scores, an online
softmax keeps a running max m and sum l per row (rescaling the accumulator by
exp(m_old - m_new)), a second micro-GEMM accumulates P V a register block of output columns at a
time (`register_chunk`: the block stays in registers across the keys instead of a load and a
store per FMA; rescaling is folded into it). Each score register block is scaled on its way to
memory and the rows' running maxima are taken from it there (NaN-blind, `nest.larger`: a NaN score
makes its own probability NaN); only key blocks across the causal diagonal or past T are masked
(the block is built twice, with and without the mask); the probabilities are e^(s - max) as
`nest.exp_nonpositive` and are summed as they are stored. Causal attention stops at the
diagonal block (masked blocks are never visited). K is transposed once per batch so the
score micro-GEMM reads it with vector loads. bfloat16 inputs on a CPU with AMX-BF16 take the
template's tile variant instead (tilec.schedule.cpu.attention_tiles: both products on tiles).

Requires: an AttentionPlan and knobs that passed the template's checks. Guarantees: the chain's
output (and its rows' logsumexp, where the plan has one: a training forward's, which torch's
backward reads), every other tensor of the chain never materialised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import Any, Mapping

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.cpu import attention_tiles
from tilec.schedule.cpu.implicit_gemm.packed import bf16_dot
from tilec.schedule.cpu.permute import LINE_BYTES
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.nest import decompose, exp_nonpositive, lane_halves, larger, thread_share, threads_loop
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
    bk: int = knob(64, LANES, 1024, f"keys per block (the micro-GEMMs take it `register_chunk` columns at a time), "
                                    f"a multiple of {LANES}")
    groups: int = knob(1, 1, 16, "query blocks that take each key block in turn while it is in cache (a work "
                                 "item's rows: groups x bq)")


def item_rows(s: int, bq: int, groups: int) -> int:
    """Work items per batch: S query rows in items of `groups` blocks of `bq` rows."""
    return -(-s // (groups * bq))


def register_chunk(bq: int, target: Target) -> int:
    """Columns of a micro-GEMM's accumulator (scores or P V) held in registers at a time: bq rows
    of them, one row of the streamed operand (K^T or V) and a broadcast fit the register file."""
    assert target.host is not None
    lanes = target.lanes("float32")
    return lanes * max(1, (target.host.vector_registers - 1) // (bq + 1))


def registers_problem(bq: int, target: Target) -> str | None:
    """Why bq rows do not fit the register file (one vector of accumulators per row, a row of K^T
    or V and a broadcast), or None."""
    assert target.host is not None
    regs = target.host.vector_registers
    if bq + 2 <= regs:
        return None
    return f"bq ({bq}) rows of accumulators, a row of K^T and a broadcast need {bq + 2} vector registers, " \
           f"more than the {regs} there are"


LINE_FLOATS = LINE_BYTES // 4  # float32 elements of a cache line (Kt holds float32)


def odd_lines_row(elements: int) -> int:
    """The row length (float32 elements) of a transposed workspace whose blocks read a column strip
    of many rows (Kt for `elements` keys; the backward kernel's Q^T and dO^T): at least `elements`,
    an odd number of cache lines. Rows a power-of-two number of lines apart (512 keys: 2 KiB) put a
    strip into the same few cache sets, which cannot hold it; an odd number of lines spreads it over
    all sets."""
    lines = -(-elements // LINE_FLOATS)
    return (lines + 1 - lines % 2) * LINE_FLOATS


def build(plan: AttentionPlan, bp: BoundProgram, target: Target, knobs: AttentionKnobs = AttentionKnobs()) -> LoweredGroup:
    BQ, BK, G = knobs.bq, knobs.bk, knobs.groups  # noqa: N806 - the names of the algorithm's block sizes
    assert BK % LANES == 0, "bk must be a multiple of LANES"
    v, c, f32 = L.Var, L.const, "float32"
    name = plan.output
    bh_n = plan.batch_size
    tp = -(-plan.t // BK) * BK
    q_blocks = item_rows(plan.s, BQ, G)  # a work item's query rows: G blocks of BQ
    kt = L.Buffer(f"{name}.Kt", f32, (bh_n, plan.d, odd_lines_row(tp)))
    bh, tt, dd, w, qb, kb, ii, j, e, x, g = (f"{name}.{s}" for s in ("bh", "t", "d", "w", "qb", "kb", "ii", "j", "e", "x",
                                                                     "g"))
    neg_inf = L.Const(-math.inf, f32)

    def access(op: BoundAccess, batch_env: dict[str, L.Expr], tail: tuple[L.Expr, ...]) -> L.Expr:
        return L.cast(f32, L.Load(op.tensor, tuple(batch_env[var] for var, _, _ in plan.batch) + tail, bp.dtypes[op.tensor]))

    # -- prologue: Kt[bh, d, t] = K[.., t, d] (zero past T), once per batch
    env_bh = decompose(v(bh), plan.batch)
    k_copy = L.If(L.Cmp("lt", v(tt), c(plan.t)),
                  L.Store(kt.name, (v(bh), v(dd), v(tt)), access(plan.k, env_bh, (v(tt), v(dd)))),
                  L.Store(kt.name, (v(bh), v(dd), v(tt)), L.Const(0.0, f32)))
    # 16-bit Q and V are widened to float32 once per batch too: read in the micro-GEMMs' inner loops, each
    # element was converted again for every key block or column chunk that read it (bf16 attention on
    # Zen 3: 41.5 ms converting at each read, 29.5 with the copies)
    widened: dict[str, L.Buffer] = {}
    copies: list[L.Stmt] = []
    for op, extent, width, tag in ((plan.q, plan.s, plan.d, "Qf"), (plan.v, plan.t, plan.e, "Vf")):
        if bp.dtypes[op.tensor] != f32 and op.tensor not in widened:
            buf = widened[op.tensor] = L.Buffer(f"{name}.{tag}", f32, (bh_n, extent, width))
            copies.append(L.For(tt, c(0), c(extent), L.For(dd, c(0), c(width), L.Store(
                buf.name, (v(bh), v(tt), v(dd)), access(op, env_bh, (v(tt), v(dd)))))))
    prologue = L.For(bh, c(0), c(bh_n), L.seq(L.For(tt, c(0), c(tp), L.For(dd, c(0), c(plan.d), k_copy)), *copies),
                     "parallel" if bh_n >= target.cores > 1 else "serial")

    # -- per work item: batch bh = w / q_blocks, query block qb = w % q_blocks
    bh_of_w = L.Bin("div", v(w), c(q_blocks))
    env = decompose(bh_of_w, plan.batch)

    def read(op: BoundAccess, tail: tuple[L.Expr, ...]) -> L.Expr:
        """Q or V of this work item's batch, as float32: from the widened copy where there is one."""
        if op.tensor in widened:
            return L.Load(widened[op.tensor].name, (bh_of_w, *tail), f32)
        return access(op, env, tail)

    item_q0 = L.mul(L.Bin("mod", v(w), c(q_blocks)), c(G * BQ))
    q0 = L.add(item_q0, L.mul(v(g), c(BQ))) if G > 1 else item_q0  # query block g of the item
    row = L.Bin("min", L.add(q0, v(ii)), c(plan.s - 1))  # rows past S are computed, never stored
    key = L.add(L.mul(v(kb), c(BK)), v(j))
    sacc = L.Buffer(f"{name}.sacc", f32, (BQ, BK), "local")  # the score register block
    sblk = L.Buffer(f"{name}.p", f32, (BQ, BK), "local")  # scores, then probabilities, in memory
    acc = L.Buffer(f"{name}.acc", f32, (G, BQ, plan.e), "local")  # each query block's running state
    run_max = L.Buffer(f"{name}.m", f32, (G, BQ), "local")
    run_sum = L.Buffer(f"{name}.l", f32, (G, BQ), "local")
    new_max = L.Buffer(f"{name}.mnew", f32, (BQ,), "local")
    alpha = L.Buffer(f"{name}.alpha", f32, (BQ,), "local")
    width_max = target.lanes("float32")  # (a score chunk's width is a multiple of it)
    rmax = L.Buffer(f"{name}.vmax", f32, (BQ, width_max), "local")  # per-lane partial maxima of the rows
    lanes_sum = L.Buffer(f"{name}.vsum", f32, (LANES,), "local")  # per-lane partial sum of a row
    jc, lane = f"{name}.jc", f"{name}.lane"

    def rows(body: L.Stmt, unrolled: bool = True) -> L.Stmt:
        return L.For(ii, c(0), c(BQ), body, "unrolled" if unrolled else "serial")

    def lanes(var: str, n: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(n), body, "vectorized")

    def ld(buf: L.Buffer, *idx: L.Expr) -> L.Expr:
        return L.Load(buf.name, tuple(idx), buf.dtype)

    init = L.For(g, c(0), c(G), rows(L.seq(
        L.Store(run_max.name, (v(g), v(ii)), neg_inf), L.Store(run_sum.name, (v(g), v(ii)), L.Const(0.0, f32)),
        lanes(e, plan.e, L.Store(acc.name, (v(g), v(ii), v(e)), L.Const(0.0, f32))))))
    chunk = register_chunk(BQ, target)

    valid: L.Expr = L.Cmp("lt", key, c(plan.t))
    if plan.causal:
        valid = L.Bin("and", valid, L.Cmp("le", key, L.add(q0, v(ii))))

    def score_chunk(j0: int, width: int, masked: bool) -> L.Stmt:
        """p[:, j0:j0+width] = scale * Q K^T for those keys (-inf where `masked` and the key is not
        valid): a register block across the d loop, scaled (and masked) on its way to memory."""
        col = L.add(c(j0), v(j))
        update = L.Store(sacc.name, (v(ii), col), L.Bin("add", ld(sacc, v(ii), col), L.Bin(
            "mul", read(plan.q, (row, v(dd))), ld(kt, bh_of_w, v(dd), L.add(L.mul(v(kb), c(BK)), col)))))
        scaled: L.Expr = L.Bin("mul", ld(sacc, v(ii), col), L.Const(plan.scale, f32))
        if masked:
            scaled = L.Select(substitute_expr(valid, {j: col}), scaled, neg_inf)
        # each row's running maximum, a vector of `width_max` lanes, taken while the scores are in registers
        maxima = rows(L.seq(*(lanes(lane, width_max, L.Store(rmax.name, (v(ii), v(lane)), larger(
            ld(rmax, v(ii), v(lane)), ld(sblk, v(ii), L.add(c(j0 + s0), v(lane))))))
            for s0 in range(0, width, width_max))))
        return L.seq(rows(lanes(j, width, L.Store(sacc.name, (v(ii), col), L.Const(0.0, f32)))),
                     L.For(dd, c(0), c(plan.d), rows(lanes(j, width, update))),
                     rows(lanes(j, width, L.Store(sblk.name, (v(ii), col), scaled))), maxima)

    def scores(masked: bool) -> L.Stmt:
        start = rows(lanes(lane, width_max, L.Store(rmax.name, (v(ii), v(lane)), ld(run_max, v(g), v(ii)))))
        return L.seq(start, *(score_chunk(j0, min(chunk, BK - j0), masked) for j0 in range(0, BK, chunk)))

    # the row maximum ignores NaN (one max instruction, not four): a NaN score's probability is NaN anyway
    max_halves, max_last4 = lane_halves(larger, rmax, lane, (v(ii),))
    row_max = rows(L.seq(max_halves, L.Store(new_max.name, (v(ii),), max_last4)), unrolled=False)
    rescale_factor = L.seq(  # across the rows: one vector exp, not bq scalar calls
        lanes(ii, BQ, L.Store(alpha.name, (v(ii),), exp_nonpositive(L.Bin("sub", ld(run_max, v(g), v(ii)), ld(new_max, v(ii)))))),
        lanes(ii, BQ, L.Store(run_max.name, (v(g), v(ii)), ld(new_max, v(ii)))))
    # each row's probabilities, summed LANES lanes at a time as they are stored (one pass over the row)
    p_key = L.add(L.mul(v(jc), c(LANES)), v(lane))
    probability = L.Store(sblk.name, (v(ii), p_key), exp_nonpositive(L.Bin("sub", ld(sblk, v(ii), p_key), ld(new_max, v(ii)))))
    summed = L.Store(lanes_sum.name, (v(lane),), L.Bin("add", ld(lanes_sum, v(lane)), ld(sblk, v(ii), p_key)))
    halves, last4 = lane_halves("add", lanes_sum, lane)
    probabilities_and_sums = rows(L.seq(
        lanes(lane, LANES, L.Store(lanes_sum.name, (v(lane),), L.Const(0.0, f32))),
        L.For(jc, c(0), c(BK // LANES), lanes(lane, LANES, L.seq(probability, summed))),
        halves,
        L.Store(run_sum.name, (v(g), v(ii)), L.Bin("add", L.Bin("mul", ld(run_sum, v(g), v(ii)), ld(alpha, v(ii))), last4))),
        unrolled=False)
    key_clamped = L.Bin("min", key, c(plan.t - 1))  # p is 0 there; the load must stay in bounds

    def pv_chunk(e0: int, width: int) -> L.Stmt:
        """acc[:, e0:e0+width] = alpha * acc[...] + P V[block, e0:e0+width]: the chunk is a register
        block (constant addresses) that stays in registers across the keys."""
        col = L.add(c(e0), v(e))
        rescale = rows(lanes(e, width, L.Store(acc.name, (v(g), v(ii), col), L.Bin("mul", ld(acc, v(g), v(ii), col), ld(alpha, v(ii))))))
        update = L.Store(acc.name, (v(g), v(ii), col), L.Bin(
            "add", ld(acc, v(g), v(ii), col), L.Bin("mul", ld(sblk, v(ii), v(j)), read(plan.v, (key_clamped, col)))))
        return L.seq(rescale, L.For(j, c(0), c(BK), rows(lanes(e, width, update))))

    pv = L.seq(*(pv_chunk(e0, min(chunk, plan.e - e0)) for e0 in range(0, plan.e, chunk)))
    k_blocks: L.Expr = c(tp // BK)

    def block_with(masked: bool) -> L.Stmt:
        return L.seq(scores(masked), row_max, rescale_factor, probabilities_and_sums, pv)

    # only blocks past T or across the diagonal need the mask: the others skip its compares and selects
    needs_mask: L.Expr = L.Cmp("gt", L.mul(L.add(v(kb), c(1)), c(BK)), c(plan.t))
    if plan.causal:
        needs_mask = L.Bin("or", needs_mask, L.Cmp("gt", L.add(L.mul(v(kb), c(BK)), c(BK - 1)), q0))
    block: L.Stmt = L.If(needs_mask, block_with(True), block_with(False))
    if plan.causal:  # blocks right of the diagonal are all masked: never visit them
        last_row = L.Bin("min", L.add(item_q0, c(G * BQ - 1)), c(plan.s - 1))
        k_blocks = L.Bin("min", k_blocks, L.add(L.Bin("div", last_row, c(BK)), c(1)))
        if G > 1:  # nor, in the item's last key blocks, the query blocks above them
            block = L.If(L.Cmp("le", L.mul(v(kb), c(BK)), L.add(q0, c(BQ - 1))), block)
    stream = L.For(kb, c(0), k_blocks, L.For(g, c(0), c(G), block))
    out_row = L.add(q0, v(ii))
    out_batch = tuple(env[var] for var, _, _ in plan.batch)
    results: L.Stmt = lanes(e, plan.e, L.Store(plan.output, out_batch + (out_row, v(e)), L.cast(
        bp.dtypes[plan.output], L.Bin("div", ld(acc, v(g), v(ii), v(e)), ld(run_sum, v(g), v(ii))))))
    if plan.lse is not None:  # the row's logsumexp: its running max and sum are the softmax's M and R
        lse = L.Bin("add", ld(run_max, v(g), v(ii)), L.Call("log", (ld(run_sum, v(g), v(ii)),), f32))
        results = L.seq(results, L.Store(plan.lse, out_batch + (out_row, c(0)), L.cast(bp.dtypes[plan.lse], lse)))
    finish = L.For(g, c(0), c(G), rows(L.If(L.Cmp("lt", out_row, c(plan.s)), results)))
    body: L.Stmt = L.seq(init, stream, finish)
    for buf in (sacc, sblk, acc, run_max, run_sum, new_max, alpha, rmax, lanes_sum):
        body = L.Allocate(buf, body)
    items = bh_n * q_blocks
    threads = max(1, min(target.cores, items))
    main = threads_loop(x, threads, thread_share(x, threads, w, items, body))
    return LoweredGroup(L.seq(prologue, main), (kt, *widened.values()), plan.consumed, plan.elided)


def gemms_of_pairs_win(dtype: str, causal: bool, d: int, e: int, target: Target) -> bool:
    """Whether attention (forward or backward) runs faster as its chain of GEMMs than as a fused
    template: for bfloat16 without a causal mask (the fused templates skip the masked half), heads
    wider than two vectors of pairs, on a CPU with the pair dot product. There the GEMMs multiply
    bfloat16 pairs at twice the float32 rate the fused templates compute in, which pays for
    writing and rereading the scores."""
    return dtype == "bfloat16" and not causal and min(d, e) > 2 * LANES and bf16_dot(target)


def default_bq(plan: AttentionPlan, target: Target) -> int:
    """Query rows per block: 6, and 4 for causal attention on a CPU with 16 vector registers, where
    a shorter block wastes less of the diagonal key block (its keys past each row are computed and
    masked). Measured on Zen 3 (AVX2, B=4 H=8 S=512 D=64, interleaved with SDPA, three runs): causal
    4 rows 1.66-1.82x SDPA, 6 rows 1.49-1.57x; without the mask 4 rows 0.97-0.99x, 6 rows 1.04-1.09x."""
    assert target.host is not None
    return 4 if plan.causal and target.host.vector_registers <= 16 else AttentionKnobs().bq


def default_bk(plan: AttentionPlan, target: Target) -> int:
    """Keys per block: 64 where the block's K^T and V tiles (2 x 64 x (d + e) / 2 floats) fill at
    most two thirds of the L1 data cache, else 32: the groups' query rows, partial sums and
    probabilities need the rest. Measured on Zen 3 (32 KiB L1, d = e = 64, 4 groups, interleaved
    with SDPA): 64 keys 1.04x SDPA, 32 keys 1.09x; causal 1.44x and 1.57x; Zen 5's 48 KiB keeps
    the 64 keys it was measured with."""
    assert target.host is not None
    return 64 if 64 * (plan.d + plan.e) * 4 <= 2 * target.host.l1d_bytes // 3 else 32


GROUPS = 4  # query blocks per work item by default (fewer where the items would not keep the cores busy)
ITEMS_PER_CORE = 4  # work items each core should have at least, for the threads' shares to come out even


def default_groups(plan: AttentionPlan, bq: int, cores: int) -> int:
    """Query blocks that share each pass over a key block: each pass reads the key block's K^T and
    V tiles (2 x d x bk floats, 32 KiB at d = bk = 64) from L2 once for all of them instead of once
    per block. Measured on Zen 3 (B=4, H=8, S=512, D=64, both cores): 3 or 4 blocks ran 10-13%
    faster than 1, 8 no faster than 4. Fewer where the work items (batch x query rows / (groups x
    bq)) would drop below ITEMS_PER_CORE per core, or one item would hold more rows than there are."""
    for groups in range(GROUPS, 1, -1):
        items = plan.batch_size * item_rows(plan.s, bq, groups)
        if groups * bq <= plan.s and items >= ITEMS_PER_CORE * cores:
            return groups
    return 1


NAMES = ("log_bq", "log_bk", "reg_use", "log_block", "intensity", "q_waste", "t_waste", "imbalance",
         "log_s", "log_t", "log_d", "causal", "kt_tile_l1", "log_groups")


class Attention(Template):
    name = "attention"
    kind = "cpu"
    knob_type = AttentionKnobs
    tunable = True
    requirement = ("it must start the chain scores, softmax, times V (tilec.schedule.patterns.attention) "
                   "in float32, or bfloat16 or float16 inputs read into float32")
    feature_names = NAMES

    def match(self, index: int, ctx: Context) -> AttentionPlan | None:
        return pattern.match(index, ctx.bp, DTYPES, logsumexp=True)

    def profitable(self, plan: AttentionPlan, ctx: Context) -> bool:
        """Always on AMX tiles (tilec.schedule.cpu.attention_tiles); else not where `gemms_of_pairs_win`.
        On Zen 5, B=4 H=8 S=512 bfloat16, the chain took 5.5 ms at D=64 (this template 6.9), 8.2 at
        D=128 (12.6), 0.51 at S=128 D=64 (0.75), but 4.7 at D=32 (this template 4.3); with a causal
        mask this template took 4.6 ms at D=64 against the chain's 7.8."""
        if attention_tiles.applies(plan, ctx.bp.dtypes, ctx.target):
            return True
        return not gemms_of_pairs_win(ctx.bp.dtypes[plan.q.tensor], plan.causal, plan.d, plan.e, ctx.target)

    def default_knobs(self, index: int, plan: AttentionPlan, ctx: Context) -> AttentionKnobs:
        """`default_bq` rows by `default_bk` keys: the micro-GEMMs hold as many columns of them in
        registers as fit (`register_chunk`), so the block's width does not depend on the register
        file; and `default_groups` query blocks per work item."""
        bq = default_bq(plan, ctx.target)
        return AttentionKnobs(bq, default_bk(plan, ctx.target), default_groups(plan, bq, ctx.target.cores))

    def problems(self, knobs: AttentionKnobs, plan: AttentionPlan, ctx: Context) -> list[str]:
        problems = []
        if knobs.bk % LANES:
            problems.append(f"bk ({knobs.bk}) must be a multiple of {LANES}")
        registers = registers_problem(knobs.bq, ctx.target)
        return problems + ([registers] if registers else [])

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        if attention_tiles.applies(choice.plan, ctx.bp.dtypes, ctx.target):  # (fixed blocks: the knobs do not apply)
            return attention_tiles.build(choice.plan, ctx.bp, ctx.target)
        return build(choice.plan, ctx.bp, ctx.target, choice.knobs)

    def space(self, index: int, plan: AttentionPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        t_up = LANES * -(-plan.t // LANES)
        knobs = (Knob("bq", choices_with((1, 2, 3, 4, 6, 8, 10, 12, 16), default["bq"])),
                 Knob("bk", choices_with(tuple(b for b in (16, 32, 48, 64, 96, 128, 192, 256) if b <= max(16, t_up)),
                                         default["bk"])),
                 Knob("groups", choices_with((1, 2, 4, 8), default["groups"])))

        def multiple(c: Config) -> str | None:
            return None if c["bk"] % LANES == 0 else f"bk ({c['bk']}) must be a multiple of {LANES}"

        def registers(c: Config) -> str | None:
            return registers_problem(c["bq"], ctx.target)

        def rows(c: Config) -> str | None:
            if c["bq"] > plan.s:
                return f"bq ({c['bq']}) exceeds the {plan.s} query rows"
            if c["groups"] > 1 and c["bq"] * c["groups"] > plan.s:
                return f"groups x bq ({c['groups']} x {c['bq']}) exceeds the {plan.s} query rows"
            return None

        return knobs, (Constraint("bk_multiple", multiple), Constraint("registers", registers), Constraint("rows", rows))

    def features(self, index: int, p: AttentionPlan, ctx: Context, c: Mapping[str, Any]) -> list[float]:
        t = ctx.target
        assert t.host is not None
        lanes = t.lanes("float32")
        bq, bk = c["bq"], c["bk"]
        vectors = -(-min(bk, register_chunk(bq, t)) // lanes)
        regs = (bq * vectors + vectors + 1) / t.host.vector_registers
        per_batch = item_rows(p.s, bq, c["groups"])
        units = p.batch_size * per_batch
        per = -(-units // t.cores)
        return [log_feature(bq), log_feature(bk), regs, log_feature(bq * bk), bq * bk / (bq + bk),
                per_batch * bq * c["groups"] / p.s,
                -(-p.t // bk) * bk / p.t, per * min(t.cores, units) / units, log_feature(p.s), log_feature(p.t), log_feature(p.d),
                float(p.causal), p.d * bk * 4 / t.host.l1d_bytes, log_feature(c["groups"])]

    def flops(self, p: AttentionPlan) -> float:
        return 2.0 * p.batch_size * p.s * p.t * (p.d + p.e)


ATTENTION = Attention()

__all__ = ["ATTENTION", "Attention", "AttentionKnobs", "GROUPS", "LANES", "build", "default_groups", "item_rows",
           "default_bk", "default_bq", "register_chunk", "registers_problem"]
