"""One backend per target: its stages in one list, what the disk cache keeps, how it loads.

    llvm      tensor -> templates -> loop -> llvm-raw -> llvm -> object          (views: asm)
    cuda-sim  tensor -> templates -> gpu -> emulated -> llvm-raw -> llvm -> object (views: loop, asm)
    cuda      tensor -> templates -> gpu -> cuda                                  (views: loop)

`explain` prints any stage or view of a target's list, the disk cache keeps the output of the
stage a backend names `cached` (keyed by everything that shapes it, the stage list included:
tilec.pipeline.cache_key) and `load` turns the last stage's output into something that runs.
`resolve_target` maps a target name to the Target its backend compiles for (target cuda asks
the GPU, when one answers, for its architecture; the SM count comes from tilec.target's table).
The CPU targets take options after the name, ``llvm -mcpu=haswell -mattr=+fma,-avx512f``
(tilec.target.parse_target): code for that CPU, run on this one. A plain ``llvm`` is the host's
CPU, or what ``TILEC_TARGET`` (tilec.config.options.cpu_target) names.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from tilec.codegen.cuda.loader import device_arch, load_cuda
from tilec.codegen.llvm.jit import load_object
from tilec.config import options
from tilec.errors import TilecError
from tilec.ir.lower import KERNEL_NAME
from tilec.pipeline.stages import (ASM, CUDA, DEFAULT_NEST, EMULATED, GPU, LLVM, LLVM_RAW, LOOP, OBJECT, TEMPLATES,
                                   TENSOR, Compilation, Stage)
from tilec.target import (DEFAULT_CUDA_ARCH, KNOWN_TARGETS, Target, cpu_info, cuda_sim_target, cuda_target, host_target,
                          parse_target)

Invoke = Callable[[list[np.ndarray]], None]


class Backend:
    name: str
    stages: tuple[Stage, ...]
    views: dict[str, tuple[str, Stage]] = {}  # view name -> (the stage it derives from, how)
    explained: tuple[str, ...] = ()  # what `explain` prints when no stage is named
    cached: str | None = None  # the stage whose output the disk cache keeps

    @property
    def ir_stage(self) -> str:
        """The last loop-IR stage before code generation (what `lower_program` returns)."""
        return next(s.name for s in self.stages if s.name in ("loop", "gpu"))

    def stage_names(self) -> tuple[str, ...]:
        """Every stage and view `explain` can print, in pipeline order."""
        names = [s.name for s in self.stages if s.show is not None]
        for view, (after, _) in self.views.items():
            if view not in names:
                names.insert(names.index(after) + 1, view)
        return tuple(names)

    def default_target(self) -> Target:
        raise NotImplementedError

    def load(self, artifact: Any, c: Compilation) -> tuple[Any, Invoke | None]:
        """(what was loaded, how to run it on one array per param, or None for a LoadedKernel's C entry)."""
        raise NotImplementedError


class LLVMBackend(Backend):
    name = "llvm"
    stages: tuple[Stage, ...] = (TENSOR, TEMPLATES, LOOP, LLVM_RAW, LLVM, OBJECT)
    views = {"asm": ("llvm", ASM)}
    explained: tuple[str, ...] = ("tensor", "templates", "loop", "llvm")
    cached = "object"

    def default_target(self) -> Target:
        return host_target()

    def load(self, artifact: bytes, c: Compilation) -> tuple[Any, None]:
        return load_object(artifact, KERNEL_NAME, c.cpu), None


class CudaSimBackend(LLVMBackend):
    """GPU kernels run on the host CPU: the GPU emulator turns them into a CPU PrimFunc for LLVM."""

    name = "cuda-sim"
    stages = (TENSOR, TEMPLATES, GPU, EMULATED, LLVM_RAW, LLVM, OBJECT)
    views = {"loop": ("tensor", DEFAULT_NEST), "asm": ("llvm", ASM)}
    explained = ("tensor", "templates", "loop", "gpu", "llvm")

    def default_target(self) -> Target:
        return cuda_sim_target()


class CudaBackend(Backend):
    """CUDA C (tilec.codegen.cuda.source) compiled by nvcc or NVRTC and loaded by tilec.codegen.cuda.loader,
    which keeps the cubins on disk itself."""

    name = "cuda"
    stages = (TENSOR, TEMPLATES, GPU, CUDA)
    views = {"loop": ("tensor", DEFAULT_NEST)}
    explained = ("tensor", "templates", "loop", "gpu", "cuda")

    def default_target(self) -> Target:
        return _cuda_device_target()

    def load(self, artifact: Any, c: Compilation) -> tuple[Any, Invoke]:
        assert c.target.gpu is not None
        module = load_cuda(artifact, c.target.gpu.arch)
        return module, module.run


@functools.cache
def _cuda_device_target() -> Target:
    """The GPU's architecture when a CUDA runtime and a GPU answer; else DEFAULT_CUDA_ARCH (a Target is
    still useful without a GPU: explain, and nvcc checks of the generated source)."""
    try:
        arch = device_arch()
    except Exception:  # no driver, no device, no binding
        return cuda_target(DEFAULT_CUDA_ARCH)
    return cuda_target(str(arch) if arch else DEFAULT_CUDA_ARCH)


BACKENDS: dict[str, Backend] = {b.name: b for b in (LLVMBackend(), CudaSimBackend(), CudaBackend())}
ALIASES = {"cpu": "llvm", "host": "llvm"}
INTERPRETED = ("interp",)  # targets with no backend: the tensor IR runs directly (tilec.interp)
STAGES = ("tensor", "templates", "loop", "gpu", "emulated", "cuda", "llvm-raw", "llvm", "asm")  # every target's


def backend_for(target: Target) -> Backend:
    backend = BACKENDS.get(target.name)
    if backend is None:
        raise TilecError(f"no backend for target '{target.name}'; backends: {', '.join(BACKENDS)}")
    return backend


def is_interpreted(target: "str | Target") -> bool:
    """Whether `target` names the reference interpreter (tilec.compile then returns a tilec.interp function)."""
    return isinstance(target, str) and target in INTERPRETED


def resolve_target(target: "str | Target") -> Target:
    """The Target of a target string: ``llvm`` (alias ``cpu`` or ``host``), ``cuda`` or ``cuda-sim``,
    the CPU targets optionally followed by ``-mcpu=CPU`` and ``-mattr=+F,-G``; a Target is itself."""
    if isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise TilecError(f"a target is a string such as 'llvm' or 'llvm -mcpu=haswell', or a tilec.Target; got "
                         f"{type(target).__name__}")
    word, opts = parse_target(target)
    name = ALIASES.get(word, word)
    if name not in BACKENDS:
        raise TilecError(f"unknown target {word!r}; known targets: {', '.join(KNOWN_TARGETS + INTERPRETED)} "
                         f"(a CPU target may name its CPU: 'llvm -mcpu=haswell')")
    if name == "llvm" and not opts and options.cpu_target and parse_target(options.cpu_target) != (word, opts):
        chosen = resolve_target(options.cpu_target)
        if chosen.name != "llvm":
            raise TilecError(f"TILEC_TARGET={options.cpu_target!r} names target '{chosen.name}'; it says what the CPU "
                             f"target 'llvm' compiles for, e.g. TILEC_TARGET='llvm -mcpu=haswell'")
        return chosen
    default = BACKENDS[name].default_target()
    if not opts:
        return default
    if default.host is None:
        raise TilecError(f"target '{name}' runs on a GPU and takes no CPU options ({', '.join(opts)}); "
                         f"-mcpu and -mattr apply to the CPU targets llvm and cuda-sim")
    return replace(default, host=cpu_info(opts.get("-mcpu"), opts.get("-mattr", "")))


__all__ = ["BACKENDS", "INTERPRETED", "STAGES", "Backend", "CudaBackend", "CudaSimBackend", "LLVMBackend", "backend_for",
           "is_interpreted", "resolve_target"]
