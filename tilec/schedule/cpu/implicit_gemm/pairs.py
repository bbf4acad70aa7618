"""bfloat16 pairs for the direct variant's micro-kernel: which reduction variable it takes in pairs.

AVX512-BF16's `vdpbf16ps` adds two products per float32 lane: acc[l] += a0 b0[l] + a1 b1[l], the a
pair broadcast from one 32-bit word. The direct variant (tilec.schedule.cpu.implicit_gemm.direct)
steps one reduction variable by two and needs A's two values of each step side by side in memory
(`pairs`, first that applies):

* in place (`pair_variable`): they lie so in A itself (an NHWC input's channels, a matrix row, a
  1x1 filter's F[co, c, 0, 0]);
* halved (`halved_variable`): a copy of A of its own size with the variable's dimension halved and
  each pair side by side, A[..., 2 q + e, ...] at [..., q, ..., e] (built by
  tilec.schedule.cpu.implicit_gemm.padding.halved_pairs), where the variable indexes a dimension
  of A alone (a weight gradient's images);
* interleaved (`interleaved_variable`): a copy of twice A's size holding each step's two values
  side by side (padding.interleaved_pairs), where A is read at a stride along every reduction
  variable.

Both copies need A to serve enough products per element (INTERLEAVE_MIN_REUSE).

Requires: a GemmPlan, A's zero borders and the program's shapes and dtypes. Guarantees: a variable
only where the pairs are exact (an even range from 0; in place, over a whole unpadded dimension).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.ir.bounds import BoundProgram
from tilec.schedule.cpu.implicit_gemm.packed import bf16_pairs
from tilec.schedule.cpu.implicit_gemm.padding import Pads
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.target import Target


def pair_variable(plan: GemmPlan, pads: Pads, bp: BoundProgram, target: Target, nr: int) -> str | None:
    """The reduction variable whose neighbouring values the micro-kernel takes in pairs (module doc):
    alone in A's innermost dimension longer than 1 (those after it of size 1: a 1x1 filter's
    F[co, c, 0, 0]), unpadded, over the whole dimension, of even size, and in no other index of A;
    A, B and the output bfloat16 on a CPU with the pair dot product, NR whole 16-lane vectors.
    None where the variant runs in float32."""
    a = plan.a
    if not bf16_pairs(plan, bp.dtypes, target, nr):
        return None
    shape = bp.shapes[a.tensor]
    d = pair_dimension(shape)
    if d is None:
        return None
    var = a.indices[d].lone_var
    ranges = {name: (lo, hi) for name, lo, hi in plan.red}
    if var is None or var not in ranges or pads[d] != (0, 0) or any(var in e.vars for k, e in enumerate(a.indices) if k != d):
        return None
    lo, hi = ranges[var]
    return var if lo == 0 and hi + 1 == shape[d] and shape[d] % 2 == 0 else None


@dataclass(frozen=True)
class Pairs:
    """The reduction variable taken in pairs and where its pairs lie: "in_place" (A's innermost
    dimension), "halved" (a copy with dimension `dim` halved) or "interleaved" (a copy twice A's size)."""

    var: str
    layout: str
    dim: int | None = None


def pairs(plan: GemmPlan, pads: Pads, bp: BoundProgram, target: Target, nr: int) -> Pairs | None:
    """How the direct variant takes bfloat16 pairs (module doc), or None (it runs in float32)."""
    var = pair_variable(plan, pads, bp, target, nr)
    if var is not None:
        return Pairs(var, "in_place")
    halved = halved_variable(plan, pads, bp, target, nr)
    if halved is not None:
        return Pairs(halved[0], "halved", halved[1])
    var = interleaved_variable(plan, pads, bp, target, nr)
    return Pairs(var, "interleaved") if var is not None else None


def halved_variable(plan: GemmPlan, pads: Pads, bp: BoundProgram, target: Target, nr: int) -> tuple[str, int] | None:
    """(variable, dimension): the outermost reduction variable that indexes a dimension of A alone
    (coefficient 1, from 0 over the whole dimension, of even size, unpadded there, in no other
    index of A), not A's innermost one (that is `pair_variable`'s), where A serves enough
    products per element for a copy (`reused_enough`); else None. A weight gradient's input
    I[n, s x + i - p, s y + j - p, c] has its images so: the copy with them halved holds image 2 q's
    and 2 q + 1's values side by side, A's size, where pairing a pixel variable (interleaved)
    copies each value twice."""
    a = plan.a
    if not bf16_pairs(plan, bp.dtypes, target, nr) or not reused_enough(plan, pads, bp):
        return None
    shape = bp.shapes[a.tensor]
    ranges = {name: (lo, hi) for name, lo, hi in plan.red}
    innermost = pair_dimension(shape)
    for var, _, _ in plan.red:
        dims = [d for d, e in enumerate(a.indices) if var in e.vars]
        if len(dims) != 1 or dims[0] == innermost:
            continue
        d = dims[0]
        lo, hi = ranges[var]
        if a.indices[d].lone_var == var and pads[d] == (0, 0) \
                and lo == 0 and hi + 1 == shape[d] and shape[d] % 2 == 0:
            return var, d
    return None


def reused_enough(plan: GemmPlan, pads: Pads, bp: BoundProgram) -> bool:
    """Whether each element of A (with its borders) serves INTERLEAVE_MIN_REUSE products or more."""
    a_size = math.prod(size + lo + hi for size, (lo, hi) in zip(bp.shapes[plan.a.tensor], pads))
    return plan.m * plan.n * plan.k * plan.batch >= INTERLEAVE_MIN_REUSE * a_size


def interleaved_variable(plan: GemmPlan, pads: Pads, bp: BoundProgram, target: Target, nr: int) -> str | None:
    """Where no reduction variable's pairs lie side by side in A (pair_variable), the innermost
    reduction variable over an even range from 0 whose pairs an interleaved copy of A puts side by
    side (padding.interleaved_pairs, twice A's size), when each element of A then serves at least
    INTERLEAVE_MIN_REUSE products (a weight gradient's input: its rows are the filter's taps and
    channels, its reduction the images and pixels, which it reads at a stride); else None."""
    if not bf16_pairs(plan, bp.dtypes, target, nr) or not reused_enough(plan, pads, bp):
        return None
    return next((var for var, lo, hi in reversed(plan.red) if lo == 0 and (hi + 1) % 2 == 0), None)


INTERLEAVE_MIN_REUSE = 32  # products per element of A for which an interleaved copy of it pays


def pair_steps(plan: GemmPlan, var: str) -> tuple[int, ...]:
    """Per dimension of A, how far its index moves when `var` grows by one."""
    return tuple(dict(e.coeffs).get(var, 0) for e in plan.a.indices)


def pair_dimension(shape: tuple[int, ...]) -> int | None:
    """The innermost dimension of `shape` longer than 1 (its neighbours are adjacent in memory)."""
    return next((d for d in reversed(range(len(shape))) if shape[d] > 1), None)


__all__ = ["INTERLEAVE_MIN_REUSE", "Pairs", "halved_variable", "interleaved_variable", "pair_dimension", "pair_steps",
           "pair_variable", "pairs", "reused_enough"]
