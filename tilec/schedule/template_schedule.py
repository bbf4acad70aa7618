"""Template schedules: which template lowers a statement, and with which knobs.

Where a `Schedule` is a list of loop transformations applied to the plain default loop
nest, a `TemplateSchedule` steers the template choice (tilec.schedule.heuristics.cpu,
tilec.schedule.heuristics.gpu): for statement `stmt` use template `template` with `knobs`,
overriding the heuristic's choice. It is what the tuner searches over and what its records
store: small, JSON round-trippable, replayable. Template names and knobs are checked on
construction (tilec.schedule.registry, .knobs), whether the template applies to the
statement when the program is lowered.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tilec.errors import ScheduleError
from tilec.schedule import registry


@dataclass(frozen=True)
class TemplateConfig:
    stmt: int  # index of the statement in the function body
    template: str  # a name of tilec.schedule.registry
    knobs: tuple[tuple[str, Any], ...] = ()  # (name, value) pairs of the template's knob record

    def __post_init__(self) -> None:
        if isinstance(self.stmt, bool) or not isinstance(self.stmt, int):
            raise ScheduleError(f"a template config's statement index must be an integer, got {self.stmt!r}")
        if not isinstance(self.template, str):
            raise ScheduleError(f"a template config's template must be a name, got {self.template!r}")
        if not isinstance(self.knobs, tuple) or not all(isinstance(k, tuple) and len(k) == 2 for k in self.knobs):
            raise ScheduleError(f"a template config's knobs must be (name, value) pairs, got {self.knobs!r}")
        self.knob_record()  # checks the name, the knobs' names, types and bounds now, not at the first call

    def knob_record(self) -> Any:
        """The knobs as the template's frozen record (GemmKnobs, AttentionKnobs, ...; None without knobs)."""
        return registry.get(self.template).knobs_of(self.knobs)

    def to_json(self) -> dict:
        return {"stmt": self.stmt, "template": self.template, "knobs": dict(self.knobs)}

    @staticmethod
    def from_json(d: dict) -> "TemplateConfig":
        try:
            stmt, template, knobs = d["stmt"], d["template"], tuple(sorted(dict(d.get("knobs", {})).items()))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ScheduleError(f"not a template config: {d!r} ({err})") from None
        return TemplateConfig(stmt, template, knobs)


@dataclass(frozen=True)
class TemplateSchedule:
    configs: tuple[TemplateConfig, ...] = ()

    def __post_init__(self) -> None:
        stmts = [c.stmt for c in self.configs]
        if len(set(stmts)) != len(stmts):
            raise ScheduleError(f"a template schedule configures statement(s) {sorted(stmts)} more than once")

    def override(self, stmt: int) -> TemplateConfig | None:
        return next((c for c in self.configs if c.stmt == stmt), None)

    def check(self, statements: int, kind: str) -> None:
        """ScheduleError unless every config names one of `statements` statements and a template
        for targets of `kind` ("cpu" or "gpu")."""
        for config in self.configs:
            if not 0 <= config.stmt < statements:
                raise ScheduleError(f"template config for statement {config.stmt}, but the program has "
                                    f"{statements} statement(s)")
            registry.for_kind(config.template, kind)

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
