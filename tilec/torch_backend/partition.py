"""Which ATen nodes of a graph become which tilec kernel, and which stay torch's.

Every call node is classified:
- **tile**: its rule writes Tile statements (tried on the node alone first); tile nodes fuse into
  kernels: one kernel is open at a time and a tile node joins it unless that would make the kernel
  depend on itself (an input computed outside the kernel from the kernel's own results); then the
  kernel closes and a new one opens;
- **view**: a reshape-like view (view, unsqueeze, ...) of a tensor from outside the open kernel
  runs in torch (no copy: the kernel reads the base tensor's memory in the view's shape); a view
  of a value inside the open kernel is a tile node (permutes and expands of any tensor are lazy
  tile nodes: the contraction that reads them indexes through them);
- **library**: a tilec kernel of its own on real tensors (convolutions);
- **torch**: everything else (ATen fallback in the same compiled function).

Requires: a graph whose nodes carry concrete `meta["val"]`. Guarantees: the groups and the other
nodes form a DAG in the graph's order (each kernel runs after everything it reads).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from tilec.torch_backend.lowering import LIBRARY_CHECKS, LIBRARY_RULES, TILE_RULES, rule_key
from tilec.torch_backend.program import ProgramWriter, Unsupported

aten = torch.ops.aten

#: views torch takes at a kernel's boundary for free (the result keeps the input's memory order)
TORCH_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
               aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.alias.default, aten.detach.default,
               aten.flatten.using_ints}
#: views a kernel's output may be replaced by (torch's view of the kernel's input: no copy)
REPLAYABLE = TORCH_VIEWS | {aten.permute.default, aten.transpose.int, aten.t.default, aten.expand.default}
TILE, VIEW, LIBRARY, TORCH = "tile", "view", "library", "torch"
#: the most nodes one kernel takes (its compile time grows with the program)
MAX_GROUP = 300


@dataclass
class Partition:
    kind: dict[fx.Node, str] = field(default_factory=dict)
    group: dict[fx.Node, int] = field(default_factory=dict)
    members: list[list[fx.Node]] = field(default_factory=list)
    reasons: dict[fx.Node, str] = field(default_factory=dict)


def classify_all(graph: fx.Graph) -> dict[fx.Node, tuple[str, str]]:
    """(kind, reason) of every call node before grouping, once per graph (a partition after a
    refusal reuses them)."""
    return {node: classify(node) for node in graph.nodes if node.op == "call_function"}


def classify(node: fx.Node) -> tuple[str, str]:
    """(kind, reason) of a call node before grouping (VIEW candidates are decided in grouping)."""
    target = node.target
    if target is operator.getitem:
        return TILE, ""
    key = rule_key(target)
    if key in TILE_RULES:
        try:
            TILE_RULES[key](ProgramWriter(), node)
        except Unsupported as e:
            return TORCH, str(e)
        except Exception as e:  # a rule's bug must not break the user's model: torch runs the node
            return TORCH, f"lowering error {type(e).__name__}: {e}"
        return TILE, ""
    if key in LIBRARY_RULES:
        try:
            check = LIBRARY_CHECKS.get(key)
            if check is not None:
                args = fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
                kwargs = fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
                check(*args, **kwargs)
        except Unsupported as e:
            return TORCH, str(e)
        return LIBRARY, ""
    return TORCH, "no tilec lowering"


def partition(graph: fx.Graph, kinds: dict[fx.Node, tuple[str, str]], refused: set[fx.Node]) -> Partition:
    """The kernel groups of `graph`'s nodes of the `kinds` classify_all gave, the `refused` ones
    (a rule refused them inside their kernel, or their kernel did not compile) in torch."""
    part = Partition()
    reach: dict[fx.Node, set[int]] = {}  # the groups a node's value depends on
    open_group = -1
    for node in graph.nodes:
        if node.op != "call_function":
            reach[node] = set()
            continue
        kind, reason = (TORCH, "refused inside its kernel") if node in refused else kinds[node]
        inputs = node.all_input_nodes
        if node.target is operator.getitem:
            src = inputs[0]
            kind = TILE if part.kind.get(src) == TILE else TORCH  # (picks from a torch or library result)
        if kind == TILE and node.target in TORCH_VIEWS and (not inputs or part.group.get(inputs[0]) != open_group):
            kind = VIEW
        if kind == TILE and node.target is not operator.getitem:
            blocked = any(open_group in reach[i] and part.group.get(i) != open_group for i in inputs) \
                or open_group < 0 or len(part.members[open_group]) >= MAX_GROUP
            if blocked:
                part.members.append([])
                open_group = len(part.members) - 1
        if kind == TILE:
            g = part.group[inputs[0]] if node.target is operator.getitem else open_group
            part.group[node] = g
            part.members[g].append(node)
        part.kind[node] = kind
        if reason:
            part.reasons[node] = reason
        deps: set[int] = set()
        for i in inputs:
            deps |= reach[i]
            if i in part.group:
                deps.add(part.group[i])
        reach[node] = deps
    return part
