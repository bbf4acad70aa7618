"""Layout copies folded into the GEMM templates instead of materialised, on either side.

Programs convert layouts with copy statements (conv2d's ``I[n, h, w, c] = =(X[n, c, h, w])``,
and the gradient's NCHW -> NHWC copy of the output gradient). When every reader of such a copy
is a GEMM whose template only ever reads it while packing an operand (B always; A when A is
packed, or copied into a zero-padded buffer by tilec.schedule.cpu.gemm.direct), the packing loop can
read the source through the permutation instead: the pack is a copy either way, and the separate
pass over memory (write the copy, read it back) disappears. The in-place template
(tilec.schedule.cpu.gemm.inplace) copies B into panels and broadcasts A's elements, so it reads both
through. On the output side, a product that only a copy reads (the gradient's ``DF[co, c, i, j] =
+(DK[i, j, c, co])``) can store its tiles straight into the copy's output (`output_copy`).

Requires: a BoundProgram, and for each statement a GEMM template lowers, the operands it reads only
in those roles. Guarantees: `foldable` names only temporaries written by a copy (one operand, `=`
or `+`, no reduction, guards or default; output and source indices the same distinct lone
variables over whole tensors of one dtype) that no statement reads except those GEMMs, in those
roles; `read_through` rewrites a template's nest so every load of such a copy loads the source at
the permuted index (`Copy.factor`); `output_copy` names a copy that is the only reader of a
temporary, and `Copy.dest_cell` / `Copy.apply` say where and what it stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup, combine, direct_output_vars, identity
from tilec.schedule.patterns.dataflow import reads
from tilec.ir.rewrite import map_stmt_exprs
from tilec.schedule.templates.base import Choice, Context, Template


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
        """What the copy stores for a source element `value`."""
        return combine(self.agg, identity(self.agg, self.dtype), value)

    def dest_cell(self, source_cell: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        """The output cell the copy writes the source's cell `source_cell` to."""
        at = dict(zip(self.src_vars, source_cell))
        return tuple(at[v] for v in self.out_vars)


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


def foldable(bp: BoundProgram, through: Mapping[int, frozenset[str]], keep: frozenset[str] = frozenset()) -> dict[str, Copy]:
    """The copies to fold, by output name. `through`: for each statement a GEMM template lowers,
    the operands it may read through a copy (it only packs or pads them, or broadcasts them);
    `keep`: copies that stay (a GEMM writes them directly: `output_copy`)."""
    copies: dict[str, Copy] = {}
    for s in bp.statements:
        if isinstance(s, BoundContraction) and s.output not in bp.program.outputs and s.output not in keep:
            c = match_copy(s, bp)
            if c is not None:
                copies[c.output] = c
    if not copies:
        return {}
    for k, s in enumerate(bp.statements):
        for n in set(reads(s)) & set(copies):
            if n not in through.get(k, frozenset()):
                copies.pop(n)
    return {n: c for n, c in copies.items() if c.source not in copies}  # a copy of a folded copy: keep both


def output_copy(index: int, bp: BoundProgram) -> Copy | None:
    """The layout copy that alone reads statement `index`'s output, a temporary: a template can
    store its results straight into the copy's output (`Copy.dest_cell`, `Copy.apply`)."""
    out = bp.statements[index].output
    if out in bp.program.outputs:
        return None
    readers = [s for s in bp.statements if out in reads(s)]
    if len(readers) != 1 or not isinstance(readers[0], BoundContraction):
        return None
    c = match_copy(readers[0], bp)
    return c if c is not None and c.source == out else None


def read_through(stmt: L.Stmt, copies: Mapping[str, Copy]) -> L.Stmt:
    """`stmt` with every load of a folded copy replaced by the copy's value at that cell."""
    if not copies:
        return stmt

    def rewrite(e: L.Expr) -> L.Expr:
        if isinstance(e, L.Load) and e.buffer in copies:
            c = copies[e.buffer]
            return c.factor(dict(zip(c.out_vars, e.indices)))
        return e

    return map_stmt_exprs(stmt, rewrite)


class FoldedCopy(Template):
    """A layout copy every reader reads through: no loop nest, the tensor never exists."""

    name = "folded_copy"
    kind = "cpu"
    selectable = False

    def match(self, index: int, ctx: Context) -> Copy | None:
        return ctx.folded.get(ctx.bp.statements[index].output)

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return LoweredGroup(L.seq(), elided=(choice.plan.output,))


class StoredCopy(Template):
    """A layout copy its producer's GEMM stores its tiles into: lowered with the producer."""

    name = "stored_copy"
    kind = "cpu"
    selectable = False

    def match(self, index: int, ctx: Context) -> bool | None:
        return True if ctx.bp.statements[index].output in ctx.stored else None

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        return LoweredGroup(L.seq())


FOLDED_COPY = FoldedCopy()
STORED_COPY = StoredCopy()

__all__ = ["Copy", "FOLDED_COPY", "FoldedCopy", "STORED_COPY", "StoredCopy", "foldable", "match_copy", "output_copy",
           "read_through"]
