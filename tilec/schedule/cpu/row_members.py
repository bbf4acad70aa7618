"""Which statements join a row-wise group (tilec.schedule.cpu.rowwise) and as what: a full-shape
member (one value per cell of the group's space F = (rows..., K)), a row member (one per row) or a
row reduction over K. A contraction joins when it writes its cells directly (every output index a
lone variable over its whole range) or reduces over the last axis only, and reads the group's
members at the cell (or the row's cell).

Requires: bound statements. Guarantees: a Member only where the fused nest computes what the
default lowering computes; None otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.ir import tensor as T
from tilec.ir.affine import IntAffine
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundIntrinsic, BoundStatement

FULL, ROW, REDUCE = "full", "row", "reduce"


@dataclass(frozen=True)
class Member:
    """One statement of a fused group: its index, kind (full | row | reduce) and, for a contraction,
    where each of its index variables sits in the group's cell (row axis "r<d>", "j" or "0")."""

    index: int
    kind: str
    places: tuple[tuple[str, str], ...] = ()


def _row(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-1] + (1,)


def _is_zero(e: IntAffine) -> bool:
    return not e.coeffs and e.const == 0


def contraction_member(index: int, b: BoundContraction, shape: tuple[int, ...],
                        kinds: dict[str, str]) -> Member | None:
    """`b` as a pointwise contraction (full or row) or a row reduction over `shape`, or None."""
    if b.empty or b.guards or b.stmt.default is not None:
        return None
    rank = len(shape)
    if b.shape == shape:
        kind = FULL
    elif b.shape == _row(shape):
        kind = ROW
    else:
        return None
    ranges = {v: (lo, hi) for v, lo, hi in b.ranges}
    places: dict[str, str] = {}
    for d, e in enumerate(b.out_indices):
        v = e.lone_var
        if d < rank - 1 or kind == FULL:
            if v is None or v in places or ranges[v] != (0, shape[d] - 1):
                return None
            places[v] = f"r{d}" if d < rank - 1 else "j"
        elif v is not None:  # the row axis of a keep-dim output: 0 or a variable over [0, 0]
            if v in places or ranges[v] != (0, 0):
                return None
            places[v] = "0"
        elif not _is_zero(e):
            return None
    rest = [v for v in ranges if v not in places]
    if rest:
        if kind != ROW or len(rest) != 1 or ranges[rest[0]] != (0, shape[-1] - 1) or b.stmt.agg not in "+><" \
                or b.stmt.combo not in ("single", "mul", "add"):
            return None
        kind = REDUCE
        places[rest[0]] = "j"
    for a in b.operands:  # in-group operands must be read at the cell (or the row's cell)
        if a.tensor not in kinds:
            continue
        want = [f"r{d}" for d in range(rank - 1)] + ["j" if kinds[a.tensor] == FULL else "0"]
        got = [places.get(e.lone_var or "", "0" if _is_zero(e) else "?") for e in a.indices]
        if got != want:
            return None
    return Member(index, kind, tuple(places.items()))


def elementwise_member(index: int, b: BoundElementwise, shape: tuple[int, ...],
                        kinds: dict[str, str]) -> Member | None:
    if b.shape == shape:
        return Member(index, FULL)
    if b.shape == _row(shape) and all(kinds.get(n) != FULL for n in T.eexpr_tensors(b.stmt.expr)):
        return Member(index, ROW)
    return None


def space(b: BoundStatement) -> tuple[int, ...] | None:
    """The iteration space a group starting at `b` covers: its shape, or a row reduction's input shape
    (None for an intrinsic: it keeps its default nest)."""
    if isinstance(b, BoundIntrinsic):
        return None
    if isinstance(b, BoundElementwise) or not b.shape:
        return b.shape
    out = {e.lone_var for e in b.out_indices}
    rest = [(v, hi + 1) for v, lo, hi in b.ranges if v not in out and lo == 0]
    if b.shape[-1] == 1 and len(rest) == 1:
        return b.shape[:-1] + (rest[0][1],)
    return b.shape


__all__ = ["FULL", "REDUCE", "ROW", "Member", "contraction_member", "elementwise_member", "space"]
