"""The compilation pipeline, in one place: bind -> lower -> schedule -> (verify) -> backend.

Backends (one per target, :class:`Backend`): llvm (LLVM IR -> O3 -> object -> load), cuda-sim
(GPU lowering -> the GPU emulator -> llvm) and cuda (GPU lowering -> CUDA C -> nvcc/NVRTC ->
load). Every stage can be printed (`explain`); the object code is cached on disk under a
key that hashes the program, shapes, dtypes, sizes, target, schedule and the compiler's own
fingerprint.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tilec.codegen.llvm.module import emit_module
from tilec.codegen.llvm.jit import LoadedKernel, emit_assembly, emit_object, load_object, optimise
from tilec.config import options
from tilec.errors import TilecError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram, bind, describe
from tilec.ir.lower import KERNEL_NAME, lower
from tilec.ir.tensor import Program
from tilec.ir.verify import verify
from tilec import disk_cache
from tilec.schedule.cpu.heuristic import auto_lower
from tilec.schedule.templates.config import TemplateSchedule
from tilec.schedule.primitives.apply import apply_schedule
from tilec.schedule.primitives.records import Schedule, schedule_key
from tilec.target import Target
from tilec.version import __version__

STAGES = ("tensor", "loop", "gpu", "cuda", "llvm-raw", "llvm", "asm")


# What decides the machine code of a kernel: everything a source edit there must invalidate.
# Tools around the compiler (cli, bench, autotune, demo) are left out, so editing them keeps
# cached kernels and tuning records valid.
KERNEL_CODE = ("frontend", "ir", "schedule", "passes", "codegen", "pipeline", "runtime", "disk_cache.py", "target.py",
               "version.py")


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """The version plus a hash of the source that shapes kernels, so an edited compiler never
    reuses stale kernels or trusts stale tuning records."""
    h = hashlib.sha256(__version__.encode())
    root = Path(__file__).parents[1]
    for part in KERNEL_CODE:
        paths = sorted((root / part).rglob("*")) if (root / part).is_dir() else [root / part]
        for path in paths:
            if path.suffix in (".py", ".lark"):
                h.update(path.relative_to(root).as_posix().encode())
                h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"


@dataclass(frozen=True)
class Signature:
    """What one compiled kernel is specialised to."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]
    sizes: tuple[tuple[str, int], ...]


def cache_key(program: Program, sig: Signature, target: Target, schedule: "Schedule | TemplateSchedule | str | None") -> str:
    payload = json.dumps([compiler_fingerprint(), str(program), sig.shapes, sig.dtypes, sig.sizes,
                          target.key, schedule_key(schedule)], default=list)
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class Stats:
    """How kernels were obtained in this process (tests and `tilec explain` read it)."""

    compiled: int = 0  # went through LLVM
    disk_hits: int = 0  # object code loaded from the disk cache


stats = Stats()


@dataclass
class Kernel:
    """A compiled, loaded program for one signature.

    `scratch` holds sets of temporary and workspace arrays from earlier calls: fresh memory
    costs a page fault per page on first touch, often more than the kernel itself, so calls
    reuse them (a set is taken for the length of one call, so concurrent callers never share).
    """

    bound: BoundProgram
    params: tuple[L.Buffer, ...]
    loaded: Any  # what the backend loaded: a LoadedKernel (llvm, cuda-sim), a CudaModule (cuda)
    key: str
    scratch: list[list[Any]] = field(default_factory=list)
    invoke: "Callable[[list[np.ndarray]], None] | None" = None  # runs `loaded` on one array per param

    def run(self, arrays: list[np.ndarray]) -> None:
        """Run the kernel on one C-contiguous array per param (inputs, outputs, scratch)."""
        if self.invoke is not None:
            self.invoke(arrays)
            return
        pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        self.loaded.function(pointers)  # `arrays` keeps every buffer alive during the call


def lower_program(program: Program, sig: Signature, schedule: "Schedule | TemplateSchedule | str | None" = None,
                  target: Target | None = None) -> tuple[BoundProgram, L.PrimFunc]:
    """Bind and lower. A user's Schedule applies to the plain default loop nest (whose loop names it
    refers to); without one, the target's templates (tilec.schedule.cpu.heuristic) pick the loop nests."""
    bound = bind(program, dict(sig.shapes), dict(sig.dtypes), dict(sig.sizes))
    if target is not None and target.is_gpu:
        return bound, _gpu_lower(bound, schedule)
    if isinstance(schedule, Schedule) or target is None:
        func = lower(bound)
    else:
        func = auto_lower(bound, target, schedule if isinstance(schedule, TemplateSchedule) else None)
    if options.debug:
        verify(func)
    if isinstance(schedule, Schedule):
        func = apply_schedule(func, schedule, outputs=bound.program.outputs)
        if options.debug:
            verify(func)
    return bound, func


def _gpu_lower(bound: BoundProgram, schedule: "Schedule | TemplateSchedule | str | None") -> L.PrimFunc:
    from tilec.schedule.gpu.launch import gpu_lower

    func = gpu_lower(bound, schedule if isinstance(schedule, (Schedule, TemplateSchedule)) else None)
    if options.debug:
        verify(func)
    return func


# ------------------------------------------------------------------ backends


class Backend:
    """What a target needs from the rest of the pipeline: the source text it renders from a
    scheduled PrimFunc (`explain`), and a loaded kernel built from it (compile + load, cached)."""

    name = ""
    source_stage = ""  # the explain stage `render` produces

    def render(self, func: L.PrimFunc, target: Target) -> str:
        raise NotImplementedError

    def build(self, func: L.PrimFunc, target: Target, key: str) -> tuple[Any, "Callable[[list[np.ndarray]], None] | None"]:
        """(the loaded kernel, how to run it on the arrays, or None for a LoadedKernel's C entry point)."""
        raise NotImplementedError


class LLVMBackend(Backend):
    name, source_stage = "llvm", "llvm-raw"

    def cpu_func(self, func: L.PrimFunc) -> L.PrimFunc:
        return func

    def cpu_target(self, target: Target) -> Target:
        return target

    def render(self, func: L.PrimFunc, target: Target) -> str:
        return emit_module(self.cpu_func(func), self.cpu_target(target))

    def build(self, func: L.PrimFunc, target: Target, key: str) -> tuple[Any, None]:
        cpu = self.cpu_target(target)
        obj = disk_cache.load(key)
        if obj is None:
            obj = emit_object(optimise(self.render(func, target), cpu), cpu)
            disk_cache.store(key, obj)
            stats.compiled += 1
        else:
            stats.disk_hits += 1
        loaded: LoadedKernel = load_object(obj, KERNEL_NAME, cpu)
        return loaded, None


class CudaSimBackend(LLVMBackend):
    """GPU kernels run on the host CPU: the GPU emulator turns them into a CPU PrimFunc for llvm."""

    name = "cuda-sim"

    def cpu_func(self, func: L.PrimFunc) -> L.PrimFunc:
        from tilec.passes.emulate_gpu import emulate
        from tilec.passes.lower_wmma import lower_wmma

        cpu = emulate(lower_wmma(func))  # tensor-core statements: their CPU meaning first
        if options.debug:
            verify(cpu)
        return cpu

    def cpu_target(self, target: Target) -> Target:
        return replace(target, name="llvm")


class CudaBackend(Backend):
    """CUDA C (tilec.codegen.cuda.source) compiled and run by tilec.runtime.cuda_runtime.

    >>> the cuda backend plugs in here: render_cuda(func) -> CudaSource(text, launches, params),
    >>> load_cuda(source, arch) -> CudaModule, CudaModule.run(arrays)."""

    name, source_stage = "cuda", "cuda"

    def render(self, func: L.PrimFunc, target: Target) -> str:
        return str(_cuda_c().render_cuda(func).text)

    def build(self, func: L.PrimFunc, target: Target, key: str) -> tuple[Any, Callable[[list[np.ndarray]], None]]:
        source = _cuda_c().render_cuda(func)
        try:
            from tilec.runtime import cuda_runtime  # type: ignore[attr-defined, unused-ignore]
        except ImportError as err:
            raise TilecError(f"target 'cuda': the CUDA runtime of tilec is not available in this build ({err}); "
                             f"use target='cuda-sim' to run GPU kernels on the CPU") from None
        module = cuda_runtime.load_cuda(source, target.cpu)
        stats.compiled += 1
        return module, module.run


def _cuda_c() -> Any:
    try:
        from tilec.codegen.cuda import source as cuda_c  # type: ignore[attr-defined, unused-ignore]
    except ImportError as err:
        raise TilecError(f"target 'cuda': the CUDA C code generator is not available in this build ({err}); "
                         f"use target='cuda-sim' to run GPU kernels on the CPU") from None
    return cuda_c


BACKENDS: dict[str, Backend] = {"llvm": LLVMBackend(), "cuda-sim": CudaSimBackend(), "cuda": CudaBackend()}


def backend_for(target: Target) -> Backend:
    backend = BACKENDS.get(target.name)
    if backend is None:
        raise TilecError(f"no backend for target '{target.name}'; backends: {', '.join(BACKENDS)}")
    return backend


def build_kernel(program: Program, sig: Signature, target: Target,
                 schedule: "Schedule | TemplateSchedule | str | None" = None) -> Kernel:
    bound, func = lower_program(program, sig, schedule, target)
    key = cache_key(program, sig, target, schedule)
    loaded, invoke = backend_for(target).build(func, target, key)
    return Kernel(bound, func.params, loaded, key, invoke=invoke)


def explain(program: Program, sig: Signature, target: Target, stage: str | None = None,
            schedule: "Schedule | TemplateSchedule | str | None" = None) -> str:
    """The text of one stage, or of every stage with headers (loop IR and later: after `schedule`).

    On a GPU target, "loop" is the default loop nest before GPU binding, "gpu" the GPU loop IR
    (blocks, threads, shared buffers, barriers), "cuda" the CUDA C source, and the llvm stages
    (cuda-sim) the emulated kernel's."""
    if stage is not None and stage not in STAGES:
        raise TilecError(f"unknown stage '{stage}'; stages are {', '.join(STAGES)}")
    backend = backend_for(target)
    if stage in ("gpu", "cuda") and not target.is_gpu:
        raise TilecError(f"stage '{stage}' needs a GPU target (--target cuda or cuda-sim); target is {target.name}")
    if stage in ("llvm-raw", "llvm", "asm") and target.name == "cuda":
        raise TilecError(f"stage '{stage}' is for the CPU targets (llvm, cuda-sim); target cuda renders stage 'cuda'")
    bound, func = lower_program(program, sig, schedule, target)
    llvm = backend if isinstance(backend, LLVMBackend) else LLVMBackend()

    def cuda_text() -> str:
        return CudaBackend().render(func, target)

    producers: dict[str, Callable[[], str]] = {
        "tensor": lambda: _describe_tensor(bound),
        "loop": lambda: str(lower_program(program, sig, None, None)[1] if target.is_gpu else func),
        "gpu": lambda: str(func),
        "cuda": cuda_text,
        "llvm-raw": lambda: llvm.render(func, target),
        "llvm": lambda: str(optimise(llvm.render(func, target), llvm.cpu_target(target))),
        "asm": lambda: emit_assembly(optimise(llvm.render(func, target), llvm.cpu_target(target)),
                                     llvm.cpu_target(target)),
    }
    if stage is not None:
        return producers[stage]().rstrip("\n") + "\n"
    names = {"llvm": ("tensor", "loop", "llvm"), "cuda-sim": ("tensor", "loop", "gpu", "llvm"),
             "cuda": ("tensor", "loop", "gpu", "cuda")}[target.name]
    parts = [f";; ---- {name} ----\n{producers[name]().rstrip()}\n" for name in names]
    return "\n".join(parts)


def _describe_tensor(bound: BoundProgram) -> str:
    lines = [str(bound.program), "", "sizes: " + (", ".join(f"{k}={v}" for k, v in sorted(bound.sizes.items()))
                                                 or "(none)")]
    for name, shape in bound.shapes.items():
        lines.append(f"  {name}: {bound.dtypes[name]}{list(shape)}")
    for s in bound.statements:
        if isinstance(s, BoundContraction):
            lines.append(f"{s.output}: {describe(s)}")
    return "\n".join(lines)
