"""The template registry: every template by name, the one place template names are looked up.

Adding a template is one module (or folder) declaring a Template subclass and one line below.
The heuristics of each target kind (tilec.schedule.heuristics.cpu, tilec.schedule.heuristics.gpu)
decide the order in which templates are tried; the tuner, the tuning records, TemplateConfig and
`tilec explain` find templates here.
"""

from __future__ import annotations

from tilec.errors import ScheduleError
from tilec.schedule.cpu.attention import ATTENTION
from tilec.schedule.cpu.attention_backward import ATTENTION_BACKWARD
from tilec.schedule.cpu.column_reduce import COLUMN_REDUCE
from tilec.schedule.cpu.copy_fold import FOLDED_COPY, STORED_COPY
from tilec.schedule.cpu.implicit_gemm import IMPLICIT_GEMM
from tilec.schedule.cpu.parallel_outer import PARALLEL_OUTER
from tilec.schedule.cpu.permute import PERMUTE
from tilec.schedule.cpu.rowwise import ROWWISE
from tilec.schedule.cpu.stencil import STENCIL
from tilec.schedule.cpu.winograd import WINOGRAD
from tilec.schedule.gpu.attention import GPU_ATTENTION
from tilec.schedule.gpu.gemm import GPU_GEMM
from tilec.schedule.gpu.tensorcore import GPU_TENSORCORE
from tilec.schedule.templates.base import Template
from tilec.schedule.templates.default import DEFAULT

TEMPLATES: dict[str, Template] = {t.name: t for t in (
    DEFAULT,
    # CPU (target llvm)
    IMPLICIT_GEMM, WINOGRAD, ATTENTION, ATTENTION_BACKWARD, PERMUTE, COLUMN_REDUCE, STENCIL, ROWWISE, PARALLEL_OUTER,
    FOLDED_COPY, STORED_COPY,
    # GPU (targets cuda and cuda-sim)
    GPU_GEMM, GPU_TENSORCORE, GPU_ATTENTION,
)}


def names(kind: str | None = None) -> tuple[str, ...]:
    """The names a TemplateConfig may use (for one target kind, "cpu" or "gpu", when given)."""
    return tuple(n for n, t in TEMPLATES.items() if t.selectable and (kind is None or t.kind in (kind, "any")))


def get(name: str) -> Template:
    """The template called `name` (ScheduleError naming the known ones otherwise)."""
    template = TEMPLATES.get(name)
    if template is None or not template.selectable:
        raise ScheduleError(f"unknown template {name!r}; templates are {', '.join(names())}")
    return template


def for_kind(name: str, kind: str) -> Template:
    """The template called `name`, which must serve targets of `kind` ("cpu" or "gpu")."""
    template = get(name)
    if template.kind not in (kind, "any"):
        other = "GPU" if template.kind == "gpu" else "CPU"
        where = "a GPU target (cuda, cuda-sim)" if kind == "gpu" else "the CPU (target llvm)"
        raise ScheduleError(f"template '{name}' is a {other} template; on {where} use one of {', '.join(names(kind))}")
    return template


def templates(*names: str) -> tuple[Template, ...]:
    """The templates called `names`, in that order (the heuristics' orders, written by name)."""
    return tuple(TEMPLATES[n] for n in names)


def tunable(kind: str) -> tuple[Template, ...]:
    return tuple(t for t in TEMPLATES.values() if t.tunable and t.kind == kind)


__all__ = ["TEMPLATES", "for_kind", "get", "names", "templates", "tunable"]
