"""`explain`: the text of any stage of a target's pipeline, or of the stages people read first.

Requires: a program, a signature and a target. Guarantees: the stage's output as text (loop IR as
readable pseudo-code, LLVM IR, assembly, CUDA C, the template choice per statement); a TilecError
naming the target's stages for a stage it does not have.
"""

from __future__ import annotations

from tilec.errors import TilecError
from tilec.ir.tensor import Program
from tilec.pipeline.backends import STAGES, Backend, backend_for
from tilec.pipeline.compile import compilation, run_stages
from tilec.pipeline.stages import Compilation, Signature, Stage
from tilec.schedule.lowering import AnySchedule
from tilec.target import Target


def explain(program: Program, sig: Signature, target: Target, stage: str | None = None,
            schedule: AnySchedule = None) -> str:
    """The text of one stage, or of the target's main stages with headers (loop IR and later:
    after `schedule`).

    On a GPU target, "loop" is the plain default nest (what a user's Schedule names loops in),
    "gpu" the GPU loop IR (blocks, threads, shared buffers, barriers), "emulated" (cuda-sim) the
    CPU loop IR the emulator makes of it, "cuda" the CUDA C source."""
    backend = backend_for(target)
    if stage is not None and stage not in backend.stage_names():
        if stage not in STAGES:
            raise TilecError(f"unknown stage '{stage}'; stages are {', '.join(STAGES)}")
        raise TilecError(f"target {target.name} has no stage '{stage}'{_hint(stage)}; the stages of {target.name} are "
                         f"{', '.join(backend.stage_names())}")
    c = compilation(program, sig, target, schedule)
    if stage is not None:
        return _text(c, backend, stage).rstrip("\n") + "\n"
    parts = [f";; ---- {name} ----\n{_text(c, backend, name).rstrip()}\n" for name in backend.explained]
    return "\n".join(parts)


def _text(c: Compilation, backend: Backend, name: str) -> str:
    if name in backend.views:
        after, view = backend.views[name]
        return _show(view, view.run(c, run_stages(c, backend, after)))
    stage = next(s for s in backend.stages if s.name == name)
    return _show(stage, run_stages(c, backend, name))


def _show(stage: Stage, value: object) -> str:
    assert stage.show is not None
    return str(stage.show(value))


def _hint(stage: str) -> str:
    if stage in ("gpu", "emulated"):
        return ": it needs a GPU target (--target cuda or cuda-sim)"
    if stage == "cuda":
        return ": it needs target cuda"
    if stage in ("llvm-raw", "llvm", "asm"):
        return ": it is for the targets that compile through LLVM (llvm, cuda-sim)"
    return ""


__all__ = ["explain"]
