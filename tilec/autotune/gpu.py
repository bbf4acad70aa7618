"""Tuning the GPU templates (targets cuda and cuda-sim): tasks, search spaces, features, timing.

The tuner's parts (search, model, records, the isolated measurement process) are the CPU's;
this module supplies what is GPU-specific:
- `GpuTask`: a Task whose template is gpu_gemm (GpuGemmKnobs), gpu_tensorcore (WmmaGemmConfig)
  or gpu_attention (GpuAttentionKnobs), with the GPU heuristic's knobs as its default;
- `gpu_space`: the knobs' choice lists with constraints that give reasons (threads per block,
  registers per thread, shared memory per block - the knob records' own `problems`);
- `gpu_features`: knob features plus loop-IR counts of the lowered GPU kernel (launch shape,
  shared and local buffers, barriers);
- `GpuTask.build` / `GpuTask.time_call`: on target cuda the candidate runs on torch CUDA tensors
  and is timed with CUDA events on torch's stream (its outputs come back as numpy arrays for the
  check against the default's); on cuda-sim it runs on the emulator, which tests the plumbing
  only (its times say nothing about a GPU).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from tilec.autotune.space import Constraint, Knob, Space, _with
from tilec.autotune.task import Config, Task
from tilec.errors import TilecError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, bind
from tilec.schedule.gpu import attention as gpu_attention
from tilec.schedule.gpu import gemm as gpu_gemm
from tilec.schedule.gpu import tensorcore as gpu_gemm_tc
from tilec.schedule.gpu.gemm import GpuGemmKnobs
from tilec.schedule.gpu.heuristic import gemm_plan
from tilec.schedule.gpu.tensorcore_knobs import WmmaGemmConfig
from tilec.ir.rewrite import walk
from tilec.target import Target

GPU_TUNABLE = ("gpu_gemm", "gpu_tensorcore", "gpu_attention")


@dataclass(frozen=True)
class GpuTask(Task):
    """A tuning task for a GPU template (see the module doc)."""

    pool_builds: ClassVar[bool] = False  # built (nvcc or the emulator) in the measurement process

    def __post_init__(self) -> None:
        if self.template not in GPU_TUNABLE:
            raise TilecError(f"cannot tune template '{self.template}' on a GPU; GPU templates: {', '.join(GPU_TUNABLE)}")
        if not self.target.is_gpu:
            raise TilecError(f"template '{self.template}' needs a GPU target (cuda or cuda-sim), not {self.target.name}")

    @functools.cached_property
    def plan(self) -> Any:
        plan: Any
        if self.template == "gpu_attention":
            plan = gpu_attention.match(self.stmt, self.bound)
        else:
            b = self.bound.statements[self.stmt]
            plan = gemm_plan(b) if isinstance(b, BoundContraction) else None
        if plan is None:
            raise TilecError(f"template '{self.template}' does not apply to statement {self.stmt} of the program")
        return plan

    def default_config(self) -> Config:
        """The GPU heuristic's knobs (tilec.schedule.gpu.heuristic), as a config of this task's space."""
        if self.template == "gpu_attention":
            return asdict(gpu_attention.GpuAttentionKnobs())
        if self.template == "gpu_tensorcore":
            return asdict(gpu_gemm_tc.default_config(self.plan))
        return asdict(gpu_gemm.default_knobs(self.plan))

    def build(self, config: Mapping[str, Any] | None) -> Callable[[list[np.ndarray]], Any]:
        """Compile the candidate; on cuda its call runs on torch CUDA copies of the inputs (made once)
        and returns numpy outputs. `device_call` gives the call to time (no copies)."""
        call = super().build(config)
        if self.target.name != "cuda":
            return call
        import torch

        on_device: dict[int, list[Any]] = {}

        def run(arrays: list[np.ndarray]) -> Any:
            if id(arrays) not in on_device:  # the inputs go to the GPU once, not per call
                on_device[id(arrays)] = [torch.from_numpy(a).cuda() for a in arrays]
            tensors = on_device[id(arrays)]
            out = call(tensors)
            outs = out if isinstance(out, tuple) else (out,)
            host = tuple(o.cpu().numpy() for o in outs)
            return host if isinstance(out, tuple) else host[0]

        run.device_call = lambda arrays: call(on_device[id(arrays)])  # type: ignore[attr-defined]
        return run

    def time_call(self, call: Callable[[], Any], repeats: int, min_repeat_s: float) -> float:
        """Seconds per call: CUDA events on torch's current stream (cuda), wall clock on the emulator."""
        if self.target.name != "cuda":
            import time

            t0 = time.perf_counter()
            call()
            return time.perf_counter() - t0
        import torch

        call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        once = max(start.elapsed_time(end) / 1e3, 1e-7)
        number = max(1, math.ceil(min_repeat_s / once))
        samples = []
        for _ in range(repeats):
            start.record()
            for _ in range(number):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / number)
        return statistics.median(samples)


def gpu_tasks_for(source: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str] | None,
                  target: Target, label: str = "") -> list[GpuTask]:
    """The GPU-tunable statements: attention chains, then sums of products (tensor cores for float16)."""
    from tilec.frontend import parse

    program = parse(source, {})
    names = program.input_names
    shape_items = tuple((n, tuple(int(d) for d in shapes[n])) for n in names)
    dtype_items = tuple((n, (dtypes or {}).get(n, "float32")) for n in names)
    bp = bind(program, dict(shape_items), dict(dtype_items), {})
    tasks, skip_until = [], 0
    for index, b in enumerate(bp.statements):
        if index < skip_until or not isinstance(b, BoundContraction):
            continue
        plan = gpu_attention.match(index, bp)
        if plan is not None and gpu_attention.applicable(plan):
            template, skip_until = "gpu_attention", index + plan.consumed
        elif gemm_plan(b) is not None:
            template = "gpu_tensorcore" if b.dtype == "float16" else "gpu_gemm"
        else:
            continue
        tasks.append(GpuTask(source, shape_items, dtype_items, target, index, template, (), label))
    return tasks


def gpu_space(task: GpuTask) -> Space:
    """The knobs of the task's template; constraints are the knob records' own problems."""
    default = task.default_config()
    if task.template == "gpu_attention":
        plan = task.plan
        knobs: tuple[Knob, ...] = (Knob("bq", _with((32, 64, 128, 256), default["bq"])),
                                   Knob("bk", _with((8, 16, 32, 64, 128), default["bk"])))

        def attention_limits(c: Config) -> str | None:
            problems = gpu_attention.GpuAttentionKnobs(**c).problems(plan.d, plan.e)
            return "; ".join(problems) or None

        return Space(knobs, (Constraint("limits", attention_limits),), default)
    if task.template == "gpu_tensorcore":
        knobs = (Knob("block_m", _with((32, 64, 128), default["block_m"])),
                 Knob("block_n", _with((32, 64, 128), default["block_n"])),
                 Knob("block_k", _with((16, 32, 64), default["block_k"])),
                 Knob("warps_m", _with((1, 2, 4), default["warps_m"])),
                 Knob("warps_n", _with((1, 2, 4), default["warps_n"])))

        def wmma_limits(c: Config) -> str | None:
            try:
                gpu_gemm_tc.check(WmmaGemmConfig(**c), "the candidate")
            except TilecError as err:
                return str(err).split(": ", 1)[-1]
            return None

        return Space(knobs, (Constraint("limits", wmma_limits),), default)
    itemsize = 8 if task.dtype == "float64" else 4
    knobs = (Knob("bm", _with((16, 32, 64, 128), default["bm"])), Knob("bn", _with((16, 32, 64, 128), default["bn"])),
             Knob("bk", _with((8, 16, 32), default["bk"])), Knob("tm", _with((1, 2, 4, 8), default["tm"])),
             Knob("tn", _with((1, 2, 4, 8), default["tn"])), Knob("double_buffer", (False, True)))

    def gemm_limits(c: Config) -> str | None:
        return "; ".join(GpuGemmKnobs(**c).problems(itemsize)) or None

    return Space(knobs, (Constraint("limits", gemm_limits),), default)


GPU_IR_NAMES = ("log_blocks", "threads", "shared_kib", "local_elems", "barriers", "loops")


def gpu_ir_features(func: L.PrimFunc) -> list[float]:
    """Counts of the lowered GPU kernel: grid and block sizes, shared/local buffers, barriers, loops."""
    blocks, threads, shared, local, barriers, loops = 1, 1, 0, 0, 0, 0
    for node in walk(func.body):
        if isinstance(node, L.For):
            loops += 1
            if node.kind in L.GPU_BLOCK_AXES and isinstance(node.end, L.Const):
                blocks *= int(node.end.value)
            elif node.kind in L.GPU_THREAD_AXES and isinstance(node.end, L.Const):
                threads *= int(node.end.value)
        elif isinstance(node, L.Allocate):
            if node.buffer.scope == "shared":
                shared += node.buffer.size * np.dtype(node.buffer.dtype).itemsize
            elif node.buffer.scope != "global":
                local += node.buffer.size
        elif isinstance(node, L.Barrier):
            barriers += 1
    return [math.log2(blocks), float(threads), shared / 1024, float(local), float(barriers), float(loops)]


def gpu_features(task: GpuTask, config: Mapping[str, Any]) -> list[float]:
    """The knobs (by name, booleans as 0/1), the lowered kernel's counts, log2 flops per thread."""
    knobs = [float(v) for _, v in sorted(config.items())]
    try:
        ir = gpu_ir_features(task.lower(config))
    except TilecError:  # an illegal candidate: the measurement will say why
        return knobs + [0.0] * (len(GPU_IR_NAMES) + 1)
    return knobs + ir + [math.log2(max(task.flops, 1.0) / (2 ** ir[0] * max(ir[1], 1.0)))]


__all__ = ["GPU_IR_NAMES", "GPU_TUNABLE", "GpuTask", "gpu_features", "gpu_ir_features", "gpu_space", "gpu_tasks_for"]
