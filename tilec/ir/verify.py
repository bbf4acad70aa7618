"""Loop-IR well-formedness: buffers exist, ranks and dtypes agree, variables are in scope.

Requires: a PrimFunc. Guarantees: raises AssertionError naming the first problem,
or returns the function unchanged. Run between stages in tests and debug mode.
Every statement kind is checked, the WMMA and tile statements included: their fragments are
allocated with a fragment scope and indexed by one expression per lead dimension, their
windows are into non-fragment buffers of the fragment's dtype with one origin expression
per dimension, a fill value has the fragment's dtype, and their expressions are in scope.
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.visitor import Visitor, child_stmts


def verify(func: L.PrimFunc) -> L.PrimFunc:
    buffers = {b.name: b for b in func.params}
    assert len(buffers) == len(func.params), f"{func.name}: duplicate parameter names"
    _Verifier(buffers).visit(func.body)
    return func


class _Verifier(Visitor):
    """Checks each node against the buffers allocated and the loop variables bound around it."""

    def __init__(self, buffers: dict[str, L.Buffer]) -> None:
        self.buffers = buffers
        self.scope: set[str] = set()
        self.tile_regions = 0  # TileRegions around the node

    # ------------------------------------------------------------ statements

    def visit_For(self, s: L.For) -> None:
        self.visit(s.begin)
        self.visit(s.end)
        assert s.begin.dtype == L.INDEX and s.end.dtype == L.INDEX, f"loop {s.var}: bounds must be {L.INDEX}"
        outer = self.scope
        self.scope = outer | {s.var}
        self.visit(s.body)
        self.scope = outer

    def visit_If(self, s: L.If) -> None:
        self.visit(s.cond)
        assert s.cond.dtype == "bool", f"if condition has dtype {s.cond.dtype}"
        for arm in child_stmts(s):
            self.visit(arm)

    def visit_Allocate(self, s: L.Allocate) -> None:
        assert s.buffer.name not in self.buffers, f"buffer {s.buffer.name} allocated twice"
        outer = self.buffers
        self.buffers = {**outer, s.buffer.name: s.buffer}
        self.visit(s.body)
        self.buffers = outer

    def visit_Store(self, s: L.Store) -> None:
        buf = self.buffers.get(s.buffer)
        assert buf is not None, f"store to unknown buffer {s.buffer}"
        assert len(s.indices) == len(buf.shape), f"store to {s.buffer}: rank {len(buf.shape)}, {len(s.indices)} indices"
        assert s.value.dtype == buf.dtype, f"store of {s.value.dtype} into {s.buffer} ({buf.dtype})"
        self.generic_visit(s)

    def visit_WmmaFill(self, s: L.WmmaFill) -> None:
        frag = self._fragment("wmma fill", s.frag, s.index, ("wmma.accumulator",))
        assert s.value.dtype == frag.dtype, f"wmma fill of {s.frag} ({frag.dtype}) with a {s.value.dtype} value"
        self.generic_visit(s)

    def visit_WmmaLoad(self, s: L.WmmaLoad) -> None:
        frag = self._fragment("wmma load", s.frag, s.index, L.FRAGMENT_SCOPES)
        self._window("wmma load", s.buffer, s.origin, frag)
        self.generic_visit(s)

    def visit_WmmaMma(self, s: L.WmmaMma) -> None:
        self._fragment("wmma mma", s.acc, s.acc_index, ("wmma.accumulator",))
        self._fragment("wmma mma", s.a, s.a_index, ("wmma.matrix_a",))
        self._fragment("wmma mma", s.b, s.b_index, ("wmma.matrix_b",))
        self.generic_visit(s)

    def visit_WmmaStore(self, s: L.WmmaStore) -> None:
        frag = self._fragment("wmma store", s.frag, s.index, ("wmma.accumulator",))
        self._window("wmma store", s.buffer, s.origin, frag)
        self.generic_visit(s)

    def visit_TileRegion(self, s: L.TileRegion) -> None:
        outer = self.tile_regions
        self.tile_regions += 1
        self.visit(s.body)
        self.tile_regions = outer

    def visit_TileDot(self, s: L.TileDot) -> None:
        assert self.tile_regions > 0, "tile dot outside a tile region"
        acc, a, b = (self.buffers.get(name) for name in (s.acc, s.a, s.b))
        assert acc is not None and a is not None and b is not None, f"tile dot: unknown buffer among {s.acc}, {s.a}, {s.b}"
        assert acc.dtype == "float32" and a.dtype == b.dtype == "bfloat16", \
            f"tile dot: {s.acc} must be float32 ({acc.dtype}), {s.a} and {s.b} bfloat16 ({a.dtype}, {b.dtype})"
        assert len(s.acc_origin) == len(acc.shape) >= 2 and len(s.a_origin) == len(a.shape) >= 3 \
            and len(s.b_origin) == len(b.shape) >= 3, "tile dot: one origin index per dimension (acc rank >= 2, a and b >= 3)"
        assert a.scope != "local" and b.scope != "local", \
            f"tile dot: {s.a} and {s.b} must be bfloat16 in memory (a local 16-bit buffer holds float32 values)"
        assert b.shape[-1] == 2 and a.shape[-1] == 2 * L.TILE_PAIRS, \
            f"tile dot: {s.b} must hold pairs in its last dimension, {s.a} a tile row's {2 * L.TILE_PAIRS} values"
        assert s.m % L.TILE_ROWS == 0 and s.n % L.TILE_ROWS == 0 and s.tiles() <= L.AMX_TILES, \
            f"tile dot: a {s.m} x {s.n} block needs whole 16 x 16 tiles, at most {L.AMX_TILES} registers with its operands"
        for name, origin in ((s.acc, s.acc_origin), (s.a, s.a_origin), (s.b, s.b_origin)):
            self._indices(name, origin)
        assert s.pairs.dtype == L.INDEX and s.fresh.dtype == "bool", \
            f"tile dot: pairs must be an index ({s.pairs.dtype}), fresh a bool ({s.fresh.dtype})"
        self.generic_visit(s)

    def _fragment(self, what: str, name: str, index: tuple[L.Expr, ...], scopes: tuple[str, ...]) -> L.Buffer:
        buf = self.buffers.get(name)
        assert buf is not None, f"{what}: unknown fragment {name}"
        assert buf.scope in scopes, f"{what}: {name} has scope {buf.scope}, expected {' or '.join(scopes)}"
        assert len(buf.shape) >= 2 and len(index) == len(buf.shape) - 2, \
            f"{what}: fragment {name}{list(buf.shape)} takes {len(buf.shape) - 2} indices, got {len(index)}"
        self._indices(name, index)
        return buf

    def _window(self, what: str, name: str, origin: tuple[L.Expr, ...], frag: L.Buffer) -> None:
        buf = self.buffers.get(name)
        assert buf is not None, f"{what}: window into unknown buffer {name}"
        assert buf.scope not in L.FRAGMENT_SCOPES, f"{what}: window into fragment {name}"
        assert len(origin) == len(buf.shape) >= 2, \
            f"{what}: window into {name}{list(buf.shape)} needs {len(buf.shape)} origin indices (rank >= 2), got {len(origin)}"
        assert buf.dtype == frag.dtype, f"{what}: window into {name} ({buf.dtype}) for fragment {frag.name} ({frag.dtype})"
        self._indices(name, origin)

    def _indices(self, name: str, indices: tuple[L.Expr, ...]) -> None:
        for i in indices:
            assert i.dtype == L.INDEX, f"index into {name} has dtype {i.dtype}"

    # ------------------------------------------------------------ expressions

    def visit_Var(self, e: L.Var) -> None:
        assert e.name in self.scope, f"variable {e.name} used outside its loop"

    def visit_Load(self, e: L.Load) -> None:
        buf = self.buffers.get(e.buffer)
        assert buf is not None, f"load from unknown buffer {e.buffer}"
        assert len(e.indices) == len(buf.shape), f"load from {e.buffer}: rank {len(buf.shape)}, {len(e.indices)} indices"
        assert e.dtype == buf.dtype, f"load from {e.buffer} typed {e.dtype}, buffer is {buf.dtype}"
        for i in e.indices:
            self.visit(i)
            assert i.dtype == L.INDEX, f"index into {e.buffer} has dtype {i.dtype}"

    def visit_Bin(self, e: L.Bin) -> None:
        self.generic_visit(e)
        assert e.a.dtype == e.b.dtype, f"{e.op}: operand dtypes {e.a.dtype} and {e.b.dtype} differ"

    visit_Cmp = visit_Bin

    def visit_Select(self, e: L.Select) -> None:
        self.generic_visit(e)
        assert e.cond.dtype == "bool" and e.a.dtype == e.b.dtype, "select: bad operand dtypes"
