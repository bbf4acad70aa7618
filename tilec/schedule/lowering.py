"""The scheduling stages of the pipeline: the template choice, then the loop IR.

1. `choose_templates` (stage "templates"): the target kind's heuristic (tilec.schedule.heuristics.cpu,
   tilec.schedule.heuristics.gpu) picks a template and knobs per statement, a TemplateSchedule
   fixing some; a user's Schedule instead keeps every statement's plain default nest.
2. `build_loop_ir` (stage "loop" on the CPU, "gpu" on a GPU): each choice's template builds its
   group and tilec.ir.lower assembles them (lowering never calls back into this package); a
   user's Schedule is applied to the plain nest; on a GPU, small plain matrix products get the
   tiled schedule of tilec.schedule.gpu.tiled_matmul and every nest becomes a launch
   (tilec.schedule.gpu.launch).

Requires: a BoundProgram and a Target. Guarantees: a PrimFunc computing what the default lowering
computes (up to the order of floating-point reductions).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir.bounds import BoundProgram
from tilec.ir.lower import lower
from tilec.schedule.heuristics import cpu as cpu_heuristic
from tilec.schedule.heuristics import gpu as gpu_heuristic
from tilec.schedule.gpu.launch import bind_launches
from tilec.schedule.gpu.tiled_matmul import tile_matmuls
from tilec.schedule.params import LoweringParams, current
from tilec.schedule.primitives.apply import apply_schedule
from tilec.schedule.primitives.records import Schedule
from tilec.schedule.templates.base import Choice, Context
from tilec.schedule.template_schedule import TemplateSchedule
from tilec.target import Target

AnySchedule = Schedule | TemplateSchedule | None


@dataclass(frozen=True)
class Templates:
    """The output of the template choice: one Choice per statement group, and the context their
    templates build in (None for a user's Schedule, which applies to the plain nest)."""

    choices: tuple[Choice, ...]
    ctx: Context | None

    def describe(self) -> str:
        if self.ctx is None:
            return "(a user's Schedule: every statement keeps its plain default nest)"
        return "\n".join(c.describe(self.ctx.bp) for c in self.choices)


def choose_templates(bp: BoundProgram, target: Target, params: LoweringParams, schedule: AnySchedule) -> Templates:
    if isinstance(schedule, Schedule):
        return Templates((), None)
    heuristic = gpu_heuristic if target.is_gpu else cpu_heuristic
    choices, ctx = heuristic.choose(bp, target, params, schedule)
    return Templates(choices, ctx)


def build_loop_ir(bp: BoundProgram, target: Target, params: LoweringParams, schedule: AnySchedule,
                  templates: Templates) -> L.PrimFunc:
    if isinstance(schedule, Schedule):
        func = apply_schedule(lower(bp), schedule, outputs=bp.program.outputs, gpu=target.gpu)
    else:
        assert templates.ctx is not None
        ctx = templates.ctx
        func = lower(ctx.bp, {c.index: c.template.build(c, ctx) for c in templates.choices},  # (its sums may read copies' sources)
                     wide_sums=not target.is_gpu)
        if target.gpu is not None:
            func = tile_matmuls(func, target.gpu)
    return bind_launches(func, params.gpu_block_threads) if target.is_gpu else func


def lower_bound(bp: BoundProgram, target: Target, schedule: AnySchedule = None,
                params: LoweringParams | None = None) -> L.PrimFunc:
    """Both stages at once: the loop IR of a bound program (for tools and tests; the pipeline runs
    the stages one by one)."""
    lowering = params or current()
    return build_loop_ir(bp, target, lowering, schedule, choose_templates(bp, target, lowering, schedule))


def default_nest(bp: BoundProgram) -> L.PrimFunc:
    """The plain default loop nest (what a user's Schedule names loops in)."""
    return lower(bp)


__all__ = ["Templates", "build_loop_ir", "choose_templates", "default_nest", "lower_bound"]
