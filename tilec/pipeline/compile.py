"""Running a backend's stages: the loop IR of a program, and a loaded kernel.

`run_stages` runs a backend's stages in order up to the one asked for, each on the previous
one's output, verifying loop IR between stages in debug mode (`options.debug`, which the test
suite turns on). `build_kernel` lowers, then takes the cached stage's output from the disk cache
or produces and stores it, then loads it.
"""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec import disk_cache
from tilec.config import options
from tilec.ir import loop as L
from tilec.ir.bounds import BoundProgram
from tilec.ir.tensor import Program
from tilec.ir.verify import verify
from tilec.pipeline.backends import Backend, Invoke, backend_for, resolve_target
from tilec.pipeline.cache_key import cache_key
from tilec.pipeline.stages import Compilation, Signature
from tilec.schedule import params as lowering_params
from tilec.schedule.lowering import AnySchedule
from tilec.schedule.params import LoweringParams
from tilec.target import Target


@dataclass
class Stats:
    """How kernels were obtained in this process (tests and `tilec explain` read it)."""

    compiled: int = 0  # went through code generation
    disk_hits: int = 0  # the cached stage's output loaded from the disk cache


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
    invoke: Invoke | None = None  # runs `loaded` on one array per param

    def run(self, arrays: list[np.ndarray]) -> None:
        """Run the kernel on one C-contiguous array per param (inputs, outputs, scratch)."""
        if self.invoke is not None:
            self.invoke(arrays)
            return
        pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        self.loaded.function(pointers)  # `arrays` keeps every buffer alive during the call


def compilation(program: Program, sig: Signature, target: Target, schedule: AnySchedule = None,
                params: LoweringParams | None = None) -> Compilation:
    """The inputs of a compilation; the lowering parameters are the ones in force unless given."""
    return Compilation(program, sig, target, schedule, params or lowering_params.current())


def run_stages(c: Compilation, backend: Backend, until: str) -> Any:
    """The output of stage `until`: the stages after the last one with an output (run earlier, or
    loaded from the disk cache) run in order, each once."""
    names = [s.name for s in backend.stages]
    stop = names.index(until)
    start = max((k for k in range(stop + 1) if names[k] in c.results), default=-1)
    previous = c.results[names[start]] if start >= 0 else None
    for stage in backend.stages[start + 1:stop + 1]:
        previous = stage.run(c, previous)
        if stage.loop_ir and options.debug:
            verify(previous)
        c.results[stage.name] = previous
    return previous


def lower_program(program: Program, sig: Signature, schedule: AnySchedule = None,
                  target: Target | None = None, params: LoweringParams | None = None) -> tuple[BoundProgram, L.PrimFunc]:
    """The bound program and its loop IR on `target` (by default what target 'llvm' means): the templates'
    (a TemplateSchedule fixing some of them), or a user's Schedule applied to the plain nest."""
    c = compilation(program, sig, target or resolve_target("llvm"), schedule, params)
    backend = backend_for(c.target)
    func = run_stages(c, backend, backend.ir_stage)
    return c.bound, func


def kernel_key(c: Compilation, backend: Backend) -> str:
    """The cache key of the kernel `c` compiles to on `backend` (tilec.pipeline.cache_key)."""
    assert c.program is not None and c.sig is not None, "a compilation from a later stage has no cache key"
    return cache_key(c.program, c.sig, c.target, c.schedule, c.params, backend)


def disk_key(key: str, func: L.PrimFunc) -> str:
    """The disk cache's key of the kernel with cache key `key` and loop IR `func`: the cache key and
    the buffers the runtime allocates for the kernel from the loop IR lowered in this process. Code
    loaded from disk thus never runs on buffers other than those it was compiled for, even where a
    lowering differed between processes under one cache key (an experiment reading the environment,
    say: the cache key holds the schedule and parameters, not every input of every heuristic)."""
    layout = ";".join(f"{b.name}:{b.dtype}:{b.shape}:{b.scope}" for b in func.params)
    return hashlib.sha256(f"{key}|{layout}".encode()).hexdigest()


def build_kernel(c: Compilation, key: str | None = None) -> Kernel:
    """The loaded kernel of `c` (`key`: its kernel_key, when the caller has it already)."""
    backend = backend_for(c.target)
    func = run_stages(c, backend, backend.ir_stage)
    key = key or kernel_key(c, backend)
    on_disk = disk_key(key, func)
    hit = disk_cache.load(on_disk) if backend.cached is not None else None
    if hit is not None:
        stats.disk_hits += 1
        c.results[backend.cached] = hit  # type: ignore[index]
    artifact = run_stages(c, backend, backend.stages[-1].name)
    if hit is None:
        stats.compiled += 1
        if backend.cached is not None:
            disk_cache.store(on_disk, c.results[backend.cached])
    loaded, invoke = backend.load(artifact, c)
    return Kernel(c.bound, func.params, loaded, key, invoke=invoke)


def load_from(stage: str, value: Any, target: Target) -> tuple[Any, Invoke | None]:
    """What the backend of `target` loads from `value`, the output of its stage `stage` (loop IR
    written by hand, say), and how to run it (see Backend.load); no disk cache."""
    c = Compilation(None, None, target, None, lowering_params.current(), {stage: value})
    backend = backend_for(target)
    return backend.load(run_stages(c, backend, backend.stages[-1].name), c)


__all__ = ["Kernel", "Stats", "build_kernel", "compilation", "disk_key", "kernel_key", "load_from", "lower_program", "run_stages", "stats"]
