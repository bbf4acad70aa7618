"""The loop IR of the fused attention-backward kernel: transposes and the passes.

The kernel's parts (see tilec.schedule.cpu.attention_backward for the two variants they make):
`Kernel` writes the per-work-item pieces (transposes of Q and dO, the panel pass, pass 1's online
softmax or the forward's saved statistics, pass 2's gradients) from the micro-GEMMs of .micro.

Requires: a BackwardPlan (tilec.schedule.patterns.attention_backward) and knobs that passed the
template's checks. Guarantees: each piece computes what its docstring says on the work item it is
given, in the plan's dtype, or float32 for 16-bit floats: their inputs are read into float32 and
each gradient rounded once, where it is stored (a gradient summed over blocks is summed in a float32
workspace first: `summed`).
"""

from __future__ import annotations

import math

from tilec.ir import loop as L
from tilec.ir.dtypes import accumulator_dtype
from tilec.schedule.cpu.attention import LANES, odd_lines_row
from tilec.schedule.cpu.attention_backward.knobs import AttentionBackwardKnobs
from tilec.schedule.cpu.attention_backward.micro import Builder, Out, lanes_loop
from tilec.schedule.nest import exp_nonpositive
from tilec.schedule.patterns.attention_backward import BackwardPlan

def _ld(buf: L.Buffer, *idx: L.Expr) -> L.Expr:
    return L.Load(buf.name, tuple(idx), buf.dtype)


def _st(buf: L.Buffer, idx: tuple[L.Expr, ...], value: L.Expr) -> L.Stmt:
    return L.Store(buf.name, idx, value)



def exp_shifted(x: L.Expr, given: bool) -> L.Expr:
    """e^(score - shift): a plan's given shift may lie below the scores (any shift is a legal saved
    form), the rows' maxima never do (tilec.schedule.nest.exp_nonpositive)."""
    return L.Call("exp", (x,), x.dtype) if given else exp_nonpositive(x)

class Kernel:
    """The kernel's pieces for one batch-and-head `bh` (its index tuple `bidx`) whose workspaces
    are at index `slot` (a thread in the per-head layout, the head itself in the split one)."""

    def __init__(self, plan: BackwardPlan, knobs: AttentionBackwardKnobs, slots: int, columns: int) -> None:
        self.plan, self.knobs = plan, knobs
        self.need_dp = plan.dq is not None or plan.dk is not None
        self.prefix = str(plan.dq or plan.dk or plan.dv)
        self.io = plan.dtype  # the inputs' and gradients' dtype
        self.dtype = accumulator_dtype(plan.dtype)  # the one the kernel computes in
        self.g = Builder(knobs, self.prefix, self.dtype, columns)
        bq, bk = knobs.bq, knobs.bk
        self.sp = -(-plan.s // bq) * bq
        self.q_blocks, self.k_blocks = self.sp // bq, -(-plan.t // bk)
        # Q^T and dO^T, zero past S; rows an odd number of cache lines long, so that a column's
        # elements do not all fall into the same few cache sets
        self.padded = -(-self.sp // LANES) * LANES
        f32, p = self.dtype, self.prefix
        self.qt = L.Buffer(f"{p}.Qt", f32, (slots, plan.d, odd_lines_row(self.padded)))
        self.dot = L.Buffer(f"{p}.dOt", f32, (slots, plan.e, odd_lines_row(self.padded)))
        self.lse = L.Buffer(f"{p}.lse", f32, (slots, self.sp))  # log-sum-exp of the scaled scores
        self.delta = L.Buffer(f"{p}.delta", f32, (slots, self.sp))  # rowsum(P dP), per query
        self.workspaces = [self.qt, self.lse] + ([self.dot, self.delta] if self.need_dp else [])
        self.slots = slots
        self.sums: dict[str, L.Buffer] = {}  # float32 sums of 16-bit gradients, per slot (`summed`)

    # -- helpers
    def tensor(self, bidx: tuple[L.Expr, ...], name: str, row: L.Expr, col: L.Expr) -> L.Expr:
        return L.cast(self.dtype, L.Load(name, bidx + (row, col), self.io))

    def output(self, name: str, prefix: tuple[L.Expr, ...], offset: L.Expr | None, limit: int) -> Out:
        """An Out onto one of the gradients (plan.dq, dk or dv)."""
        return Out(name, self.dtype, prefix, offset, limit, self.io)

    def summed(self, name: str, bidx: tuple[L.Expr, ...], slot: L.Expr, offset: L.Expr | None, limit: int) -> Out:
        """An Out onto gradient `name` for a sum over blocks: the gradient itself, or for a 16-bit one
        a float32 workspace of the slot's (rounded into the gradient once, by `rounded`)."""
        if self.io == self.dtype:
            return self.output(name, bidx, offset, limit)
        if name not in self.sums:
            rows, cols = self.rows_cols(name)
            self.sums[name] = L.Buffer(f"{self.prefix}.sum{len(self.sums)}", self.dtype, (self.slots, rows, cols))
        return Out(self.sums[name].name, self.dtype, (slot,), offset, limit)

    def rows_cols(self, name: str) -> tuple[int, int]:
        plan = self.plan
        return {plan.dq: (plan.s, plan.d), plan.dk: (plan.t, plan.d), plan.dv: (plan.t, plan.e)}[name]

    def zero_sum(self, name: str, bidx: tuple[L.Expr, ...], slot: L.Expr) -> L.Stmt:
        """Zeroes what `summed` gives for gradient `name`."""
        rows, cols = self.rows_cols(name)
        out = self.summed(name, bidx, slot, None, rows)
        return self.zero_rows(out.buffer, out.prefix, rows, cols, out.memory or out.dtype)

    def rounded(self, name: str, bidx: tuple[L.Expr, ...], slot: L.Expr) -> L.Stmt | None:
        """Gradient `name` = its float32 sum, rounded (None where it was summed in place)."""
        if name not in self.sums:
            return None
        rows, cols = self.rows_cols(name)
        a, b = self.g.var("a"), self.g.var("b")
        value = L.Load(self.sums[name].name, (slot, L.Var(a), L.Var(b)), self.dtype)
        return L.For(a, L.const(0), L.const(rows), lanes_loop(b, cols, L.Store(
            name, bidx + (L.Var(a), L.Var(b)), L.cast(self.io, value))))

    def query(self, r: L.Expr) -> L.Expr:  # queries past S read row S - 1 (their results are dropped)
        return L.Bin("min", r, L.const(self.plan.s - 1))

    def key(self, r: L.Expr) -> L.Expr:  # keys past T read row T - 1 (their probabilities are 0)
        return L.Bin("min", r, L.const(self.plan.t - 1))

    def valid(self, q: L.Expr, k: L.Expr, rows_too: bool) -> L.Expr:
        cond: L.Expr = L.Cmp("lt", k, L.const(self.plan.t))
        if rows_too:
            cond = L.Bin("and", cond, L.Cmp("lt", q, L.const(self.plan.s)))
        if self.plan.causal:
            cond = L.Bin("and", cond, L.Cmp("le", k, q))
        return cond

    def transposes(self, slot: L.Expr, bidx: tuple[L.Expr, ...]) -> L.Stmt:
        """Qt[slot, d, s] = Q[s, d] (and dO), zero for s past S, in blocks of LANES queries: each
        block's source rows stay in cache while the destination is written a line at a time."""
        parts = []
        for src, dst, width in ((self.plan.q, self.qt, self.plan.d), (self.plan.do, self.dot, self.plan.e)):
            if dst is self.dot and not self.need_dp:
                continue
            sb, dd, ss = self.g.var("sb"), self.g.var("d"), self.g.var("s")
            s_ = L.add(L.mul(L.Var(sb), L.const(LANES)), L.Var(ss))
            value = self.tensor(bidx, src, self.query(s_), L.Var(dd))
            if self.padded > self.plan.s:
                value = L.Select(L.Cmp("lt", s_, L.const(self.plan.s)), value, L.Const(0.0, self.dtype))
            parts.append(L.For(sb, L.const(0), L.const(self.padded // LANES), L.For(
                dd, L.const(0), L.const(width), lanes_loop(ss, LANES, _st(dst, (slot, L.Var(dd), s_), value)))))
        return L.seq(*parts)

    def tiles(self, slot: L.Expr, bidx: tuple[L.Expr, ...], q0: L.Expr, k0: L.Expr, st: Out, dpt: Out) -> L.Stmt:
        """S^T[j, i] = K[k0 + j] . Q[q0 + i] into st and dP^T[j, i] = V[k0 + j] . dO[q0 + i] into dpt."""
        plan, g, bk, bq, f = self.plan, self.g, self.knobs.bk, self.knobs.bq, self.dtype
        s_gemm = g.gemm(bk, bq, plan.d, lambda m, k: self.tensor(bidx, plan.k, self.key(L.add(k0, m)), k),
                        lambda k, n: L.Load(self.qt.name, (slot, k, L.add(q0, n)), f), st, zero=True)
        if not self.need_dp:
            return s_gemm
        assert plan.v is not None
        v_name = plan.v
        dp_gemm = g.gemm(bk, bq, plan.e, lambda m, k: self.tensor(bidx, v_name, self.key(L.add(k0, m)), k),
                         lambda k, n: L.Load(self.dot.name, (slot, k, L.add(q0, n)), f), dpt, zero=True)
        return L.seq(s_gemm, dp_gemm)

    def tile_buffers(self) -> tuple[L.Buffer, L.Buffer]:
        bk, bq = self.knobs.bk, self.knobs.bq
        # S^T then P^T; dP^T then dS^T (scaled)
        return (L.Buffer(self.g.var("s"), self.dtype, (bk, bq), "local"),
                L.Buffer(self.g.var("dp"), self.dtype, (bk, bq), "local"))

    # -- pass 1
    def pass1(self, slot: L.Expr, bidx: tuple[L.Expr, ...], qb_begin: L.Expr, qb_end: L.Expr) -> L.Stmt:
        """Per query block: online softmax statistics, log-sum-exp and Delta = rowsum(P dP) (with the
        plan's given shift for the exponentials, `shift`, no maxima and no rescaling)."""
        plan, g, bq, bk, f32 = self.plan, self.g, self.knobs.bq, self.knobs.bk, self.dtype
        given = plan.saved is not None
        v, c, zero, scale = L.Var, L.const, L.Const(0.0, f32), L.Const(plan.scale, f32)
        st, dpt = self.tile_buffers()
        qb, kb, i, j = g.var("qb"), g.var("kb"), g.var("i"), g.var("j")
        q0, k0 = L.mul(v(qb), c(bq)), L.mul(v(kb), c(bk))
        m_run, l_run, d_run, m_new = (L.Buffer(g.var(n), f32, (bq,), "local") for n in ("m", "l", "dl", "mnew"))
        s_ji, dp_ji, vi = _ld(st, v(j), v(i)), _ld(dpt, v(j), v(i)), (v(i),)

        def over_tile(body: L.Stmt) -> L.Stmt:
            return L.For(j, c(0), c(bk), lanes_loop(i, bq, body))

        first = self.shift(bidx, L.add(q0, v(i))) if given else L.Const(-math.inf, f32)
        init = lanes_loop(i, bq, L.seq(_st(m_run, vi, first), _st(l_run, vi, zero), _st(d_run, vi, zero)))
        valid = self.valid(L.add(q0, v(i)), L.add(k0, v(j)), False)
        maxima = None if given else L.seq(lanes_loop(i, bq, _st(m_new, vi, _ld(m_run, v(i)))), over_tile(_st(m_new, vi, L.Bin(
            "max", _ld(m_new, v(i)), L.Select(valid, L.Bin("mul", s_ji, scale), L.Const(-math.inf, f32))))))
        alpha = exp_nonpositive(L.Bin("sub", _ld(m_run, v(i)), _ld(m_new, v(i))))
        rescale = None if given else lanes_loop(i, bq, L.seq(
            _st(l_run, vi, L.Bin("mul", _ld(l_run, v(i)), alpha)),
            _st(d_run, vi, L.Bin("mul", _ld(d_run, v(i)), alpha)) if self.need_dp else None,
            _st(m_run, vi, _ld(m_new, v(i)))))
        p = L.Select(valid, exp_shifted(L.Bin("sub", L.Bin("mul", s_ji, scale), _ld(m_run if given else m_new, v(i))),
                                        given), zero)
        sums = over_tile(L.seq(
            _st(st, (v(j), v(i)), p),
            _st(l_run, vi, L.Bin("add", _ld(l_run, v(i)), s_ji)),
            _st(d_run, vi, L.Bin("add", _ld(d_run, v(i)), L.Bin("mul", s_ji, dp_ji))) if self.need_dp else None))
        k_end: L.Expr = c(self.k_blocks)
        if plan.causal:  # key blocks right of the diagonal are all masked
            last = L.Bin("min", L.add(q0, c(bq - 1)), c(plan.s - 1))
            k_end = L.Bin("min", k_end, L.add(L.Bin("div", last, c(bk)), c(1)))
        stream = L.For(kb, c(0), k_end, L.seq(self.tiles(slot, bidx, q0, k0, Out(st.name, f32), Out(dpt.name, f32)),
                                              maxima, rescale, sums))
        at = (slot, L.add(q0, v(i)))
        stats = lanes_loop(i, bq, L.seq(
            _st(self.lse, at, L.Bin("add", _ld(m_run, v(i)), L.Call("log", (_ld(l_run, v(i)),), f32))),
            _st(self.delta, at, L.Bin("div", _ld(d_run, v(i)), _ld(l_run, v(i)))) if self.need_dp else None))
        body: L.Stmt = L.For(qb, qb_begin, qb_end, L.seq(init, stream, stats))
        for buf in (st, dpt, m_run, l_run, d_run) + (() if given else (m_new,)):
            body = L.Allocate(buf, body)
        return body

    def shift(self, bidx: tuple[L.Expr, ...], q: L.Expr) -> L.Expr:
        """The given shift of query q's exponentials (row S - 1's past S), where the plan has one: the
        forward's log-sum-exp, for which P = exp(S - shift) needs no maximum (and sums to 1)."""
        saved = self.plan.saved
        assert saved is not None
        row = self.query(q)
        where = tuple(L.const(0) if a is None else bidx[a] if a < len(bidx) else row for a in saved.axes)
        return L.cast(self.dtype, L.Load(saved.lse, where, saved.lse_dtype))

    # -- pass 2
    def pass2(self, slot: L.Expr, bidx: tuple[L.Expr, ...], key_blocks: tuple[L.Expr, L.Expr, int],
              dq: Out | None) -> L.Stmt:
        """For key blocks begin, begin + step, .. < end: dK and dV in local memory; per query block,
        P, dV, dS, dK and dQ (into `dq`)."""
        plan, g, bq, bk, f32 = self.plan, self.g, self.knobs.bq, self.knobs.bk, self.dtype
        v, c, zero, scale = L.Var, L.const, L.Const(0.0, f32), L.Const(plan.scale, f32)
        st, dpt = self.tile_buffers()
        qb, kc, i, j, a, b = g.var("qb"), g.var("kc"), g.var("i"), g.var("j"), g.var("a"), g.var("b")
        begin, end, step = key_blocks
        n_blocks = L.Bin("div", L.add(L.sub(end, begin), c(step - 1)), c(step))
        q0, k0 = L.mul(v(qb), c(bq)), L.mul(L.add(begin, L.mul(v(kc), c(step))), c(bk))
        s_ji, dp_ji = _ld(st, v(j), v(i)), _ld(dpt, v(j), v(i))
        dk_acc = L.Buffer(g.var("dk"), f32, (bk, plan.d), "local")
        dv_acc = L.Buffer(g.var("dv"), f32, (bk, plan.e), "local")
        accs = [(buf, out) for buf, out in ((dk_acc, plan.dk), (dv_acc, plan.dv)) if out is not None]
        clear = L.seq(*(L.For(a, c(0), c(bk), lanes_loop(b, buf.shape[1], _st(buf, (v(a), v(b)), zero)))
                        for buf, _ in accs))
        at = (slot, L.add(q0, v(i)))
        p = L.Select(self.valid(L.add(q0, v(i)), L.add(k0, v(j)), True), exp_nonpositive(L.Bin(
            "sub", L.Bin("mul", s_ji, scale), L.Load(self.lse.name, at, f32))), zero)
        ds = L.Bin("mul", L.Bin("mul", s_ji, L.Bin("sub", dp_ji, L.Load(self.delta.name, at, f32))), scale)
        probs = L.For(j, c(0), c(bk), lanes_loop(i, bq, L.seq(
            _st(st, (v(j), v(i)), p), _st(dpt, (v(j), v(i)), ds) if self.need_dp else None)))
        steps: list[L.Stmt | None] = [self.tiles(slot, bidx, q0, k0, Out(st.name, f32), Out(dpt.name, f32)), probs]
        if plan.dv:  # dV[k0 + j] += sum_i P^T[j, i] dO[q0 + i]
            steps.append(g.gemm(bk, plan.e, bq, lambda m, k: _ld(st, m, k),
                                lambda k, n: self.tensor(bidx, plan.do, self.query(L.add(q0, k)), n),
                                Out(dv_acc.name, f32), zero=False))
        if plan.dk:  # dK[k0 + j] += sum_i dS^T[j, i] Q[q0 + i]
            steps.append(g.gemm(bk, plan.d, bq, lambda m, k: _ld(dpt, m, k),
                                lambda k, n: self.tensor(bidx, plan.q, self.query(L.add(q0, k)), n),
                                Out(dk_acc.name, f32), zero=False))
        if dq is not None:  # dQ[q0 + i] += sum_j dS^T[j, i] K[k0 + j]
            steps.append(g.gemm(bq, plan.d, bk, lambda m, k: _ld(dpt, k, m),
                                lambda k, n: self.tensor(bidx, plan.k, self.key(L.add(k0, k)), n),
                                Out(dq.buffer, f32, dq.prefix, q0, dq.limit), zero=False))
        q_begin: L.Expr = L.Bin("div", k0, c(bq)) if plan.causal else c(0)
        inner = L.For(qb, q_begin, c(self.q_blocks), L.seq(*steps))
        key_row = L.add(k0, v(a))
        store = L.seq(*(L.For(a, c(0), c(bk), L.If(L.Cmp("lt", key_row, c(plan.t)), lanes_loop(b, buf.shape[1], L.Store(
            out, bidx + (key_row, v(b)), L.cast(self.io, _ld(buf, v(a), v(b))))))) for buf, out in accs))
        body: L.Stmt = L.For(kc, c(0), n_blocks, L.seq(clear, inner, store))
        for buf in [st, dpt] + [buf for buf, _ in accs]:
            body = L.Allocate(buf, body)
        return body

    # -- the panel variant: one pass
    def panel(self, slot: L.Expr, bidx: tuple[L.Expr, ...], ps: L.Buffer, pd: L.Buffer) -> L.Stmt:
        """Per query block: S^T and dP^T for every key block into the panels ps and pd (keys by
        queries), the exact softmax statistics from them (the maxima: the plan's shift, if given), then
        per key block P^T, dS^T and dV, dK, dQ (summed: `summed`). Five micro-GEMMs per tile, one exp."""
        plan, g, bq, bk, f = self.plan, self.g, self.knobs.bq, self.knobs.bk, self.dtype
        v, c, zero, scale = L.Var, L.const, L.Const(0.0, f), L.Const(plan.scale, f)
        qb, kb, kb2, j, i = g.var("qb"), g.var("kb"), g.var("kb"), g.var("j"), g.var("i")
        q0 = L.mul(v(qb), c(bq))
        m, l_sum, d_sum = (L.Buffer(g.var(n), f, (bq,), "local") for n in ("m", "l", "dl"))
        vi, cell = (v(i),), (slot, v(j), v(i))
        s_ji, dp_ji = L.Load(ps.name, cell, f), L.Load(pd.name, cell, f)
        k_end: L.Expr = c(self.k_blocks)
        if plan.causal:  # key blocks right of the diagonal are all masked
            last = L.Bin("min", L.add(q0, c(bq - 1)), c(plan.s - 1))
            k_end = L.Bin("min", k_end, L.add(L.Bin("div", last, c(bk)), c(1)))
        k0 = L.mul(v(kb), c(bk))
        fill = L.For(kb, c(0), k_end, self.tiles(slot, bidx, q0, k0, Out(ps.name, f, (slot,), k0),
                                                 Out(pd.name, f, (slot,), k0)))
        valid = self.valid(L.add(q0, v(i)), v(j), True)  # padded queries too: they must add nothing to dK, dV
        keys = L.mul(k_end, c(bk))
        given = plan.saved is not None
        if given:
            maxima = lanes_loop(i, bq, _st(m, vi, self.shift(bidx, L.add(q0, v(i)))))
        else:
            maxima = L.seq(lanes_loop(i, bq, _st(m, vi, L.Const(-math.inf, f))), L.For(j, c(0), keys, lanes_loop(
                i, bq, _st(m, vi, L.Bin("max", _ld(m, v(i)), L.Select(valid, L.Bin("mul", s_ji, scale),
                                                                       L.Const(-math.inf, f)))))))
        p = L.Select(valid, exp_shifted(L.Bin("sub", L.Bin("mul", s_ji, scale), _ld(m, v(i))), given), zero)
        sums = L.seq(lanes_loop(i, bq, L.seq(_st(l_sum, vi, zero), _st(d_sum, vi, zero))), L.For(j, c(0), keys, lanes_loop(
            i, bq, L.seq(L.Store(ps.name, cell, p), _st(l_sum, vi, L.Bin("add", _ld(l_sum, v(i)), s_ji)),
                         _st(d_sum, vi, L.Bin("add", _ld(d_sum, v(i)), L.Bin("mul", s_ji, dp_ji)))
                         if self.need_dp else None))))
        # 1/l (0 for a query with no valid key: a padded one) and Delta = rowsum(P dP)
        inv = lanes_loop(i, bq, L.seq(
            _st(l_sum, vi, L.Select(L.Cmp("gt", _ld(l_sum, v(i)), zero), L.Bin("div", L.Const(1.0, f),
                                                                              _ld(l_sum, v(i))), zero)),
            _st(d_sum, vi, L.Bin("mul", _ld(d_sum, v(i)), _ld(l_sum, v(i)))) if self.need_dp else None))
        k0 = L.mul(v(kb2), c(bk))
        at: tuple[L.Expr, ...] = (slot, L.add(k0, v(j)), v(i))
        prob = L.Bin("mul", L.Load(ps.name, at, f), _ld(l_sum, v(i)))
        ds = L.Bin("mul", L.Bin("mul", L.Load(ps.name, at, f), L.Bin("sub", L.Load(pd.name, at, f),
                                                                       _ld(d_sum, v(i)))), scale)
        steps: list[L.Stmt | None] = [L.For(j, c(0), c(bk), lanes_loop(i, bq, L.seq(
            L.Store(ps.name, at, prob), L.Store(pd.name, at, ds) if self.need_dp else None)))]
        if plan.dv:  # dV[k0 + j] += sum_i P^T[j, i] dO[q0 + i]
            steps.append(g.gemm(bk, plan.e, bq, lambda mm, k: L.Load(ps.name, (slot, L.add(k0, mm), k), f),
                                lambda k, n: self.tensor(bidx, plan.do, self.query(L.add(q0, k)), n),
                                self.summed(plan.dv, bidx, slot, k0, plan.t), zero=False))
        if plan.dk:  # dK[k0 + j] += sum_i dS^T[j, i] Q[q0 + i]
            steps.append(g.gemm(bk, plan.d, bq, lambda mm, k: L.Load(pd.name, (slot, L.add(k0, mm), k), f),
                                lambda k, n: self.tensor(bidx, plan.q, self.query(L.add(q0, k)), n),
                                self.summed(plan.dk, bidx, slot, k0, plan.t), zero=False))
        if plan.dq:  # dQ[q0 + i] += sum_j dS^T[j, i] K[k0 + j]
            steps.append(g.gemm(bq, plan.d, bk, lambda mm, k: L.Load(pd.name, (slot, L.add(k0, k), mm), f),
                                lambda k, n: self.tensor(bidx, plan.k, self.key(L.add(k0, k)), n),
                                self.summed(plan.dq, bidx, slot, q0, plan.s), zero=False))
        body: L.Stmt = L.For(qb, c(0), c(self.q_blocks), L.seq(
            fill, maxima, sums, inv, L.For(kb2, c(0), k_end, L.seq(*steps))))
        for buf in (m, l_sum, d_sum):
            body = L.Allocate(buf, body)
        outputs = [name for name in (plan.dq, plan.dk, plan.dv) if name]
        return L.seq(self.transposes(slot, bidx), *(self.zero_sum(name, bidx, slot) for name in outputs), body,
                     *(self.rounded(name, bidx, slot) for name in outputs))

    def zero_rows(self, buffer: str, prefix: tuple[L.Expr, ...], rows: int = 0, cols: int = 0,
                  dtype: str | None = None) -> L.Stmt:
        """buffer[prefix.., r, c] = 0 for r < rows, c < cols (by default S and D: dQ), a buffer of `dtype`
        (by default the kernel's)."""
        a, b = self.g.var("a"), self.g.var("b")
        return L.For(a, L.const(0), L.const(rows or self.plan.s), lanes_loop(b, cols or self.plan.d, L.Store(
            buffer, prefix + (L.Var(a), L.Var(b)), L.Const(0.0, dtype or self.dtype))))


__all__ = ["Builder", "Kernel", "Out", "lanes_loop"]
