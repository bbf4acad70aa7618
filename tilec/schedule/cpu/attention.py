"""The fused attention template: softmax(scale * Q K^T [causal]) V without the score matrix.

It recognises the chain of statements a Tile program writes for attention (batch indices
are any leading output indices):

    L[.., s, t] = +(Q[.., s, d] * K[.., t, d]);   Z = L * c;        # the scale is optional
    [Neg = -1e30; Zc[.., s, t] = >(Z[.., s, t]), s - t < S default Neg;]   # causal, optional
    M[.., s, 0] = >(Z[.., s, t]);  E = exp(Z - M);  R[.., s, 0] = +(E[.., s, t]);  P = E / R;
    O[.., s, e] = +(P[.., s, t] * V[.., t, e]);

and lowers all of it to one flash-attention loop nest: for each block of `bq` query rows,
stream blocks of `bk` keys (AttentionKnobs); a register-blocked micro-GEMM gives the scores, an online
softmax keeps a running max m and sum l per row (rescaling the accumulator by
exp(m_old - m_new)), a second micro-GEMM accumulates P V. Causal attention stops at the
diagonal block (masked blocks are never visited). K is transposed once per batch so the
score micro-GEMM reads it with vector loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir import tensor as T
from tilec.ir.affine import INF
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundElementwise, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.patterns.epilogue import _readers
from tilec.schedule.cpu.gemm.packed import decompose, thread_share, threads_loop
from tilec.target import Target

Range = tuple[str, int, int]
LANES = 16  # width of the partial row maxima and sums


@dataclass(frozen=True)
class AttentionKnobs:
    """The template's tunable knobs (a schedule record)."""

    bq: int = 6  # query rows per block: the register block's height
    bk: int = 64  # keys per block: the register block's width, a multiple of LANES

    def to_json(self) -> dict:
        return {"template": "attention", "bq": self.bq, "bk": self.bk}
MASK_LIMIT = -1e29  # a causal `default` at or below this contributes exp(.) == 0, like a skipped key


@dataclass(frozen=True)
class AttentionPlan:
    q: BoundAccess
    k: BoundAccess
    v: BoundAccess
    batch: tuple[Range, ...]
    s: int  # query rows
    t: int  # keys
    d: int  # head dimension of Q and K
    e: int  # head dimension of V
    scale: float
    causal: bool
    output: str
    consumed: int
    elided: tuple[str, ...]


def _vars(access: BoundAccess) -> tuple[str | None, ...]:
    return tuple(e.lone_var for e in access.indices)


def _out_vars(b: BoundContraction) -> tuple[str | None, ...]:
    return tuple(e.lone_var for e in b.out_indices)


def _keepdim_reduce(b: BoundContraction, agg: str, source: str, batch: tuple[str, ...], s: str, t: str) -> bool:
    """b is X[.., s, 0] = agg(source[.., s, t])."""
    if b.stmt.agg != agg or b.stmt.combo != "single" or b.stmt.default is not None or b.guards or b.empty:
        return False
    (op,) = b.operands
    last = b.out_indices[-1]
    return (op.tensor == source and _vars(op) == batch + (s, t) and _out_vars(b)[:-1] == batch + (s,)
            and not last.coeffs and last.const == 0 and b.shape[-1] == 1)


@dataclass(frozen=True)
class SoftmaxChain:
    """The statements from the scores contraction through P = E / R (what the forward and the
    backward templates share): names of the tensors, the loop variables of the scores, and where
    the chain stops (`next`, the index of the first statement after P)."""

    q: BoundAccess
    k: BoundAccess
    batch: tuple[str, ...]  # batch variables of the scores, outermost first
    s: str
    t: str
    d: str
    ranges: dict[str, Range]
    scale: float
    causal: bool
    raw: str  # Q K^T
    scaled: str  # raw * scale (raw itself without a scale statement)
    scores: str  # the scaled scores, masked when causal
    m: str
    e: str
    r: str
    p: str | None  # None where the chain stops at R
    chain: tuple[str, ...]  # every tensor from raw through R (P excluded)
    next: int


def match_softmax(index: int, bp: BoundProgram, dtypes: tuple[str, ...] = ("float32", "float64")) -> SoftmaxChain | None:
    """The chain L = +(Q K), [Z = L * c], [Neg, Zc], M, E, R, P starting at statement `index`,
    with scores of one of `dtypes`."""
    stmts = bp.statements
    first = stmts[index]
    if not (isinstance(first, BoundContraction) and first.stmt.agg == "+" and first.stmt.combo == "mul"
            and first.stmt.default is None and not first.guards and not first.empty
            and first.dtype in dtypes):
        return None
    out = _out_vars(first)
    if None in out or len(out) < 2 or len(set(out)) != len(out):
        return None
    batch, s, t = tuple(v for v in out[:-2] if v), out[-2], out[-1]
    assert s is not None and t is not None
    reduction = [v for v, _, _ in first.ranges if v not in out]
    if len(reduction) != 1:
        return None
    d = reduction[0]
    a, b = first.operands
    if _vars(b) == batch + (s, d) and _vars(a) == batch + (t, d):
        a, b = b, a
    if not (_vars(a) == batch + (s, d) and _vars(b) == batch + (t, d)):
        return None
    chain: list[str] = [first.output]
    k = index + 1

    def take(kind: type) -> BoundContraction | BoundElementwise | None:
        nonlocal k
        if k < len(stmts) and isinstance(stmts[k], kind):
            k += 1
            return stmts[k - 1]  # type: ignore[return-value]
        return None

    scores, scale = first.output, 1.0
    z = stmts[k] if k < len(stmts) else None
    if isinstance(z, BoundElementwise) and isinstance(z.stmt.expr, T.EBinary) and z.stmt.expr.op == "*":
        x, y = z.stmt.expr.a, z.stmt.expr.b
        if isinstance(x, T.EConst):
            x, y = y, x
        if x == T.ETensor(scores) and isinstance(y, T.EConst):
            scale, scores = float(y.value), z.output
            chain.append(z.output)
            k += 1
    scaled = scores
    causal = False
    neg = stmts[k] if k < len(stmts) else None
    if isinstance(neg, BoundElementwise) and isinstance(neg.stmt.expr, T.EConst) and neg.shape == ():
        masked = stmts[k + 1] if k + 1 < len(stmts) else None
        if not (isinstance(masked, BoundContraction) and masked.stmt.agg == ">" and masked.stmt.combo == "single"
                and masked.stmt.default == neg.output and float(neg.stmt.expr.value) <= MASK_LIMIT):
            return None
        (op,) = masked.operands
        guard = causal_guard(masked, s, t, first.shape[-2])
        if not (op.tensor == scores and _vars(op) == batch + (s, t) and _out_vars(masked) == batch + (s, t)
                and guard):
            return None
        causal, scores = True, masked.output
        chain += [neg.output, masked.output]
        k += 2
    m = take(BoundContraction)
    e = take(BoundElementwise)
    r = take(BoundContraction)
    if None in (m, e, r):
        return None
    assert isinstance(m, BoundContraction) and isinstance(e, BoundElementwise) and isinstance(r, BoundContraction)
    if not _keepdim_reduce(m, ">", scores, batch, s, t):
        return None
    if e.stmt.expr != T.ECall("exp", (T.EBinary("-", T.ETensor(scores), T.ETensor(m.output)),)):
        return None
    if not _keepdim_reduce(r, "+", e.output, batch, s, t):
        return None
    p = stmts[k] if k < len(stmts) else None
    if isinstance(p, BoundElementwise) and p.stmt.expr == T.EBinary("/", T.ETensor(e.output), T.ETensor(r.output)):
        k += 1
    else:
        p = None  # a gradient program that needs no P (tilec.grad with respect to Q or K alone)
    chain += [m.output, e.output, r.output]
    ranges = {v: (v, lo, hi) for v, lo, hi in first.ranges}
    if ranges[s][1] != 0 or ranges[t][1] != 0 or ranges[d][1] != 0:
        return None
    return SoftmaxChain(q=a, k=b, batch=batch, s=s, t=t, d=d, ranges=ranges, scale=scale, causal=causal,
                        raw=first.output, scaled=scaled, scores=scores, m=m.output, e=e.output, r=r.output,
                        p=p.output if p is not None else None, chain=tuple(chain), next=k)


def causal_guard(b: BoundContraction, s: str, t: str, rows: int) -> bool:
    """b's only guard is 0 <= s - t (< S): the causal mask, t <= s."""
    (guard,) = b.guards if len(b.guards) == 1 else (None,)
    return (guard is not None and dict(guard.expr.coeffs) == {s: 1, t: -1} and guard.expr.const == 0
            and guard.expr.divisor == 1 and guard.lo == 0 and (guard.hi == INF or guard.hi >= rows - 1))


CPU_DTYPES = ("float32",)


def match(index: int, bp: BoundProgram, dtypes: tuple[str, ...] = CPU_DTYPES) -> AttentionPlan | None:
    """The attention chain starting at statement `index`, or None.

    Q, K and V must share one dtype out of `dtypes`, and the output's dtype must be one of
    them too (a causal chain's float32 mask constant promotes a float16 chain's output to
    float32). The CPU template is float32 only; the GPU template
    (tilec.schedule.gpu.attention) also takes float16, keeping its softmax statistics and
    accumulators in float32.
    """
    sm = match_softmax(index, bp, dtypes)
    if sm is None or sm.p is None:
        return None
    o = bp.statements[sm.next] if sm.next < len(bp.statements) else None
    if not isinstance(o, BoundContraction):
        return None
    batch, s, t = sm.batch, sm.s, sm.t
    if not (o.stmt.agg == "+" and o.stmt.combo == "mul" and o.stmt.default is None and not o.guards):
        return None
    pv, vv = o.operands
    ev = _out_vars(o)[-1]
    if _vars(vv) == batch + (s, t):
        pv, vv = vv, pv
    if not (pv.tensor == sm.p and _vars(pv) == batch + (s, t) and ev is not None
            and _vars(vv) == batch + (t, ev) and _out_vars(o) == batch + (s, ev)):
        return None
    chain = sm.chain + (sm.p,)
    if any(name in bp.program.outputs for name in chain):
        return None
    expected_readers = {name: 1 for name in chain}
    expected_readers[sm.scores] = 2  # M and E read the (scaled, masked) scores
    expected_readers[sm.e] = 2  # R and P read E
    readers = _readers(bp)
    if any(readers.get(name, 0) != n for name, n in expected_readers.items()):
        return None
    first = bp.statements[index]
    if any(bp.dtypes[x] != first.dtype for x in (sm.q.tensor, sm.k.tensor, vv.tensor)) or bp.dtypes[o.output] not in dtypes:
        return None
    ranges = sm.ranges
    return AttentionPlan(q=sm.q, k=sm.k, v=vv, batch=tuple(ranges[x] for x in batch), s=first.shape[-2],
                         t=first.shape[-1], d=ranges[sm.d][2] + 1, e=o.shape[-1], scale=sm.scale, causal=sm.causal,
                         output=o.output, consumed=sm.next + 1 - index, elided=chain)


def build(plan: AttentionPlan, bp: BoundProgram, target: Target, knobs: AttentionKnobs = AttentionKnobs()) -> LoweredGroup:
    BQ, BK = knobs.bq, knobs.bk  # noqa: N806 - the names of the algorithm's block sizes
    assert BK % LANES == 0, "bk must be a multiple of LANES"
    v, c, f32 = L.Var, L.const, "float32"
    name = plan.output
    bh_n = math.prod(hi - lo + 1 for _, lo, hi in plan.batch)
    tp = -(-plan.t // BK) * BK
    q_blocks = -(-plan.s // BQ)
    kt = L.Buffer(f"{name}.Kt", f32, (bh_n, plan.d, tp))
    bh, tt, dd, w, qb, kb, ii, j, e, x = (f"{name}.{s}" for s in ("bh", "t", "d", "w", "qb", "kb", "ii", "j", "e", "x"))
    neg_inf = L.Const(-math.inf, f32)

    def access(op: BoundAccess, batch_env: dict[str, L.Expr], tail: tuple[L.Expr, ...]) -> L.Expr:
        return L.Load(op.tensor, tuple(batch_env[var] for var, _, _ in plan.batch) + tail, bp.dtypes[op.tensor])

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
        L.Bin("div", ld(acc, v(ii), v(e)), ld(run_sum, v(ii)))))))
    body: L.Stmt = L.seq(init, stream, finish)
    for buf in (sacc, sblk, acc, run_max, run_sum, new_max, alpha, block_sum, lanes_max, lanes_sum):
        body = L.Allocate(buf, body)
    items = bh_n * q_blocks
    threads = max(1, min(target.cores, items))
    main = threads_loop(x, threads, thread_share(x, threads, w, items, body))
    return LoweredGroup(L.seq(prologue, main), (kt,), plan.consumed, plan.elided)
