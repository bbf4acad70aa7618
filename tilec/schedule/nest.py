"""Loop-nest building blocks the templates share: flattened indices, guarded loads, threads,
reductions across vector lanes.

Requires: index variables and loop IR expressions. Guarantees: each helper returns loop IR
with the stated meaning and introduces no names but the ones it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, Condition
from tilec.ir.loop_nest import condition_expr, index_expr
from tilec.ir.rewrite import substitute_expr

Range = tuple[str, int, int]  # (var, lo, hi) inclusive


def decompose(flat: L.Expr, ranges: tuple[Range, ...]) -> dict[str, L.Expr]:
    """Index variables of a row-major flattening `flat` over `ranges` (last varies fastest)."""
    out: dict[str, L.Expr] = {}
    stride = 1
    for v, lo, hi in reversed(ranges):
        n = hi - lo + 1
        q = flat if stride == 1 else L.Bin("div", flat, L.const(stride))
        idx = q if v == ranges[0][0] else L.Bin("mod", q, L.const(n))
        out[v] = L.add(idx, L.const(lo))
        stride *= n
    return out


def guarded_store(buffer: str, indices: tuple[L.Expr, ...], op: BoundAccess, guards: tuple[Condition, ...],
                  env: dict[str, L.Expr], dtype: str, op_dtype: str, extra: list[L.Expr]) -> L.Stmt:
    """buffer[indices] = op(env) converted to `dtype`, or 0 where a guard (or an `extra` bound) fails.

    An `If`, not a select: the load must not run where its index is out of bounds.
    """
    load = L.cast(dtype, L.Load(op.tensor, tuple(substitute_expr(index_expr(i), env) for i in op.indices), op_dtype))
    cond = L.logical_and(extra + [substitute_expr(condition_expr(g), env) for g in guards])
    if cond is None:
        return L.Store(buffer, indices, load)
    return L.If(cond, L.Store(buffer, indices, load), L.Store(buffer, indices, L.cast(dtype, L.const(0))))


def in_blocks(var: str, extent: int, side: int, inner: "Callable[[L.Expr, int], L.Stmt]") -> L.Stmt:
    """inner(first index, count) over [0, extent) in blocks of `side`: a loop `var.o` over the whole
    blocks, then the shorter last one (constant counts: a transposing tile's extents)."""
    full, tail = divmod(extent, side)
    parts = [L.For(f"{var}.o", L.const(0), L.const(full), inner(L.mul(L.Var(f"{var}.o"), L.const(side)), side))
             ] if full else []
    return L.seq(*parts, *([inner(L.const(full * side), tail)] if tail else []))


def transposing_tiles(rows_var: str, rows: int, cols_var: str, cols: int, side: int,
                      body: "Callable[[L.Expr, L.Expr], L.Stmt]") -> L.Stmt:
    """body(row, column) over [0, rows) x [0, cols) as tiles of up to `side` x `side`: blocks of
    columns, then blocks of rows, each tile ``for <rows_var>.i unrolled: for <cols_var>.i
    vectorized`` (the shape tilec.codegen.llvm.transpose turns into shuffles in registers)."""
    def tile(r0: L.Expr, n_rows: int, c0: L.Expr, n_cols: int) -> L.Stmt:
        ri, ci = f"{rows_var}.i", f"{cols_var}.i"
        return L.For(ri, L.const(0), L.const(n_rows), L.For(ci, L.const(0), L.const(n_cols), body(
            L.add(r0, L.Var(ri)), L.add(c0, L.Var(ci))), "vectorized"), "unrolled")

    return in_blocks(cols_var, cols, side, lambda c0, n_cols: in_blocks(
        rows_var, rows, side, lambda r0, n_rows: tile(r0, n_rows, c0, n_cols)))


def thread_share(t: str, threads: int, var: str, total: int, body: L.Stmt) -> L.Stmt:
    """`for var` over thread `t`'s contiguous share of [0, total)."""
    per = -(-total // threads)
    begin = L.mul(L.Var(t), L.const(per))
    return L.For(var, begin, L.Bin("min", L.const(total), L.add(begin, L.const(per))), body)


def threads_loop(t: str, threads: int, body: L.Stmt) -> L.Stmt:
    """`for t` over the threads, a parallel loop when there are several."""
    return L.For(t, L.const(0), L.const(threads), body, "parallel" if threads > 1 else "serial")


def larger(a: L.Expr, b: L.Expr) -> L.Expr:
    """The larger of `a` and `b`, or `b` where either is NaN: one x86 max instruction, where the loop
    IR's NaN-propagating `max` takes four on AVX2. For maxima whose NaN cannot matter (softmax's row
    maximum: a NaN score makes its own probability NaN anyway)."""
    return L.Select(L.Cmp("gt", a, b), a, b)


def exp_nonpositive(x: L.Expr) -> L.Expr:
    """e^x for an x that is at most 0 by construction (a score less its row's maximum or
    logsumexp): exp(min(x, 0)), which the code generator builds in float32 with 2^n as one factor
    and no overflow test (tilec.codegen.llvm.vector_math.exp_f32's ceiling)."""
    return L.Call("exp", (L.Bin("min", x, L.Const(0.0, x.dtype)),), x.dtype)


def lane_reduce(op: "str | Callable[[L.Expr, L.Expr], L.Expr]", start: L.Expr, element: "Callable[[L.Expr], L.Expr]",
                partial: L.Buffer, lane: str, chunk: str, chunks: int, chunk_kind: str = "serial") -> tuple[L.Stmt, L.Expr]:
    """op(start, element(0), ..., element(n - 1)) for n = `chunks` x the lanes of `partial` (a local
    vector; `op` a binary operator's name or a function building the combination, e.g. `larger`):
    the statements that leave each lane's partial result in `partial` and halve them down to
    4 lanes (a scalar chain over all n would be n dependent operations; 2- and 1-lane vector steps
    would be integer shuffles), and the scalar expression that combines the last 4 (`lane_halves`)."""
    v, c, width = L.Var, L.const, partial.shape[0]
    combine = _combiner(op)

    def lanes(value: L.Expr) -> L.Stmt:
        return L.For(lane, c(0), c(width), L.Store(partial.name, (v(lane),), value), "vectorized")

    halves, last4 = lane_halves(op, partial, lane)
    stmts = L.seq(
        lanes(start),
        L.For(chunk, c(0), c(chunks), lanes(combine(L.Load(partial.name, (v(lane),), partial.dtype), element(
            L.add(L.mul(v(chunk), c(width)), v(lane))))), chunk_kind),
        halves)
    return stmts, last4


def lane_halves(op: "str | Callable[[L.Expr, L.Expr], L.Expr]", partial: L.Buffer, lane: str,
                lead: tuple[L.Expr, ...] = ()) -> tuple[L.Stmt, L.Expr]:
    """The statements that halve the lanes of `partial` (a local vector of partial results; with
    `lead`, the vector partial[lead]) with `op` down to 4, and the scalar expression that combines
    those 4: `lane_reduce`'s last step, for loops that accumulate their partial results themselves."""
    v, c, width = L.Var, L.const, partial.shape[-1]
    combine = _combiner(op)

    def part(i: L.Expr) -> L.Expr:
        return L.Load(partial.name, lead + (i,), partial.dtype)

    halves = [width >> k for k in range(1, width.bit_length()) if width >> k >= 4]
    stmts = L.seq(*(L.For(lane, c(0), c(half), L.Store(partial.name, lead + (v(lane),), combine(
        part(v(lane)), part(L.add(v(lane), c(half))))), "vectorized") for half in halves))
    return stmts, combine(combine(part(c(0)), part(c(1))), combine(part(c(2)), part(c(3))))


def _combiner(op: "str | Callable[[L.Expr, L.Expr], L.Expr]") -> "Callable[[L.Expr, L.Expr], L.Expr]":
    return op if callable(op) else (lambda a, b: L.Bin(op, a, b))


__all__ = ["Range", "decompose", "exp_nonpositive", "guarded_store", "in_blocks", "lane_halves", "lane_reduce", "larger", "thread_share", "threads_loop",
           "transposing_tiles"]
