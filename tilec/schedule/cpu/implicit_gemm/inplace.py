"""A GEMM with both operands read in place, nothing packed (a direct convolution).

A weight gradient written onto the weights' own layout,

    DF[co, c, i, j] = +(DO[n, co, x, y] * I[n, x + i - 1, y + j - 1, c])

is a GEMM whose usual column (the output's innermost index, j) is three wide. Taking as the column
instead the innermost index of one operand (c, contiguous in I), that operand (B) is read in place a
vector at a time, the other (A) is broadcast from memory as in tilec.schedule.cpu.implicit_gemm.direct, and the
register tile is stored at whatever stride the output's layout gives the column (9 elements here):

    [Apad = A with zero borders]                     # only where A's accesses need padding
    Bpan[jr, d0, ..., jj] = B[d0, ..., jr * NR + jj]   # B in column panels, zero borders on d0, ...
    parallel over (outer, column panel, row tile), flattened and shared evenly by the threads:
      acc[MR, NR] = 0
      for red...:                                    # the original reduction loops
        for ii unrolled MR: for jj vectorized NR:
          acc[ii, jj] += A(row_ii, red) * Bpan[jr, (B's other indices), jj]
      C tile = epilogue(acc)                         # rows past the end are not stored

B is copied once, not once per use: the panel layout only moves each column panel's NR-wide rows
next to each other, so the reduction walks a panel the way a packed one is walked (reading B with
NR of its C columns from each row ran a quarter slower: 1 KiB strides defeat the prefetchers and
the TLB). A program's layout copies feed it directly: A through the copy's source
(tilec.schedule.cpu.copy_fold), B's panels gathered from the copy's source. Row indices of the last
tile are clamped into range, as in the direct variant; the column is whole panels (N a multiple of NR).

A panel larger than L2 (the 56^2 convolution's is 6.9 MB) would be re-read from L3 by every row
tile; then the reduction runs in blocks outside the units (`reduction_blocks`), each unit's sums
saved in a workspace between blocks, so that a block's part of the panel stays in L2.

Requires: a BoundContraction the GEMM template matches with the chosen column (see `match`).
Guarantees: `build` computes the statement's sum of products in the reduction order of the
original loops, per output cell (blocks keep that order: each continues the previous one's sums).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import lone_output_vars
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.patterns.layout_copy import Copy
from tilec.schedule.cpu.implicit_gemm.knobs import DTYPES, GemmKnobs, widths_block
from tilec.schedule.cpu.implicit_gemm.padding import Pads, access_padding, gathered, padded_index, padded_operand, zero_slabs
from tilec.schedule.nest import decompose, thread_share, threads_loop
from tilec.schedule.patterns import gemm as gemm_pattern
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Context
from tilec.target import Target


@dataclass(frozen=True)
class Candidate:
    """One way to read both operands of a statement in place."""

    gemm: GemmPlan  # its column is B's innermost index
    a_pads: Pads  # zero borders each operand needs, per dimension (all (0, 0): read as it is)
    b_pads: Pads


@dataclass(frozen=True)
class InplacePlan:
    """A statement for the in-place variant: the candidate taken, the layout copy its tiles are
    stored into (None: stored into the statement's own output, through its fused epilogue)."""

    candidate: Candidate
    out_copy: Copy | None
    epilogue: Epilogue | None

    variant = "inplace"

    @property
    def gemm(self) -> GemmPlan:
        return self.candidate.gemm

    def reads_through(self, knobs: GemmKnobs) -> frozenset[str]:
        """A broadcast from memory and B copied into panels: a layout copy of either folds in."""
        return frozenset({self.gemm.a.tensor, self.gemm.b.tensor})

    def stores(self) -> str | None:
        return self.out_copy.output if self.out_copy is not None else None

    def build(self, b: BoundContraction, knobs: GemmKnobs, ctx: Context) -> tuple[L.Stmt, list[L.Buffer]]:
        return build(b, self.candidate, knobs, ctx, self.epilogue, self.out_copy)


def candidates(b: BoundContraction, bp: BoundProgram, lanes: int) -> list[Candidate]:
    """Every way to read both operands of `b` in place: a column that is an output index, one
    operand's innermost index alone (and nowhere else in it), a whole number of `lanes`-wide
    vectors, with each operand's only guards its own bounds."""
    out_vars = lone_output_vars(b)
    if out_vars is None:
        return []
    plans = []
    for op in b.operands:
        col = op.indices[-1].lone_var if op.indices else None
        if col is None or col not in out_vars or any(col in e.vars for e in op.indices[:-1]):
            continue
        plan = gemm_pattern.match(b, DTYPES, col)
        if plan is None or plan.b is not op or plan.partial or plan.n % lanes:
            continue
        if plan.col[1:] != (0, bp.shapes[op.tensor][-1] - 1):
            continue  # B's panels hold its whole innermost dimension
        box = {v: (lo, hi) for v, lo, hi in plan.outer + plan.rows + plan.red + (plan.col,)}
        a_pads = access_padding(plan.a, plan.a_guards, box, bp.shapes[plan.a.tensor])
        b_pads = access_padding(plan.b, plan.b_guards, box, bp.shapes[plan.b.tensor])
        if a_pads is not None and b_pads is not None and b_pads[-1] == (0, 0):
            plans.append(Candidate(plan, a_pads, b_pads))
    return plans


def default_knobs(ip: Candidate, dtype: str, target: Target) -> GemmKnobs:
    """The register block (tilec.schedule.cpu.implicit_gemm.knobs.widths_block) of those up to four
    vectors wide that divide the columns."""
    lanes = target.lanes(dtype)
    mr, vectors = widths_block(target, tuple(k for k in (4, 2, 1) if ip.gemm.n % (k * lanes) == 0))
    return GemmKnobs(mr=mr, nr=vectors * lanes, threads=target.cores, pack_a=False, pack_b=False)


def _panelled(name: str, tensor: str, pads: Pads, nr: int, ctx: Context) -> tuple[L.Stmt, L.Buffer]:
    """B in column panels: ``name[p, d0, ..., c] = B[d0 - pad0, ..., p * nr + c]`` (0 in the zero
    borders of the other dimensions), so that a panel's rows follow each other in memory the way
    the reduction walks them, as a packed panel's would; filled straight from the source when B is
    a folded layout copy."""
    shape, dtype = ctx.bp.shapes[tensor], ctx.bp.dtypes[tensor]
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape[:-1], pads[:-1]))
    buf = L.Buffer(name, dtype, (shape[-1] // nr, *padded, nr))

    def cell(index: list[L.Expr], panel: L.Expr, lane: L.Expr) -> tuple[L.Expr, ...]:  # B's index -> the panel buffer's
        return (panel, *(L.add(i, L.const(lo)) for i, (lo, _) in zip(index[:-1], pads)), lane)

    through = ctx.folded.get(tensor)
    if through is not None:  # a panel at a time, so that each column's lane is affine (transposing tiles)
        col = through.out_vars[-1]

        def panel_cell(p: int) -> Callable[[dict[str, L.Expr]], tuple[L.Expr, ...]]:
            return lambda at: cell([at[u] for u in through.out_vars], L.const(p), L.sub(at[col], L.const(p * nr)))

        interior = L.seq(*(gathered(name, through, (*shape[:-1], nr), ctx.target.cores, panel_cell(p), {col: p * nr})
                           for p in range(shape[-1] // nr)))
    else:
        idx: list[L.Expr] = [L.Var(f"{name}.d{k}") for k in range(len(shape))]
        interior = L.Store(name, cell(idx, L.Bin("div", idx[-1], L.const(nr)), L.Bin("mod", idx[-1], L.const(nr))),
                           L.Load(tensor, tuple(idx), dtype))
        for k in reversed(range(len(shape))):
            interior = L.For(f"{name}.d{k}", L.const(0), L.const(shape[k]), interior,
                             "vectorized" if k == len(shape) - 1 and 2 <= shape[k] <= 1024 else "serial")
    slabs = [(d + 1, b, e) for d, (lo, _) in enumerate(pads[:-1]) for b, e in ((0, lo), (lo + shape[d], padded[d]))]
    return L.seq(interior, *zero_slabs(name, dtype, buf.shape, slabs)), buf


def build(b: BoundContraction, ip: Candidate, knobs: GemmKnobs, ctx: Context, epilogue: Epilogue | None = None,
          out_copy: Copy | None = None) -> tuple[L.Stmt, list[L.Buffer]]:
    """The nest and its workspaces (B's panels, A's zero-padded copy if it needs one). With `out_copy`
    (a permutation that is the only reader of `b`'s output) the tiles go straight to its output."""
    bp, target = ctx.bp, ctx.target
    plan = ip.gemm
    dt = b.dtype
    mr, nr = knobs.mr, knobs.nr
    assert mr >= 1 and nr >= 1 and plan.n % nr == 0, "the template checks the knobs first"
    m, n = plan.m, plan.n
    panels, tiles = n // nr, -(-m // mr)
    n_outer = plan.batch
    units = n_outer * panels * tiles
    threads = max(1, min(knobs.threads or target.cores, units))
    out = b.output
    v = L.Var
    t, w, jj, ii = (f"{out}.{s}" for s in ("t", "w", "jj", "ii"))
    stmts: list[L.Stmt] = []
    workspaces: list[L.Buffer] = []

    a_tensor, a_dtype, a_offsets = plan.a.tensor, bp.dtypes[plan.a.tensor], tuple(lo for lo, _ in ip.a_pads)
    if any(p != (0, 0) for p in ip.a_pads):
        fill, apad = padded_operand(f"{out}.Apad", a_tensor, ip.a_pads, ctx)
        stmts.append(fill)
        workspaces.append(apad)
        a_tensor = apad.name
    fill_b, b_panels = _panelled(f"{out}.Bpan", plan.b.tensor, ip.b_pads, nr, ctx)
    stmts.append(fill_b)
    workspaces.append(b_panels)
    b_offsets = tuple(lo for lo, _ in ip.b_pads[:-1])

    # the work unit w -> (outer, column panel, row tile), nested in the destination's order (unit_order)
    extents = {"outer": n_outer, "panel": panels, "tile": tiles}
    order = unit_order(b, plan, mr, nr, ctx.bp, out_copy)
    coordinate: dict[str, L.Expr] = {}
    inner = 1
    for k, group in enumerate(reversed(order)):
        at = L.Bin("div", v(w), L.const(inner)) if inner > 1 else v(w)
        coordinate[group] = at if k == len(order) - 1 else L.Bin("mod", at, L.const(extents[group]))
        inner *= extents[group]
    o, jr, ir = coordinate["outer"], coordinate["panel"], coordinate["tile"]
    outer_env = decompose(o, plan.outer) if plan.outer else {}
    col_var, col_lo, _ = plan.col
    col_index = L.add(L.mul(jr, L.const(nr)), v(jj))
    col_env = {col_var: L.add(col_index, L.const(col_lo))}

    row = L.Bin("min", L.add(L.mul(ir, L.const(mr)), v(ii)), L.const(m - 1))  # the last tile's extra rows re-read row m-1
    a_env = {**outer_env, **decompose(row, plan.rows)}
    a_value = L.cast(dt, L.Load(a_tensor, padded_index(plan.a.indices, a_offsets, a_env), a_dtype))
    b_env = {**outer_env, **col_env}
    b_index = padded_index(plan.b.indices[:-1], b_offsets, b_env)
    b_value = L.cast(dt, L.Load(b_panels.name, (jr, *b_index, v(jj)), b_panels.dtype))
    acc = L.Buffer(f"{out}.acc", dt, (mr, nr), "local")
    acc_now = L.Load(acc.name, (v(ii), v(jj)), dt)

    def tile(body: L.Stmt) -> L.Stmt:
        return L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), body, "vectorized"), "unrolled")

    kernel = tile(L.Store(acc.name, (v(ii), v(jj)), L.Bin("add", acc_now, L.Bin("mul", a_value, b_value))))
    assert target.host is not None
    blocking = reduction_blocks(plan, b_panels, bp.dtypes[plan.b.tensor], threads, target.host.l2_bytes // 2,
                                ctx.params.inplace_sums_bytes)
    level, chunk = blocking or (0, 0)
    kb = f"{out}.kb"
    for d in reversed(range(level, len(plan.red))):
        var, lo, hi = plan.red[d]
        if blocking and d == level:  # this block's chunk of the split loop
            first = L.add(L.const(lo), L.mul(v(kb), L.const(chunk)))
            kernel = L.For(var, first, L.Bin("min", L.const(hi + 1), L.add(first, L.const(chunk))), kernel)
        else:
            kernel = L.For(var, L.const(lo), L.const(hi + 1), kernel)

    row_of_tile = L.add(L.mul(ir, L.const(mr)), v(ii))
    cell_env = {**outer_env, **decompose(row_of_tile, plan.rows), **col_env}
    cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    value: L.Expr = acc_now if epilogue is None else epilogue_value(epilogue, bp, out, acc_now, cell)
    dest = epilogue.dest if epilogue is not None else out
    if out_copy is not None:
        dest, cell, value = out_copy.output, out_copy.dest_cell(cell), out_copy.apply(value)
    store = L.Store(dest, cell, value)
    zero = tile(L.Store(acc.name, (v(ii), v(jj)), L.cast(dt, L.const(0))))
    whole = L.Cmp("le", L.mul(L.add(ir, L.const(1)), L.const(mr)), L.const(m))
    stores = L.If(whole, tile(store), tile(L.If(L.Cmp("lt", row_of_tile, L.const(m)), store)))
    if blocking is None:  # one block: the whole reduction in registers
        micro = L.Allocate(acc, L.seq(zero, kernel, stores))
        stmts.append(threads_loop(t, threads, thread_share(t, threads, w, units, micro)))
        return L.seq(*stmts), workspaces
    # blocks of the reduction outside the units: each unit's partial sums wait in `partial` between them
    partial = L.Buffer(f"{out}.partial", dt, (units, mr, nr))
    workspaces.append(partial)
    saved = L.Load(partial.name, (v(w), v(ii), v(jj)), dt)
    _, lo, hi = plan.red[level]
    blocks = -(-(hi - lo + 1) // chunk)
    outside = plan.red[:level]

    def block_is(k: int, ends: list[int]) -> L.Expr:  # the block with kb = k and the outside loops at `ends`
        cond: L.Expr = L.Cmp("eq", v(kb), L.const(k))
        for (u, _, _), e in zip(outside, ends):
            cond = L.Bin("and", cond, L.Cmp("eq", v(u), L.const(e)))
        return cond

    first, last = block_is(0, [a for _, a, _ in outside]), block_is(blocks - 1, [z for _, _, z in outside])
    micro = L.Allocate(acc, L.seq(
        L.If(first, zero, tile(L.Store(acc.name, (v(ii), v(jj)), saved))), kernel,
        L.If(last, stores, tile(L.Store(partial.name, (v(w), v(ii), v(jj)), acc_now)))))
    nest: L.Stmt = L.For(kb, L.const(0), L.const(blocks), thread_share(t, threads, w, units, micro))
    for u, a, z in reversed(outside):
        nest = L.For(u, L.const(a), L.const(z + 1), nest)
    stmts.append(threads_loop(t, threads, nest))
    return L.seq(*stmts), workspaces


def unit_order(b: BoundContraction, plan: GemmPlan, mr: int, nr: int, bp: BoundProgram,
               out_copy: Copy | None) -> tuple[str, ...]:
    """The work units' coordinates ("outer", "panel", "tile"), outermost first: by the stride at which
    each steps through the tiles' destination, largest first (ties: that order, so that consecutive
    units share B's panel). The threads take contiguous runs of units, so each then writes its own
    part of the destination: a weight gradient stored through the copy onto F[co, c, i, j] with the
    taps (i, j) outermost had both threads writing into every cache line of it (the 3x3 256->256
    conv on a 2x2 map: its weight gradient 0.65 ms on one core, 0.76 on two)."""
    out_vars = lone_output_vars(b)
    assert out_vars is not None, "the candidate's output indices are lone variables"
    dest_vars, shape = list(out_vars), b.shape
    if out_copy is not None:
        dest_vars = [out_vars[out_copy.src_vars.index(u)] for u in out_copy.out_vars]
        shape = bp.shapes[out_copy.output]
    stride = {v: math.prod(shape[k + 1:]) for k, v in enumerate(dest_vars)}
    steps = {"outer": max((stride[r[0]] for r in plan.outer), default=0),
             "panel": stride[plan.col[0]] * nr,
             "tile": max(stride[r[0]] for r in plan.rows) * mr}
    return tuple(sorted(steps, key=lambda g: -steps[g]))


def reduction_blocks(plan: GemmPlan, panels: L.Buffer, dtype: str, threads: int, l2_budget: int,
                     sums_budget: int) -> tuple[int, int] | None:
    """(level, chunk): the reduction runs in blocks, each one value of the loops outside `level`,
    `chunk` values of loop `level` and all of the loops inside it, so that the part of B's column
    panel a block reads (about l2_budget / 2; the template gives half of L2) stays in L2 while every
    unit of a thread uses it. Only when a panel overflows l2_budget and the partial sums of all units,
    saved and reloaded between blocks, fit sums_budget per thread (a lowering parameter), and there
    are several blocks; otherwise None.
    Measured on the 3x3 64->64 56^2 convolution's weight gradient: a 6.9 MB panel re-read from L3
    by every row tile ran at 325 GFLOP/s on two cores, vs 412 for a packed GEMM of its size."""
    itemsize = np.dtype(dtype).itemsize
    extents = [hi - lo + 1 for _, lo, hi in plan.red]
    panel_bytes = math.prod(panels.shape[1:]) * itemsize
    sums_bytes = plan.m * plan.n * itemsize
    if panel_bytes <= l2_budget or sums_bytes > sums_budget * threads:
        return None
    per_element = panel_bytes / plan.k  # bytes of panel per element of the reduction
    want = max(1, int(l2_budget / 2 / per_element))  # reduction elements per block
    level = 0
    while level < len(extents) - 1 and math.prod(extents[level + 1:]) > want:
        level += 1
    inside = math.prod(extents[level + 1:])
    chunk = max(1, min(extents[level], want // inside))
    blocks = -(-extents[level] // chunk)
    return (level, -(-extents[level] // blocks)) if blocks > 1 else None  # even blocks


__all__ = ["Candidate", "InplacePlan", "build", "candidates", "default_knobs", "reduction_blocks", "unit_order"]
