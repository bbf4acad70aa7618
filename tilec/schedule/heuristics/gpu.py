"""The GPU heuristic: which template lowers each statement (targets cuda and cuda-sim), untuned.

Requires: a BoundProgram, a GPU Target, the lowering parameters and optionally a TemplateSchedule
naming GPU templates for some statements. Guarantees: one Choice per statement group, in
program order, each a GPU template (or `default`) whose plan applies and whose knobs passed its
checks. Per statement, the first that applies and would gain:

* an explicit choice of the TemplateSchedule;
* the attention chain (tilec.schedule.patterns.attention, float32 or float16) -> fused flash
  attention (`gpu_attention`);
* a float16 sum of products -> the tensor-core template (`gpu_tensorcore`, float32
  accumulation); float32/float64 -> the CUDA-core template (`gpu_gemm`), a convolution as
  implicit GEMM; tiny products stay on the default binding;
* anything else: `default`, bound to blocks and threads by tilec.schedule.gpu.launch.
"""

from __future__ import annotations

from tilec.ir.bounds import BoundProgram
from tilec.schedule import registry
from tilec.schedule.params import LoweringParams
from tilec.schedule.template_schedule import TemplateSchedule
from tilec.schedule.templates.base import Choice, Context
from tilec.target import Target

ORDER = registry.templates("gpu_attention", "gpu_tensorcore", "gpu_gemm")  # tried in this order
DEFAULT = registry.get("default")


def choose(bp: BoundProgram, target: Target, params: LoweringParams,
           overrides: TemplateSchedule | None = None) -> tuple[tuple[Choice, ...], Context]:
    """The choices of the module doc, and the context their templates build in."""
    overrides = overrides or TemplateSchedule()
    overrides.check(len(bp.statements), "gpu")
    ctx = Context(bp, target, params)
    choices: list[Choice] = []
    index = 0
    while index < len(bp.statements):
        choices.append(_choose(index, ctx, overrides))
        index += choices[-1].consumed
    return tuple(choices), ctx


def _choose(index: int, ctx: Context, overrides: TemplateSchedule) -> Choice:
    config = overrides.override(index)
    if config is not None:
        return registry.for_kind(config.template, "gpu").choose(index, ctx, config.knobs)
    for template in ORDER:
        choice = template.heuristic(index, ctx)
        if choice is not None:
            return choice
    return DEFAULT.chosen(index, True, None)


__all__ = ["ORDER", "choose"]
