"""The stages of compilation, each a named step from the previous stage's output to its own.

A backend (tilec.pipeline.backends) is a list of these, from the tensor IR to the artifact it
loads. Every stage's output can be printed (`tilec explain --stage NAME`); the loop-IR stages
are verified (tilec.ir.verify) after they run when `options.debug` is on (the test suite turns
it on). Views are printable results derived from a stage's output that no later stage needs
(the assembly from the optimised LLVM module; on a GPU, the plain default nest a user's Schedule
names loops in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tilec.codegen.cuda.source import render_cuda
from tilec.codegen.llvm.jit import emit_assembly, emit_object, optimise
from tilec.codegen.llvm.module import emit_module
from tilec.codegen.llvm.work import unrolling_pays
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram, bind, describe
from tilec.ir.tensor import Program
from tilec.passes.emulate_gpu import emulate
from tilec.passes.lower_wmma import lower_wmma
from tilec.schedule.lowering import AnySchedule, Templates, build_loop_ir, choose_templates, default_nest
from tilec.schedule.params import LoweringParams
from tilec.target import CpuInfo, Target


@dataclass(frozen=True)
class Signature:
    """What one compiled kernel is specialised to."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, int], ...]


@dataclass
class Compilation:
    """The inputs of one compilation, and each stage's output once it has run (a compilation that
    starts from a later stage's output, hand-written loop IR say, has no program or signature)."""

    program: Program | None
    sig: Signature | None
    target: Target
    schedule: AnySchedule
    params: LoweringParams
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu(self) -> CpuInfo:
        """The CPU the LLVM stages compile for."""
        assert self.target.host is not None, f"target {self.target.name} has no CPU stages"
        return self.target.host

    @property
    def bound(self) -> BoundProgram:
        return self.results["tensor"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Compilation, Any], Any]  # (the compilation, the previous stage's output) -> this one's
    show: Callable[[Any], str] | None = str  # its text for explain; None: not printable
    loop_ir: bool = False  # its output is loop IR (verified in debug mode)


def _bind(c: Compilation, _: Any) -> BoundProgram:
    assert c.program is not None and c.sig is not None, "a compilation from a later stage has no tensor stage"
    return bind(c.program, dict(c.sig.shapes), dict(c.sig.dtypes), dict(c.sig.sizes))


def _choose(c: Compilation, bound: BoundProgram) -> Templates:
    return choose_templates(bound, c.target, c.params, c.schedule)


def _loop(c: Compilation, templates: Templates) -> L.PrimFunc:
    return build_loop_ir(c.bound, c.target, c.params, c.schedule, templates)


def _unrolling_pays(c: Compilation) -> bool:
    """Whether LLVM should unroll the loops of the kernel `c` compiles: by the estimated work of its
    loop IR (tilec.codegen.llvm.work.unrolling_pays); yes where the compilation has none (it
    started from LLVM IR)."""
    func = c.results.get("emulated", c.results.get("loop"))
    return not isinstance(func, L.PrimFunc) or unrolling_pays(func, c.cpu.vector_bits // 8)


def describe_tensor(bound: BoundProgram) -> str:
    lines = [str(bound.program), "", "sizes: " + (", ".join(f"{k}={v}" for k, v in sorted(bound.sizes.items()))
                                                 or "(none)")]
    for name, shape in bound.shapes.items():
        lines.append(f"  {name}: {bound.dtypes[name]}{list(shape)}")
    for s in bound.statements:
        if isinstance(s, BoundContraction):
            lines.append(f"{s.output}: {describe(s)}")
    return "\n".join(lines)


TENSOR = Stage("tensor", _bind, describe_tensor)
TEMPLATES = Stage("templates", _choose, Templates.describe)
LOOP = Stage("loop", _loop, loop_ir=True)  # CPU targets: the scheduled loop IR
GPU = replace(LOOP, name="gpu")  # GPU targets: the launches (blocks, threads, shared buffers, barriers)
EMULATED = Stage("emulated", lambda c, func: emulate(lower_wmma(func)), loop_ir=True)  # GPU IR run on the CPU
LLVM_RAW = Stage("llvm-raw", lambda c, func: emit_module(func, c.cpu))
LLVM = Stage("llvm", lambda c, text: optimise(text, c.cpu, _unrolling_pays(c)))
OBJECT = Stage("object", lambda c, module: emit_object(module, c.cpu), show=None)
CUDA = Stage("cuda", lambda c, func: render_cuda(func), show=lambda source: str(source.text))

ASM = Stage("asm", lambda c, module: emit_assembly(module, c.cpu))  # a view of "llvm"
DEFAULT_NEST = Stage("loop", lambda c, bound: default_nest(bound))  # a view of "tensor" on GPU targets


__all__ = ["ASM", "CUDA", "DEFAULT_NEST", "EMULATED", "GPU", "LLVM", "LLVM_RAW", "LOOP", "OBJECT", "TEMPLATES", "TENSOR",
           "Compilation", "Signature", "Stage", "describe_tensor"]
