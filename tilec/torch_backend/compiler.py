"""An ATen graph (AOTAutograd's forward or backward) compiled to tilec kernels and torch calls.

`compile_graph(gm)` partitions the graph (tilec.torch_backend.partition), writes one Tile
program per kernel group, and returns a new GraphModule whose nodes are the kernels (`Kernel`),
the library calls (`LibraryCall`), torch's views and the ATen nodes tilec does not lower. A
graph with symbolic sizes (`dynamic=True`, `mark_dynamic`) compiles one such module per
concrete shape signature the first time it runs with it (`Compiled`).

Requires: an ATen graph whose nodes carry `meta["val"]`. Guarantees: the returned callable takes
AOTAutograd's boxed argument list and returns what the graph returns; no node tilec refuses
stops compilation (it runs in torch); `coverage()` counts every call.
"""

from __future__ import annotations

import copy
import heapq
import operator
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from tilec.config import logs
from tilec.errors import TilecError, TilecWarning
from tilec.ops.kernels import call, forward_fn, plan_for
from tilec.torch_backend import tasks
from tilec.torch_backend.lowering import LIBRARY_RULES, TILE_RULES, argv, rule_key
from tilec.torch_backend.partition import (LIBRARY, REPLAYABLE, TILE, TORCH, VIEW, Partition, classify_all,
                                           partition)
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value


@dataclass
class GraphStats:
    """Counts of ATen calls in tilec kernels, ATen calls torch runs (by op name) and tilec kernels
    launched: one compiled graph's per call, or (COVERAGE) the sum over every call since the last
    reset."""

    lowered: int = 0
    fallback: Counter[str] = field(default_factory=Counter)
    kernels: int = 0
    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, other: "GraphStats") -> None:
        self.lowered += other.lowered
        self.fallback.update(other.fallback)
        self.kernels += other.kernels

    def summary(self) -> str:
        total = self.lowered + sum(self.fallback.values())
        share = self.lowered / total if total else 1.0
        text = (f"tilec backend: {self.lowered} of {total} ATen calls in {self.kernels} tilec kernels "
                f"({share:.0%})")
        if self.fallback:
            text += "; torch runs " + ", ".join(f"{op} x{n}" for op, n in self.fallback.most_common())
        for op, why in self.reasons.items():
            text += f"\n  {op}: {why}"
        return text


COVERAGE = GraphStats()


class Kernel:
    """One fused Tile program as a graph node: runs on the input tensors, returns its outputs."""

    def __init__(self, source: str, generated: Sequence[Callable[[], torch.Tensor]],
                 layouts: Sequence[tuple[int, ...] | None] = ()) -> None:
        self.source = source
        self.fn = forward_fn(source)
        self.generated = tuple(generated)
        self.layouts = tuple(layouts) if any(o is not None for o in layouts) else ()
        self.__name__ = "tilec_kernel"

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        if self.layouts:  # inputs declared in their memory order: free views, no copies
            tensors = tuple(t if o is None else t.permute(o) for t, o in zip(tensors, self.layouts))
        extra = [make() for make in self.generated]
        return call(self.fn, [*tensors, *extra])


class LibraryCall:
    """A library rule as a graph node (its name shows in printed graphs)."""

    def __init__(self, rule: Callable[..., Any], target: Any) -> None:
        self.rule = rule
        self.__name__ = f"tilec_{getattr(target, '__name__', str(target)).replace('.', '_')}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.rule(*args, **kwargs)


class GroupRefused(Exception):
    """Nodes that must run in torch after all (a rule refused a node inside its kernel, or the
    kernel did not compile)."""

    def __init__(self, nodes: list[fx.Node], reason: str) -> None:
        super().__init__(reason)
        self.nodes = nodes


def _op_name(node: fx.Node) -> str:
    return str(getattr(node.target, "__name__", node.target)).removesuffix(".default")


@dataclass
class Group:
    """A kernel group's program and what leaves it: `values` (the kernel's outputs), `index` (the
    output each member node used outside gives: members with one value share it) and `replay`
    (views of the kernel's inputs used outside: torch takes them itself, for free)."""

    writer: ProgramWriter
    values: list[Value]
    index: dict[fx.Node, int]
    replay: list[fx.Node]


def _write_group(members: list[fx.Node], outside: Callable[[fx.Node], bool]) -> Group:
    p = ProgramWriter()
    for node in members:
        try:
            if node.target is operator.getitem:
                src, i = argv(node)
                value = p.values[src][i]
            else:
                value = TILE_RULES[rule_key(node.target)](p, node)
        except Unsupported as e:
            raise GroupRefused([node], str(e)) from e
        p.values[node] = value
    group = Group(p, [], {}, [])
    inputs = {v.name for v, _ in [*p.inputs, *p.generated]}
    by_name: dict[str, int] = {}
    member_set = set(members)
    for node in members:
        value = p.values[node]
        if not isinstance(value, Value) or not any(outside(u) for u in node.users):
            continue
        if value.name in inputs and node.target in REPLAYABLE \
                and not any(i in member_set for i in node.all_input_nodes):
            group.replay.append(node)
            continue
        key = f"{value.name}{value.shape}{value.index}"
        if key not in by_name:
            value = p.materialise(value)
            if value.name in inputs:  # (a kernel output is a tensor the kernel writes)
                value = p.copy(value)
            by_name[key] = len(group.values)
            group.values.append(value)
        group.index[node] = by_name[key]
    return group


def compile_static(gm: fx.GraphModule) -> tuple[fx.GraphModule, GraphStats]:
    """The graph with its tilec kernels (every size concrete)."""
    refused: set[fx.Node] = set()
    kinds = classify_all(gm.graph)
    while True:
        part = partition(gm.graph, kinds, refused)
        try:
            return _build(gm, part)
        except GroupRefused as e:
            warnings.warn(f"tilec backend: {len(e.nodes)} ATen node(s) run in torch: {e}", TilecWarning, stacklevel=2)
            refused.update(e.nodes)


def _build(gm: fx.GraphModule, part: Partition) -> tuple[fx.GraphModule, GraphStats]:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    stats = GraphStats()
    users_kernel: set[fx.Node] = set()  # nodes read by a kernel or library call
    for node in gm.graph.nodes:
        if part.kind.get(node) in (TILE, LIBRARY):
            users_kernel.update(node.all_input_nodes)

    def emit_group(g: int) -> None:
        members = part.members[g]
        member_set = set(members)
        group = _write_group(members, lambda u: u not in member_set)
        p = group.writer
        for node in group.replay:
            env[node] = graph.node_copy(node, lambda n: env[n])
        if not group.values:
            stats.lowered += len(group.replay)
            return
        source = p.source(group.values)
        declared = [v for v, _ in [*p.inputs, *p.generated]]
        try:
            kernel = Kernel(source, [make for _, make in p.generated], [p.layouts.get(v.name) for v, _ in p.inputs])
            plan_for(kernel.fn, [torch.empty(v.shape, dtype=v.dtype, device="meta")
                                 for v in declared])  # compiles now, not mid-step
        except TilecError as e:
            raise GroupRefused(members, f"tilec cannot compile the kernel: {e}") from e
        tasks.note(source, kernel.fn.inputs, [v.shape for v in declared], [v.dtype for v in declared])
        result = graph.call_function(kernel, tuple(env[n] for _, n in p.inputs))
        outputs = [graph.call_function(operator.getitem, (result, i)) for i in range(len(group.values))]
        for node, i in group.index.items():
            env[node] = outputs[i]
        stats.kernels += 1
        stats.lowered += sum(1 for n in members if n.target is not operator.getitem)

    for node in _schedule(gm.graph, part):
        if isinstance(node, int):
            emit_group(node)
            continue
        if node.op == "placeholder":
            env[node] = graph.placeholder(node.name, type_expr=node.type)
            env[node].meta = dict(node.meta)
            continue
        if node.op == "output":
            graph.output(fx.node.map_arg(argv(node)[0], lambda n: env[n]))
            continue
        if node.op != "call_function":
            env[node] = graph.node_copy(node, lambda n: env[n])
            continue
        kind = part.kind[node]
        new = graph.node_copy(node, lambda n: env[n])
        if kind == LIBRARY:
            new.target = LibraryCall(LIBRARY_RULES[rule_key(node.target)], node.target)
            stats.kernels += 1
            stats.lowered += 1
        elif kind == VIEW and node in users_kernel:
            stats.lowered += 1
        elif node.target is not operator.getitem:
            name = _op_name(node)
            stats.fallback[name] += 1
            if node in part.reasons and kind == TORCH:
                stats.reasons.setdefault(name, part.reasons[node])
        env[node] = new
    graph.lint()
    return fx.GraphModule(gm, graph), stats


def _schedule(graph: fx.Graph, part: Partition) -> list[fx.Node | int]:
    """The nodes outside kernels and the kernels (group numbers) in an order that runs every one
    after what it reads: the graph's order, a kernel at its last member's place, deferred while an
    input is not yet computed (a node after a kernel's first member may read the kernel's result)."""
    nodes = list(graph.nodes)
    unit: dict[fx.Node, Any] = {n: (part.group[n] if part.kind.get(n) == TILE else n) for n in nodes}
    position: dict[Any, int] = {}
    deps: dict[Any, set[Any]] = {}
    for pos, n in enumerate(nodes):
        u = unit[n]
        position[u] = pos  # a group's position: its last member's
        deps.setdefault(u, set()).update(unit[i] for i in n.all_input_nodes if unit[i] != u)
    users: dict[Any, list[Any]] = {}
    for u, ds in deps.items():
        for d in ds:
            users.setdefault(d, []).append(u)
    waiting = {u: len(ds) for u, ds in deps.items()}
    ready = [(position[u], i, u) for i, u in enumerate(deps) if waiting[u] == 0]
    heapq.heapify(ready)
    order: list[Any] = []
    counter = len(deps)
    while ready:
        _, _, u = heapq.heappop(ready)
        order.append(u)
        for v in users.get(u, []):
            waiting[v] -= 1
            if waiting[v] == 0:
                counter += 1
                heapq.heappush(ready, (position[v], counter, v))
    if len(order) != len(deps):
        raise AssertionError("tilec backend: the kernel groups depend on each other in a cycle")
    return order


def _has_symbols(gm: fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(not isinstance(s, int) for s in val.shape):
            return True
    return False


def _log(stats: GraphStats) -> None:
    if logs("backend"):
        print(stats.summary(), file=sys.stderr)


class Compiled:
    """The boxed callable AOTAutograd runs: one compiled module per shape signature."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self._boxed_call = True  # (an instance attribute: wrappers copy __dict__)
        self.gm = gm
        self.dynamic = _has_symbols(gm)
        self.modules: dict[Any, tuple[fx.GraphModule, GraphStats]] = {}
        if not self.dynamic:
            self.static = compile_static(gm)
            _log(self.static[1])

    def __call__(self, args: list[Any]) -> Any:
        if self.dynamic:
            module, stats = self._specialised(args)
        else:
            module, stats = self.static
        COVERAGE.add(stats)
        out = module(*args)
        args.clear()
        return out

    def _specialised(self, args: Sequence[Any]) -> tuple[fx.GraphModule, GraphStats]:
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        entry = self.modules.get(key)
        if entry is None:
            entry = self.modules[key] = compile_static(specialise(self.gm, args))
            _log(entry[1])
        return entry


def specialise(gm: fx.GraphModule, args: Sequence[Any]) -> fx.GraphModule:
    """A copy of `gm` whose nodes' values are recomputed (on fake tensors) for these arguments."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    copied = copy.deepcopy(gm)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]
    FakeTensorProp(copied, mode).propagate_dont_convert_inputs(*fakes)
    return copied


__all__ = ["Compiled", "compile_static", "COVERAGE", "GraphStats", "TORCH", "TILE"]
