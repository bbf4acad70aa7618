"""The fused attention-backward kernel's micro-GEMMs: register blocks of loop IR, and where their
results go (`Out`: a gradient, a float32 workspace, a tile).

Requires: knobs that passed the template's checks. Guarantees: `Builder.gemm` computes what its
docstring says with every loop variable freshly named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.schedule.cpu.attention_backward.knobs import AttentionBackwardKnobs

Fn2 = Callable[[L.Expr, L.Expr], L.Expr]


class Builder:
    """Loop-IR pieces of the kernel; every loop variable gets a fresh name."""

    def __init__(self, knobs: AttentionBackwardKnobs, prefix: str, dtype: str, columns: int) -> None:
        self.knobs, self.prefix, self.dtype, self.columns = knobs, prefix, dtype, columns
        self.count = 0

    def var(self, what: str) -> str:
        self.count += 1
        return f"{self.prefix}.{what}{self.count}"

    def gemm(self, rows: int, cols: int, depth: int, a: Fn2, b: Fn2, out: Out, zero: bool) -> L.Stmt:
        """out[m, n] (+)= sum_k a(m, k) b(k, n) for m < rows, n < cols, in register blocks of mr rows
        (rows is a multiple of mr) by up to `columns` columns: a is broadcast, b read as vectors."""
        mr = self.knobs.mr
        parts = []
        for n0 in range(0, cols, self.columns):
            width = min(self.columns, cols - n0)
            mc, r, n, k = (self.var(x) for x in ("mc", "r", "n", "k"))
            regs = L.Buffer(self.var("regs"), self.dtype, (mr, width), "local")
            m = L.add(L.mul(L.Var(mc), L.const(mr)), L.Var(r))
            col = L.add(L.Var(n), L.const(n0))
            cell = (L.Var(r), L.Var(n))
            reg = L.Load(regs.name, cell, self.dtype)
            zero_reg = L.Store(regs.name, cell, L.Const(0.0, self.dtype))
            init = zero_reg if zero else out.guarded(m, L.Store(regs.name, cell, out.load(m, col)), zero_reg)
            update = L.For(k, L.const(0), L.const(depth), _unrolled(r, mr, lanes_loop(n, width, L.Store(
                regs.name, cell, L.Bin("add", reg, L.Bin("mul", a(m, L.Var(k)), b(L.Var(k), col)))))))
            store = out.guarded(m, out.store(m, col, reg))
            parts.append(L.For(mc, L.const(0), L.const(rows // mr), L.Allocate(regs, L.seq(
                _unrolled(r, mr, lanes_loop(n, width, init)), update, _unrolled(r, mr, lanes_loop(n, width, store))))))
        return L.seq(*parts)


@dataclass(frozen=True)
class Out:
    """Where a micro-GEMM's results go: buffer[prefix.., offset + row, column], rows from `limit` on
    skipped (never read or written); values of `dtype` kept as `memory` (a 16-bit output), if given."""

    buffer: str
    dtype: str
    prefix: tuple[L.Expr, ...] = ()
    offset: L.Expr | None = None
    limit: int | None = None
    memory: str | None = None

    def _at(self, m: L.Expr, n: L.Expr) -> tuple[L.Expr, ...]:
        return self.prefix + ((m if self.offset is None else L.add(self.offset, m)), n)

    def load(self, m: L.Expr, n: L.Expr) -> L.Expr:
        return L.cast(self.dtype, L.Load(self.buffer, self._at(m, n), self.memory or self.dtype))

    def store(self, m: L.Expr, n: L.Expr, value: L.Expr) -> L.Stmt:
        return L.Store(self.buffer, self._at(m, n), L.cast(self.memory or self.dtype, value))

    def guarded(self, m: L.Expr, then: L.Stmt, orelse: L.Stmt | None = None) -> L.Stmt:
        if self.limit is None:
            return then
        row = m if self.offset is None else L.add(self.offset, m)
        return L.If(L.Cmp("lt", row, L.const(self.limit)), then, orelse)


def _unrolled(var: str, n: int, body: L.Stmt) -> L.Stmt:
    return L.For(var, L.const(0), L.const(n), body, "unrolled")


def lanes_loop(var: str, n: int, body: L.Stmt) -> L.Stmt:
    return L.For(var, L.const(0), L.const(n), body, "vectorized")


__all__ = ["Builder", "Fn2", "Out", "lanes_loop"]
