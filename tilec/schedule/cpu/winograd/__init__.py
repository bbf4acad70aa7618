"""Winograd F(2x2, 3x3): a 3x3 stride-1 convolution with 2.25 times fewer multiplications.

A contraction ``O[rows..., col] = +(A[..., x + s*i + d, ..., y + t*j + e, ..., c] * B[i, j, c, col])``
(any index order; s, t = +1 or -1: an input gradient runs its taps backwards) over 3x3 taps
computes each 2x2 tile of output cells from a 4x4 patch d of A and a 3x3 slice g of B as
``Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`` (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016). Summed over the channels c, the 16 element-wise products are 16 GEMMs of
tiles x channels x columns, 16 multiplications per tile where the direct form needs 36::

    Apad[...]     = A with zero borders (tiles past the edge read zeros)
    U[ab, c, col] = (G g Gᵀ)[a, b]            for every channel and column  # filter transform
    V[ab, p, c]   = (Bᵀ d B)[a, b]            for every tile p and channel   # input transform
    M[ab, p, col] = +(V[ab, p, c] * U[ab, c, col])                           # 16 GEMMs
    O[tile p's 2x2 cells, col] = (Aᵀ M[:, p, col] A)                         # output transform

A filter gradient ``O[i, j, c, col] = +(B[batch, x, y, col] * A[.., x + i + d, .., y + j + e, .., c])``
is the same algorithm with the roles exchanged (B's 2x2 tiles the "filter", the taps the output):
``O[.., c, col] = Gᵀ [sum over tiles (A z Aᵀ) ⊙ (Bᵀ d B)] G``, z a tile of B::

    U[ab, p, col] = (A z Aᵀ)[a, b]            for every tile p and column    # gradient transform
    V[ab, p, c]   = (Bᵀ d B)[a, b]            as above
    M[ab, c, col] = +(V[ab, p, c] * U[ab, p, col])                           # 16 GEMMs over tiles
    O[taps, c, col] = (Gᵀ M[:, c, col] G)                                     # filter output

The GEMMs go through the implicit-GEMM template's packed or direct variant
(tilec.schedule.cpu.implicit_gemm) with this template's knobs (GemmKnobs: the 16 GEMMs'); the transforms
(.transforms) run over tiles (or channels) split across the threads, vectorized along the channel
or column, which must be the innermost index of the tensors they read. The pattern: .plan.

Requires: a BoundContraction whose GEMM roles (implicit_gemm.match) have no outer loop, and in
one index of A each of two taps ranging over 0..2 beside one position variable with coefficient
1 (positions are output rows and taps reduction variables in a convolution, the other way round
in a filter gradient); A's other indices lone batch or channel variables, the channel innermost;
B's indices lone variables (the taps, channel and column; or the batch, positions and column,
the column innermost); only bound guards on A and none on B. Guarantees: the contraction's
result (with float rounding of the transforms: F(2x2, 3x3) loses about one decimal digit
against the direct sum).
"""

from __future__ import annotations

from dataclasses import replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundContraction
from tilec.ir.lower import LoweredGroup
from tilec.schedule.cpu import copy_fold
from tilec.schedule.cpu.implicit_gemm import packed_or_direct
from tilec.schedule.cpu.implicit_gemm.direct import DirectPlan, padding
from tilec.schedule.cpu.implicit_gemm.knobs import GemmKnobs, knob_problems, worthwhile
from tilec.schedule.cpu.implicit_gemm.packed import PackedPlan, bf16_pairs
from tilec.schedule.cpu.implicit_gemm.padding import Pads, padded_operand
from tilec.schedule.cpu.winograd import plan
from tilec.schedule.cpu.winograd.plan import POINTS, WinogradPlan, lone, workspace_names
from tilec.schedule.cpu.winograd.transforms import (filter_column_inner, filter_output, filter_transform,
                                                    gradient_transform, input_transform, output_transform)
from tilec.schedule.patterns import gemm as gemm_pattern
from tilec.schedule.patterns.epilogue import covered, find_epilogue, fused_group
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Choice, Context, Template

DTYPES = ("float32", "float64")  # the dtypes the Winograd template takes


def _operand(name: str, tensor: str, pads: Pads, ctx: Context, stmts: list[L.Stmt], workspaces: list[L.Buffer]) -> str:
    """The buffer a transform reads `tensor` from: a zero-padded copy (gathered from a folded layout
    copy's source) when it needs borders or is folded, else the tensor itself."""
    if all(p == (0, 0) for p in pads) and tensor not in ctx.folded:
        return tensor
    fill, buf = padded_operand(name, tensor, pads, ctx)
    stmts.append(fill)
    workspaces.append(buf)
    return name


def build(b: BoundContraction, wp: WinogradPlan, knobs: GemmKnobs, ctx: Context) -> tuple[L.Stmt, list[L.Buffer]]:
    """The phases and their workspaces; `knobs` are the 16 GEMMs' (of wp.gemm)."""
    bp, target, copies, epilogue = ctx.bp, ctx.target, ctx.folded, wp.epilogue
    dt, plan, image = b.dtype, wp.conv, wp.image
    u, v, m, apad, bpad = workspace_names(b.output)
    column_inner = wp.weight or filter_column_inner(bp, wp, copies)
    g = wp.gemm
    if not column_inner:  # U laid out [point, column, channel], as the filter transform stores it
        point, channel, col = g.b.indices
        g = replace(g, b=replace(g.b, indices=(point, col, channel)))
    shapes = {u: _extents(g.b, g), v: _extents(g.a, g), m: (POINTS, g.m, g.n)}
    workspaces = [L.Buffer(name, dt, shape) for name, shape in shapes.items()]
    stmts: list[L.Stmt] = []
    a_source = _operand(apad, plan.a.tensor, image.pads, ctx, stmts, workspaces)
    stmts.append(input_transform(b, wp, a_source, bp.dtypes[plan.a.tensor], target))
    if wp.weight:
        b_source = _operand(bpad, plan.b.tensor, wp.b_pads, ctx, stmts, workspaces)
        stmts.append(gradient_transform(b, wp, b_source, bp.dtypes[plan.b.tensor], target))
    else:
        stmts.append(filter_transform(b, bp, wp, target, column_inner))

    gemm_b = replace(b, stmt=replace(b.stmt, output=m), shape=shapes[m],
                     out_indices=tuple(lone(r[0]) for r in (g.outer[0], g.rows[0], g.col)),
                     operands=(g.a, g.b), ranges=g.outer + g.rows + (g.col,) + g.red, guards=(), empty=False)
    gemm_bp = replace(bp, shapes={**bp.shapes, **shapes}, dtypes={**bp.dtypes, **{n: dt for n in shapes}})
    gemm_ctx = replace(ctx, bp=gemm_bp, folded={})
    gemm_plan = PackedPlan(g, None) if knobs.pack_a else DirectPlan(g, padding(g, gemm_bp), None)  # type: ignore[arg-type]
    gemm, gemm_workspaces = gemm_plan.build(gemm_b, knobs, gemm_ctx)
    stmts.append(gemm)
    workspaces += gemm_workspaces
    stmts.append(filter_output(b, bp, wp, target, epilogue) if wp.weight else output_transform(b, bp, wp, target, epilogue))
    return L.seq(*stmts), workspaces


def _extents(access: BoundAccess, plan: GemmPlan) -> tuple[int, ...]:
    """The shape of a workspace `access` reads whole, from the plan's variable ranges."""
    ranges = {v: hi - lo + 1 for v, lo, hi in plan.outer + plan.rows + (plan.col,) + plan.red}
    return tuple(ranges[e.lone_var] for e in access.indices)  # type: ignore[index]


class Winograd(Template):
    name = "winograd"
    kind = "cpu"
    knob_type = GemmKnobs
    folds_copies = True
    requirement = ("it needs a 3x3 stride-1 convolution or filter gradient (no batch loop around its GEMM) "
                   "whose channel is the image's innermost index")

    def match(self, index: int, ctx: Context) -> WinogradPlan | None:
        b = ctx.bp.statements[index]
        if not isinstance(b, BoundContraction):
            return None
        conv = gemm_pattern.match(b, DTYPES)  # (its transforms would round 16-bit floats at every stage)
        wp = plan.match(b, conv, ctx.bp) if conv is not None else None
        return None if wp is None else replace(wp, epilogue=find_epilogue(index, ctx.bp))

    def profitable(self, wp: WinogradPlan, ctx: Context) -> bool:
        # bfloat16 operands on a CPU with the pair dot product: the direct form runs twice float32's
        # products per instruction, and the transforms would run in float32 (Zen 5, 3x3 bfloat16
        # convolutions, 256 -> 256 channels at 14^2 and 28^2, 128 -> 128 at 56^2: 1.04-1.55x faster direct)
        pairs = bf16_pairs(wp.conv, ctx.bp.dtypes, ctx.target, ctx.target.lanes("float32"))
        return worthwhile(wp.conv, ctx.params) and plan.large_enough(wp, ctx.params) and not pairs

    def default_knobs(self, index: int, wp: WinogradPlan, ctx: Context) -> GemmKnobs:
        # the GEMMs' A is the input transform, a workspace without guards: readable in place
        return packed_or_direct(wp.gemm, ctx, wp.conv.dtype, tuple((0, 0) for _ in wp.gemm.a.indices))

    def problems(self, knobs: GemmKnobs, wp: WinogradPlan, ctx: Context) -> list[str]:
        problems = knob_problems(knobs, wp.gemm, wp.conv.dtype, ctx.target)
        if not knobs.pack_b:
            problems.append("pack_b must be true: the 16 GEMMs read the transformed filter packed")
        return problems

    def consumed(self, wp: WinogradPlan) -> int:
        return covered(wp.epilogue)

    def reads_through(self, choice: Choice) -> frozenset[str]:
        """A is padded (or gathered) for the input transform, B transformed: copies of either fold in."""
        return frozenset({choice.plan.conv.a.tensor, choice.plan.conv.b.tensor})

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        b = ctx.bp.statements[choice.index]
        assert isinstance(b, BoundContraction)
        stmt, workspaces = build(b, choice.plan, choice.knobs, ctx)
        return fused_group(copy_fold.read_through(stmt, ctx.folded), b, choice.plan.epilogue, tuple(workspaces))


WINOGRAD = Winograd()

__all__ = ["WINOGRAD", "Winograd", "build"]
