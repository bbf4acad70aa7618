"""CPU meaning of the WMMA statements: `lower_wmma` rewrites them into plain loop IR.

Requires a GPU PrimFunc (tilec/ir/loop.py conventions) whose WMMA statements follow the
tensor-core conventions there. Guarantees: an equivalent PrimFunc without WMMA statements
or fragment scopes, which the GPU emulator (or any loop-IR executor) can run:
- each fragment Allocate becomes a ``local`` buffer of the same dtype and shape;
- each WMMA statement becomes loops over its 16x16 (x16) tile run by lane 0 of each warp,
  ``If((linear thread id) % 32 == 0, loops)``, the linear id being
  ``tx + bx_dim * (ty + by_dim * tz)`` as in CUDA.
Barrier-free: lane 0 holds the warp's whole fragment (its local copy) and is the only lane
that reads or writes it, so no lane ever needs another's data; window loads and stores go
to memory like any Store, and the program's own Barriers order them against other threads
as they must on the GPU. The other lanes' copies stay unused.
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.launch import launch_extents
from tilec.ir.visitor import Rewriter

F32 = "float32"


def lower_wmma(func: L.PrimFunc) -> L.PrimFunc:
    stmts = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    out = []
    for stmt in stmts:
        _, block = launch_extents(stmt)
        out.append(_LowerWmma(block).rewrite(stmt))
    body = L.seq(*out)
    return func if body == func.body else L.PrimFunc(func.name, func.params, body)


class _LowerWmma(Rewriter):
    """One launch: fragments become local buffers, WMMA statements loops run by lane 0 of each warp."""

    def __init__(self, block: tuple[int, int, int]) -> None:
        self.block = block
        self.dtypes: dict[str, str] = {}  # fragment -> element dtype
        self.threads: dict[str, str] = {}  # the variable of each enclosing thread loop, by axis

    def rewrite_expr(self, e: L.Expr) -> L.Expr:
        return e  # WMMA statements are statements: expressions hold none

    def rewrite_For(self, s: L.For) -> L.Stmt:
        if s.kind not in L.GPU_THREAD_AXES:
            return self.rebuild(s)
        outer = self.threads
        self.threads = {**outer, s.kind: s.var}
        out = self.rebuild(s)
        self.threads = outer
        return out

    def rewrite_Allocate(self, s: L.Allocate) -> L.Stmt:
        buf = s.buffer
        if buf.scope not in L.FRAGMENT_SCOPES:
            return self.rebuild(s)
        self.dtypes[buf.name] = buf.dtype
        return L.Allocate(L.Buffer(buf.name, buf.dtype, buf.shape, "local"), self.rewrite(s.body))

    def _lane_zero(self, s: L.Stmt) -> L.Stmt:
        return L.If(L.Cmp("eq", L.Bin("mod", self._linear_id(), L.const(32)), L.const(0)), _loops(s, self.dtypes))

    rewrite_WmmaFill = rewrite_WmmaLoad = rewrite_WmmaMma = rewrite_WmmaStore = _lane_zero

    def _linear_id(self) -> L.Expr:
        def axis(k: int) -> L.Expr:
            name = self.threads.get(L.GPU_THREAD_AXES[k])
            return L.Var(name) if name is not None else L.const(0)

        bx, by, _ = self.block
        return L.add(axis(0), L.mul(L.const(bx), L.add(axis(1), L.mul(L.const(by), axis(2)))))


def _tile(body: L.Stmt, *names: str) -> L.Stmt:
    for name in reversed(names):
        body = L.For(name, L.const(0), L.const(16), body)
    return body


_I, _J, _K = L.Var("wmma_i"), L.Var("wmma_j"), L.Var("wmma_k")


def _window(origin: tuple[L.Expr, ...], r: L.Expr, c: L.Expr) -> tuple[L.Expr, ...]:
    return origin[:-2] + (L.add(origin[-2], r), L.add(origin[-1], c))


def _loops(s: L.Stmt, dtypes: dict[str, str]) -> L.Stmt:
    i, j = _I, _J
    if isinstance(s, L.WmmaFill):
        return _tile(L.Store(s.frag, s.index + (i, j), s.value), i.name, j.name)
    if isinstance(s, L.WmmaLoad):
        value = L.Load(s.buffer, _window(s.origin, i, j), dtypes.get(s.frag, "float16"))
        return _tile(L.Store(s.frag, s.index + (i, j), value), i.name, j.name)
    if isinstance(s, L.WmmaStore):
        value = L.Load(s.frag, s.index + (i, j), F32)
        return _tile(L.Store(s.buffer, _window(s.origin, i, j), value), i.name, j.name)
    assert isinstance(s, L.WmmaMma)
    acc = L.Load(s.acc, s.acc_index + (i, j), F32)
    a = L.Cast(F32, L.Load(s.a, s.a_index + (i, _K), "float16"))
    b = L.Cast(F32, L.Load(s.b, s.b_index + (_K, j), "float16"))
    return _tile(L.Store(s.acc, s.acc_index + (i, j), L.add(acc, L.mul(a, b))), i.name, j.name, _K.name)

