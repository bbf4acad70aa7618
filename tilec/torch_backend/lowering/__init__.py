"""The ATen ops tilec lowers, by family, and how the partitioner asks about them.

Two kinds of rule:
- a **Tile rule** `rule(p, node)` writes the node's statements into the kernel `p`
  (tilec.torch_backend.program.ProgramWriter) and returns its Value (or a tuple of them for a
  multi-output op, which `getitem` nodes pick from); nodes with Tile rules fuse into one program;
- a **library rule** `rule(*args, **kwargs)` runs the node on real tensors through tilec's own
  tuned kernels (convolutions) and returns torch tensors: one kernel call of its own.

A rule raises `Unsupported` for arguments it cannot lower; the node then runs in torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.program import ProgramWriter, Unsupported, Value

TileRule = Callable[[ProgramWriter, fx.Node], Any]
LibraryRule = Callable[..., Any]

TILE_RULES: dict[Any, TileRule] = {}
LIBRARY_RULES: dict[Any, LibraryRule] = {}
#: library rules' checks on fake arguments (Unsupported where the rule would refuse)
LIBRARY_CHECKS: dict[Any, Callable[..., None]] = {}


def tile(*ops: Any) -> Callable[[TileRule], TileRule]:
    def register(rule: TileRule) -> TileRule:
        for op in ops:
            TILE_RULES[op] = rule
        return rule
    return register


def library_call(*ops: Any, check: Callable[..., None] | None = None) -> Callable[[LibraryRule], LibraryRule]:
    def register(rule: LibraryRule) -> LibraryRule:
        for op in ops:
            LIBRARY_RULES[op] = rule
            if check is not None:
                LIBRARY_CHECKS[op] = check
        return rule
    return register


def argv(node: fx.Node) -> tuple[Any, ...]:
    """The node's positional arguments (untyped: each rule checks what it reads)."""
    return tuple(node.args)


def rule_key(target: Any) -> Any:
    """The registry key of a node's target: the overload itself, else its packet."""
    if target in TILE_RULES or target in LIBRARY_RULES:
        return target
    packet = getattr(target, "overloadpacket", None)
    return packet if packet is not None else target


def lowered_ops() -> set[Any]:
    """Every overload or packet with a rule (the backend keeps them out of torch's decompositions)."""
    return set(TILE_RULES) | set(LIBRARY_RULES)


def out_meta(node: fx.Node) -> torch.Tensor:
    from tilec.torch_backend.program import check_tensor, meta

    val = meta(node)
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{node.name} does not give one tensor")
    check_tensor(val, node.name)
    return val


def result(p: ProgramWriter, node: fx.Node) -> tuple[tuple[int, ...], torch.dtype]:
    """The node's output shape (ints) and dtype, checked."""
    from tilec.torch_backend.program import concrete

    val = out_meta(node)
    return concrete(val.shape), val.dtype


from tilec.torch_backend.lowering import elementwise, layout, library, linalg, nn, reductions  # noqa: E402,I001  (registers)

__all__ = ["TILE_RULES", "LIBRARY_RULES", "LIBRARY_CHECKS", "rule_key", "lowered_ops", "Unsupported", "Value",
           "elementwise", "layout", "library", "linalg", "nn", "reductions"]
