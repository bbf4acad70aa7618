"""A tuning task: one statement of one program, for fixed input shapes, dtypes and target,
lowered by one template whose knobs the tuner searches.

`tasks_for(source, shapes, dtypes)` finds the statements a template applies to (the fused
attention chain, else implicit GEMM); `task.schedule(config)` turns a knob assignment into the
TemplateSchedule that `tilec.compile(...).with_schedule` and the records replay.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

import numpy as np

from tilec.pipeline import driver
from tilec.errors import TilecError
from tilec.frontend import parse
from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram, bind
from tilec.ir.tensor import Program
from tilec.schedule.cpu import attention
from tilec.schedule.patterns import attention_backward
from tilec.schedule.cpu.gemm import packed as implicit_gemm
from tilec.schedule.cpu.heuristic import default_gemm
from tilec.schedule.templates.config import TemplateConfig, TemplateSchedule
from tilec.target import Target, host_target

Config = dict[str, Any]  # knob name -> value, one point of a Space
TEMPLATES = ("implicit_gemm", "attention")


@dataclass(frozen=True)
class Task:
    """What is tuned. `label` names it for people (``gemm M=1024,N=1024,K=1024``)."""

    source: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dtypes: tuple[tuple[str, str], ...]
    target: Target
    stmt: int
    template: str
    sizes: tuple[tuple[str, int], ...] = ()
    label: str = ""
    # Whether builder processes can compile candidates to object code in the disk cache
    # (compile_object); GPU tasks (tilec.autotune.gpu) are built in the measurement process.
    pool_builds: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise TilecError(f"cannot tune template '{self.template}'; tunable templates: {', '.join(TEMPLATES)}")

    # ------------------------------------------------------------ the program, bound
    @functools.cached_property
    def program(self) -> Program:
        return parse(self.source, dict(self.sizes))

    @property
    def signature(self) -> driver.Signature:
        return driver.Signature(self.shapes, self.dtypes, self.sizes)

    @functools.cached_property
    def bound(self) -> BoundProgram:
        return bind(self.program, dict(self.shapes), dict(self.dtypes), dict(self.sizes))

    @functools.cached_property
    def plan(self) -> Any:
        """The template's plan of the statement (GemmPlan or AttentionPlan)."""
        plan: Any
        if self.template == "attention":
            plan = attention.match(self.stmt, self.bound)
        else:
            b = self.bound.statements[self.stmt]
            plan = implicit_gemm.match(b) if isinstance(b, BoundContraction) else None
        if plan is None:
            raise TilecError(f"template '{self.template}' does not apply to statement {self.stmt} of the program")
        return plan

    @property
    def dtype(self) -> str:
        return self.bound.statements[self.stmt].dtype

    @property
    def key(self) -> str:
        from tilec.autotune.records import task_key

        return task_key(str(self.program), dict(self.shapes), dict(self.dtypes), self.stmt, dict(self.sizes))

    @property
    def flops(self) -> float:
        p = self.plan
        if isinstance(p, attention.AttentionPlan):  # CPU and GPU attention templates alike
            return 2.0 * math.prod(hi - lo + 1 for _, lo, hi in p.batch) * p.s * p.t * (p.d + p.e)
        return 2.0 * p.m * p.n * p.k * math.prod(hi - lo + 1 for _, lo, hi in p.outer)

    # ------------------------------------------------------------ knobs -> schedules
    def default_config(self) -> Config:
        """The heuristic's knobs (tilec.schedule.cpu.heuristic), as a config of this task's space."""
        if self.template == "attention":
            return dict(attention.AttentionKnobs().__dict__)
        decision = default_gemm(self.stmt, self.bound, self.target)
        knobs = decision.knobs if decision is not None else implicit_gemm.default_knobs(self.plan, self.dtype, self.target)
        return dict(knobs.__dict__)

    def schedule(self, config: Mapping[str, Any]) -> TemplateSchedule:
        return TemplateSchedule((TemplateConfig(self.stmt, self.template, tuple(sorted(config.items()))),))

    def config_of(self, schedule: TemplateSchedule) -> Config | None:
        """The config a (recorded) schedule sets for this task's statement, or None."""
        c = schedule.override(self.stmt)
        return dict(c.knobs) if c is not None and c.template == self.template else None

    def lower(self, config: Mapping[str, Any]) -> L.PrimFunc:
        """The loop IR of a candidate (raises ScheduleError for illegal knobs)."""
        return driver.lower_program(self.program, self.signature, self.schedule(config), self.target)[1]

    # ------------------------------------------------------------ building (in a builder process)
    def compile_object(self, config: Mapping[str, Any]) -> str:
        """Lower the candidate and compile it to object code in the disk cache (unless it is there
        already), under the key `build` will look up; returns the key. Requires the disk cache
        to be enabled (the builder processes point it at the measurer's directory)."""
        from tilec.codegen.llvm.module import emit_module
        from tilec.codegen.llvm.jit import emit_object, optimise
        from tilec import disk_cache

        schedule = self.schedule(config)
        key = driver.cache_key(self.program, self.signature, self.target, schedule)
        if disk_cache.load(key) is None:
            _, func = driver.lower_program(self.program, self.signature, schedule, self.target)
            disk_cache.store(key, emit_object(optimise(emit_module(func, self.target), self.target), self.target))
        return key

    # ------------------------------------------------------------ running (in a measurement process)
    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape).astype(dict(self.dtypes).get(name, "float32"))
                for name, shape in self.shapes]

    def build(self, config: Mapping[str, Any] | None) -> Callable[[list[np.ndarray]], Any]:
        """Compile the candidate (None: the default schedule) and return a call on input arrays.
        Compilation happens here, so a build error is raised here, not at the first call."""
        import tilec

        # The default is compiled with its knobs spelled out: a bare compile would apply tuning records.
        fn = tilec.compile(self.source, self.target, **dict(self.sizes))
        fn = fn.with_schedule(self.schedule(self.default_config() if config is None else config))
        fn.kernel(self.signature)
        return lambda arrays: fn(*arrays)


def tasks_for(source: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str] | None = None,
              target: Target | None = None, sizes: Mapping[str, int] | None = None, label: str = "") -> list[Task]:
    """The tunable statements of a program: each attention chain, and each other contraction
    the implicit-GEMM template matches (statements inside an attention chain, or inside the
    gradient of one, which lowers as one fused kernel, are skipped)."""
    target = target or host_target()
    dtypes = dict(dtypes or {})
    program = parse(source, dict(sizes or {}))
    names = program.input_names
    missing = [n for n in names if n not in shapes]
    if missing:
        raise TilecError(f"give a shape for every input of the program; missing {', '.join(missing)}")
    shape_items = tuple((n, tuple(int(d) for d in shapes[n])) for n in names)
    dtype_items = tuple((n, dtypes.get(n, "float32")) for n in names)
    size_items = tuple(sorted((sizes or {}).items()))
    bp = bind(program, dict(shape_items), dict(dtype_items), dict(size_items))
    tasks, skip_until = [], 0
    for index, b in enumerate(bp.statements):
        if index < skip_until or not isinstance(b, BoundContraction):
            continue
        plan = attention.match(index, bp)
        backward = attention_backward.match(index, bp) if plan is None else None
        if backward is not None:
            # the fused attention gradient: its statements are not tuned one by one (a record for one
            # of its products would replace the fused kernel); its block knobs have no search space yet
            skip_until = index + backward.consumed
            continue
        if plan is not None:
            template, skip_until = "attention", index + plan.consumed
        elif implicit_gemm.match(b) is not None:
            template = "implicit_gemm"
        else:
            continue
        tasks.append(Task(source, shape_items, dtype_items, target, index, template, size_items, label))
    return tasks


def gradient_source(source: str, wrt: "list[str] | tuple[str, ...]", sizes: Mapping[str, int] | None = None) -> str:
    """The Tile text of the gradient program `tilec.grad(source, wrt, **sizes)` compiles: its
    tasks have the keys that `tilec.grad` looks records up by."""
    from tilec.autodiff import derive

    return str(derive(parse(source, dict(sizes or {})), list(wrt)))


def backward_tasks(source: str, shapes: Mapping[str, tuple[int, ...]], wrt: "list[str] | tuple[str, ...]",
                   dtypes: Mapping[str, str] | None = None, target: Target | None = None,
                   sizes: Mapping[str, int] | None = None, label: str = "") -> list[Task]:
    """The tunable statements of the gradient of `source` with respect to `wrt` (tilec.autodiff):
    its inputs are the forward inputs, shaped as given, then one gradient per forward output
    (``D<Output>``, shaped like that output)."""
    dtypes = dict(dtypes or {})
    program = parse(source, dict(sizes or {}))
    missing = [n for n in program.input_names if n not in shapes]
    if missing:
        raise TilecError(f"give a shape for every input of the program; missing {', '.join(missing)}")
    unknown = [n for n in wrt if n not in program.input_names]
    if unknown:
        raise TilecError(f"cannot differentiate with respect to {', '.join(unknown)}: the program's inputs are "
                         f"{', '.join(program.input_names)}")
    bound = bind(program, {n: tuple(shapes[n]) for n in program.input_names},
                 {n: dtypes.get(n, "float32") for n in program.input_names}, dict(sizes or {}))
    grad_shapes = {**{n: tuple(shapes[n]) for n in program.input_names},
                   **{f"D{o}": tuple(bound.shapes[o]) for o in program.outputs}}
    grad_dtypes = {**{n: dtypes.get(n, "float32") for n in program.input_names},
                   **{f"D{o}": bound.dtypes[o] for o in program.outputs}}
    return tasks_for(gradient_source(source, wrt, sizes), grad_shapes, grad_dtypes, target, sizes, label)
