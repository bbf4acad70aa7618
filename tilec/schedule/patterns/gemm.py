"""The GEMM pattern: a sum-of-products contraction's index variables in GEMM roles.

A contraction ``O[outer..., rows..., col] = +(A[...] * B[...])`` maps onto GEMM when the
output's innermost index `col` is read by exactly one operand (B); the output indices B does
not read are the GEMM rows, the indices outside the output are the reduction, output indices
both operands read are an outer (batch) loop. GEMM in any layout, batched GEMM, conv2d in NHWC
(rows n, x, y; reduction i, j, c: an implicit im2col) and the two matmuls of attention all match.

Requires: a BoundContraction. Guarantees: `match` returns the roles (and which guards belong to
which operand) or None; it decides nothing about targets: the dtypes it accepts are the
caller's (each GEMM template names its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.ir.bounds import BoundAccess, BoundContraction, Condition
from tilec.ir.lower import lone_output_vars
from tilec.schedule.nest import Range
from tilec.schedule.patterns.epilogue import Epilogue


@dataclass(frozen=True)
class GemmPlan:
    """How a contraction's index variables map onto the GEMM roles."""

    a: BoundAccess
    b: BoundAccess
    outer: tuple[Range, ...]
    rows: tuple[Range, ...]
    col: Range
    red: tuple[Range, ...]
    a_guards: tuple[Condition, ...]
    b_guards: tuple[Condition, ...]
    dtype: str  # the statement's (the output's)
    partial: bool = False  # some output cells get no tuple: the output is zeroed first
    epilogue: Epilogue | None = None  # where a template fuses the statements after it (it sets this)

    @property
    def m(self) -> int:
        return math.prod(_extent(r) for r in self.rows)

    @property
    def n(self) -> int:
        return _extent(self.col)

    @property
    def k(self) -> int:
        return math.prod(_extent(r) for r in self.red)

    @property
    def batch(self) -> int:
        """Iterations of the outer loops."""
        return math.prod(_extent(r) for r in self.outer)


def _extent(r: Range) -> int:
    return r[2] - r[1] + 1


def match(b: BoundContraction, dtypes: tuple[str, ...], col: str | None = None) -> GemmPlan | None:
    """The GEMM roles of `b`, or None if it is not a plain sum of products onto a direct output
    whose dtype is one of `dtypes` (the template's choice). The column is the output's innermost
    index, or the output index `col` when given (the in-place template,
    tilec.schedule.cpu.implicit_gemm.inplace, puts it where B is contiguous)."""
    stmt = b.stmt
    if stmt.agg != "+" or stmt.combo != "mul" or stmt.default is not None or b.empty:
        return None
    if b.dtype not in dtypes or not b.shape:
        return None
    out_vars = lone_output_vars(b)
    if out_vars is None:
        return None
    ranges = {v: (v, lo, hi) for v, lo, hi in b.ranges}
    partial = any(ranges[v][1:] != (0, n - 1) for v, n in zip(out_vars, b.shape))
    reads = [{v for e in op.indices for v in e.vars} for op in b.operands]
    unit: list[str] = []
    if col is None:
        # Trailing output dimensions of size 1 that no operand reads (a 1x1 kernel's position in a
        # weight gradient) are outer loops of one iteration; the column is the last dimension before.
        while len(out_vars) > 1 and b.shape[len(out_vars) - 1] == 1 and not any(out_vars[-1] in vs for vs in reads):
            unit.insert(0, out_vars.pop())
        col = out_vars[-1]
    elif col not in out_vars:
        return None
    others = [v for v in out_vars if v != col]
    holders = [k for k, vs in enumerate(reads) if col in vs]
    if len(holders) != 1:
        return None
    bk = holders[0]
    a_op, b_op = b.operands[1 - bk], b.operands[bk]
    a_vars, b_vars = reads[1 - bk], reads[bk]
    outer = tuple(ranges[v] for v in others if v in b_vars) + tuple(ranges[v] for v in unit)
    rows = tuple(ranges[v] for v in others if v not in b_vars)
    red = tuple(ranges[v] for v, _, _ in b.ranges if v not in out_vars and v not in unit)
    if not rows or not red:
        return None
    outer_names = {r[0] for r in outer}
    a_side = a_vars | outer_names | {r[0] for r in rows} | {r[0] for r in red}
    b_side = b_vars | outer_names | {r[0] for r in red}
    a_guards, b_guards = [], []
    for g in b.guards:
        vs = set(g.expr.vars)
        if vs <= b_side:
            b_guards.append(g)
        elif vs <= a_side:
            a_guards.append(g)
        else:
            return None  # a condition tying rows to columns: not a GEMM
    return GemmPlan(a_op, b_op, outer, rows, ranges[col], red, tuple(a_guards), tuple(b_guards), b.dtype, partial)


__all__ = ["GemmPlan", "Range", "match"]
