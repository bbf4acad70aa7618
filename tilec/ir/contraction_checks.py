"""Checks that binding makes on a contraction beyond its ranges (used by tilec.ir.bounds).

- `warn_lone_extents`: a TilecWarning when an index used alone runs over dimensions of different
  extents in two inputs (the intersection is used; usually a shape bug);
- `check_single_assignment`: a SemanticError when '=' surely writes a cell twice.
"""

from __future__ import annotations

import warnings

from tilec.errors import SemanticError, TilecWarning
from tilec.ir import tensor as T
from tilec.ir.affine import IntAffine
from tilec.ir.conditions import Condition


def warn_lone_extents(stmt: T.Contraction, operands: list[tuple[str, tuple[IntAffine, ...]]],
                      shapes: dict[str, tuple[int, ...]]) -> None:
    """Tile semantics make an index variable used alone in dimensions of different extents run over
    their intersection. Across two different inputs that is usually a shape bug (a matmul with
    disagreeing K), so say so with a TilecWarning, unless a constraint on the variable shows the
    truncation is meant. (Within one tensor it is ordinary: the diagonal of a rectangular matrix.)"""
    constrained = {v for c in stmt.constraints for v in T.iexpr_names(c.poly)[0]}
    seen: dict[str, tuple[str, int, int]] = {}
    for tensor, indices in operands:
        for axis, e in enumerate(indices):
            if len(e.coeffs) != 1 or e.coeffs[0][1] != 1 or e.const != 0 or e.divisor != 1:
                continue
            v = e.coeffs[0][0]
            extent = shapes[tensor][axis]
            first = seen.setdefault(v, (tensor, axis, extent))
            if first[2] != extent and first[0] != tensor and v not in constrained:
                warnings.warn(TilecWarning(
                    f"index '{v}' in '{stmt}' runs over {first[2]} values in '{first[0]}' (dimension {first[1]}, "
                    f"shape {shapes[first[0]]}) but over {extent} in '{tensor}' (dimension {axis}, shape "
                    f"{shapes[tensor]}); tilec uses the first {min(first[2], extent)} values (their "
                    f"intersection). Make the shapes agree, or add the constraint '{v} < {min(first[2], extent)}' "
                    f"to say the truncation is intended"), stacklevel=2)
                return


def check_single_assignment(stmt: T.Contraction, out_idx: tuple[IntAffine, ...],
                            ranges: tuple[tuple[str, int, int], ...], guards: tuple[Condition, ...]) -> None:
    """Under '=' two tuples must not write one cell. The compiler sees it for sure when a variable
    that takes several values does not appear on the left at all (and no constraint ties it down);
    left-hand sides such as ``M*i + j`` can still be injective on the box, so they are trusted."""
    if stmt.constraints or guards:
        return
    lhs_vars = {v for e in out_idx for v in e.vars}
    free = [v for v, lo, hi in ranges if hi > lo and v not in lhs_vars]
    if free:
        raise SemanticError(f"'=' in '{stmt}' writes some output cells more than once: index variable(s) "
                            f"{', '.join(repr(v) for v in free)} do not appear on the left; use an aggregation such "
                            f"as '+' or '>' instead, or add constraints")
