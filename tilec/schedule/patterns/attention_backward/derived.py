"""The attention gradient's first form: what `tilec.grad` derives from the attention chain, which
recomputes the softmax (see the package's docstring for the statements).

Requires: a BoundProgram and the softmax chain the gradient starts with. Guarantees: a plan only for
exactly that chain, none of the elided temporaries read elsewhere.
"""

from __future__ import annotations

from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundIntrinsic, BoundProgram
from tilec.schedule.patterns.attention import SoftmaxChain, causal_guard
from tilec.schedule.patterns.attention_backward.plan import BackwardPlan, BoundStatement, plain, plan, signature


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
        sig, n, nb = signature(b), self.names, self.nb
        if sig is None or len(b.out_indices) != nb + 2:
            return None
        ops = [a.tensor for a in b.operands]
        row, col = ("o", nb), ("o", nb + 1)
        if plain(b, "mul") and not b.guards:
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
        if plain(b, "single") and not b.guards:
            (sa,) = sig
            if ops[0] in (n.get("dr3"), n.get("dm8")) and b.shape[-1] == 1 and sa[:-1] == self.o(row) \
                    and sa[-1][0] == "r" and self._full(b, str(sa[-1][1])):
                return "drsum" if ops[0] == n.get("dr3") else "dmsum"
            if ops[0] == n.get("drsum") and sa == self.o(row, ("0", 0)):
                return "de5"
            return None
        if plain(b, "cond") and len(ops) == 3:
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


def recomputed(index: int, sm: SoftmaxChain, bp: BoundProgram, dtypes: tuple[str, ...]) -> BackwardPlan | None:
    """The first form's plan: tilec.grad's derivative of the softmax chain `sm`."""
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
    written: dict[str, str] = {r: roles.get("copy_" + r, name) for r, name in grads.items()}
    elided = sm.chain + ((sm.p,) if sm.p else ()) + tuple(roles[r] for r in chain_roles) + \
        tuple(name for r, name in grads.items() if written[r] != name)
    return plan(index, k, sm, bp, dtypes, (m.do, m.v), written, elided, None)


__all__ = ["recomputed"]
