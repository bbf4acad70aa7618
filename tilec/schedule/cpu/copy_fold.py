"""Layout copies folded into the GEMM templates instead of materialised, on either side.

Programs convert layouts with copy statements (tilec.schedule.patterns.layout_copy). When every
reader of such a copy
is a GEMM whose template only ever reads it while packing an operand (B always; A when A is
packed, or copied into a zero-padded buffer by tilec.schedule.cpu.implicit_gemm.direct), the packing loop can
read the source through the permutation instead: the pack is a copy either way, and the separate
pass over memory (write the copy, read it back) disappears. The in-place template
(tilec.schedule.cpu.implicit_gemm.inplace) copies B into panels and broadcasts A's elements, so it reads both
through. On the output side, a product that only a copy reads (the gradient's ``DF[co, c, i, j] =
+(DK[i, j, c, co])``) can store its tiles straight into the copy's output (`output_copy`).

Requires: a BoundProgram, and for each statement a GEMM template lowers, the operands it reads only
in those roles. Guarantees: `foldable` names only temporaries written by a copy that no statement
reads except those GEMMs, in those roles; `read_through` rewrites a template's nest so every load
of such a copy loads the source at the permuted index (`Copy.factor`). The two pseudo-templates
below lower the copies' own statements: nothing (folded), or nothing apart from the GEMM that
stores into them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup
from tilec.schedule.patterns.dataflow import reads
from tilec.schedule.patterns.layout_copy import Copy, match_copy
from tilec.ir.rewrite import map_stmt_exprs
from tilec.schedule.templates.base import Choice, Context, Template


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


def sums_read_sources(bp: BoundProgram, through: Mapping[int, frozenset[str]],
                      keep: frozenset[str] = frozenset()) -> BoundProgram:
    """`bp` with the plain sums (`+` of one operand, no default) of a layout copy reading the copy's
    source instead, where that leaves the copy read only by GEMMs that read it through (`through`,
    as `foldable` takes it), so that it folds: a convolution's bias gradient, DBias[co] = +(DY[n,
    x, y, co]) over the NHWC copy of DO[n, co, x, y] that the weight gradient's GEMM packs, then
    sums DO itself, and the copy is never made. Exact: a sum from +0 of the copy's values (0 + x)
    and of x itself are the same (they differ only in a zero's sign, which such a sum never
    shows). The same object where nothing changes."""
    statements = list(bp.statements)
    for s in bp.statements:
        if not isinstance(s, BoundContraction) or s.output in bp.program.outputs or s.output in keep:
            continue
        copy = match_copy(s, bp)
        if copy is None:
            continue
        readers = [k for k, r in enumerate(statements) if copy.output in reads(r)]
        sums = [k for k in readers if _plain_sum(statements[k], copy.output)]
        if not sums or any(k not in sums and copy.output not in through.get(k, frozenset()) for k in readers):
            continue
        for k in sums:
            statements[k] = _read_source(statements[k], copy)  # type: ignore[arg-type]
    return bp if statements == list(bp.statements) else replace(bp, statements=tuple(statements))


def _plain_sum(s: object, tensor: str) -> bool:
    return (isinstance(s, BoundContraction) and s.stmt.agg == "+" and s.stmt.combo == "single"
            and s.stmt.default is None and len(s.operands) == 1 and s.operands[0].tensor == tensor)


def _read_source(s: BoundContraction, copy: Copy) -> BoundContraction:
    """`s` (a plain sum of `copy`'s output) reading the copy's source at the permuted index."""
    def permuted(indices: tuple) -> tuple:
        return tuple(indices[copy.out_vars.index(v)] for v in copy.src_vars)

    bound = BoundAccess(copy.source, permuted(s.operands[0].indices))
    access = s.stmt.operands[0]
    stmt = replace(s.stmt, operands=(replace(access, tensor=copy.source, indices=permuted(access.indices)),))
    return replace(s, stmt=stmt, operands=(bound,))


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

__all__ = ["FOLDED_COPY", "FoldedCopy", "STORED_COPY", "StoredCopy", "foldable", "read_through", "sums_read_sources"]
