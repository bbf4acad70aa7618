"""The template protocol: everything about one way of lowering a statement, in one unit.

A template declares its `name`, the `kind` of target it serves ("cpu" or "gpu"), its knob
record (`knob_type`, a frozen dataclass of `knob` fields, see tilec.schedule.templates.knobs)
and implements

* `match(index, ctx)`: the plan of statement `index` (and of the statements it covers), or None
  where the template does not apply;
* `profitable(plan, ctx)`: whether the heuristic should take it (an explicit choice of the
  template in a TemplateSchedule applies it wherever `match` does);
* `default_knobs(index, plan, ctx)`: the untuned knobs, derived from the plan and the Target;
* `problems(knobs, plan, ctx)`: why knobs that passed the record's types and bounds still cannot
  be built for this plan on this target (each problem names its knob);
* `build(choice, ctx)`: the loop IR of a Choice (plan + knobs) as a LoweredGroup;
* for the tuner (`tunable = True`): `space(index, plan, ctx, default)` (choice lists and
  constraints with reasons), `flops(plan)`, and optionally `features(index, plan, ctx, config)`
  with `feature_names`.

`heuristic(index, ctx)` is the untuned choice (match, profitable, default knobs). On the CPU, the
GEMM templates also say which operands a layout copy may be folded into (`reads_through`) and
which copy they store into (`stores`): tilec.schedule.cpu.copy_fold.

`choose` (shared) turns an explicit choice into a Choice: it checks that the template applies,
makes the knob record from (name, value) pairs, and runs `problems` before anything is built.
Templates register in tilec.schedule.registry; nothing else compares their names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tilec.errors import ScheduleError
from tilec.ir.bounds import BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.params import LoweringParams
from tilec.schedule.templates.knobs import check_record, make_record
from tilec.schedule.templates.space import Config, Constraint, Knob
from tilec.target import Target

if TYPE_CHECKING:
    from tilec.schedule.patterns.layout_copy import Copy


@dataclass(frozen=True)
class Context:
    """What every template may read: the program, the target, the lowering parameters, and (on
    the CPU, once the GEMM choices are made) the layout copies folded into their readers and the
    ones a GEMM stores into (tilec.schedule.cpu.copy_fold)."""

    bp: BoundProgram
    target: Target
    params: LoweringParams
    folded: "Mapping[str, Copy]" = field(default_factory=dict)
    stored: frozenset[str] = frozenset()

    def where(self, index: int) -> str:
        """A statement, as errors name it."""
        return f"statement {index} ('{self.bp.statements[index].stmt}')"


@dataclass(frozen=True)
class Choice:
    """What the template-choice stage decided for statement `index` (and the `consumed` - 1
    statements after it, which the template lowers together with it)."""

    index: int
    template: "Template"
    plan: Any = None
    knobs: Any = None
    consumed: int = 1

    def describe(self, bp: BoundProgram) -> str:
        """One line for `tilec explain --stage templates`."""
        text = f"{self.index}: {self.template.label(self)}"
        if self.knobs is not None:
            text += " " + " ".join(f"{k}={v}" for k, v in asdict(self.knobs).items())
        if self.consumed > 1:
            text += f" (with statements {self.index + 1}..{self.index + self.consumed - 1})"
        return f"{text}    # {bp.statements[self.index].stmt}"


class Template:
    name: ClassVar[str]
    kind: ClassVar[str]  # "cpu" | "gpu": the targets it serves
    knob_type: ClassVar[type | None] = None  # its knob record; None: no knobs
    tunable: ClassVar[bool] = False
    selectable: ClassVar[bool] = True  # may a TemplateConfig name it
    requirement: ClassVar[str] = ""  # what `match` needs, for "does not apply" errors

    # ------------------------------------------------------------ what every template implements
    def match(self, index: int, ctx: Context) -> Any | None:
        raise NotImplementedError

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        raise NotImplementedError

    # ------------------------------------------------------------ with defaults
    def profitable(self, plan: Any, ctx: Context) -> bool:
        return True

    def default_knobs(self, index: int, plan: Any, ctx: Context) -> Any:
        return self.knob_type() if self.knob_type is not None else None

    def problems(self, knobs: Any, plan: Any, ctx: Context) -> list[str]:
        return []

    def consumed(self, plan: Any) -> int:
        return int(getattr(plan, "consumed", 1))

    def label(self, choice: Choice) -> str:
        """The template's name as explain shows it (a template with variants names the variant)."""
        return self.name

    def heuristic(self, index: int, ctx: Context) -> Choice | None:
        """The untuned choice of this template for statement `index`, or None where it does not
        apply or would not gain."""
        plan = self.match(index, ctx)
        if plan is None or not self.profitable(plan, ctx):
            return None
        return self.chosen(index, plan, self.default_knobs(index, plan, ctx))

    # ------------------------------------------------------------ layout copies (CPU GEMM templates)
    folds_copies: ClassVar[bool] = False  # its packing can read a layout copy's source instead

    def reads_through(self, choice: Choice) -> frozenset[str]:
        """The operands it reads only where reading a layout copy's source instead is no extra pass."""
        return frozenset()

    def stores(self, choice: Choice) -> str | None:
        """The layout copy it stores its results into, lowering that copy's statement too."""
        return None

    # ------------------------------------------------------------ tuning
    feature_names: ClassVar[tuple[str, ...]] = ()

    def space(self, index: int, plan: Any, ctx: Context,
              default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
        raise ScheduleError(f"template '{self.name}' has no search space")

    def features(self, index: int, plan: Any, ctx: Context, config: Mapping[str, Any]) -> list[float]:
        """Its own features for the cost model (`feature_names` long); templates without them
        get the tuner's generic ones."""
        raise NotImplementedError

    def flops(self, plan: Any) -> float:
        return 0.0

    # ------------------------------------------------------------ shared
    def knobs_of(self, items: Iterable[tuple[str, Any]]) -> Any:
        """The knob record from (name, value) pairs, types and bounds checked (ScheduleError)."""
        if self.knob_type is None:
            pairs = list(items)
            if pairs:
                raise ScheduleError(f"template '{self.name}' takes no knobs; got {', '.join(str(k) for k, _ in pairs)}")
            return None
        return make_record(self.name, self.knob_type, items)

    def checked(self, knobs: Any, plan: Any, ctx: Context, where: str) -> Any:
        """`knobs` unchanged if this plan can be built with them on ctx.target, else ScheduleError."""
        if knobs is None:
            return None
        check_record(self.name, knobs)
        problems = self.problems(knobs, plan, ctx)
        if problems:
            raise ScheduleError(f"{self.name} knobs {knobs} for {where}: " + "; ".join(problems))
        return knobs

    def choose(self, index: int, ctx: Context, items: Iterable[tuple[str, Any]] | None = None) -> Choice:
        """The Choice of this template for statement `index`: with the knobs `items` (name, value
        pairs, unset ones at the record's defaults), or the default knobs when `items` is None.
        ScheduleError where the template does not apply or the knobs do not fit."""
        where = ctx.where(index)
        plan = self.match(index, ctx)
        if plan is None:
            raise ScheduleError(f"template '{self.name}' does not apply to {where}: {self.requirement}")
        knobs = self.default_knobs(index, plan, ctx) if items is None else self.knobs_of(items)
        return self.chosen(index, plan, self.checked(knobs, plan, ctx, where))

    def chosen(self, index: int, plan: Any, knobs: Any) -> Choice:
        return Choice(index, self, plan, knobs, self.consumed(plan))


def config_of(knobs: Any) -> Config:
    """A knob record as a config (knob name -> value)."""
    return asdict(knobs) if knobs is not None else {}


__all__ = ["Choice", "Context", "Template", "config_of"]
