"""The layout-copy pattern: a statement that only permutes a tensor, and the copy reading a product.

Programs convert layouts with copy statements (conv2d's ``I[n, h, w, c] = =(X[n, c, h, w])``,
and the gradient's NCHW -> NHWC copy of the output gradient).

Requires: a BoundProgram. Guarantees: `match_copy` accepts only copies (one operand, `=` or `+`,
no reduction, guards or default; output and source indices the same distinct lone variables over
whole tensors of one dtype); `output_copy` names the copy that is the only reader of a temporary;
`Copy.value`/`factor`/`apply`/`dest_cell` say what a copy stores where, so that a template can
read through it or store into it (tilec.schedule.cpu.copy_fold, tilec.schedule.cpu.permute).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.dtypes import LOW_PRECISION
from tilec.ir.lower import combine, direct_output_vars, identity
from tilec.schedule.patterns.dataflow import reads


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
        return self.apply(self.factor(at))

    def factor(self, at: Mapping[str, L.Expr]) -> L.Expr:
        """The copy's value at `at` as a factor of a product summed onto +0, as every GEMM template
        sums: `+`'s ``0 + x`` and ``x`` differ only in a zero's sign, which such a sum never shows
        (the product is then a zero, and a running sum from +0 is never -0, so adding it is exact)."""
        return L.cast(self.dtype, L.Load(self.source, tuple(at[v] for v in self.src_vars), self.dtype))

    def apply(self, value: L.Expr) -> L.Expr:
        """What the copy stores for a source element `value` (converted to the copy's dtype: a copy
        from the float32 a 16-bit temporary is held in rounds, `output_copy`)."""
        return combine(self.agg, identity(self.agg, self.dtype), L.cast(self.dtype, value))

    def dest_cell(self, source_cell: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        """The output cell the copy writes the source's cell `source_cell` to."""
        at = dict(zip(self.src_vars, source_cell))
        return tuple(at[v] for v in self.out_vars)


def match_copy(b: BoundContraction, bp: BoundProgram, rounding: bool = False) -> Copy | None:
    """`b` as a copy: one operand, `=` or `+`, no reduction, guard or default, each index a
    distinct lone variable over the whole source (a permutation of the output's), one dtype; with
    `rounding`, also from a float32 source to a 16-bit float output (the source a 16-bit temporary
    held in float32, tilec.ir.dtypes.Widening: only `Copy.apply` may be used then)."""
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
    if bp.dtypes[src.tensor] != b.dtype and not (rounding and bp.dtypes[src.tensor] == "float32"
                                                 and b.dtype in LOW_PRECISION):
        return None
    return Copy(b.output, src.tensor, tuple(out_vars), tuple(src_vars), b.stmt.agg, b.dtype)  # type: ignore[arg-type]


def output_copy(index: int, bp: BoundProgram) -> Copy | None:
    """The layout copy that alone reads statement `index`'s output, a temporary: a template can
    store its results straight into the copy's output (`Copy.dest_cell`, `Copy.apply`)."""
    out = bp.statements[index].output
    if out in bp.program.outputs:
        return None
    readers = [s for s in bp.statements if out in reads(s)]
    if len(readers) != 1 or not isinstance(readers[0], BoundContraction):
        return None
    c = match_copy(readers[0], bp, rounding=True)
    return c if c is not None and c.source == out else None


__all__ = ["Copy", "match_copy", "output_copy"]
