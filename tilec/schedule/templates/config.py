"""Template schedules: which template lowers a statement, and with which knobs.

Where a `Schedule` is a list of loop transformations applied to the plain default loop
nest, a `TemplateSchedule` steers the templates of `tilec.schedule.cpu.heuristic`: for statement
`stmt` use template `template` with `knobs`, overriding the heuristic's choice. It is what
the tuner searches over and what its records store: small, JSON round-trippable, replayable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from tilec.errors import ScheduleError
from tilec.schedule.cpu.attention import AttentionKnobs
from tilec.schedule.patterns.attention_backward import AttentionBackwardKnobs
from tilec.schedule.gpu.attention import GpuAttentionKnobs
from tilec.schedule.gpu.gemm import GpuGemmKnobs
from tilec.schedule.gpu.tensorcore_knobs import WmmaGemmConfig
from tilec.schedule.cpu.gemm.packed import GemmKnobs

KNOB_TYPES: dict[str, type] = {"implicit_gemm": GemmKnobs, "attention": AttentionKnobs,
                               "attention_backward": AttentionBackwardKnobs,
                               # GPU targets (tilec.schedule.gpu.heuristic)
                               "gpu_gemm": GpuGemmKnobs, "gpu_tensorcore": WmmaGemmConfig,
                               "gpu_attention": GpuAttentionKnobs}
GPU_TEMPLATES = ("gpu_gemm", "gpu_tensorcore", "gpu_attention")
TEMPLATES = tuple(KNOB_TYPES) + ("default",)  # "default": no template, the plain loop nest


@dataclass(frozen=True)
class TemplateConfig:
    stmt: int  # index of the statement in the function body
    template: str  # one of TEMPLATES
    knobs: tuple[tuple[str, Any], ...] = ()  # (name, value) pairs of the template's knob record

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ScheduleError(f"unknown template '{self.template}'; templates are {', '.join(TEMPLATES)}")
        if self.template in KNOB_TYPES:
            self.knob_record()  # validates the names now, not at the first call

    def knob_record(self) -> Any:
        """The knobs as the template's frozen record (GemmKnobs, AttentionKnobs)."""
        kind = KNOB_TYPES[self.template]
        names = {f.name for f in fields(kind)}
        unknown = [k for k, _ in self.knobs if k not in names]
        if unknown:
            raise ScheduleError(f"template '{self.template}' has no knob(s) {', '.join(unknown)}; "
                                f"its knobs are {', '.join(sorted(names))}")
        return kind(**dict(self.knobs))

    def to_json(self) -> dict:
        return {"stmt": self.stmt, "template": self.template, "knobs": dict(self.knobs)}

    @staticmethod
    def from_json(d: dict) -> "TemplateConfig":
        try:
            return TemplateConfig(int(d["stmt"]), str(d["template"]), tuple(sorted(dict(d.get("knobs", {})).items())))
        except (KeyError, TypeError, ValueError) as err:
            raise ScheduleError(f"not a template config: {d!r} ({err})") from None


@dataclass(frozen=True)
class TemplateSchedule:
    configs: tuple[TemplateConfig, ...] = ()

    def __post_init__(self) -> None:
        stmts = [c.stmt for c in self.configs]
        if len(set(stmts)) != len(stmts):
            raise ScheduleError(f"a template schedule configures statement(s) {sorted(stmts)} more than once")

    def override(self, stmt: int) -> TemplateConfig | None:
        return next((c for c in self.configs if c.stmt == stmt), None)

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in self.configs]

    @staticmethod
    def from_json(items: list[dict]) -> "TemplateSchedule":
        return TemplateSchedule(tuple(TemplateConfig.from_json(d) for d in items))

    def key(self) -> str:
        if not self.configs:
            return "default"
        text = json.dumps(self.to_json(), sort_keys=True)
        return "templates:" + hashlib.sha256(text.encode()).hexdigest()[:24]
