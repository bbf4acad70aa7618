"""The default heuristic: which template lowers each contraction, with which knobs, untuned.

Requires: a BoundProgram and a Target. Guarantees: a PrimFunc computing what the
default lowering computes; sum-of-products contractions big enough to gain go
through a GEMM template (packed: implicit_gemm; A in place: direct_gemm; both operands in place,
stored through the layout copy that reads the product: inplace_gemm; a wide 3x3 stride-1
convolution or filter gradient: 16 GEMMs between Winograd transforms, winograd) with knobs chosen
from the shapes and target,
with the elementwise statements that follow them fused in as an epilogue; runs of elementwise
statements and keep-dim row reductions over one iteration space become one nest over rows
(tilec/schedule/cpu/rowwise.py); sums over leading axes (a bias's gradient) keep the
vector loop on the output's last axis (tilec/schedule/cpu/column_reduce.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundProgram
from tilec.ir.lower import LoweredGroup, lower, lower_statement
from tilec.schedule.cpu import attention
from tilec.schedule.patterns import attention_backward
from tilec.schedule.cpu import attention_backward as attention_backward_kernel
from tilec.schedule.cpu import column_reduce
from tilec.schedule.cpu import copy_fold
from tilec.schedule.cpu.gemm import direct as direct_gemm
from tilec.schedule.cpu import rowwise as elementwise_fusion
from tilec.schedule.cpu.gemm import packed as implicit_gemm
from tilec.schedule.cpu.gemm import inplace as inplace_gemm
from tilec.schedule.cpu import permute
from tilec.schedule.cpu import winograd
from tilec.schedule.patterns.epilogue import find_epilogue, fused_group
from tilec.ir.legality import check_parallel
from tilec.errors import ScheduleError
from tilec.schedule.templates.config import GPU_TEMPLATES, TemplateConfig, TemplateSchedule
from tilec.target import Target

DIRECT_MAX_PANELS = 4  # column panels up to which reading A in place beats packing it


PARALLEL_MIN_CELLS = 1 << 15  # output cells below which starting the pool costs more than it saves


def auto_lower(bp: BoundProgram, target: Target, overrides: "TemplateSchedule | None" = None) -> L.PrimFunc:
    """Lower with the templates; `overrides` (a TemplateSchedule) fixes the template and knobs
    of the statements it names, and the heuristic picks the rest."""
    overrides = overrides or TemplateSchedule()
    for config in overrides.configs:
        if not 0 <= config.stmt < len(bp.statements):
            raise ScheduleError(f"template config for statement {config.stmt}, but the program has "
                                f"{len(bp.statements)} statement(s)")

    gemms = _gemm_decisions(bp, target, overrides)
    stored = {d.out_copy.output for d in gemms.values() if d.out_copy is not None}  # written by their GEMM
    folded = copy_fold.foldable(bp, {k: d.through() for k, d in gemms.items()}, frozenset(stored))

    def strategy(index: int, program: BoundProgram) -> LoweredGroup | None:
        b = program.statements[index]
        if b.output in folded:  # every reader packs it from the source: never materialised
            return LoweredGroup(L.seq(), elided=(b.output,))
        if b.output in stored:  # its GEMM stored it already
            return LoweredGroup(L.seq())
        if index in gemms:
            return _gemm_group(index, b, program, target, gemms[index], folded)  # type: ignore[arg-type]
        config = overrides.override(index)
        if config is not None:
            return _configured(index, b, program, target, config)
        if isinstance(b, BoundContraction):
            plan = attention.match(index, program)
            if plan is not None:
                return attention.build(plan, program, target)
            backward = attention_backward.match(index, program)
            if backward is not None:
                return attention_backward_kernel.build(backward, program, target)
            permutation = permute.match(b, program)
            if permutation is not None:
                return permute.build(permutation, b, program, target, PARALLEL_MIN_CELLS)
            column = column_reduce.match(b)
            if column is not None:
                return column_reduce.build(column, b, program, target, PARALLEL_MIN_CELLS)
        fused = elementwise_fusion.match(index, program)
        if fused is not None:
            return elementwise_fusion.build(fused, program, target, PARALLEL_MIN_CELLS)
        return _parallel_default(b, program, target)

    return lower(bp, strategy=strategy)


def _configured(index: int, b: BoundContraction | BoundElementwise, program: BoundProgram, target: Target,
                config: TemplateConfig) -> LoweredGroup | None:
    if config.template == "default":
        return None
    where = f"statement {index} ('{b.stmt}')"
    if config.template in GPU_TEMPLATES:
        raise ScheduleError(f"template '{config.template}' for {where} is a GPU template; on target {target.name} "
                            f"use implicit_gemm, attention or default (or compile for cuda / cuda-sim)")
    if config.template == "attention":
        plan = attention.match(index, program)
        if plan is None:
            raise ScheduleError(f"template 'attention' does not apply to {where}: it must start the chain "
                                f"scores, softmax, times V (see tilec/schedule/cpu/attention.py)")
        knobs = config.knob_record()
        if knobs.bq < 1 or knobs.bk < attention.LANES or knobs.bk % attention.LANES:
            raise ScheduleError(f"attention knobs {knobs} for {where}: bq must be >= 1 and bk a positive multiple "
                                f"of {attention.LANES}")
        return attention.build(plan, program, target, knobs)
    if config.template == "attention_backward":
        backward = attention_backward.match(index, program)
        if backward is None:
            raise ScheduleError(f"template 'attention_backward' does not apply to {where}: it must start the "
                                f"gradient tilec.grad derives from attention (see tilec/schedule/patterns/attention_backward.py)")
        knobs = config.knob_record()
        problems = attention_backward.knob_problems(knobs)
        if problems:
            raise ScheduleError(f"attention_backward knobs {knobs} for {where}: " + "; ".join(problems))
        return attention_backward_kernel.build(backward, program, target, knobs)
    raise _not_a_gemm(where)  # implicit_gemm on a contraction is decided in _gemm_decisions


def _not_a_gemm(where: str) -> ScheduleError:
    return ScheduleError(f"template 'implicit_gemm' does not apply to {where}: it needs a sum of products "
                         f"onto a direct output whose last index only one operand reads")


def _check_gemm_knobs(knobs: implicit_gemm.GemmKnobs, where: str, target: Target, dtype: str) -> None:
    lanes = target.lanes(dtype)
    problems = []
    if knobs.mr < 1 or knobs.nr < 1 or knobs.kc < 1 or knobs.mc < 1:
        problems.append("every block size must be positive")
    if knobs.mc % max(1, knobs.mr):
        problems.append(f"mc ({knobs.mc}) must be a multiple of mr ({knobs.mr})")
    if knobs.threads < 0:
        problems.append("threads must be >= 0 (0: one per core)")
    if problems:
        raise ScheduleError(f"implicit_gemm knobs {knobs} for {where}: " + "; ".join(problems)
                            + f" (vector lanes here: {lanes})")


@dataclass(frozen=True)
class GemmDecision:
    """How a GEMM template lowers one statement."""

    plan: implicit_gemm.GemmPlan
    knobs: implicit_gemm.GemmKnobs
    a_pads: direct_gemm.Pads | None = None  # A read in place (direct_gemm): its zero borders
    inplace: inplace_gemm.InplacePlan | None = None  # both operands read in place: the plan
    out_copy: copy_fold.Copy | None = None  # the layout copy the tiles are stored into directly
    winograd: winograd.WinogradPlan | None = None  # a 3x3 convolution as 16 GEMMs (`knobs` are theirs)

    def through(self) -> frozenset[str]:
        """The operands the template reads only where reading a layout copy's source instead is no
        extra pass: while packing or zero-padding them, or (read in place) as broadcast scalars."""
        a, b = self.plan.a.tensor, self.plan.b.tensor
        if self.inplace is not None or self.winograd is not None:  # A broadcast or padded; B copied or transformed
            return frozenset({a, b})
        if self.knobs.pack_a or (self.a_pads is not None and any(p != (0, 0) for p in self.a_pads)):
            return frozenset({a, b})
        return frozenset({b} - {a})  # A read in place: not through a copy, even where it is B too


def _gemm_decisions(bp: BoundProgram, target: Target, overrides: TemplateSchedule) -> dict[int, GemmDecision]:
    """The statements the GEMM templates lower, decided before lowering starts (copies they pack
    from are folded into them: tilec.schedule.cpu.copy_fold). Mirrors the strategy's order: an
    override first, then attention's templates, then the GEMM heuristic."""
    out: dict[int, GemmDecision] = {}
    covered = 0  # statements before this one belong to an attention template's group
    for index, b in enumerate(bp.statements):
        config = overrides.override(index)
        if index < covered or not isinstance(b, BoundContraction):
            continue
        group = _attention_group(index, bp, config)
        if group:
            covered = index + group
            continue
        if config is None:
            decision = default_gemm(index, bp, target)
            if decision is not None:
                out[index] = decision
            continue
        if config.template != "implicit_gemm":
            continue
        where = f"statement {index} ('{b.stmt}')"
        plan = implicit_gemm.match(b)
        if plan is None:
            raise _not_a_gemm(where)
        knobs = config.knob_record()
        _check_gemm_knobs(knobs, where, target, b.dtype)
        if not knobs.pack_a and not direct_gemm.applicable(plan, bp):
            raise ScheduleError(f"pack_a=False needs A's only guards to be its own bounds (padding); "
                                f"{where} has others")
        inplace, out_copy = None, None
        if not knobs.pack_b:
            out_copy = copy_fold.output_copy(index, bp)
            inplace = _inplace_plan(b, bp, target, plan, out_copy, knobs.nr)
            if inplace is None:
                raise ScheduleError(f"pack_b=False does not apply to {where}: it needs an output index that is "
                                    f"one operand's innermost index alone, a multiple of nr={knobs.nr} wide, "
                                    f"and each operand's only guards its own bounds")
        out[index] = _decision(b, bp, plan, knobs, inplace, out_copy)
    return out


def default_gemm(index: int, bp: BoundProgram, target: Target) -> GemmDecision | None:
    """The heuristic's GEMM template and knobs for statement `index`, or None (not a GEMM, or too
    small to gain). Both operands are read in place when the tiles then land at a smaller stride of
    the layout copy that reads them (tilec.schedule.cpu.gemm.inplace); A is read in place when each
    packed element would serve few column panels (tilec.schedule.cpu.gemm.direct)."""
    b = bp.statements[index]
    plan = implicit_gemm.match(b) if isinstance(b, BoundContraction) else None
    if plan is None or not implicit_gemm.worthwhile(plan, target):
        return None
    wino = winograd.match(b, plan, bp)  # type: ignore[arg-type]
    if wino is not None:
        # the GEMMs' A is the input transform, a workspace without guards: readable in place
        return GemmDecision(plan, _packed_or_direct(wino.gemm, target, b.dtype, True), winograd=wino)
    out_copy = copy_fold.output_copy(index, bp)
    inplace = _inplace_plan(b, bp, target, plan, out_copy) if out_copy is not None else None  # type: ignore[arg-type]
    if inplace is not None:
        knobs = inplace_gemm.default_knobs(inplace, b.dtype, target)
    else:
        knobs = _packed_or_direct(plan, target, b.dtype, direct_gemm.applicable(plan, bp))
    return _decision(b, bp, plan, knobs, inplace, out_copy)  # type: ignore[arg-type]


def _packed_or_direct(plan: implicit_gemm.GemmPlan, target: Target, dtype: str,
                      a_in_place: bool) -> implicit_gemm.GemmKnobs:
    """The packed template's default knobs, A read in place (direct_gemm) where it can be
    (`a_in_place`) and the columns are few."""
    knobs = implicit_gemm.default_knobs(plan, dtype, target)
    if -(-plan.n // knobs.nr) <= DIRECT_MAX_PANELS and a_in_place:
        knobs = replace(knobs, pack_a=False)  # each packed A element would serve too few panels
    return knobs


def _decision(b: BoundContraction, bp: BoundProgram, plan: implicit_gemm.GemmPlan, knobs: implicit_gemm.GemmKnobs,
              inplace: inplace_gemm.InplacePlan | None, out_copy: copy_fold.Copy | None) -> GemmDecision:
    if inplace is not None:
        return GemmDecision(inplace.gemm, knobs, inplace=inplace, out_copy=out_copy)
    return GemmDecision(plan, knobs, None if knobs.pack_a else direct_gemm.padding(plan, bp))


def inplace_columns(index: int, bp: BoundProgram, target: Target) -> tuple[int, ...]:
    """The column counts of the in-place template's plans for statement `index` (knob pack_b=False
    needs an nr that divides one of them); empty when it does not apply."""
    b = bp.statements[index]
    if not isinstance(b, BoundContraction):
        return ()
    lanes = target.lanes(b.dtype)
    return tuple(ip.gemm.n for ip in inplace_gemm.match(b, bp, lanes))


def _inplace_plan(b: BoundContraction, bp: BoundProgram, target: Target, plan: implicit_gemm.GemmPlan,
                  out_copy: copy_fold.Copy | None, nr: int | None = None) -> inplace_gemm.InplacePlan | None:
    """The in-place template's plan for `b` whose column has the smallest stride where the tiles are
    stored (the layout copy `out_copy` when given). Without `nr` (the heuristic) only when that is
    smaller than the usual column's: then the packed templates' tiles would land scattered."""
    order: tuple[L.Expr, ...] = tuple(L.Var(e.lone_var) for e in b.out_indices)  # type: ignore[arg-type]
    dest = b.output
    if out_copy is not None:  # b's output variables in the order of the copy's dimensions
        dest, order = out_copy.output, out_copy.dest_cell(order)
    shape = bp.shapes[dest]

    def stride(var: str) -> int:
        return math.prod(shape[order.index(L.Var(var)) + 1:])

    candidates = [ip for ip in inplace_gemm.match(b, bp, target.lanes(b.dtype)) if nr is None or ip.gemm.n % nr == 0]
    if not candidates:
        return None
    best = min(candidates, key=lambda ip: stride(ip.gemm.col[0]))
    if nr is None and stride(best.gemm.col[0]) >= stride(plan.col[0]):
        return None
    return best


def _attention_group(index: int, bp: BoundProgram, config: TemplateConfig | None) -> int:
    """How many statements an attention template lowers from statement `index` on (0: none)."""
    if config is not None and config.template not in ("attention", "attention_backward"):
        return 0
    if config is None or config.template == "attention":
        plan = attention.match(index, bp)
        if plan is not None:
            return plan.consumed
    if config is None or config.template == "attention_backward":
        backward = attention_backward.match(index, bp)
        if backward is not None:
            return backward.consumed
    return 0


def _gemm_group(index: int, b: BoundContraction, program: BoundProgram, target: Target, decision: GemmDecision,
                folded: dict[str, copy_fold.Copy]) -> LoweredGroup:
    if decision.winograd is not None:
        epilogue = find_epilogue(index, program)
        stmt, workspaces = winograd.build(b, program, decision.winograd, decision.knobs, target, epilogue, folded)
        return fused_group(copy_fold.read_through(stmt, folded), b, epilogue, tuple(workspaces))
    if decision.inplace is not None:
        epilogue = None if decision.out_copy is not None else find_epilogue(index, program)
        stmt, workspaces = inplace_gemm.build(b, program, decision.inplace, decision.knobs, target, epilogue,
                                              decision.out_copy, folded)
        group = fused_group(copy_fold.read_through(stmt, folded), b, epilogue, tuple(workspaces))
        return group if decision.out_copy is None else replace(group, elided=(b.output,))
    epilogue = None if decision.plan.partial else find_epilogue(index, program)  # f(0) need not be 0
    stmt, workspaces = implicit_gemm.build(b, program, decision.plan, decision.knobs, target, epilogue, folded)
    return fused_group(copy_fold.read_through(stmt, folded), b, epilogue, tuple(workspaces))


def _parallel_default(b: BoundContraction | BoundElementwise, program: BoundProgram,
                      target: Target) -> LoweredGroup | None:
    """The default nest(s) of a statement with each top-level loop spread over the cores where the
    parallel legality check proves its iterations write disjoint elements (an elementwise or
    direct statement, the init/update/final nests of a keep-dim reduction, ...) and it is big enough."""
    work = math.prod(b.shape) if isinstance(b, BoundElementwise) else \
        math.prod(hi - lo + 1 for _, lo, hi in b.ranges)
    if target.cores < 2 or work < PARALLEL_MIN_CELLS or (isinstance(b, BoundContraction) and b.empty):
        return None
    workspaces: list[L.Buffer] = []
    stmt = lower_statement(b, program, workspaces)
    nests = stmt.stmts if isinstance(stmt, L.Seq) else (stmt,)
    changed = [_parallel_outer(nest, target.cores) for nest in nests]
    # Returned even when nothing became parallel: the nest is built, and None would lower it again.
    return LoweredGroup(L.seq(*changed), tuple(workspaces))


def _parallel_outer(nest: L.Stmt, cores: int) -> L.Stmt:
    if not isinstance(nest, L.For) or not isinstance(nest.begin, L.Const) or not isinstance(nest.end, L.Const):
        return nest
    if nest.end.value - nest.begin.value < cores:
        return nest
    try:
        check_parallel(nest)
    except ScheduleError:
        return nest
    return replace(nest, kind="parallel")
