"""A tuning task: one statement of one program, for fixed input shapes, dtypes and target,
lowered by one template whose knobs the tuner searches.

`tasks_for(source, shapes, dtypes)` finds the statements a tunable template applies to (the
target kind's heuristic order: tilec.schedule.heuristics.cpu.TUNED, tilec.schedule.heuristics.gpu.ORDER);
`task.schedule(config)` turns a knob assignment into the TemplateSchedule that
`tilec.compile(...).with_schedule` and the records replay. The template (from the registry)
supplies the plan, the default knobs, the space, the features and the work a candidate does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tilec import disk_cache, pipeline
from tilec.autotune.gpu import on_device
from tilec.errors import TilecError
from tilec.frontend import parse
from tilec.ir import loop as L
from tilec.ir.bounds import BoundProgram, bind
from tilec.ir.tensor import Program
from tilec.records import Record, task_key
from tilec.records.record import task_family
from tilec.runtime.function import Function
from tilec.schedule import params as lowering_params
from tilec.schedule.cuts import cut, tunable_statements
from tilec.schedule import registry
from tilec.schedule.templates.base import Context, Template, config_of
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.schedule.templates.space import Config
from tilec.target import Target


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

    def __post_init__(self) -> None:
        kind = self.target.kind
        tunable = [t.name for t in registry.tunable(kind)]
        if self.template not in registry.names(kind) or not self.impl.tunable:
            raise TilecError(f"cannot tune template '{self.template}' on target {self.target.name}; tunable templates: "
                             f"{', '.join(tunable)}")

    @property
    def pool_builds(self) -> bool:
        """Whether builder processes compile candidates to object code in the disk cache
        (compile_object); GPU tasks are built in the measurement process."""
        return not self.target.is_gpu

    @property
    def impl(self) -> Template:
        """The template itself (tilec.schedule.registry)."""
        return registry.get(self.template)

    # ------------------------------------------------------------ the program, bound
    @functools.cached_property
    def program(self) -> Program:
        return parse(self.source, dict(self.sizes))

    @property
    def signature(self) -> pipeline.Signature:
        return pipeline.Signature(self.shapes, self.dtypes, self.sizes)

    @functools.cached_property
    def bound(self) -> BoundProgram:
        return bind(self.program, dict(self.shapes), dict(self.dtypes), dict(self.sizes))

    @functools.cached_property
    def context(self) -> Context:
        return Context(self.bound, self.target, lowering_params.current())

    @functools.cached_property
    def plan(self) -> Any:
        """The template's plan of the statement (a GemmPlan, an AttentionPlan, ...)."""
        plan = self.impl.match(self.stmt, self.context)
        if plan is None:
            raise TilecError(f"template '{self.template}' does not apply to statement {self.stmt} of the program")
        return plan

    @property
    def dtype(self) -> str:
        return self.bound.statements[self.stmt].dtype

    @property
    def key(self) -> str:
        return task_key(str(self.program), dict(self.shapes), dict(self.dtypes), self.stmt, dict(self.sizes))

    @functools.cached_property
    def family(self) -> tuple[str, dict[str, list[int]]]:
        """(the key without the shapes, the shapes under its names): tilec.records.task_family."""
        return task_family(str(self.program), dict(self.shapes), dict(self.dtypes), self.stmt, dict(self.sizes))

    def record(self, config: Config, time_s: float | None, error: str = "ok", **fields: Any) -> Record:
        """A tuning record of `config` for this task (its family and shapes filled in)."""
        family, dims = self.family
        return Record(self.key, self.target.key, pipeline.compiler_fingerprint(), self.schedule(config).to_json(), time_s, error,
                      family=family, dims=dims, **fields)

    @property
    def flops(self) -> float:
        return self.impl.flops(self.plan)

    # ------------------------------------------------------------ knobs -> schedules
    def default_config(self) -> Config:
        """The heuristic's knobs, as a config of this task's space."""
        return config_of(self.impl.default_knobs(self.stmt, self.plan, self.context))

    def schedule(self, config: Mapping[str, Any]) -> TemplateSchedule:
        return TemplateSchedule((TemplateConfig(self.stmt, self.template, tuple(sorted(config.items()))),))

    def config_of(self, schedule: TemplateSchedule) -> Config | None:
        """The config a (recorded) schedule sets for this task's statement, or None."""
        c = schedule.override(self.stmt)
        return dict(c.knobs) if c is not None and registry.get(c.template) is self.impl else None

    def lower(self, config: Mapping[str, Any]) -> L.PrimFunc:
        """The loop IR of a candidate (raises ScheduleError for illegal knobs)."""
        return pipeline.lower_program(self.program, self.signature, self.schedule(config), self.target)[1]

    # ------------------------------------------------------------ building (in a builder process)
    def compile_object(self, config: Mapping[str, Any]) -> str:
        """Lower the candidate and compile it to object code in the disk cache (unless it is there
        already), under the key `build` will look up (pipeline.disk_key); returns the key. Requires the disk cache
        to be enabled (the builder processes point it at the measurer's directory)."""
        schedule = self.schedule(config)
        backend = pipeline.backend_for(self.target)
        assert backend.cached is not None, f"target {self.target.name} builds in the measurement process"
        c = pipeline.compilation(self.program, self.signature, self.target, schedule)
        key = pipeline.disk_key(pipeline.kernel_key(c, backend), pipeline.run_stages(c, backend, backend.ir_stage))
        if disk_cache.load(key) is None:
            disk_cache.store(key, pipeline.run_stages(c, backend, backend.cached))
        return key

    # ------------------------------------------------------------ running (in a measurement process)
    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape).astype(dict(self.dtypes).get(name, "float32"))
                for name, shape in self.shapes]

    def build(self, config: Mapping[str, Any] | None) -> Callable[[list[np.ndarray]], Any]:
        """Compile the candidate (None: the default schedule) and return a call on input arrays.
        Compilation happens here, so a build error is raised here, not at the first call. On a
        GPU (target cuda) the call runs on device copies of the inputs (tilec.autotune.gpu)."""
        # The default is compiled with its knobs spelled out: a bare compile would apply tuning records.
        fn = Function(self.source, self.target, **dict(self.sizes))
        fn = fn.with_schedule(self.schedule(self.default_config() if config is None else config))
        fn.kernel(self.signature)
        call: Callable[[list[np.ndarray]], Any] = lambda arrays: fn(*arrays)  # noqa: E731
        return on_device(call) if self.target.host is None else call


def tasks_for(source: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str] | None = None,
              target: Target | None = None, sizes: Mapping[str, int] | None = None, label: str = "",
              alone: bool = False) -> list[Task]:
    """The tunable statements of a program (tilec.schedule.cuts.tunable_statements): one task at
    each (the fused attention gradient, which has no search space yet, has none). With `alone`,
    each task is its statement cut out of the program (tilec.schedule.cuts.cut): a candidate runs
    the statement, not the whole program, and its record serves every program that holds the
    statement (tilec.records.lookup looks cuts up after the whole program's own records)."""
    target = target or pipeline.resolve_target("llvm")  # the host, or the CPU TILEC_TARGET names
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
    tasks = []
    for found in tunable_statements(bp, target):
        whole = Task(source, shape_items, dtype_items, target, found.index, found.template, size_items, label)
        if alone:
            part = cut(bp, found.index, found.count)
            task = Task(part.source, part.shapes, part.dtypes, target, part.first, found.template, part.sizes, label)
            whole = task if _applies(task) else whole
        tasks.append(whole)
    return tasks


def _applies(task: Task) -> bool:
    """Whether the task's template lowers its statement (a cut program can lose what made the
    template apply in the whole one: then the whole program is tuned)."""
    try:
        return task.impl.match(task.stmt, task.context) is not None
    except TilecError:
        return False


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
