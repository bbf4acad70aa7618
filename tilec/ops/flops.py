"""FLOP counts of tilec's torch ops, for `torch.utils.flop_counter.FlopCounterMode`.

torch counts the floating-point work of matrix products, convolutions and attention (2 per
multiply-add) and none for elementwise ops; a Tile program is counted the same way: 2 per index
tuple of every contraction that multiplies two operands under a sum (``+(A[..] * B[..])``), over
the tuple box its bounds inference gives, and 0 for everything else. The backward op
(tilec::tile_grad) is counted on the derived gradient program, so a convolution's backward counts
what its two gradient contractions do (twice the forward, as torch counts it).

`register()` registers the formulas for tilec::program and tilec::tile_grad, and for the tuned
ops attention, linear and conv2d by their shapes (tilec.ops.program calls it once, after defining
its op and importing the others). Requires: the shapes of the op's tensor arguments (FlopCounterMode passes them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
from torch.utils.flop_counter import register_flop_formula

from tilec.autodiff import derive
from tilec.frontend import parse
from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, bind


@lru_cache(maxsize=256)
def _parsed(source: str) -> T.Program:
    return parse(source)


@lru_cache(maxsize=256)
def _gradient(source: str, wrt: tuple[int, ...]) -> T.Program:
    program = _parsed(source)
    return derive(program, [program.input_names[i] for i in wrt])


def program_flops(program: T.Program, shapes: Sequence[Sequence[int]], dtype: str = "float32") -> int:
    """2 x the index tuples of every multiply-under-sum contraction of `program` on inputs of `shapes`."""
    names = program.input_names
    bound = bind(program, {n: tuple(int(d) for d in s) for n, s in zip(names, shapes)}, dict.fromkeys(names, dtype))
    total = 0
    for b in bound.statements:
        if isinstance(b, BoundContraction) and not b.empty and b.stmt.agg == "+" and b.stmt.combo == "mul":
            total += 2 * math.prod(hi - lo + 1 for _, lo, hi in b.ranges)
    return total


def _program_flops(source: str, inputs: list[Any], *args: Any, **kwargs: Any) -> int:
    return program_flops(_parsed(source), inputs)


def _tile_grad_flops(source: str, wrt: list[int], inputs: list[Any], *args: Any, **kwargs: Any) -> int:
    return program_flops(_gradient(source, tuple(wrt)), inputs)


def _attention_flops(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> int:
    """Q K^T and P V over [B, H, S, D] x [B, H, T, D] x [B, H, T, Dv] (as torch counts sdpa)."""
    b, h, s, d = q
    return 2 * b * h * s * k[2] * d + 2 * b * h * s * k[2] * v[3]


def _linear_flops(x: Any, weight: Any, *args: Any, **kwargs: Any) -> int:
    return 2 * math.prod(x[:-1]) * weight[0] * weight[1]


def _conv2d_flops(x: Any, weight: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """2 per multiply-add: every output element sums C/groups x KH x KW products."""
    return 2 * math.prod(out_shape) * math.prod(weight[1:])


def register() -> None:
    """Registers the formulas with torch's flop counter: tilec::program and tilec::tile_grad on
    their programs, the tuned ops (attention, linear, conv2d) by their shapes."""
    register_flop_formula(torch.ops.tilec.program)(_program_flops)
    register_flop_formula(torch.ops.tilec.tile_grad)(_tile_grad_flops)
    register_flop_formula(torch.ops.tilec.attention)(_attention_flops)
    register_flop_formula(torch.ops.tilec.linear)(_linear_flops)
    register_flop_formula(torch.ops.tilec.conv2d)(_conv2d_flops)


__all__ = ["program_flops", "register"]
