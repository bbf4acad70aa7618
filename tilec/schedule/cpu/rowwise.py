"""Row-wise fusion: consecutive elementwise statements and keep-dim row reductions as one nest.

Derived gradients (layer norm, softmax, GELU) and forward chains are runs of statements over one
iteration space F = (rows..., K): elementwise statements of shape F or of the row shape
(rows..., 1) (operands of lower rank broadcast), "pointwise" contractions (a direct output and no
reduction variable: ``DX[i, j] = +(DQ[i, 0] * Xc[i, j])``) and keep-dim reductions over the last
axis (``S[i, 0] = +(E[i, j])``). The default lowering gives each its own loop nest and its own pass
over memory (and, in parallel, its own pool synchronisation). Here the whole run is one nest:

    for rows (the outermost parallel):          # every statement is row-local
        segment: for j in K (vectorised in blocks of `lanes`, a scalar tail)
                     full-shape statements; reductions into per-lane partials
                 partials folded into a row scalar
        row statement (a scalar per row)
        segment ...

A segment ends where a statement reads a reduction of the same segment (or at a row statement).
A temporary whose readers are all in the group is never materialised: a full-shape one lives in a
per-lane local buffer (registers), a row one in a local scalar; a full-shape one a later segment
reads lives in a local buffer of one row (at most ROW_SCRATCH bytes; a layer norm's centred
values); one read outside the group (or an output) is stored to its buffer too.

Requires: a BoundProgram. Guarantees: `match` gives a plan only for runs of at least two statements
(or one elementwise statement: its inner loop becomes explicit vector code) whose every in-group read is row-local (the same cell, or the row's cell of a row value), with
rank >= 2 and K >= 2; `build` computes what the default lowering computes (reductions sum per lane
first, so floating-point sums are reassociated, as in the other templates).
"""

from __future__ import annotations

import math

import numpy as np
from dataclasses import dataclass, replace

from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundIntrinsic, BoundProgram
from tilec.ir.elementwise import lower_expression
from tilec.ir.lower import LoweredGroup, combine, identity, tuple_operand
from tilec.ir.loop_nest import broadcast_indices, index_expr, loop_nest
from tilec.ir.dtypes import accumulator_dtype, numpy_common
from tilec.ir.rewrite import map_expr
from tilec.schedule.cpu.row_members import FULL, REDUCE, ROW, Member, contraction_member, elementwise_member, space
from tilec.schedule.patterns.dataflow import reads
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.target import Target

ROW_SCRATCH = 64 * 1024  # bytes of one row of a temporary kept on the stack (FusionPlan.row_local)


@dataclass(frozen=True)
class FusionPlan:
    shape: tuple[int, ...]  # the iteration space F = (rows..., K)
    members: tuple[Member, ...]
    segments: tuple[tuple[int, ...], ...]  # member positions; a row member is a segment alone
    stored: tuple[str, ...]  # outputs written to their buffers
    local: tuple[str, ...]  # outputs kept in local buffers (per-lane for full ones)
    row_local: tuple[str, ...] = ()  # full temporaries later segments read, kept one row at a time

    @property
    def elided(self) -> tuple[str, ...]:
        return tuple(n for n in self.local if n not in self.stored and n not in self.row_local) + self.row_local


def match(index: int, bp: BoundProgram) -> FusionPlan | None:
    """The longest fusable run of statements from statements[index] (at least two), or None."""
    shape = space(bp.statements[index])
    if shape is None or len(shape) < 2 or shape[-1] < 2:
        return None
    kinds: dict[str, str] = {}
    members: list[Member] = []
    for k in range(index, len(bp.statements)):
        s = bp.statements[k]
        if isinstance(s, BoundIntrinsic):
            break
        m = elementwise_member(k, s, shape, kinds) if isinstance(s, BoundElementwise) else \
            contraction_member(k, s, shape, kinds)
        if m is None or (not members and m.kind == ROW):
            break
        members.append(m)
        kinds[s.output] = FULL if m.kind == FULL else ROW
    if not members or (len(members) < 2 and not isinstance(bp.statements[index], BoundElementwise)):
        return None  # a lone elementwise statement gains too: LLVM vectorises its default nest's outer loop
    return _plan(shape, members, bp)


def _plan(shape: tuple[int, ...], members: list[Member], bp: BoundProgram) -> FusionPlan:
    outputs = {bp.statements[m.index].output: m for m in members}
    segment_of: dict[str, int] = {}
    segments: list[list[int]] = []
    open_reductions: set[str] | None = None  # reductions of the open loop segment; None: no open segment
    for pos, m in enumerate(members):
        s = bp.statements[m.index]
        if m.kind == ROW:
            segments.append([pos])
            open_reductions = None
        elif open_reductions is None or set(reads(s)) & open_reductions:
            segments.append([pos])
            open_reductions = set()
        else:
            segments[-1].append(pos)
        if m.kind == REDUCE:
            assert open_reductions is not None
            open_reductions.add(s.output)
        segment_of[s.output] = len(segments) - 1
    readers: dict[str, list[int | None]] = {}  # segment of each reader (None: outside the group)
    in_group = {m.index: segment_of[bp.statements[m.index].output] for m in members}
    for k, s in enumerate(bp.statements):
        for n in set(reads(s)):
            readers.setdefault(n, []).append(in_group.get(k))
    stored, local, row_local = [], [], []
    for name, m in outputs.items():
        seen = readers.get(name, [])
        if m.kind != FULL:
            local.append(name)
            if name in bp.program.outputs or None in seen:
                stored.append(name)
            continue
        if segment_of[name] in seen:
            local.append(name)
        later = any(r != segment_of[name] for r in seen)  # (None, a reader outside the group, counts)
        if later and name not in bp.program.outputs and None not in seen \
                and shape[-1] * np.dtype(bp.dtypes[name]).itemsize <= ROW_SCRATCH:
            row_local.append(name)
        elif later or name in bp.program.outputs:
            stored.append(name)
    return FusionPlan(shape, tuple(members), tuple(tuple(s) for s in segments), tuple(stored), tuple(local),
                      tuple(row_local))


# ------------------------------------------------------------------ building the nest


def vector_lanes(dtype: str, target: Target) -> int:
    """Elements of a vectorised loop's vector for a statement of `dtype`: 32-bit lanes of the widest
    register (64-bit ones for float64 and int64), at least 2."""
    return max(2, target.vector_bits // (64 if dtype in ("float64", "int64") else 32))


class _Builder:
    def __init__(self, plan: FusionPlan, bp: BoundProgram, lanes: int) -> None:
        self.plan, self.bp, self.lanes = plan, bp, lanes
        self.rows = [L.Var(f"fuse.r{d}") for d in range(len(plan.shape) - 1)]
        self.kinds = {bp.statements[m.index].output: m.kind for m in plan.members}
        self.buffers: list[L.Buffer] = []

    def lane_buf(self, name: str) -> str:
        return f"{name}.lane"

    def row_buf(self, name: str) -> str:
        return f"{name}.row"

    def read(self, name: str, j: L.Expr, lane: L.Expr, segment: int) -> L.Expr:
        """The value of in-group `name` at the current cell, as seen from `segment`."""
        dtype = self.bp.dtypes[name]
        if self.kinds[name] != FULL:
            return L.Load(self.row_buf(name), (), dtype)
        if name in self.plan.local and self.segment_of(name) == segment:
            return L.Load(self.lane_buf(name), (lane,), dtype)
        return L.Load(*self.cell(name, j), dtype)

    def row_scratch(self, name: str) -> str:
        return f"{name}.rowbuf"

    def cell(self, name: str, j: L.Expr) -> tuple[str, tuple[L.Expr, ...]]:
        """Where a full member's value at column `j` of the current row is stored."""
        return (self.row_scratch(name), (j,)) if name in self.plan.row_local else (name, tuple(self.rows) + (j,))

    def segment_of(self, name: str) -> int:
        for n, seg in enumerate(self.plan.segments):
            if any(self.bp.statements[self.plan.members[p].index].output == name for p in seg):
                return n
        raise AssertionError(name)

    def value(self, m: Member, j: L.Expr, lane: L.Expr, segment: int) -> tuple[L.Expr, L.Expr | None]:
        """The member's value at the cell (one tuple's value, for a reduction) and its condition."""
        s = self.bp.statements[m.index]
        cell = list(self.rows) + [j if m.kind == FULL else L.const(0)]

        def load(name: str) -> L.Expr:
            if name in self.kinds:
                return self.read(name, j, lane, segment)
            return L.Load(name, broadcast_indices(self.bp.shapes[name], s.shape, cell), self.bp.dtypes[name])

        if isinstance(s, BoundElementwise):
            return lower_expression(s.stmt.expr, self.bp.dtypes, load, s.dtype), None
        assert isinstance(s, BoundContraction), "match() stops at intrinsics"
        place = dict(m.places)
        where = {v: (j if p == "j" else L.const(0) if p == "0" else self.rows[int(p[1:])]) for v, p in place.items()}

        def place_var(x: L.Expr) -> L.Expr:
            return where.get(x.name, x) if isinstance(x, L.Var) else x

        def access(tensor: str, indices: tuple[IntAffine, ...]) -> L.Expr:
            if tensor in self.kinds:
                return self.read(tensor, j, lane, segment)
            idx = tuple(map_expr(index_expr(e), place_var) for e in indices)
            return L.Load(tensor, idx, self.bp.dtypes[tensor])

        loads = [access(a.tensor, a.indices) for a in s.operands]
        acc, combo = accumulator_dtype(s.dtype), s.stmt.combo  # (tuples in the accumulator's type, as lower.py's)
        if combo == "single":
            return tuple_operand(loads[0], s.dtype, acc), None
        if combo in ("mul", "add"):
            return combine({"mul": "*", "add": "+"}[combo], tuple_operand(loads[0], s.dtype, acc),
                           tuple_operand(loads[1], s.dtype, acc)), None
        ct = numpy_common(loads[0].dtype, loads[1].dtype)
        equal = L.Cmp("eq", L.cast(ct, loads[0]), L.cast(ct, loads[1]))
        if combo == "eq":
            return L.cast(acc, equal), None
        return tuple_operand(loads[2], s.dtype, acc), equal

    def cell_body(self, segment: int, j: L.Expr, lane: L.Expr) -> L.Stmt:
        stmts: list[L.Stmt] = []
        seen: dict[L.Expr, L.Expr] = {}  # a full member's value -> where an earlier member stored it
        for pos in self.plan.segments[segment]:
            m = self.plan.members[pos]
            s = self.bp.statements[m.index]
            value, cond = self.value(m, j, lane, segment)
            if m.kind == REDUCE:
                assert isinstance(s, BoundContraction)
                part, acc = f"{s.output}.part", accumulator_dtype(s.dtype)
                stmts.append(L.Store(part, (lane,), combine(s.stmt.agg, L.Load(part, (lane,), acc), value)))
                continue
            if isinstance(s, BoundContraction):  # one tuple per cell: combine it with the identity
                acc = accumulator_dtype(s.dtype)
                value = combine(s.stmt.agg, identity(s.stmt.agg, acc), value)
                if cond is not None:
                    value = L.Select(cond, value, L.cast(acc, L.const(0)))
                value = L.cast(s.dtype, value)
            if m.kind == ROW:
                stmts.append(L.Store(self.row_buf(s.output), (), value))
                if s.output in self.plan.stored:
                    stmts.append(L.Store(s.output, tuple(self.rows) + (L.const(0),),
                                         L.Load(self.row_buf(s.output), (), s.dtype)))
                continue
            key = value
            value = seen.get(key, value)  # derived gradients repeat expressions (GELU's for two uses)
            if s.output in self.plan.local:
                stmts.append(L.Store(self.lane_buf(s.output), (lane,), value))
                value = L.Load(self.lane_buf(s.output), (lane,), s.dtype)
            if s.output in self.plan.stored or s.output in self.plan.row_local:
                stmts.append(L.Store(*self.cell(s.output, j), value))
                value = L.Load(*self.cell(s.output, j), s.dtype) if s.output not in self.plan.local else value
            seen.setdefault(key, value)
        return L.seq(*stmts)

    def segment(self, n: int) -> L.Stmt:
        members = [self.plan.members[p] for p in self.plan.segments[n]]
        if members[0].kind == ROW:
            return self.cell_body(n, L.const(0), L.const(0))
        k, v = self.plan.shape[-1], self.lanes
        blocks = k // v
        jo, ji, jt = L.Var(f"fuse.j{n}o"), L.Var(f"fuse.j{n}i"), L.Var(f"fuse.j{n}t")
        reductions = [s for m in members if m.kind == REDUCE
                      for s in (self.bp.statements[m.index],) if isinstance(s, BoundContraction)]
        init = [L.For(f"fuse.p{n}", L.const(0), L.const(v), L.Store(f"{s.output}.part", (L.Var(f"fuse.p{n}"),),
                                                                       identity(s.stmt.agg, accumulator_dtype(s.dtype))),
                      "vectorized")
                for s in reductions]
        loops: list[L.Stmt] = []
        if blocks:
            j = L.add(L.mul(jo, L.const(v)), ji)
            loops.append(L.For(jo.name, L.const(0), L.const(blocks),
                               L.For(ji.name, L.const(0), L.const(v), self.cell_body(n, j, ji), "vectorized")))
        if k % v:
            loops.append(L.For(jt.name, L.const(blocks * v), L.const(k),
                               self.cell_body(n, jt, L.sub(jt, L.const(blocks * v)))))
        final: list[L.Stmt] = []
        for s in reductions:
            # Fold the partials as a tree (log2(lanes) vector steps, not a chain of lanes scalar ones:
            # with short rows the chain cost as much as the row's arithmetic).
            part, width, step, acc = f"{s.output}.part", v, 0, accumulator_dtype(s.dtype)
            while width > 1:
                half = width // 2
                f = L.Var(f"fuse.f{n}.{step}")
                fold = L.Store(part, (f,), combine(s.stmt.agg, L.Load(part, (f,), acc),
                                                   L.Load(part, (L.add(f, L.const(half)),), acc)))
                final.append(L.For(f.name, L.const(0), L.const(half), fold, "vectorized" if half > 1 else "serial"))
                if width % 2:  # an odd width (not with power-of-two lanes): fold its last partial in too
                    final.append(L.Store(part, (L.const(0),), combine(s.stmt.agg, L.Load(part, (L.const(0),), acc),
                                                                       L.Load(part, (L.const(width - 1),), acc))))
                width, step = half, step + 1
            final.append(L.Store(self.row_buf(s.output), (), L.cast(s.dtype, L.Load(part, (L.const(0),), acc))))
            if s.output in self.plan.stored:
                final.append(L.Store(s.output, tuple(self.rows) + (L.const(0),),
                                     L.Load(self.row_buf(s.output), (), s.dtype)))
        return L.seq(*init, *loops, *final)

    def build(self, parallel: bool) -> L.Stmt:
        body = L.seq(*(self.segment(n) for n in range(len(self.plan.segments))))
        for m in self.plan.members:
            s = self.bp.statements[m.index]
            if m.kind == REDUCE:
                body = L.Allocate(L.Buffer(f"{s.output}.part", accumulator_dtype(s.dtype), (self.lanes,), "local"), body)
            if m.kind != FULL:
                body = L.Allocate(L.Buffer(self.row_buf(s.output), s.dtype, (), "local"), body)
            elif s.output in self.plan.local:
                body = L.Allocate(L.Buffer(self.lane_buf(s.output), s.dtype, (self.lanes,), "local"), body)
            if s.output in self.plan.row_local:
                body = L.Allocate(L.Buffer(self.row_scratch(s.output), s.dtype, (self.plan.shape[-1],), "local"), body)
        rows = [(r.name, 0, n - 1) for r, n in zip(self.rows, self.plan.shape)]
        nest = loop_nest(rows, body, [])
        if parallel and isinstance(nest, L.For):
            # Row-local by construction (every member is matched so): each buffer access leads with
            # the row variables, so rows write disjoint cells and read only their own. (The generic
            # check_parallel cannot see that a segment's j*lanes + lane and a later one's cover
            # the same cells.)
            nest = replace(nest, kind="parallel")
        return nest


def build(plan: FusionPlan, bp: BoundProgram, target: Target, parallel_min_cells: int) -> LoweredGroup:
    """One nest computing every member of `plan` (see the module docstring)."""
    first = bp.statements[plan.members[0].index]
    builder = _Builder(plan, bp, vector_lanes(first.dtype, target))
    parallel = target.cores >= 2 and math.prod(plan.shape) >= parallel_min_cells and plan.shape[0] >= target.cores
    return LoweredGroup(builder.build(parallel), (), len(plan.members), plan.elided)


class Rowwise(Template):
    name = "rowwise"
    kind = "cpu"
    requirement = ("it needs a run of elementwise statements and keep-dim row reductions over one iteration "
                   "space (two statements at least, or one elementwise statement)")

    def match(self, index: int, ctx: Context) -> FusionPlan | None:
        return match(index, ctx.bp)

    def consumed(self, plan: FusionPlan) -> int:
        return len(plan.members)

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return build(choice.plan, ctx.bp, ctx.target, ctx.params.parallel_min_cells)


ROWWISE = Rowwise()

__all__ = ["FusionPlan", "ROWWISE", "Rowwise", "build", "match", "vector_lanes"]
