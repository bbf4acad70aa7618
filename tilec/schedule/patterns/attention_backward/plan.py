"""The attention-backward plan, and what both of its forms' matchers share.

Requires: a BoundProgram. Guarantees: `plan` returns a BackwardPlan only where the matched
statements' elided temporaries are read nowhere else and every tensor has the shape and dtype the
kernel (tilec.schedule.cpu.attention_backward) takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundIntrinsic, BoundProgram
from tilec.schedule.nest import Range
from tilec.schedule.patterns.attention import ScoresChain
from tilec.schedule.patterns.dataflow import reads

BoundStatement = BoundContraction | BoundElementwise | BoundIntrinsic


@dataclass(frozen=True)
class Saved:
    """What the second form reads from the forward: LSE[axes..], each axis indexed by one of the
    batch variables or the query row (positions in (batch.., s)) or None (a constant 0)."""

    lse: str
    axes: tuple[int | None, ...]
    lse_dtype: str


@dataclass(frozen=True)
class BackwardPlan:
    q: str
    k: str
    v: str | None  # None when only dV is wanted (dP is never formed)
    do: str
    batch: tuple[Range, ...]
    s: int  # query rows
    t: int  # keys
    d: int  # head dimension of Q and K
    e: int  # head dimension of V and dO
    scale: float
    causal: bool
    dtype: str  # every tensor's: float32, float64 or a 16-bit float (computed in float32)
    dq: str | None  # the tensors the kernel writes
    dk: str | None
    dv: str | None
    consumed: int
    elided: tuple[str, ...]
    saved: Saved | None = None  # the second form's: the statistics are read, not recomputed


def signature(b: BoundContraction) -> tuple[tuple[tuple[str, object], ...], ...] | None:
    """Each operand's indices as ('o', position in the output) / ('r', reduction var) / ('0', 0);
    None when an output index is not a lone variable or a constant 0."""
    out: list[str | None] = []
    for e in b.out_indices:
        v = e.lone_var
        if v is None and (e.coeffs or e.const != 0):
            return None
        out.append(v)
    if len({v for v in out if v}) != len([v for v in out if v]):
        return None
    sigs = []
    for op in b.operands:
        sig: list[tuple[str, object]] = []
        for e in op.indices:
            v = e.lone_var
            if v is not None:
                sig.append(("o", out.index(v)) if v in out else ("r", v))
            elif not e.coeffs and e.const == 0:
                sig.append(("0", 0))
            else:
                return None
        sigs.append(tuple(sig))
    return tuple(sigs)


def plain(b: BoundStatement, combo: str) -> bool:
    return (isinstance(b, BoundContraction) and b.stmt.agg == "+" and b.stmt.combo == combo
            and b.stmt.default is None and not b.empty)


def plan(index: int, k: int, sc: ScoresChain, bp: BoundProgram, dtypes: tuple[str, ...],
          do_v: tuple[str, str | None], written: dict[str, str], elided: tuple[str, ...],
          saved: Saved | None) -> BackwardPlan | None:
    """The plan for statements index..k-1 of either form, once the roles are known: None unless the
    elided tensors are read nowhere else and every tensor has the shape and dtype the kernel takes."""
    if any(name in bp.program.outputs for name in elided) or read_outside(bp, index, k, set(elided)):
        return None
    ranges = sc.ranges
    batch = tuple(ranges[x] for x in sc.batch)
    if any(lo != 0 for _, lo, _ in batch):
        return None
    do, v = do_v
    bs = tuple(hi + 1 for _, _, hi in batch)
    s, t, d = bp.shapes[sc.raw][-2], bp.shapes[sc.raw][-1], ranges[sc.d][2] + 1
    e = bp.shapes[do][-1] if bp.shapes[do] else 0
    expected = {sc.q.tensor: (s, d), sc.k.tensor: (t, d), do: (s, e)}
    if v is not None:
        expected[v] = (t, e)
    expected.update({written[r]: {"dq": (s, d), "dk": (t, d), "dv": (t, e)}[r] for r in written})
    dtype = bp.dtypes[sc.q.tensor]
    if dtype not in dtypes or any(bp.shapes[name] != bs + tail or bp.dtypes[name] != dtype
                                   for name, tail in expected.items()):
        return None
    return BackwardPlan(q=sc.q.tensor, k=sc.k.tensor, v=v, do=do, batch=batch, s=s, t=t, d=d, e=e,
                        scale=sc.scale, causal=sc.causal, dtype=dtype, dq=written.get("dq"), dk=written.get("dk"),
                        dv=written.get("dv"), consumed=k - index, elided=elided, saved=saved)


def read_outside(bp: BoundProgram, start: int, stop: int, names: set[str]) -> bool:
    for i, b in enumerate(bp.statements):
        if start <= i < stop:
            continue
        if set(reads(b)) & names:
            return True
    return False


__all__ = ["BackwardPlan", "BoundStatement", "Saved", "plain", "plan", "read_outside", "signature"]
