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
does not depend on the shift) with DQ = DL K, DK = DL^T Q. `match` gives the plan that
tilec.schedule.cpu.attention_backward lowers to one kernel that never forms an S x T matrix.

Requires: a BoundProgram and the dtypes the caller takes. Guarantees: a plan only for exactly
that chain, tensors of one of those dtypes laid out [batch.., rows, cols], none of the elided temporaries read elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundIntrinsic, BoundProgram
from tilec.schedule.patterns.attention import SoftmaxChain, causal_guard, match_softmax
from tilec.schedule.patterns.dataflow import reads
from tilec.schedule.nest import Range

BoundStatement = BoundContraction | BoundElementwise | BoundIntrinsic


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


# ------------------------------------------------------------------ matching


def _signature(b: BoundContraction) -> tuple[tuple[tuple[str, object], ...], ...] | None:
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


def _plain(b: BoundStatement, combo: str) -> bool:
    return (isinstance(b, BoundContraction) and b.stmt.agg == "+" and b.stmt.combo == combo
            and b.stmt.default is None and not b.empty)


class _Matcher:
    """Classifies the statements after the softmax chain into the roles of the derived gradient."""

    def __init__(self, sm: SoftmaxChain, bp: BoundProgram) -> None:
        self.sm, self.bp = sm, bp
        self.nb = len(sm.batch)
        self.batch_sig = tuple(("o", i) for i in range(self.nb))
        self.names: dict[str, str] = {}  # role -> tensor
        self.do: str | None = None
        self.v: str | None = None
        self.exp_scores = T.ECall("exp", (T.EBinary("-", T.ETensor(sm.scores), T.ETensor(sm.m)),))

    def o(self, *tail: tuple[str, object]) -> tuple[tuple[str, object], ...]:
        return self.batch_sig + tail

    def role(self, b: BoundStatement) -> str | None:
        if isinstance(b, BoundIntrinsic):
            return None
        return self._elementwise(b) if isinstance(b, BoundElementwise) else self._contraction(b)

    def _elementwise(self, b: BoundElementwise) -> str | None:
        x, n, sm = b.stmt.expr, self.names, self.sm
        tensor = {role: T.ETensor(name) for role, name in n.items()}
        r, e = T.ETensor(sm.r), T.ETensor(sm.e)
        if "dp" in n:
            dp = tensor["dp"]
            if x == T.EBinary("/", dp, r):
                return "de2"
            if x == T.EUnary("-", T.EBinary("/", T.EBinary("*", dp, e), T.EBinary("*", r, r))):
                return "dr3"
        if "de2" in n and "de5" in n and x == T.EBinary("+", tensor["de2"], tensor["de5"]):
            return "de"
        if "de" in n and x == T.EBinary("*", tensor["de"], self.exp_scores):
            return "dz7"
        if "de" in n and x == T.EUnary("-", T.EBinary("*", tensor["de"], self.exp_scores)):
            return "dm8"
        if "dz7" in n and "dz10" in n and x == T.EBinary("+", tensor["dz7"], tensor["dz10"]):
            return "dz"
        dz = tensor.get("dzm" if sm.causal else "dz")
        if dz is not None and sm.scaled != sm.raw and isinstance(x, T.EBinary) and x.op == "*":
            if (x.a, x.b) in ((dz, T.EConst(sm.scale)), (T.EConst(sm.scale), dz)):
                return "dl"
        if isinstance(x, T.ETensor) and b.output in self.bp.program.outputs:
            for role in ("dq", "dk", "dv"):
                if n.get(role) == x.name:
                    return "copy_" + role
        return None

    def _contraction(self, b: BoundContraction) -> str | None:
        sig, n, nb = _signature(b), self.names, self.nb
        if sig is None or len(b.out_indices) != nb + 2:
            return None
        ops = [a.tensor for a in b.operands]
        row, col = ("o", nb), ("o", nb + 1)
        if _plain(b, "mul") and not b.guards:
            (sa, sb), (ta, tb) = sig, ops
            red = [v for v in sa if v[0] == "r"]
            if len(red) != 1:
                return None
            (r,) = red
            if sa == self.o(row, r) and sb == self.o(col, r) and ta not in n.values() and tb not in n.values():
                if self._set_do(ta) and "dp" not in n:
                    self.v = tb
                    return "dp"
            for (xa, ya), (xt, yt) in (((sa, sb), (ta, tb)), ((sb, sa), (tb, ta))):
                if xt == self.sm.p and xa == self.o(r, row) and ya == self.o(r, col) and self._set_do(yt):
                    return "dv"
                dl = n.get("dl", n.get("dzm" if self.sm.causal else "dz"))
                if dl is not None and xt == dl and self.chain_complete():
                    if xa == self.o(row, r) and ya == self.o(r, col) and yt == self.sm.k.tensor:
                        return "dq"
                    if xa == self.o(r, row) and ya == self.o(r, col) and yt == self.sm.q.tensor:
                        return "dk"
            return None
        if _plain(b, "single") and not b.guards:
            (sa,) = sig
            if ops[0] in (n.get("dr3"), n.get("dm8")) and b.shape[-1] == 1 and sa[:-1] == self.o(row) \
                    and sa[-1][0] == "r" and self._full(b, str(sa[-1][1])):
                return "drsum" if ops[0] == n.get("dr3") else "dmsum"
            if ops[0] == n.get("drsum") and sa == self.o(row, ("0", 0)):
                return "de5"
            return None
        if _plain(b, "cond") and len(ops) == 3:
            if not b.guards and ops == [self.sm.scores, self.sm.m, n.get("dmsum")] \
                    and sig == (self.o(row, col), self.o(row, ("0", 0)), self.o(row, ("0", 0))):
                return "dz10"
            if self.sm.causal and ops == [self.sm.scaled, self.sm.scores, n.get("dz")] \
                    and sig == (self.o(row, col),) * 3 and causal_guard(b, *self._row_col(b), b.shape[-2]):
                return "dzm"
        return None

    def chain_complete(self) -> bool:
        """Whether the whole chain from dP to the scores' gradient has been seen."""
        need = {"dp", "de2", "dr3", "drsum", "de5", "de", "dz7", "dm8", "dmsum", "dz10", "dz"}
        need |= {"dzm"} if self.sm.causal else set()
        need |= {"dl"} if self.sm.scaled != self.sm.raw else set()
        return need <= self.names.keys()

    def _row_col(self, b: BoundContraction) -> tuple[str, str]:
        out = [e.lone_var for e in b.out_indices]
        return str(out[-2]), str(out[-1])

    def _set_do(self, name: str) -> bool:
        if self.do is None:
            self.do = name
        return self.do == name

    def _full(self, b: BoundContraction, var: str) -> bool:
        lo_hi = next(((lo, hi) for v, lo, hi in b.ranges if v == var), None)
        return lo_hi == (0, self.bp.shapes[self.sm.raw][-1] - 1)


def match(index: int, bp: BoundProgram, dtypes: tuple[str, ...]) -> BackwardPlan | None:
    """The plan for the derived attention gradient starting at statement `index`, or None."""
    sm = match_softmax(index, bp, dtypes)
    if sm is None:
        return None
    stmts, m = bp.statements, _Matcher(sm, bp)
    k = sm.next
    while k < len(stmts):
        role = m.role(stmts[k])
        if role is None or role in m.names:
            break
        m.names[role] = stmts[k].output
        k += 1
    roles = m.names
    grads = {r: roles[r] for r in ("dq", "dk", "dv") if r in roles}
    chain_roles = set(roles) - set(grads) - {"copy_dq", "copy_dk", "copy_dv"}
    if not grads or (("dq" in grads or "dk" in grads) != bool(chain_roles)) or m.do is None:
        return None
    if ("dq" in grads or "dk" in grads) and not m.chain_complete():
        return None
    scores, rows = bp.shapes[sm.raw], bp.shapes[sm.raw][:-1] + (1,)
    if any(bp.shapes[roles[r]] != (rows if r in ("drsum", "dmsum") else scores) for r in chain_roles):
        return None
    written = {r: roles.get("copy_" + r, name) for r, name in grads.items()}
    elided = sm.chain + ((sm.p,) if sm.p else ()) + tuple(roles[r] for r in chain_roles) + \
        tuple(name for r, name in grads.items() if written[r] != name)
    if any(name in bp.program.outputs for name in elided):
        return None
    if _read_outside(bp, index, k, set(elided)):
        return None
    ranges = sm.ranges
    batch = tuple(ranges[x] for x in sm.batch)
    if any(lo != 0 for _, lo, _ in batch):
        return None
    bs = tuple(hi + 1 for _, _, hi in batch)
    s, t, d = bp.shapes[sm.raw][-2], bp.shapes[sm.raw][-1], ranges[sm.d][2] + 1
    e = bp.shapes[m.do][-1] if bp.shapes[m.do] else 0
    expected = {sm.q.tensor: (s, d), sm.k.tensor: (t, d), m.do: (s, e)}
    if m.v is not None:
        expected[m.v] = (t, e)
    expected.update({written[r]: {"dq": (s, d), "dk": (t, d), "dv": (t, e)}[r] for r in grads})
    dtype = bp.dtypes[sm.q.tensor]
    if dtype not in dtypes or any(bp.shapes[name] != bs + tail or bp.dtypes[name] != dtype
                                   for name, tail in expected.items()):
        return None
    return BackwardPlan(q=sm.q.tensor, k=sm.k.tensor, v=m.v, do=m.do, batch=batch, s=s, t=t, d=d, e=e,
                        scale=sm.scale, causal=sm.causal, dtype=dtype, dq=written.get("dq"), dk=written.get("dk"),
                        dv=written.get("dv"), consumed=k - index, elided=elided)


def _read_outside(bp: BoundProgram, start: int, stop: int, names: set[str]) -> bool:
    for i, b in enumerate(bp.statements):
        if start <= i < stop:
            continue
        if set(reads(b)) & names:
            return True
    return False
