"""The key of a compiled kernel: everything that shapes its code, and nothing else.

`cache_key` hashes the compiler's fingerprint (its version and the source of every module that
shapes kernels), the program, the argument shapes, dtypes and sizes, the whole Target record
(CPU features, vector width, cores, cache sizes; GPU limits), the schedule (a user's Schedule
- even an empty one, which keeps the plain default nest - is not the default, which picks
templates), the lowering parameters in force (tilec.schedule.params) and the backend's stage
list. The memory cache (tilec.runtime.kernels) and the disk cache (tilec.disk_cache) both use it,
and a disk entry carries it, so an entry is only ever loaded for the key it was stored under.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from tilec.ir.tensor import Program
from tilec.pipeline.backends import Backend
from tilec.pipeline.stages import Signature
from tilec.schedule.lowering import AnySchedule
from tilec.schedule.params import LoweringParams
from tilec.schedule.primitives.records import Schedule
from tilec.schedule.template_schedule import TemplateSchedule
from tilec.target import Target
from tilec.version import __version__

# What decides the machine code of a kernel: everything a source edit there must invalidate.
# Tools around the compiler (cli, bench, autotune, demo) are left out, so editing them keeps
# cached kernels and tuning records valid.
KERNEL_CODE = ("frontend", "ir", "schedule", "passes", "codegen", "pipeline", "runtime", "disk_cache.py", "target.py",
               "llvm_cpus.py", "version.py")


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


def schedule_identity(schedule: AnySchedule) -> str:
    """The schedule as the key sees it: "default" (templates picked by the heuristic, which an
    empty TemplateSchedule leaves alone), else the schedule's own key (a user's Schedule, an
    empty one included, is never the default)."""
    if schedule is None:
        return "default"
    if isinstance(schedule, (Schedule, TemplateSchedule)):
        return schedule.key()
    raise TypeError(f"not a schedule: {schedule!r}")


def cache_key(program: Program, sig: Signature, target: Target, schedule: AnySchedule,
              params: LoweringParams, backend: Backend) -> str:
    payload = json.dumps([compiler_fingerprint(), str(program), sig.shapes, sig.dtypes, sig.sizes, asdict(target),
                          schedule_identity(schedule), asdict(params), [s.name for s in backend.stages]],
                         sort_keys=True, default=list)
    return hashlib.sha256(payload.encode()).hexdigest()


__all__ = ["KERNEL_CODE", "cache_key", "compiler_fingerprint", "schedule_identity"]
