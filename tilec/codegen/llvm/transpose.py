"""Transposing tiles: a layout permutation's inner two loops as shuffles in registers.

    for a in [a0, a0 + m) unrolled:
      for b in [b0, b0 + n) vectorized:
        O[f(a, b)] = value(b)        # O unit-stride along a, not along b; value's loads unit-stride
                                     # (or uniform) along b, none of them from O

as written, each of the m vector rows would be stored lane by lane (m * n scalar stores, the cost of
an NCHW <-> NHWC copy). Here the m rows are computed as vectors of n lanes, transposed in registers
into n vectors of m lanes (log2 steps of two-input shuffles), and each is stored whole along a
(all n as one vector where they lie back to back: O's stride along b is m, an interleave).
Rows are transposed as O stores them: bfloat16 rows rounded to their 16-bit form first, or loaded
as bits where the value is a plain copy of a bfloat16 buffer (half the registers of float32 lanes).
Extents that are not powers of two are cut into power-of-two pieces (as `power_of_two_pieces`), each
piece pair transposed in square blocks of the smaller side.

Requires: `transposable(loop, buffers)`. Guarantees: the same stores of the same values as the
scalar loops; all loads of a piece happen before its stores, which is the loops' meaning because
no load reads O.
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilec.codegen.llvm.scalar import ScalarEmitter
from tilec.codegen.llvm.types import I64, alignment, packed_bfloat16, storage_type
from tilec.codegen.llvm.vector import VectorLoop, element_stride, power_of_two_pieces, single_store, varies, vectorizable
from tilec.ir import loop as L
from tilec.ir.visitor import walk

MAX_SIDE = L.TRANSPOSE_MAX_SIDE  # lanes of a row or column: beyond this the register file spills anyway
_DTYPES = {"float32", "float64", "int32", "int64", "bfloat16"}  # bfloat16: float32 in registers, narrowed to store


def _loads(e: L.Expr) -> list[L.Load]:
    """Every load in `e`, those inside an index included."""
    return [n for n in walk(e) if isinstance(n, L.Load)]


def _extent(loop: L.For) -> int | None:
    if isinstance(loop.begin, L.Const) and isinstance(loop.end, L.Const):
        return int(loop.end.value) - int(loop.begin.value)
    return None


def transposable(loop: L.For, buffers: dict[str, L.Buffer]) -> bool:
    """Whether `loop` (unrolled) and the vectorized loop it holds form a transposing tile."""
    inner = loop.body
    if not (loop.kind == "unrolled" and isinstance(inner, L.For) and inner.kind == "vectorized"):
        return False
    m, n = _extent(loop), _extent(inner)
    if m is None or n is None or not (2 <= m <= MAX_SIDE and 2 <= n <= MAX_SIDE):
        return False
    store = single_store(inner.body)
    buf = buffers.get(store.buffer) if store is not None else None
    if store is None or buf is None or buf.dtype not in _DTYPES or not vectorizable(inner, buffers):
        return False
    if element_stride(buf, store.indices, loop.var) != 1 or element_stride(buf, store.indices, inner.var) in (None, 0, 1):
        return False
    if store.value.dtype != buf.dtype:
        return False
    for load in _loads(store.value):
        if load.buffer == store.buffer or buffers.get(load.buffer) is None:
            return False
        if varies(load, inner.var) and element_stride(buffers[load.buffer], load.indices, inner.var) != 1:
            return False  # a gathered load: lane by lane anyway, nothing to gain
    return True


def emit_transposed(em: ScalarEmitter, loop: L.For) -> None:
    """Emit a `transposable` tile through the scalar emitter `em`."""
    inner = loop.body
    assert isinstance(inner, L.For)
    store = single_store(inner.body)
    assert store is not None
    buf = em.buffers[store.buffer]
    saved = {v: em.vars.get(v) for v in (loop.var, inner.var)}
    for rows_piece in power_of_two_pieces(loop):
        for cols_piece in power_of_two_pieces(inner):
            a0, b0 = int(rows_piece.begin.value), int(cols_piece.begin.value)  # type: ignore[union-attr]
            m, n = _extent(rows_piece), _extent(cols_piece)
            assert m is not None and n is not None
            lanes = VectorLoop(em, cols_piece)
            bits = _bits_source(store, buf, em.buffers, inner.var)
            rows = []
            for a in range(a0, a0 + m):
                em.vars[loop.var] = ir.Constant(I64, a)
                em.vars[inner.var] = ir.Constant(I64, b0)
                if bits is not None:  # the stored bits themselves: no widening and rounding
                    vt = ir.VectorType(storage_type(bits), n)
                    rows.append(em.b.load(lanes.vector_pointer(bits, store.value.indices, vt), typ=vt,  # type: ignore[union-attr]
                                          align=alignment(bits.dtype)))
                else:
                    rows.append(em.to_memory(buf, lanes.vector(store.value)))
            columns = transpose(em.b, rows, n)
            em.vars[loop.var] = ir.Constant(I64, a0)
            if element_stride(buf, store.indices, inner.var) == m:  # the columns lie back to back: one store
                em.vars[inner.var] = ir.Constant(I64, b0)
                whole = _concat(em.b, columns)
                em.b.store(whole, em.b.bitcast(em.address(buf, store.indices), ir.PointerType(whole.type)),
                           align=alignment(buf.dtype))
                continue
            for k, column in enumerate(columns):
                em.vars[inner.var] = ir.Constant(I64, b0 + k)
                pointer = em.b.bitcast(em.address(buf, store.indices), ir.PointerType(column.type))
                em.b.store(column, pointer, align=alignment(buf.dtype))
    for v, value in saved.items():
        em.restore_var(v, value)


def _bits_source(store: L.Store, buf: L.Buffer, buffers: dict[str, L.Buffer], var: str) -> L.Buffer | None:
    """The buffer a bfloat16 tile copies as it is (its value one unit-stride load of the same type,
    whose bits are the stored bits): its rows are then moved as 16-bit integers. None otherwise."""
    value = store.value
    if not (packed_bfloat16(buf) and isinstance(value, L.Load)):
        return None
    src = buffers.get(value.buffer)
    if src is None or not packed_bfloat16(src) or element_stride(src, value.indices, var) != 1:
        return None
    return src


def transpose(b: ir.IRBuilder, rows: list[ir.Value], n: int) -> list[ir.Value]:
    """`rows` (m vectors of n lanes, m and n powers of two) as n vectors of m lanes: column k holds
    lane k of every row, in row order."""
    m = len(rows)
    q = min(m, n)
    if m > n:  # stack the square transposes of each band of n rows
        bands = [transpose(b, rows[r:r + q], n) for r in range(0, m, q)]
        return [_concat(b, [band[k] for band in bands]) for k in range(n)]
    if n > m:  # split each row into bands of m lanes: band j's transpose gives columns j*m ...
        columns: list[ir.Value] = []
        for j in range(0, n, q):
            columns += _square(b, [_slice(b, row, j, q) for row in rows])
        return columns
    return _square(b, rows)


def _square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """Transpose q vectors of q lanes: at each step, rows i and i + h (bit h of i clear) swap the
    h-lane blocks that sit across the diagonal, for h = q/2, q/4, ..., 1."""
    q = len(rows)
    rows = list(rows)
    h = q // 2
    while h >= 1:
        for i in range(q):
            if i & h:
                continue
            j = i + h
            low = [k if not k & h else q + k - h for k in range(q)]  # row i's blocks, then row j's
            high = [k + h if not k & h else q + k for k in range(q)]
            rows[i], rows[j] = _shuffle(b, rows[i], rows[j], low), _shuffle(b, rows[i], rows[j], high)
        h //= 2
    return rows


def _shuffle(b: ir.IRBuilder, x: ir.Value, y: ir.Value, mask: list[int]) -> ir.Value:
    return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)), mask))


def _slice(b: ir.IRBuilder, v: ir.Value, start: int, count: int) -> ir.Value:
    return _shuffle(b, v, ir.Constant(v.type, None), list(range(start, start + count)))


def _concat(b: ir.IRBuilder, parts: list[ir.Value]) -> ir.Value:
    while len(parts) > 1:
        width = parts[0].type.count
        parts = [_shuffle(b, parts[i], parts[i + 1], list(range(2 * width))) for i in range(0, len(parts), 2)]
    return parts[0]


__all__ = ["MAX_SIDE", "emit_transposed", "transposable", "transpose"]
