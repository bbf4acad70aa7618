"""TileDot on a CPU without AMX: `lower_tiles` rewrites each into plain loop IR.

Requires: a PrimFunc whose TileDot statements follow tilec.ir.loop's conventions. Guarantees: an
equivalent PrimFunc without them (a TileRegion becomes its body): each TileDot becomes its window
zeroed where `fresh` holds, then the loops of a register-blocked micro-kernel, ``for r < pairs:
for i < m (unrolled): for j < n (vectorized): acc[i, j] = dot2(acc[i, j], A(i, 2 r), A(i, 2 r + 1),
b[r, j, 0], b[r, j, 1])`` with A(i, x) = a[x // 32, i, x % 32] (tilec.ir.loop.DOT2_BF16), which the
LLVM backend emits as `vdpbf16ps` where the CPU has it and in float32 otherwise.
tilec.codegen.llvm.module lowers them so for a CPU without AMX-BF16, so the AMX templates' loop
nests run (and are tested) on any CPU.
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.visitor import Rewriter, walk


def lower_tiles(func: L.PrimFunc) -> L.PrimFunc:
    if not any(isinstance(n, (L.TileDot, L.TileRegion)) for n in walk(func.body)):
        return func
    return L.PrimFunc(func.name, func.params, _LowerTiles().rewrite(func.body))


def tile_dot_loops(s: L.TileDot) -> L.Stmt:
    """The loops TileDot `s` stands for (module doc)."""
    v = L.Var
    r, i, j = (f"{s.acc}.tile_{x}" for x in ("r", "i", "j"))

    def at(origin: tuple[L.Expr, ...], *offsets: L.Expr) -> tuple[L.Expr, ...]:
        lead = origin[:len(origin) - len(offsets)]
        return lead + tuple(L.add(o, d) for o, d in zip(origin[len(lead):], offsets))

    cell = at(s.acc_origin, v(i), v(j))
    acc = L.Load(s.acc, cell, "float32")
    step, within = L.Bin("div", v(r), L.const(L.TILE_PAIRS)), L.Bin("mod", v(r), L.const(L.TILE_PAIRS))
    a_pair = [L.Load(s.a, at(s.a_origin, step, v(i), L.add(L.mul(within, L.const(2)), L.const(e))), "bfloat16")
              for e in (0, 1)]
    b_pair = [L.Load(s.b, at(s.b_origin, v(r), v(j), L.const(e)), "bfloat16") for e in (0, 1)]
    update = L.Store(s.acc, cell, L.Call(L.DOT2_BF16, (acc, *a_pair, *b_pair), "float32"))
    zero = L.For(i, L.const(0), L.const(s.m), L.For(j, L.const(0), L.const(s.n), L.Store(
        s.acc, cell, L.cast("float32", L.const(0))), "vectorized"), "unrolled")
    return L.seq(L.If(s.fresh, zero), L.For(r, L.const(0), s.pairs, L.For(i, L.const(0), L.const(s.m),
                                               L.For(j, L.const(0), L.const(s.n), update, "vectorized"), "unrolled")))


class _LowerTiles(Rewriter):
    def rewrite_expr(self, e: L.Expr) -> L.Expr:
        return e  # tile statements are statements: expressions hold none

    def rewrite_TileRegion(self, s: L.TileRegion) -> L.Stmt:
        return self.rewrite(s.body)

    def rewrite_TileDot(self, s: L.TileDot) -> L.Stmt:
        return tile_dot_loops(s)


__all__ = ["lower_tiles", "tile_dot_loops"]
