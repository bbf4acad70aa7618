"""The compilation pipeline, in one place: bind -> lower -> schedule -> (verify) -> LLVM IR -> O3 -> object -> load.

Every stage can be printed (`explain`); the object code is cached on disk under a
key that hashes the program, shapes, dtypes, sizes, target, schedule and the
compiler's own fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tilec.codegen.llvm_ir import emit_module
from tilec.codegen.llvm_jit import LoadedKernel, emit_assembly, emit_object, load_object, optimise
from tilec.config import options
from tilec.errors import TilecError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram, bind, describe
from tilec.ir.lower import KERNEL_NAME, lower
from tilec.ir.tensor import Program
from tilec.ir.verify import verify
from tilec.runtime import disk_cache
from tilec.schedule.auto import auto_lower
from tilec.schedule.templates import TemplateSchedule
from tilec.schedule.apply import apply_schedule
from tilec.schedule.primitives import Schedule, schedule_key
from tilec.target import Target
from tilec.version import __version__

STAGES = ("tensor", "loop", "llvm-raw", "llvm", "asm")


# What decides the machine code of a kernel: everything a source edit there must invalidate.
# Tools around the compiler (cli, bench, autotune, demo) are left out, so editing them keeps
# cached kernels and tuning records valid.
KERNEL_CODE = ("frontend", "ir", "schedule", "codegen", "runtime", "driver.py", "target.py", "version.py")


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """The version plus a hash of the source that shapes kernels, so an edited compiler never
    reuses stale kernels or trusts stale tuning records."""
    h = hashlib.sha256(__version__.encode())
    root = Path(__file__).parent
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
    loaded: LoadedKernel
    key: str
    scratch: list[list[Any]] = field(default_factory=list)


def lower_program(program: Program, sig: Signature, schedule: "Schedule | TemplateSchedule | str | None" = None,
                  target: Target | None = None) -> tuple[BoundProgram, L.PrimFunc]:
    """Bind and lower. A user's Schedule applies to the plain default loop nest (whose loop names it
    refers to); without one, the target's templates (tilec.schedule.auto) pick the loop nests."""
    bound = bind(program, dict(sig.shapes), dict(sig.dtypes), dict(sig.sizes))
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


def build_kernel(program: Program, sig: Signature, target: Target,
                 schedule: "Schedule | TemplateSchedule | str | None" = None) -> Kernel:
    bound, func = lower_program(program, sig, schedule, target)
    key = cache_key(program, sig, target, schedule)
    obj = disk_cache.load(key)
    if obj is None:
        obj = emit_object(optimise(emit_module(func, target), target), target)
        disk_cache.store(key, obj)
        stats.compiled += 1
    else:
        stats.disk_hits += 1
    return Kernel(bound, func.params, load_object(obj, KERNEL_NAME, target), key)


def explain(program: Program, sig: Signature, target: Target, stage: str | None = None,
            schedule: "Schedule | TemplateSchedule | str | None" = None) -> str:
    """The text of one stage, or of every stage with headers (loop IR and later: after `schedule`)."""
    if stage is not None and stage not in STAGES:
        raise TilecError(f"unknown stage '{stage}'; stages are {', '.join(STAGES)}")
    bound, func = lower_program(program, sig, schedule, target)
    producers: dict[str, Callable[[], str]] = {
        "tensor": lambda: _describe_tensor(bound),
        "loop": lambda: str(func),
        "llvm-raw": lambda: emit_module(func, target),
        "llvm": lambda: str(optimise(emit_module(func, target), target)),
        "asm": lambda: emit_assembly(optimise(emit_module(func, target), target), target),
    }
    if stage is not None:
        return producers[stage]().rstrip("\n") + "\n"
    parts = [f";; ---- {name} ----\n{producers[name]().rstrip()}\n" for name in ("tensor", "loop", "llvm")]
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
