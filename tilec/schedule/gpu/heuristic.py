"""Which GPU template lowers each statement (targets cuda and cuda-sim), with which knobs.

Requires: a BoundProgram, and optionally a TemplateSchedule naming GPU templates for some
statements. Guarantees: a lowering strategy (tilec.ir.lower.Strategy) whose groups are
launches in the GPU conventions of tilec/ir/loop.py computing what the default lowering
computes. Heuristic choice per statement, in this order:

* the attention chain (tilec.schedule.cpu.attention.match, float32 or float16) -> fused flash
  attention (tilec.schedule.gpu.attention);
* a sum of products the implicit-GEMM matcher accepts -> float16 operands: the tensor-core
  template (tilec.schedule.gpu.tensorcore, float32 accumulation); float32/float64: the
  CUDA-core template (tilec.schedule.gpu.gemm), a convolution as implicit GEMM;
* anything else (or too small to gain): None, the default binding of tilec.schedule.gpu.launch.
"""

from __future__ import annotations

from dataclasses import replace

from tilec.errors import ScheduleError
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup, Strategy
from tilec.schedule.gpu import attention as gpu_attention
from tilec.schedule.gpu import gemm as gpu_gemm
from tilec.schedule.gpu import tensorcore as gpu_gemm_tc
from tilec.schedule.cpu.gemm import packed as implicit_gemm
from tilec.schedule.templates.config import GPU_TEMPLATES, TemplateConfig, TemplateSchedule


def gemm_plan(b: BoundContraction) -> implicit_gemm.GemmPlan | None:
    """The implicit-GEMM plan of `b` on the GPU: the CPU matcher's, float16 included."""
    if b.dtype == "float16":  # the CPU matcher leaves float16 to the default; the GPU has tensor cores
        return implicit_gemm.match(replace(b, dtype="float32"))
    return implicit_gemm.match(b)


def gpu_strategy(bp: BoundProgram, overrides: TemplateSchedule | None = None) -> Strategy:
    """The strategy that `tilec.ir.lower.lower` calls per statement (see the module doc)."""
    overrides = overrides or TemplateSchedule()
    for config in overrides.configs:
        if not 0 <= config.stmt < len(bp.statements):
            raise ScheduleError(f"template config for statement {config.stmt}, but the program has "
                                f"{len(bp.statements)} statement(s)")
        if config.template not in GPU_TEMPLATES + ("default",):
            raise ScheduleError(f"template '{config.template}' is a CPU template; on a GPU target use one of "
                                f"{', '.join(GPU_TEMPLATES)} or 'default'")

    def strategy(index: int, program: BoundProgram) -> LoweredGroup | None:
        b = program.statements[index]
        config = overrides.override(index)
        if config is not None:
            return _configured(index, program, config)
        if not isinstance(b, BoundContraction):
            return None
        plan = gpu_attention.match(index, program)
        if plan is not None and gpu_attention.applicable(plan):
            return gpu_attention.build(plan, program)
        gemm = gemm_plan(b)
        if gemm is None:
            return None
        if b.dtype == "float16":
            return gpu_gemm_tc.lower_gemm(index, b, program, gemm)
        return gpu_gemm.lower_gemm(index, b, program, gemm)

    return strategy


def _configured(index: int, program: BoundProgram, config: TemplateConfig) -> LoweredGroup | None:
    b = program.statements[index]
    where = f"statement {index} ('{b.stmt}')"
    if config.template == "default":
        return None
    if config.template == "gpu_attention":
        plan = gpu_attention.match(index, program)
        if plan is None or not gpu_attention.applicable(plan):
            raise ScheduleError(f"template 'gpu_attention' does not apply to {where}: it must start the chain "
                                f"scores, softmax, times V (see tilec/schedule/cpu/attention.py) in float32 or float16")
        return gpu_attention.build(plan, program, config.knob_record(), where)
    gemm = gemm_plan(b) if isinstance(b, BoundContraction) else None
    if gemm is None or gemm.partial:
        raise ScheduleError(f"template '{config.template}' does not apply to {where}: it needs a sum of products "
                            f"onto a direct output, every cell written, whose last index only one operand reads")
    assert isinstance(b, BoundContraction)
    if config.template == "gpu_tensorcore":
        if b.dtype != "float16":
            raise ScheduleError(f"template 'gpu_tensorcore' needs float16 operands; {where} is {b.dtype} "
                                f"(use gpu_gemm: float32 stays on the CUDA cores)")
        return gpu_gemm_tc.lower_gemm(index, b, program, gemm, config.knob_record())
    if b.dtype == "float16":
        raise ScheduleError(f"template 'gpu_gemm' is for float32/float64; {where} is float16: use gpu_tensorcore")
    return gpu_gemm.lower_gemm(index, b, program, gemm, config.knob_record())


__all__ = ["gpu_strategy", "gemm_plan"]
