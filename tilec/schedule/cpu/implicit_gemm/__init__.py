"""The implicit-GEMM template (CPU): any sum-of-products contraction as a register-blocked GEMM.

One template, three variants, each a module of its own with its plan type:

* packed (tilec.schedule.cpu.implicit_gemm.packed): A and B packed into panels, the BLIS recipe;
* direct (.direct, knob pack_a=False): A read in place from a zero-padded copy, for few column
  panels (a convolution's output channels), where packing A costs more than it saves; bfloat16
  as pairs for the pair dot product where the CPU has it (.pairs: in place, or from a halved or
  an interleaved copy); how it reads B in .direct_b; the tiles stored through the layout copy that alone reads the
  result where they land there as whole vectors (.stored_tiles: a convolution's copy back to NCHW);
* in-place (.inplace, knob pack_b=False): both operands read in place, the column where one of
  them is contiguous, the tiles stored through the layout copy that alone reads the product (a
  convolution's weight gradient).

The knobs (GemmKnobs, .knobs) pick the variant; the heuristic picks the knobs: in-place where
the tiles then land at a smaller stride of the copy that reads them, direct where A can be read
in place and either needs no zero-bordered copy (B's micro-panel over all of K fitting half of
L2) or the column panels are few, packed otherwise. Products too small to gain keep the
default nest. The elementwise statements that follow are fused as an epilogue
(tilec.schedule.patterns.epilogue) and layout copies that only feed the packing are read through
(tilec.schedule.cpu.copy_fold). Space and features for the tuner: .space, .features.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction
from tilec.ir.dtypes import LOW_PRECISION, accumulator_dtype
from tilec.ir.lower import LoweredGroup
from tilec.schedule.cpu import copy_fold
from tilec.schedule.cpu.implicit_gemm import inplace
from tilec.schedule.cpu.implicit_gemm.direct import DirectPlan, by_panels, padding
from tilec.schedule.cpu.implicit_gemm.stored_tiles import stores_well
from tilec.schedule.cpu.implicit_gemm.direct_b import b_through
from tilec.schedule.cpu.implicit_gemm.pairs import pair_steps, pairs
from tilec.schedule.cpu.implicit_gemm.padding import Pads
from tilec.schedule.cpu.implicit_gemm.features import NAMES, gemm_features
from tilec.schedule.cpu.implicit_gemm.knobs import (DTYPES, GemmKnobs, default_knobs, itemsize, knob_problems, reduction_block,
                                                   row_block, shared_panels_block, worthwhile)
from tilec.schedule.cpu.implicit_gemm.packed import PackedPlan, bf16_pairs
from tilec.schedule.cpu.implicit_gemm.space import gemm_space
from tilec.schedule.cpu.implicit_gemm.tiles import tile_knobs, tiles_pay, uses_tiles
from tilec.schedule.patterns import gemm as gemm_pattern
from tilec.schedule.patterns.epilogue import covered, find_epilogue, fused_group
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.patterns.layout_copy import Copy, output_copy
from tilec.schedule.templates.base import Choice, Context, Template
from tilec.schedule.templates.space import Config, Constraint, Knob

VariantPlan = PackedPlan | DirectPlan | inplace.InplacePlan


def on_tiles(plan: GemmPlan, ctx: Context, knobs: GemmKnobs) -> bool:
    """Whether the packed variant builds `knobs`' register block on AMX tiles (.tiles; packed.build
    asks the same)."""
    return uses_tiles(bf16_pairs(plan, ctx.bp.dtypes, ctx.target, knobs.nr), ctx.target, knobs.mr, knobs.nr)


class ImplicitGemm(Template):
    name = "implicit_gemm"
    kind = "cpu"
    knob_type = GemmKnobs
    tunable = True
    folds_copies = True
    requirement = "it needs a sum of products onto a direct output whose last index only one operand reads"
    feature_names = NAMES

    def match(self, index: int, ctx: Context) -> GemmPlan | None:
        b = ctx.bp.statements[index]
        return gemm_pattern.match(b, DTYPES) if isinstance(b, BoundContraction) else None

    def profitable(self, plan: GemmPlan, ctx: Context) -> bool:
        return worthwhile(plan, ctx.params)

    def problems(self, knobs: GemmKnobs, plan: GemmPlan, ctx: Context) -> list[str]:
        return knob_problems(knobs, plan, plan.dtype, ctx.target, knobs.pack_a and on_tiles(plan, ctx, knobs))

    def heuristic(self, index: int, ctx: Context) -> Choice | None:
        """The untuned choice: the variant and knobs of the module doc, or None (too small)."""
        plan = self.match(index, ctx)
        if plan is None or not worthwhile(plan, ctx.params):
            return None
        b = ctx.bp.statements[index]
        assert isinstance(b, BoundContraction)
        out_copy = output_copy(index, ctx.bp)
        b_packed = accumulator_dtype(b.dtype) != b.dtype  # 16-bit floats: B converted while packed
        candidate = select_inplace(b, ctx, plan, out_copy) if out_copy is not None and not b_packed else None
        if candidate is not None:
            knobs = inplace.default_knobs(candidate, b.dtype, ctx.target)
        else:
            knobs = packed_or_direct(plan, ctx, b.dtype, padding(plan, ctx.bp))
        return self._choice(index, ctx, plan, knobs, candidate, out_copy)

    def default_knobs(self, index: int, plan: GemmPlan, ctx: Context) -> GemmKnobs:
        choice = self.heuristic(index, ctx)
        if choice is not None:
            return choice.knobs
        return default_knobs(plan, plan.dtype, ctx.target)

    def choose(self, index: int, ctx: Context, items: Any = None) -> Choice:
        if items is None:
            return super().choose(index, ctx)
        where = ctx.where(index)
        plan = self.match(index, ctx)
        if plan is None:
            raise ScheduleError(f"template '{self.name}' does not apply to {where}: {self.requirement}")
        knobs = self.checked(self.knobs_of(items), plan, ctx, where)
        if not knobs.pack_a and padding(plan, ctx.bp) is None:
            raise ScheduleError(f"pack_a=False needs A's only guards to be its own bounds (padding); {where} has others")
        candidate, out_copy = None, None
        if not knobs.pack_b:
            b = ctx.bp.statements[index]
            assert isinstance(b, BoundContraction)
            out_copy = output_copy(index, ctx.bp)
            candidate = select_inplace(b, ctx, plan, out_copy, knobs.nr)
            if candidate is None:
                raise ScheduleError(f"pack_b=False does not apply to {where}: it needs an output index that is "
                                    f"one operand's innermost index alone, a multiple of nr={knobs.nr} wide, "
                                    f"and each operand's only guards its own bounds")
        return self._choice(index, ctx, plan, knobs, candidate, out_copy)

    def chosen(self, index: int, plan: Any, knobs: Any) -> Choice:  # the Template.choose path
        raise AssertionError("implicit_gemm builds its choices through _choice")

    def _choice(self, index: int, ctx: Context, plan: GemmPlan, knobs: GemmKnobs,
                candidate: inplace.Candidate | None, out_copy: Copy | None) -> Choice:
        variant: VariantPlan
        if candidate is not None:
            epilogue = None if out_copy is not None else find_epilogue(index, ctx.bp)
            variant = inplace.InplacePlan(candidate, out_copy, epilogue)
        else:
            epilogue = None if plan.partial else find_epilogue(index, ctx.bp)  # f(0) need not be 0
            pads = padding(plan, ctx.bp)
            if knobs.pack_a:
                variant = PackedPlan(plan, epilogue, on_tiles(plan, ctx, knobs))
            else:
                variant = DirectPlan(plan, pads, epilogue, direct_store(index, ctx, plan, epilogue, knobs.mr, knobs.nr),  # type: ignore[arg-type]
                                     b_through(plan, pads, ctx, knobs.nr))  # type: ignore[arg-type]
        return Choice(index, self, variant, knobs, covered(variant.epilogue))

    def label(self, choice: Choice) -> str:
        return f"{self.name}[{choice.plan.variant}]"

    def reads_through(self, choice: Choice) -> frozenset[str]:
        """The operands it reads only where reading a layout copy's source instead is no extra pass."""
        return choice.plan.reads_through(choice.knobs)

    def stores(self, choice: Choice) -> str | None:
        """The layout copy it stores its tiles into (that copy's statement is then lowered by it)."""
        return choice.plan.stores()

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        b = ctx.bp.statements[choice.index]
        assert isinstance(b, BoundContraction)
        plan: VariantPlan = choice.plan
        stmt, workspaces = plan.build(b, choice.knobs, ctx)
        group = fused_group(copy_fold.read_through(stmt, ctx.folded), b, plan.epilogue, tuple(workspaces))
        if plan.stores() is None:
            return group
        return replace(group, elided=group.elided + (plan.epilogue.dest if plan.epilogue is not None else b.output,))

    # ------------------------------------------------------------ tuning
    def space(self, index: int, plan: GemmPlan, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        return gemm_space(index, plan, ctx, default)

    def features(self, index: int, plan: GemmPlan, ctx: Context, config: Mapping[str, Any]) -> list[float]:
        return gemm_features(index, plan, ctx, config)

    def flops(self, plan: GemmPlan) -> float:
        return 2.0 * plan.m * plan.n * plan.k * plan.batch


def packed_or_direct(plan: GemmPlan, ctx: Context, dtype: str, pads: Pads | None) -> GemmKnobs:
    """The packed variant's default knobs, or A read in place (direct) where it can be (`pads`, its
    zero borders, not None) and either

    * A needs no zero-bordered copy and B's micro-panel over all of K (the direct variant packs B
      once, K unblocked) fits half of L2: every packed A element would be read once per column
      panel from L2 anyway, so packing it is one more pass over A and a cold workspace per call
      (measured on Zen 4, one and two cores: 64x512x512 in any layout 1.03-1.1x, 1024^3 1.03x,
      2048^3 1.05x faster direct; with K = 4096 at M = 64, whose B micro-panel fills L2, 0.96x),
      unless every other step of the reduction moves A's reads to another page or more (`a_step_bytes`:
      a transposed A of 512 or more float32 rows, a linear layer's weight gradient, whose direct
      micro-tiles then touch a page every product or two; measured on Zen 3, 2 cores, C[M, 256] =
      +(A[k, i] * B[k, j]), K = 512, direct vs packed: M = 1024 3.60 vs 2.68 ms, 1000 2.72-2.98 vs
      2.53-2.81, 512 1.51-1.92 vs 1.39-1.69; 1024^3 33.0 vs 19.4; M = 256 0.83 vs 0.87, mixed); or
    * the column panels are few (each packed A element would serve too few of them); or
    * the rows are few against B (`shares_panels`): the direct variant's threads then share B's
      column panels, each reading its share of B, where the packed variant's share the row tiles
      and each reads all of B (a convolution on a small map: 32 rows of A against 2.4 MB of
      weights). Measured on Zen 3 (AVX2, whose 3-vector panels make the panels many; both cores,
      3x3 convolutions, 30 interleaved rounds), packed vs direct: 256->256 on 2x2 maps, 8 images,
      0.63 vs 0.44 ms; 512->512 on 2x2, 8 images, 4.68 vs 2.49 (torch 4.08); 512->512 on 4x4, 2
      images, 4.69 vs 2.50 (torch 3.25); stride 2, 8 images, 256->512 from 4x4 1.50 vs 0.95; a
      GEMM of 32 rows, K = 4608, N = 512, 2.11 vs 1.77;

    and the direct variant would not give up the bfloat16 pair dot product the packed one has
    (`pairs_lost`), nor convert a 16-bit A at every use where the column panels are many
    (`converts_a`); or
    * the direct variant multiplies bfloat16 pairs (`direct_pairs`): it then beat the packed one on
      every shape measured (Zen 5, both cores; the packed variant at 40-80% of its speed: GEMMs
      1024^3 925 vs 729 GFLOP/s, 512 x 1024 x 4096 944 vs 539, 256 x 2048 x 8192 689 vs 401, a
      transposed A 1024 x 1024 x 512 977 vs 783; 3x3 convolutions of 512 columns 1.7-1.8x)."""
    if tiles_pay(plan):
        tiled = tile_knobs(plan, ctx.target)
        if on_tiles(plan, ctx, tiled):
            return tiled  # AMX: the packed variant on tiles (.tiles)
    knobs = default_knobs(plan, dtype, ctx.target)
    panels = -(-plan.n // knobs.nr)
    if pads is None or pairs_lost(plan, ctx, knobs, pads) or \
            (converts_a(plan, ctx, knobs, pads) and panels > ctx.params.direct_max_panels):
        return knobs
    assert ctx.target.host is not None
    no_copy = all(p == (0, 0) for p in pads)
    b_panel = plan.k * knobs.nr * itemsize(dtype)
    near_steps = a_step_bytes(plan, ctx, pads) < PAGE_BYTES // 2
    if (no_copy and near_steps and 2 * b_panel <= ctx.target.host.l2_bytes) or panels <= ctx.params.direct_max_panels \
            or shares_panels(plan, ctx, knobs, panels) or direct_pairs(plan, ctx, knobs, pads):
        knobs = replace(knobs, pack_a=False)
        if aliased_a_steps(plan, ctx, pads, knobs):
            knobs = replace(default_knobs(plan, dtype, ctx.target, per_line=True), pack_a=False)
        else:
            knobs = panels_shared(plan, ctx, dtype, knobs)
    return knobs


def shares_panels(plan: GemmPlan, ctx: Context, knobs: GemmKnobs, panels: int) -> bool:
    """Whether the rows are so few that the packed variant (`knobs`) gives each thread at most one
    row block, for which each would read all of B, and the direct variant's threads would share
    B's `panels` column panels instead (the rows are theirs to share, with no outer loop for them,
    and direct.by_panels finds that each thread then reads fewer bytes). A is then at most one
    packed block per thread (a quarter of L2 per reduction block), so the direct variant's passes
    over it, one per column panel, stay in cache. Where the rows are more, the direct variant was
    1.08-1.15x faster too on Zen 3 (GEMMs of 64-512 rows, K = 4096, N = 1024; a stride-2 3x3
    convolution of 392 rows), but its passes over A then reach L3, which no other CPU has been
    measured with."""
    threads = knobs.threads or ctx.target.cores
    return plan.batch < threads and plan.m <= threads * knobs.mc and \
        by_panels(plan, panels, threads, ctx.bp.shapes[plan.a.tensor])


def panels_shared(plan: GemmPlan, ctx: Context, dtype: str, knobs: GemmKnobs) -> GemmKnobs:
    """The direct variant's knobs with the register block for threads that share B's column panels
    (knobs.shared_panels_block) where the rows are the threads' to share (no outer loop for them),
    B's micro-panel over all of K does not fit half of L2 (the direct variant streams it from
    beyond L2 for every row tile: a weight gradient's output gradient, K = the images' pixels) and,
    with that block, sharing the panels reads fewer bytes (direct.by_panels); else `knobs`."""
    cpu, threads, size = ctx.target.host, knobs.threads or ctx.target.cores, itemsize(dtype)
    assert cpu is not None
    if plan.batch >= threads or 2 * plan.k * knobs.nr * size <= cpu.l2_bytes:
        return knobs
    block = shared_panels_block(plan.m, plan.n, ctx.target.lanes(accumulator_dtype(dtype)), cpu, threads)
    if block is None or block == (knobs.mr, knobs.nr) or \
            not by_panels(plan, -(-plan.n // block[1]), threads, ctx.bp.shapes[plan.a.tensor]):
        return knobs
    mr, nr = block
    kc = reduction_block(plan.k, plan.n, nr, size, cpu)
    return replace(knobs, mr=mr, nr=nr, kc=kc, mc=row_block(plan.m, mr, kc, size, cpu, 1))


PAGE_BYTES = 4096  # the smallest page of the CPUs tilec targets, and the way of every one's L1 (32 KiB 8-way, 48 KiB 12-way)


def aliased_a_steps(plan: GemmPlan, ctx: Context, pads: Pads, knobs: GemmKnobs) -> bool:
    """Whether the direct variant reads A with its rows side by side (A transposed: a linear layer's
    weight gradient X^T dY) and each step of the micro-kernel's reduction (a pair of steps where it
    multiplies bfloat16 pairs) moves A's address by a multiple of PAGE_BYTES. Then all the lines one
    tile reads over the reduction fall into one set of L1 (and few of L2), and each is fetched again,
    from L3, by every tile that shares it: a 4-row tile uses 4 of its 16 floats. Measured on Zen 5
    (2 cores), C[i, j] = +(A[k, i] * B[k, j]), K = 512, N = 256, the default 4 x 64 block against
    14 x 32: M = 1024 0.72-0.78 vs 0.61 ms, M = 2048 1.58 vs 1.28, and N = 64 0.21 vs 0.17; in
    bfloat16, M = 1024 0.40 vs 0.34 and M = 2048 0.83 vs 0.69. M = 1000 (4000 bytes a step) ran the
    same with either block."""
    if len(plan.rows) != 1:
        return False
    row_steps = pair_steps(plan, plan.rows[0][0])
    if row_steps[-1:] != (1,) or any(row_steps[:-1]):
        return False
    step = a_step_bytes(plan, ctx, pads)
    if direct_pairs(plan, ctx, knobs, pads):
        step *= 2
    return step > 0 and step % PAGE_BYTES == 0


def a_step_bytes(plan: GemmPlan, ctx: Context, pads: Pads) -> int:
    """How far A's address moves (bytes, in its zero-bordered copy where `pads` makes one) when the
    innermost reduction index grows by one; 0 for a workspace a template laid out to be read in place
    (Winograd's input transform)."""
    if plan.a.tensor not in ctx.bp.shapes:
        return 0
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(ctx.bp.shapes[plan.a.tensor], pads))
    steps = pair_steps(plan, plan.red[-1][0])
    return abs(sum(step * math.prod(shape[d + 1:]) for d, step in enumerate(steps))) * \
        itemsize(ctx.bp.dtypes[plan.a.tensor])


def direct_store(index: int, ctx: Context, plan: GemmPlan, epilogue: Any, mr: int, nr: int) -> Copy | None:
    """The layout copy that alone reads the direct variant's result (after its fused epilogue), where
    its tiles land in the copy's output as whole vectors (stored_tiles.stores_well): it stores them there
    and the copy never runs (a channels-last convolution's NHWC -> NCHW copy: 0.2 ms of the 3x3
    64->64 conv's 5.6 on Zen 4, and its temporary)."""
    last = index + (len(epilogue.links) if epilogue is not None else 0)
    copy = output_copy(last, ctx.bp)
    b = ctx.bp.statements[index]
    assert isinstance(b, BoundContraction)
    assert ctx.target.host is not None
    return copy if copy is not None and stores_well(plan, b, copy, mr, nr, ctx.bp, ctx.target.host) else None


def pairs_lost(plan: GemmPlan, ctx: Context, knobs: GemmKnobs, pads: Pads) -> bool:
    """Whether the packed variant multiplies bfloat16 pairs (a matrix: one row and one reduction
    index) and the direct one cannot, neither in A as it lies nor from a copy (.pairs.pairs: a
    linear layer's weight gradient DW[o, k] = +(DO[m, o] * X[m, k]) pairs the m of a halved copy
    of DO; read packed, it ran 1.4-5x slower on Zen 4)."""
    packed_pairs = len(plan.rows) == len(plan.red) == 1 and bf16_pairs(plan, ctx.bp.dtypes, ctx.target, knobs.nr)
    return packed_pairs and pairs(plan, pads, ctx.bp, ctx.target, knobs.nr) is None


def direct_pairs(plan: GemmPlan, ctx: Context, knobs: GemmKnobs, pads: Pads) -> bool:
    """Whether the direct variant multiplies bfloat16 pairs (in A as it lies or from a copy, .pairs)."""
    return bf16_pairs(plan, ctx.bp.dtypes, ctx.target, knobs.nr) and \
        pairs(plan, pads, ctx.bp, ctx.target, knobs.nr) is not None


def converts_a(plan: GemmPlan, ctx: Context, knobs: GemmKnobs, pads: Pads) -> bool:
    """Whether the direct variant would convert each element of a 16-bit A to float32 at every use,
    once per column panel (it reads A as it lies, and multiplies no bfloat16 pairs), where the
    packed variant converts it once, into its float32 panels. float16 GEMM 1024^3 on Zen 5 (no
    AVX512-FP16, both cores): direct 9.1 ms, packed 5.3; float32 direct 4.4, packed 5.2."""
    return ctx.bp.dtypes.get(plan.a.tensor) in LOW_PRECISION and pairs(plan, pads, ctx.bp, ctx.target, knobs.nr) is None


def select_inplace(b: BoundContraction, ctx: Context, plan: GemmPlan, out_copy: Copy | None,
                   nr: int | None = None) -> inplace.Candidate | None:
    """The in-place candidate for `b` whose column has the smallest stride where the tiles are
    stored (the layout copy `out_copy` when given). Without `nr` (the heuristic) only when that is
    smaller than the usual column's: then the packed variants' tiles would land scattered."""
    order: tuple[L.Expr, ...] = tuple(L.Var(e.lone_var) for e in b.out_indices)  # type: ignore[arg-type]
    dest = b.output
    if out_copy is not None:  # b's output variables in the order of the copy's dimensions
        dest, order = out_copy.output, out_copy.dest_cell(order)
    shape = ctx.bp.shapes[dest]

    def stride(var: str) -> int:
        return math.prod(shape[order.index(L.Var(var)) + 1:])

    found = [ip for ip in inplace.candidates(b, ctx.bp, ctx.target.lanes(b.dtype)) if nr is None or ip.gemm.n % nr == 0]
    if not found:
        return None
    best = min(found, key=lambda ip: stride(ip.gemm.col[0]))
    if nr is None and stride(best.gemm.col[0]) >= stride(plan.col[0]):
        return None
    return best


IMPLICIT_GEMM = ImplicitGemm()

__all__ = ["DTYPES", "IMPLICIT_GEMM", "GemmKnobs", "ImplicitGemm", "packed_or_direct", "select_inplace"]
