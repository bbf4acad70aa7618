"""The attention-backward pattern: dQ, dK, dV of softmax(scale * Q K^T [causal]) V.

What `tilec.grad` derives from the attention chain (tilec/schedule/cpu/attention.py):
the recomputed softmax (L, Z, [Neg, Zc], M, E, R, P; `attention.match_softmax`) followed by

    DP = +(DO[.., s, e] * V[.., t, e]);          DVo = +(DO[.., s, e] * P[.., s, t]);
    DE2 = DP / R;  DR3 = -(DP * E / (R * R));  DRsum = +(DR3);  DE5 = +(DRsum[.., s, 0]);  DE = DE2 + DE5;
    DZ7 = DE * exp(Zs - M);  DM8 = -(DE * exp(Zs - M));  DMsum = +(DM8);
    DZ10 = +(Zs == M ? DMsum);  DZ = DZ7 + DZ10;  [DZm = +(Z == Zc ? DZ), t <= s;]  [DL = DZ * c;]
    DQo = +(DL[.., s, t] * K[.., t, d]);         DKo = +(DL[.., s, t] * Q[.., s, d]);
    [DQ = DQo; DK = DKo; DV = DVo;]             # the copies onto the outputs

(any subset of DQo, DKo, DVo, in the order `tilec.grad` emits them), i.e. DV = P^T dO and
DL = c P (dP - rowsum(P dP)) (the max's own gradient, DMsum, is zero up to rounding: softmax
does not depend on the shift) with DQ = DL K, DK = DL^T Q.

The second form shifts the softmax by the forward's saved logsumexp of each row in place of the
maximum, as torch's flash backward does (tilec.torch_backend.lowering.attention writes it):

    L, [Z], [Neg, Zc] as above;  [Lse[.., s, 0] = =(LSE[..]);]   # LSE's axes in any order
    E = exp(Zs - Lse);  R[.., s, 0] = +(E[.., s, t]);  P = E / R;    # E and P may be rounded to 16 bits
    DV = +(P[.., s, t] * DO[.., s, e]);   DP = +(DO[.., s, e] * V[.., t, e]);
    Row[.., s, 0] = +(P[.., s, t] * DP[.., s, t]);   DS = P * (DP - Row) * c;
    DQ = +(DS[.., s, t] * K[.., t, d]);   DK = +(DS[.., s, t] * Q[.., s, d]);

(any subset of DQ, DK, DV, in any order after the statements they read). `match` gives the plan,
of either form, that tilec.schedule.cpu.attention_backward lowers to one kernel that never forms
an S x T matrix.

Requires: a BoundProgram and the dtypes the caller takes. Guarantees: a plan only for exactly
that chain, tensors of one of those dtypes laid out [batch.., rows, cols], none of the elided temporaries read elsewhere.
"""

from __future__ import annotations

from tilec.ir.bounds import BoundProgram
from tilec.schedule.patterns.attention import match_scores, match_softmax
from tilec.schedule.patterns.attention_backward.derived import recomputed
from tilec.schedule.patterns.attention_backward.plan import BackwardPlan, Saved
from tilec.schedule.patterns.attention_backward.saved import saved


def match(index: int, bp: BoundProgram, dtypes: tuple[str, ...]) -> BackwardPlan | None:
    """The plan for the attention gradient, of either form, starting at statement `index`, or None."""
    sm = match_softmax(index, bp, dtypes)
    if sm is not None:
        return recomputed(index, sm, bp, dtypes)
    sc = match_scores(index, bp, dtypes)
    return saved(index, sc, bp, dtypes) if sc is not None else None


__all__ = ["BackwardPlan", "Saved", "match"]
