"""Lowering of the structural intrinsics (tilec.ir.intrinsics) to default loop nests.

Requires: a BoundIntrinsic and the BoundProgram's shapes and dtypes. Guarantees: loop IR that
computes the intrinsic's meaning (see tilec.ir.intrinsics) with plain serial loops: one nest per
output cell for index, shape, reshape and gather (each cell stored once, so the parallel legality
check may spread the outer loop); scatter zero-fills its output, then adds every value into the
row its index names: the loops over the index dimensions stay serial (the rows are data-dependent),
the loops over the rows' own dimensions run outside them and may be spread.
"""

from __future__ import annotations

import math

from tilec.ir import loop as L
from tilec.ir.intrinsics import BoundIntrinsic


def lower_intrinsic(b: BoundIntrinsic, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]) -> L.Stmt:
    """The default loop nest of one intrinsic statement."""
    out, func = b.output, b.stmt.func
    if func == "shape":
        (src,) = b.stmt.tensors
        stores = [L.Store(out, (L.const(k),), L.Const(n, b.dtype)) for k, n in enumerate(shapes[src])]
        return L.seq(*stores) if stores else L.Seq(())
    cell = _cells(b.shape, f"{out}.c")
    if func == "index":
        value: L.Expr = L.cast(b.dtype, cell[b.params[0]])
    elif func == "reshape":
        src = b.stmt.tensors[0]
        value = L.Load(src, _unflatten(_flatten(cell, b.shape), shapes[src]), dtypes[src])
    elif func == "gather":
        data, indices = b.stmt.tensors
        rank = len(shapes[indices])
        row = _clamped_row(L.Load(indices, tuple(cell[:rank]), dtypes[indices]), shapes[data][0])
        value = L.Load(data, (row, *cell[rank:]), dtypes[data])
    else:
        return _scatter(b, shapes, dtypes)
    return _nest(b.shape, f"{out}.c", L.Store(out, tuple(cell), value))


def _scatter(b: BoundIntrinsic, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str]) -> L.Stmt:
    out, dt = b.output, b.dtype
    values, indices, _ = b.stmt.tensors
    cell = _cells(b.shape, f"{out}.z")
    zero = _nest(b.shape, f"{out}.z", L.Store(out, tuple(cell), L.cast(dt, L.const(0))))
    src = _cells(shapes[values], f"{out}.s")
    rank = len(shapes[indices])
    row = _clamped_row(L.Load(indices, tuple(src[:rank]), dtypes[indices]), b.shape[0])
    target = (row, *src[rank:])
    value = L.cast(dt, L.Load(values, tuple(src), dtypes[values]))
    add = L.Bin("or", L.Load(out, target, dt), value) if dt == "bool" else L.Bin("add", L.Load(out, target, dt), value)
    # The loops over the row's own dimensions go outermost: their iterations write disjoint
    # elements, so the parallel legality check lets the CPU and GPU spread them.
    order = list(range(rank, len(src))) + list(range(rank))
    return L.seq(zero, _nest(shapes[values], f"{out}.s", L.Store(out, target, add), order))


def _cells(shape: tuple[int, ...], prefix: str) -> list[L.Expr]:
    return [L.Var(f"{prefix}{k}") for k in range(len(shape))]


def _nest(shape: tuple[int, ...], prefix: str, body: L.Stmt, order: list[int] | None = None) -> L.Stmt:
    """Loops ``prefix<k>`` over each dimension k of `shape` around `body`, in `order` (outermost first)."""
    for k in reversed(order if order is not None else range(len(shape))):
        body = L.For(f"{prefix}{k}", L.const(0), L.const(shape[k]), body)
    return body


def _clamped_row(index: L.Expr, rows: int) -> L.Expr:
    """`index` as an int64 row number clamped to [0, rows - 1] (PlaidML's rule for gather)."""
    as_index = L.cast(L.INDEX, index)
    return L.Bin("max", L.Bin("min", as_index, L.const(max(rows - 1, 0))), L.const(0))


def _flatten(cell: list[L.Expr], shape: tuple[int, ...]) -> L.Expr:
    flat: L.Expr = L.const(0)
    for k, v in enumerate(cell):
        flat = L.add(flat, L.mul(v, L.const(math.prod(shape[k + 1:]))))
    return flat


def _unflatten(flat: L.Expr, shape: tuple[int, ...]) -> tuple[L.Expr, ...]:
    out: list[L.Expr] = []
    for k, n in enumerate(shape):
        stride = math.prod(shape[k + 1:])
        index = flat if stride == 1 else L.Bin("div", flat, L.const(stride))
        out.append(index if k == 0 else L.Bin("mod", index, L.const(n)))
    return tuple(out)


__all__ = ["lower_intrinsic"]
