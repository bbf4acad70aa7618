"""The attention pattern: softmax(scale * Q K^T [causal]) V written as a chain of Tile statements.

The chain a Tile program writes for attention (batch indices are any leading output indices):

    L[.., s, t] = +(Q[.., s, d] * K[.., t, d]);   Z = L * c;        # the scale is optional
    [Neg = -1e30; Zc[.., s, t] = >(Z[.., s, t]), s - t < S default Neg;]   # causal, optional
    M[.., s, 0] = >(Z[.., s, t]);  E = exp(Z - M);  R[.., s, 0] = +(E[.., s, t]);  P = E / R;
    O[.., s, e] = +(P[.., s, t] * V[.., t, e]);

Requires: a BoundProgram and the index of the chain's first statement. Guarantees: `match`
returns an AttentionPlan (the accesses, extents, scale, causality, how many statements the chain
covers and which temporaries it never needs) or None; `match_softmax` the shared part up to P,
which the gradient's pattern (tilec.schedule.patterns.attention_backward) builds on. The dtypes
accepted are the caller's: each attention template names its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.ir import tensor as T
from tilec.ir.dtypes import LOW_PRECISION
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundElementwise, BoundProgram
from tilec.schedule.nest import Range
from tilec.schedule.patterns.dataflow import reader_counts


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
    lse: str | None = None  # where the chain's logsumexp M + log(R) is stored (a training forward's), if asked

    @property
    def batch_size(self) -> int:
        """Iterations of the batch loops."""
        return math.prod(hi - lo + 1 for _, lo, hi in self.batch)


def _vars(access: BoundAccess) -> tuple[str | None, ...]:
    return tuple(e.lone_var for e in access.indices)


def _out_vars(b: BoundContraction) -> tuple[str | None, ...]:
    return tuple(e.lone_var for e in b.out_indices)


def keepdim_reduce(b: BoundContraction, agg: str, source: str, batch: tuple[str, ...]) -> bool:
    """b is X[.., s, 0] = agg(source[.., s, t]) over the scores' batch axes (its index variables may
    have names of their own: a program's statements need not share them)."""
    if b.stmt.agg != agg or b.stmt.combo != "single" or b.stmt.default is not None or b.guards or b.empty:
        return False
    (op,) = b.operands
    last, names = b.out_indices[-1], _vars(op)
    return (op.tensor == source and len(names) == len(batch) + 2 and None not in names
            and len(set(names)) == len(names) and _out_vars(b)[:-1] == names[:-1]
            and not last.coeffs and last.const == 0 and b.shape[-1] == 1)


@dataclass(frozen=True)
class ScoresChain:
    """The statements from the scores contraction through the (scaled, masked) scores, which every
    attention pattern starts with: the tensors' names, the loop variables of the scores, and where
    the chain stops (`next`, the index of the first statement after it)."""

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
    chain: tuple[str, ...]  # every tensor from raw through scores
    next: int


@dataclass(frozen=True)
class SoftmaxChain(ScoresChain):
    """The scores followed by their softmax, M, E, R and P = E / R (what the forward and the
    recomputing backward templates share); `next` is the index of the first statement after P,
    `chain` every tensor from raw through R (P excluded)."""

    m: str = ""
    e: str = ""
    r: str = ""
    p: str | None = None  # None where the chain stops at R


def match_scores(index: int, bp: BoundProgram, dtypes: tuple[str, ...]) -> ScoresChain | None:
    """The chain L = +(Q K), [Z = L * c], [Neg, Zc] starting at statement `index`, with scores of
    one of `dtypes`."""
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
    ranges = {v: (v, lo, hi) for v, lo, hi in first.ranges}
    if ranges[s][1] != 0 or ranges[t][1] != 0 or ranges[d][1] != 0:
        return None
    return ScoresChain(q=a, k=b, batch=batch, s=s, t=t, d=d, ranges=ranges, scale=scale, causal=causal,
                       raw=first.output, scaled=scaled, scores=scores, chain=tuple(chain), next=k)


def match_softmax(index: int, bp: BoundProgram, dtypes: tuple[str, ...]) -> SoftmaxChain | None:
    """The chain L = +(Q K), [Z = L * c], [Neg, Zc], M, E, R, P starting at statement `index`,
    with scores of one of `dtypes`."""
    sc = match_scores(index, bp, dtypes)
    if sc is None:
        return None
    stmts, k, scores, batch = bp.statements, sc.next, sc.scores, sc.batch
    m, e, r = (stmts[j] if j < len(stmts) else None for j in range(k, k + 3))
    if not (isinstance(m, BoundContraction) and isinstance(e, BoundElementwise) and isinstance(r, BoundContraction)):
        return None
    if not keepdim_reduce(m, ">", scores, batch):
        return None
    if e.stmt.expr != T.ECall("exp", (T.EBinary("-", T.ETensor(scores), T.ETensor(m.output)),)):
        return None
    if not keepdim_reduce(r, "+", e.output, batch):
        return None
    k += 3
    p = stmts[k] if k < len(stmts) else None
    if isinstance(p, BoundElementwise) and p.stmt.expr == T.EBinary("/", T.ETensor(e.output), T.ETensor(r.output)):
        k += 1
    else:
        p = None  # a gradient program that needs no P (tilec.grad with respect to Q or K alone)
    fields = {f: getattr(sc, f) for f in ScoresChain.__dataclass_fields__}
    fields.update(chain=sc.chain + (m.output, e.output, r.output), next=k)
    return SoftmaxChain(**fields, m=m.output, e=e.output, r=r.output, p=p.output if p is not None else None)


def causal_guard(b: BoundContraction, s: str, t: str, rows: int) -> bool:
    """b's only guard is 0 <= s - t (< S): the causal mask, t <= s."""
    (guard,) = b.guards if len(b.guards) == 1 else (None,)
    return (guard is not None and dict(guard.expr.coeffs) == {s: 1, t: -1} and guard.expr.const == 0
            and guard.expr.divisor == 1 and guard.lo == 0 and (guard.hi is None or guard.hi >= rows - 1))


def _logsumexp(bp: BoundProgram, sm: SoftmaxChain, k: int) -> tuple[str | None, tuple[str, ...], int]:
    """The statement after the chain's output that writes its rows' logsumexp, L = M + log(R) (what
    torch's attention returns for its backward), optionally converted to float32 by the next one:
    (the tensor stored, the intermediates elided, the index after them), or (None, (), k)."""
    stmts = bp.statements
    first = stmts[k] if k < len(stmts) else None
    if not (isinstance(first, BoundElementwise)
            and first.stmt.expr == T.EBinary("+", T.ETensor(sm.m), T.ECall("log", (T.ETensor(sm.r),)))):
        return None, (), k
    then = stmts[k + 1] if k + 1 < len(stmts) else None
    if (isinstance(then, BoundElementwise) and isinstance(then.stmt.expr, T.ECall) and then.stmt.expr.func == "as_float"
            and then.stmt.expr.args == (T.ETensor(first.output), T.EConst(32)) and then.shape == first.shape):
        return then.output, (first.output,), k + 2
    return first.output, (), k + 1


def match(index: int, bp: BoundProgram, dtypes: tuple[str, ...], logsumexp: bool = False) -> AttentionPlan | None:
    """The attention chain starting at statement `index`, or None. Where `logsumexp`, the
    chain may go on to store its rows' logsumexp (`_logsumexp`), which the plan's `lse` names.

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
    lse, lse_elided, end = _logsumexp(bp, sm, sm.next + 1) if logsumexp else (None, (), sm.next + 1)
    chain = sm.chain + (sm.p,) + lse_elided
    if any(name in bp.program.outputs for name in chain):
        return None
    expected_readers = {name: 1 for name in chain}
    expected_readers[sm.scores] = 2  # M and E read the (scaled, masked) scores
    expected_readers[sm.e] = 2  # R and P read E
    if lse is not None:
        expected_readers[sm.m] = expected_readers[sm.r] = 2  # (and the logsumexp M and R)
    readers = reader_counts(bp)
    if any(readers.get(name, 0) != n for name, n in expected_readers.items()):
        return None
    first = bp.statements[index]
    io = bp.dtypes[sm.q.tensor]  # the scores are Q's type, or the float32 16-bit scores are held in
    if any(bp.dtypes[x] != io for x in (sm.k.tensor, vv.tensor)) or bp.dtypes[o.output] not in dtypes \
            or first.dtype not in (io, "float32" if io in LOW_PRECISION else io):
        return None
    ranges = sm.ranges
    return AttentionPlan(q=sm.q, k=sm.k, v=vv, batch=tuple(ranges[x] for x in batch), s=first.shape[-2],
                         t=first.shape[-1], d=ranges[sm.d][2] + 1, e=o.shape[-1], scale=sm.scale, causal=sm.causal,
                         output=o.output, consumed=end - index, elided=chain, lse=lse)


__all__ = ["AttentionPlan", "MASK_LIMIT", "ScoresChain", "SoftmaxChain", "causal_guard", "keepdim_reduce", "match",
           "match_scores", "match_softmax"]
