"""The registry of lowering rules (`tile`, `library_call`) and the helpers every rule uses to
read its node (`argv`, `result`, `axis`, `require_float`); the rule families register into it
(tilec.torch_backend.lowering)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, check_tensor, concrete, meta

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


def result(node: fx.Node) -> tuple[tuple[int, ...], torch.dtype]:
    """The node's output shape (ints) and dtype, checked (one tensor tilec can hold)."""
    val = meta(node)
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{node.name} does not give one tensor")
    check_tensor(val, node.name)
    return concrete(val.shape), val.dtype


def axis(d: int, rank: int) -> int:
    """An axis argument as torch takes it (negative counts from the end) made non-negative."""
    return d + rank if d < 0 else d


def require_float(v: Value, what: str) -> None:
    if not v.dtype.is_floating_point:
        raise Unsupported(f"{what} of {v.dtype}")
