"""Layout copies read through by the GEMM template's packing instead of materialised.

Programs convert layouts with copy statements (conv2d's ``I[n, h, w, c] = =(X[n, c, h, w])``,
and the gradient's NCHW -> NHWC copy of the output gradient). When every reader of such a copy
is a GEMM whose template only ever reads it while packing an operand (B always; A when A is
packed, or copied into a zero-padded buffer by tilec.schedule.direct_gemm), the packing loop can
read the source through the permutation instead: the pack is a copy either way, and the separate
pass over memory (write the copy, read it back) disappears.

Requires: a BoundProgram, and for each statement the GEMM plan and knobs its template will use
(None where no GEMM template lowers it). Guarantees: `foldable` names only temporaries written by
a copy (one operand, `=` or `+`, no reduction, guards or default; output and source indices the
same distinct lone variables over whole tensors of one dtype) that no statement reads except those
GEMMs, in packed roles; `read_through` rewrites a template's nest so every load of such a copy
loads the source at the permuted index, with the copy's own value expression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import combine, direct_output_vars, identity
from tilec.schedule.implicit_gemm import GemmKnobs, GemmPlan
from tilec.schedule.loops import map_stmt_exprs


# Larger copies stay materialised: folding the NCHW -> NHWC copy of a 3x3 64->64 conv's 56^2 input
# (1.6M cells) into the padded-copy gather cost ~0.5-1 ms in its gradient (a gather across 12.5 kB
# planes), while the 14^2 ones (0.4M cells) gain.
MAX_FOLD_CELLS = 1 << 20


@dataclass(frozen=True)
class Copy:
    """``output[out_vars] = agg(source[src_vars])``."""

    output: str
    source: str
    out_vars: tuple[str, ...]
    src_vars: tuple[str, ...]
    agg: str
    dtype: str

    def value(self, at: Mapping[str, L.Expr]) -> L.Expr:
        """The copy's value at the cell whose output variables are `at` (as its nest computes it)."""
        load = L.cast(self.dtype, L.Load(self.source, tuple(at[v] for v in self.src_vars), self.dtype))
        return combine(self.agg, identity(self.agg, self.dtype), load)


def match_copy(b: BoundContraction, bp: BoundProgram) -> Copy | None:
    """`b` as a copy: one operand, `=` or `+`, no reduction, guard or default, each index a
    distinct lone variable over the whole source (a permutation of the output's), one dtype."""
    if b.empty or b.guards or b.stmt.default is not None or not b.shape:
        return None
    if b.stmt.combo != "single" or b.stmt.agg not in ("=", "+") or len(b.operands) != 1:
        return None
    out_vars = direct_output_vars(b)
    if out_vars is None or {v for v, _, _ in b.ranges} != set(out_vars):
        return None
    src = b.operands[0]
    src_vars = [e.lone_var for e in src.indices]
    if any(v is None for v in src_vars) or len(set(src_vars)) != len(src_vars) or set(src_vars) != set(out_vars):
        return None
    extent = dict(zip(out_vars, b.shape))
    if tuple(extent[v] for v in src_vars) != tuple(bp.shapes[src.tensor]):  # type: ignore[index]
        return None
    if bp.dtypes[src.tensor] != b.dtype:
        return None
    return Copy(b.output, src.tensor, tuple(out_vars), tuple(src_vars), b.stmt.agg, b.dtype)  # type: ignore[arg-type]


def _packed_tensors(plan: GemmPlan, knobs: GemmKnobs, a_padded: bool) -> set[str]:
    packed = {plan.b.tensor}
    if knobs.pack_a or a_padded:
        packed.add(plan.a.tensor)
    return packed


def _reads(s: object) -> list[str]:
    if isinstance(s, BoundContraction):
        return [a.tensor for a in s.stmt.operands] + ([s.stmt.default] if s.stmt.default else [])
    return list(T.eexpr_tensors(s.stmt.expr))  # type: ignore[attr-defined]


def foldable(bp: BoundProgram, gemms: Mapping[int, tuple[GemmPlan, GemmKnobs, bool]]) -> dict[str, Copy]:
    """The copies to fold, by output name. `gemms`: statement index -> (plan, knobs, whether the
    direct template pads A) for the statements a GEMM template lowers."""
    copies: dict[str, Copy] = {}
    for s in bp.statements:
        if isinstance(s, BoundContraction) and s.output not in bp.program.outputs:
            c = match_copy(s, bp)
            if c is not None and math.prod(s.shape) <= MAX_FOLD_CELLS:
                copies[c.output] = c
    if not copies:
        return {}
    for k, s in enumerate(bp.statements):
        names = set(_reads(s)) & set(copies)
        if not names:
            continue
        if k not in gemms:
            for n in names:
                copies.pop(n, None)
            continue
        plan, knobs, padded = gemms[k]
        packed = _packed_tensors(plan, knobs, padded)
        for n in names:
            # A and B the same copy, A read in place: the micro-kernel would still read the copy
            if n not in packed or (plan.a.tensor == plan.b.tensor == n and not (knobs.pack_a or padded)):
                copies.pop(n, None)
    return {n: c for n, c in copies.items() if c.source not in copies}  # a copy of a folded copy: keep both


def read_through(stmt: L.Stmt, copies: Mapping[str, Copy]) -> L.Stmt:
    """`stmt` with every load of a folded copy replaced by the copy's value at that cell."""
    if not copies:
        return stmt

    def rewrite(e: L.Expr) -> L.Expr:
        if isinstance(e, L.Load) and e.buffer in copies:
            c = copies[e.buffer]
            return c.value(dict(zip(c.out_vars, e.indices)))
        return e

    return map_stmt_exprs(stmt, rewrite)


__all__ = ["Copy", "foldable", "match_copy", "read_through"]
