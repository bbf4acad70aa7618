"""The CPU heuristic: which template lowers each statement, with which knobs, untuned.

Requires: a BoundProgram, a CPU Target, the lowering parameters and optionally a TemplateSchedule
(explicit choices for some statements). Guarantees: one Choice per statement group, in program
order (a template that lowers several statements together covers them), each a template of
tilec.schedule.registry whose plan applies and whose knobs passed its checks.

The choice, statement by statement (the first template that applies and would gain):

1. a layout copy that every reader's GEMM packing reads through is never materialised
   (`folded_copy`; plain sums of it read its source instead where that lets it fold), and one a
   GEMM stores its tiles into is lowered with that GEMM (`stored_copy`):
   tilec.schedule.cpu.copy_fold decides, from the GEMM choices made first;
2. an explicit choice of the TemplateSchedule;
3. whole chains: `attention`, `attention_backward`;
4. sums of products: `winograd` (wide 3x3 stride-1 convolutions and filter gradients), else
   `implicit_gemm` (its variant and knobs from the shapes and the target), with the elementwise
   statements that follow fused in as an epilogue;
5. `permute` (layout copies), `column_reduce` (sums over leading axes), `stencil` (sums of a few
   taps, a depthwise convolution's), `rowwise` (runs of
   elementwise statements and keep-dim row reductions as one nest), `parallel_outer` (big statements'
   outer loops on all cores), else `default` (the plain nest).
"""

from __future__ import annotations

from dataclasses import replace

from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.schedule import registry
from tilec.schedule.cpu import copy_fold
from tilec.schedule.params import LoweringParams
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.schedule.templates.base import Choice, Context
from tilec.target import Target

CHAINS = registry.templates("attention", "attention_backward")  # lower several statements as one kernel
GEMMS = registry.templates("winograd", "implicit_gemm")  # layout copies fold into their packing
OTHERS = registry.templates("permute", "column_reduce", "stencil", "rowwise", "parallel_outer")
COPIES = registry.templates("folded_copy", "stored_copy")  # the copies the GEMM choices fold or store into
DEFAULT = registry.get("default")
# what the tuner looks for, in order (tilec.schedule.cuts.tunable_statements): winograd has no search space; a
# statement its heuristic takes is not tuned (an implicit GEMM record would replace the faster algorithm)
TUNED = registry.templates("attention", "attention_backward", "winograd", "implicit_gemm")


def choose(bp: BoundProgram, target: Target, params: LoweringParams,
           overrides: TemplateSchedule | None = None) -> tuple[tuple[Choice, ...], Context]:
    """The choices of the module doc, and the context their templates build in."""
    overrides = overrides or TemplateSchedule()
    overrides.check(len(bp.statements), "cpu")
    ctx = Context(bp, target, params)
    gemms = _gemm_choices(ctx, overrides)
    stored = frozenset(s for s in (c.template.stores(c) for c in gemms.values()) if s is not None)
    through = {k: c.template.reads_through(c) for k, c in gemms.items()}
    bp = copy_fold.sums_read_sources(bp, through, stored)  # the GEMMs' statements stay the same objects
    ctx = replace(ctx, bp=bp, folded=copy_fold.foldable(bp, through, stored), stored=stored)
    choices: list[Choice] = []
    index = 0
    while index < len(bp.statements):
        choice = _choose(index, ctx, gemms, overrides.override(index))
        choices.append(choice)
        index += choice.consumed
    return tuple(choices), ctx


def _gemm_choices(ctx: Context, overrides: TemplateSchedule) -> dict[int, Choice]:
    """The statements the GEMM templates lower, decided before lowering starts (the layout copies
    they pack from fold into them). Chains come first: their statements are nobody else's."""
    out: dict[int, Choice] = {}
    covered = 0  # statements before this one belong to a chain
    for index, b in enumerate(ctx.bp.statements):
        config = overrides.override(index)
        if index < covered or not isinstance(b, BoundContraction):
            continue
        chain = _chain(index, ctx, config)
        if chain:
            covered = index + chain
            continue
        if config is None:
            choice = next((c for c in (t.heuristic(index, ctx) for t in GEMMS) if c is not None), None)
            if choice is not None:
                out[index] = choice
            continue
        template = registry.for_kind(config.template, "cpu")
        if template.folds_copies:
            out[index] = template.choose(index, ctx, config.knobs)
    return out


def _chain(index: int, ctx: Context, config: TemplateConfig | None) -> int:
    """How many statements a chain template lowers from statement `index` on (0: none)."""
    candidates = CHAINS if config is None else tuple(t for t in CHAINS if t is registry.get(config.template))
    for template in candidates:
        plan = template.match(index, ctx)
        if plan is not None and (config is not None or template.profitable(plan, ctx)):
            return template.consumed(plan)
    return 0


def _choose(index: int, ctx: Context, gemms: dict[int, Choice], config: TemplateConfig | None) -> Choice:
    for copy in COPIES:
        plan = copy.match(index, ctx)
        if plan is not None:
            return copy.chosen(index, plan, None)
    if index in gemms:
        return gemms[index]
    if config is not None:
        return registry.for_kind(config.template, "cpu").choose(index, ctx, config.knobs)
    for template in CHAINS + OTHERS:
        choice = template.heuristic(index, ctx)
        if choice is not None:
            return choice
    return DEFAULT.chosen(index, True, None)


__all__ = ["CHAINS", "GEMMS", "OTHERS", "TUNED", "choose"]
