"""The implicit-GEMM template: any sum-of-products contraction as packed panels and a
register-blocked micro-kernel (the BLIS/GotoBLAS recipe, DESIGN.md §9).

A contraction ``O[outer..., rows..., col] = +(A[...] * B[...])`` maps onto GEMM when
the output's innermost index `col` is read by exactly one operand (B); the output
indices B does not read are the GEMM rows, the indices outside the output are the
reduction, output indices both operands read are an outer (batch) loop. GEMM in any
layout, batched GEMM, conv2d in NHWC (rows n, x, y; reduction i, j, c — an implicit
im2col) and the two matmuls of attention all match.

The loop nest (knobs in capitals)::

    for outer...:                                  # batch
      for pc in K / KC:                              # reduction block
        Bp[jr, r, jj] = B(r, col) or 0               # pack B: KC x N in NR-wide panels
        parallel for t in THREADS:                   # a contiguous range of row blocks each
          for ic in its row blocks (MC rows each):
            Ap[t, ir, r, ii] = A(row, r) or 0        # pack A: MC x KC in MR-tall panels
            for jr in N / NR: for ir in MC / MR:
              acc[MR, NR] = 0, or the C tile when pc > 0
              for r in KC: for ii unrolled MR: for jj vectorized NR:
                acc[ii, jj] += Ap[t, ir, r, ii] * Bp[jr, r, jj]
              C tile = acc                           # vector stores; a guarded path at the edges

Guards (padding, strides, constraints) and the zero padding of partial panels live in
the packing loops, so the micro-kernel has no branch. Operands are converted to the
output dtype while packing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram, Condition
from tilec.ir.dtypes import is_float
from tilec.ir.lower import condition_expr, index_expr, lone_output_vars, zero_fill
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.ir.rewrite import substitute_expr
from tilec.target import Target

if TYPE_CHECKING:
    from tilec.schedule.cpu.copy_fold import Copy

Range = tuple[str, int, int]  # (var, lo, hi) inclusive


@dataclass(frozen=True)
class GemmKnobs:
    """The template's tunable knobs (a schedule record: JSON round-trippable via asdict)."""

    mr: int = 6  # rows of the register block
    nr: int = 64  # columns of the register block, a multiple of the vector lanes
    kc: int = 256  # reduction block
    mc: int = 144  # rows packed at once, a multiple of mr
    threads: int = 0  # 0: one per core
    pack_a: bool = True  # False: read A in place (tilec.schedule.cpu.gemm.direct), for few column panels
    pack_b: bool = True  # False: read B in place too, its innermost index the column (tilec.schedule.cpu.gemm.inplace)

    def to_json(self) -> dict:
        return {"template": "implicit_gemm", **asdict(self)}


@dataclass(frozen=True)
class GemmPlan:
    """How a contraction's index variables map onto the GEMM roles."""

    a: BoundAccess
    b: BoundAccess
    outer: tuple[Range, ...]
    rows: tuple[Range, ...]
    col: Range
    red: tuple[Range, ...]
    a_guards: tuple[Condition, ...]
    b_guards: tuple[Condition, ...]
    partial: bool = False  # some output cells get no tuple: the output is zeroed first

    @property
    def m(self) -> int:
        return math.prod(_extent(r) for r in self.rows)

    @property
    def n(self) -> int:
        return _extent(self.col)

    @property
    def k(self) -> int:
        return math.prod(_extent(r) for r in self.red)


def _extent(r: Range) -> int:
    return r[2] - r[1] + 1


def match(b: BoundContraction, col: str | None = None) -> GemmPlan | None:
    """The GEMM roles of `b`, or None if it is not a plain sum of products onto a direct output.
    The column is the output's innermost index, or the output index `col` when given (the
    in-place template, tilec.schedule.cpu.gemm.inplace, puts it where B is contiguous)."""
    stmt = b.stmt
    if stmt.agg != "+" or stmt.combo != "mul" or stmt.default is not None or b.empty:
        return None
    if not is_float(b.dtype) or b.dtype == "float16" or not b.shape:
        return None
    out_vars = lone_output_vars(b)
    if out_vars is None:
        return None
    ranges = {v: (v, lo, hi) for v, lo, hi in b.ranges}
    partial = any(ranges[v][1:] != (0, n - 1) for v, n in zip(out_vars, b.shape))
    reads = [{v for e in op.indices for v in e.vars} for op in b.operands]
    unit: list[str] = []
    if col is None:
        # Trailing output dimensions of size 1 that no operand reads (a 1x1 kernel's position in a
        # weight gradient) are outer loops of one iteration; the column is the last dimension before.
        while len(out_vars) > 1 and b.shape[len(out_vars) - 1] == 1 and not any(out_vars[-1] in vs for vs in reads):
            unit.insert(0, out_vars.pop())
        col = out_vars[-1]
    elif col not in out_vars:
        return None
    others = [v for v in out_vars if v != col]
    holders = [k for k, vs in enumerate(reads) if col in vs]
    if len(holders) != 1:
        return None
    bk = holders[0]
    a_op, b_op = b.operands[1 - bk], b.operands[bk]
    a_vars, b_vars = reads[1 - bk], reads[bk]
    outer = tuple(ranges[v] for v in others if v in b_vars) + tuple(ranges[v] for v in unit)
    rows = tuple(ranges[v] for v in others if v not in b_vars)
    red = tuple(ranges[v] for v, _, _ in b.ranges if v not in out_vars and v not in unit)
    if not rows or not red:
        return None
    outer_names = {r[0] for r in outer}
    a_side = a_vars | outer_names | {r[0] for r in rows} | {r[0] for r in red}
    b_side = b_vars | outer_names | {r[0] for r in red}
    a_guards, b_guards = [], []
    for g in b.guards:
        vs = set(g.expr.vars)
        if vs <= b_side:
            b_guards.append(g)
        elif vs <= a_side:
            a_guards.append(g)
        else:
            return None  # a condition tying rows to columns: not a GEMM
    return GemmPlan(a_op, b_op, outer, rows, ranges[col], red, tuple(a_guards), tuple(b_guards), partial)


L1_BUDGET = 32 * 1024  # bytes of L1 for the B micro-panel that every row tile re-reads
MC_TARGET = 144  # rows packed at once: MC x KC of A stays in L2


def default_knobs(plan: GemmPlan, dtype: str, target: Target) -> GemmKnobs:
    """Register block from the vector width; KC so the B micro-panel (KC x NR) stays in L1;
    MC so that the row blocks split evenly over the threads when they share the rows."""
    itemsize = 4 if dtype == "float32" else 8
    lanes = target.lanes(dtype)
    vectors = 4 if plan.n > 2 * lanes else 2 if plan.n > lanes else 1
    nr = vectors * lanes
    mr = min(14, 24 // vectors)  # about 24 accumulator registers of the 32
    kc = min(plan.k, max(16, L1_BUDGET // (nr * itemsize)))
    threads = target.cores
    n_outer = math.prod(_extent(r) for r in plan.outer)
    share = 1 if n_outer >= threads else threads  # row blocks are split over threads only then
    blocks = share * -(-plan.m // (share * MC_TARGET))
    mc = _round_up(-(-plan.m // blocks), mr)
    return GemmKnobs(mr=mr, nr=nr, kc=kc, mc=mc, threads=threads)


def worthwhile(plan: GemmPlan, target: Target) -> bool:
    """Small problems are faster as plain loops than packed."""
    return plan.n >= 8 and plan.m * plan.n * plan.k >= 32**3


def plan_threads(plan: GemmPlan, knobs: GemmKnobs, target: Target, row_units: int) -> tuple[bool, int, int]:
    """(parallel over the outer loop?, threads, outer iterations): the outer (batch) loop when it
    has an iteration per thread, else `row_units` (row blocks or tiles) shared by the threads."""
    n_outer = math.prod(_extent(r) for r in plan.outer)
    wanted = max(1, knobs.threads or target.cores)
    outer_parallel = n_outer >= wanted and wanted > 1
    return outer_parallel, wanted if outer_parallel else max(1, min(wanted, row_units)), n_outer


def thread_share(t: str, threads: int, var: str, total: int, body: L.Stmt) -> L.Stmt:
    """`for var` over thread `t`'s contiguous share of [0, total)."""
    per = -(-total // threads)
    begin = L.mul(L.Var(t), L.const(per))
    return L.For(var, begin, L.Bin("min", L.const(total), L.add(begin, L.const(per))), body)


def threads_loop(t: str, threads: int, body: L.Stmt) -> L.Stmt:
    """`for t` over the threads, a parallel loop when there are several."""
    return L.For(t, L.const(0), L.const(threads), body, "parallel" if threads > 1 else "serial")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def decompose(flat: L.Expr, ranges: tuple[Range, ...]) -> dict[str, L.Expr]:
    """Index variables of a row-major flattening `flat` over `ranges` (last varies fastest)."""
    out: dict[str, L.Expr] = {}
    stride = 1
    for v, lo, hi in reversed(ranges):
        n = hi - lo + 1
        q = flat if stride == 1 else L.Bin("div", flat, L.const(stride))
        idx = q if v == ranges[0][0] else L.Bin("mod", q, L.const(n))
        out[v] = L.add(idx, L.const(lo))
        stride *= n
    return out


def _guarded_store(buffer: str, indices: tuple[L.Expr, ...], op: BoundAccess, guards: tuple[Condition, ...],
                   env: dict[str, L.Expr], dtype: str, op_dtype: str, extra: list[L.Expr]) -> L.Stmt:
    """buffer[indices] = op(env) converted to `dtype`, or 0 where a guard (or an `extra` bound) fails.

    An `If`, not a select: the load must not run where its index is out of bounds.
    """
    load = L.cast(dtype, L.Load(op.tensor, tuple(substitute_expr(index_expr(i), env) for i in op.indices), op_dtype))
    cond = L.logical_and(extra + [substitute_expr(condition_expr(g), env) for g in guards])
    if cond is None:
        return L.Store(buffer, indices, load)
    return L.If(cond, L.Store(buffer, indices, load), L.Store(buffer, indices, L.cast(dtype, L.const(0))))


def build(b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: GemmKnobs, target: Target,
          epilogue: Epilogue | None = None, copies: "Mapping[str, Copy] | None" = None) -> tuple[L.Stmt, list[L.Buffer]]:
    """The loop nest of the template and the workspaces it needs (pack_a=False: see direct_gemm).

    Parallelism: over the outer (batch) loop when it has an iteration per thread, each thread
    packing into its own slices; otherwise over blocks of rows, after B is packed once.
    """
    if not knobs.pack_a:
        from tilec.schedule.cpu.gemm.direct import build_direct

        return build_direct(b, bp, plan, knobs, target, epilogue, copies)
    dt = b.dtype
    mr, nr, mc = knobs.mr, knobs.nr, knobs.mc
    kc = min(knobs.kc, plan.k)
    m, n, k = plan.m, plan.n, plan.k
    panels = -(-n // nr)
    row_blocks = -(-m // mc)
    outer_parallel, threads, n_outer = plan_threads(plan, knobs, target, row_blocks)
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    bp_buf = L.Buffer(f"{out}.Bp", dt, (threads if outer_parallel else 1, panels, kc, nr))
    ap_buf = L.Buffer(f"{out}.Ap", dt, (threads, mc // mr, kc, mr))
    v = L.Var
    o, pc, r, jr, jj, t, ic, ir, ii = (f"{out}.{s}" for s in ("o", "pc", "r", "jr", "jj", "t", "ic", "ir", "ii"))
    b_slot = v(t) if outer_parallel else L.const(0)
    outer_env = decompose(v(o), plan.outer) if plan.outer else {}
    kk = L.add(L.mul(v(pc), L.const(kc)), v(r))  # the flat reduction index
    kc_here = L.Bin("min", L.const(kc), L.sub(L.const(k), L.mul(v(pc), L.const(kc))))

    # -- pack B: Bp[slot, jr, r, jj] = B(kk, col) for col = jr * NR + jj < N, else 0
    col_var, col_lo, _ = plan.col
    col_index = L.add(L.mul(v(jr), L.const(nr)), v(jj))
    env_b = {**outer_env, **decompose(kk, plan.red), col_var: L.add(col_index, L.const(col_lo))}
    b_store = _guarded_store(bp_buf.name, (b_slot, v(jr), v(r), v(jj)), plan.b, plan.b_guards, env_b, dt,
                             bp.dtypes[plan.b.tensor], [L.Cmp("lt", col_index, L.const(n))])
    pack_b = L.For(jr, L.const(0), L.const(panels),
                   L.For(r, L.const(0), kc_here, L.For(jj, L.const(0), L.const(nr), b_store)),
                   "parallel" if not outer_parallel and panels >= threads > 1 else "serial")

    # -- pack A: Ap[t, ir, r, ii] = A(row, kk) for row = ic * MC + ir * MR + ii < M, else 0
    row_index = L.add(L.add(L.mul(v(ic), L.const(mc)), L.mul(v(ir), L.const(mr))), v(ii))
    env_a = {**outer_env, **decompose(kk, plan.red), **decompose(row_index, plan.rows)}
    a_store = _guarded_store(ap_buf.name, (v(t), v(ir), v(r), v(ii)), plan.a, plan.a_guards, env_a, dt,
                             bp.dtypes[plan.a.tensor], [L.Cmp("lt", row_index, L.const(m))])
    pack_a = L.For(ir, L.const(0), L.const(mc // mr),
                   L.For(r, L.const(0), kc_here, L.For(ii, L.const(0), L.const(mr), a_store)))

    # -- micro-kernel on acc[MR, NR]
    acc = L.Buffer(f"{out}.acc", dt, (mr, nr), "local")
    acc_now = L.Load(acc.name, (v(ii), v(jj)), dt)
    fma = L.Store(acc.name, (v(ii), v(jj)), L.Bin("add", acc_now, L.Bin(
        "mul", L.Load(ap_buf.name, (v(t), v(ir), v(r), v(ii)), dt),
        L.Load(bp_buf.name, (b_slot, v(jr), v(r), v(jj)), dt))))
    kernel = L.For(r, L.const(0), kc_here,
                   L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), fma, "vectorized"),
                         "unrolled"))

    # -- the C tile <-> acc, at dest[outer..., rows(row0 + ii)..., col0 + jj]
    row_of_tile = row_index
    cell_env = {**outer_env, **decompose(row_of_tile, plan.rows), col_var: L.add(col_index, L.const(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    partial = L.Load(dest, out_cell, dt)
    final = acc_now if epilogue is None else epilogue_value(epilogue, bp, out, acc_now, out_cell)
    zero = L.cast(dt, L.const(0))
    row0 = L.add(L.mul(v(ic), L.const(mc)), L.mul(v(ir), L.const(mr)))
    full = L.Bin("and", L.Cmp("le", L.add(row0, L.const(mr)), L.const(m)),
                 L.Cmp("le", L.mul(L.add(v(jr), L.const(1)), L.const(nr)), L.const(n)))
    inside = L.Bin("and", L.Cmp("lt", row_of_tile, L.const(m)), L.Cmp("lt", col_index, L.const(n)))
    first = L.Cmp("eq", v(pc), L.const(0))
    last = L.Cmp("eq", v(pc), L.const(-(-k // kc) - 1))

    def tile(body: L.Stmt, fast: bool) -> L.Stmt:
        return L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), body,
                                                       "vectorized" if fast else "serial"),
                     "unrolled" if fast else "serial")

    def to_acc(value: L.Expr) -> L.Stmt:
        return L.Store(acc.name, (v(ii), v(jj)), value)

    def to_dest(value: L.Expr) -> L.Stmt:
        return L.Store(dest, out_cell, value)

    # Edge tiles keep the vector loops: the lane-varying `if`s become masked loads and stores.
    load_fast = tile(to_acc(L.Select(first, zero, partial)), True)
    load_edge = tile(L.If(L.Bin("and", L.Not(first), inside), to_acc(partial), to_acc(zero)), True)
    store_fast = tile(to_dest(L.Select(last, final, acc_now)), True)
    store_edge = tile(L.If(inside, to_dest(L.Select(last, final, acc_now))), True)
    micro = L.Allocate(acc, L.seq(L.If(full, load_fast, load_edge), kernel, L.If(full, store_fast, store_edge)))

    rows_here = L.Bin("min", L.const(mc // mr), L.Bin("div", L.add(L.sub(L.const(m), L.mul(v(ic), L.const(mc))),
                                                                   L.const(mr - 1)), L.const(mr)))
    block = L.seq(pack_a, L.For(jr, L.const(0), L.const(panels), L.For(ir, L.const(0), rows_here, micro)))

    def chunk(var: str, total: int, body: L.Stmt) -> L.Stmt:
        return thread_share(t, threads, var, total, body)

    def thread_loop(body: L.Stmt) -> L.Stmt:
        return threads_loop(t, threads, body)

    if outer_parallel:
        per_pc = L.seq(pack_b, L.For(ic, L.const(0), L.const(row_blocks), block))
        nest = thread_loop(chunk(o, n_outer, L.For(pc, L.const(0), L.const(-(-k // kc)), per_pc)))
    else:
        per_pc = L.seq(pack_b, thread_loop(chunk(ic, row_blocks, block)))
        nest = L.For(o, L.const(0), L.const(n_outer), L.For(pc, L.const(0), L.const(-(-k // kc)), per_pc))
    if plan.partial:  # cells no tuple writes are 0
        nest = L.seq(zero_fill(dest, b.shape, dt, parallel=threads > 1), nest)
    return nest, [bp_buf, ap_buf]


__all__ = ["GemmKnobs", "GemmPlan", "match", "build", "default_knobs", "worthwhile"]
