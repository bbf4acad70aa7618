"""PlaidML's structural intrinsics executed with numpy (index, gather, scatter, reshape, shape).

Written from their definitions (docs/LANGUAGE.md, tilec.ir.intrinsics' module doc), not from
the compiler's lowering (tilec.ir.lower_intrinsics), whose oracle this is:

* ``index(T, d)``: int32 of T's shape, each element its coordinate along dimension d;
* ``gather(T, I)``: ``T[clamp(I, 0, T.shape[0] - 1)]``, shape ``I.shape + T.shape[1:]``;
* ``scatter(T, I, U)``: zeros of shape ``U.shape[:1] + T.shape[I.rank:]`` in T's dtype, into which
  every ``T[i.., j..]`` is added at row ``clamp(I[i..])`` (T.shape starts with I.shape);
* ``reshape(T, d1, ..., dn)``: T's elements in row-major order, shape (d1, ..., dn);
* ``shape(T)``: int32 ``[rank]`` holding T's dimensions.

Requires: the arrays of the statement's tensors and the bound sizes. Guarantees: the result, or a
BindError naming the statement (a dimension out of range, non-integer indices, shapes that do
not fit together, a reshape that changes the number of elements).
"""

from __future__ import annotations

import math

import numpy as np

from tilec.errors import BindError, TilecError
from tilec.interp.polyhedron import size_value
from tilec.ir import tensor as T


def run_intrinsic(stmt: T.Intrinsic, values: dict[str, np.ndarray], sizes: dict[str, int]) -> np.ndarray:
    """The result of `stmt` over the arrays computed so far."""
    what = f"'{stmt}'"
    params = [size_value(p, sizes, f"the arguments of {what}") for p in stmt.params]
    args = [values[name] for name in stmt.tensors]
    if stmt.func == "index":
        (data,), (dim,) = args, params
        if not 0 <= dim < data.ndim:
            raise BindError(f"{what}: dimension {dim} is out of range for '{stmt.tensors[0]}' of shape "
                            f"{data.shape} (rank {data.ndim})")
        axis = np.arange(data.shape[dim], dtype=np.int32).reshape((-1,) + (1,) * (data.ndim - dim - 1))
        return np.array(np.broadcast_to(axis, data.shape), dtype=np.int32)
    if stmt.func == "shape":
        return np.array(args[0].shape, dtype=np.int32)
    if stmt.func == "reshape":
        return _reshape(args[0], tuple(params), what)
    if stmt.func == "gather":
        return _gather(args[0], args[1], stmt, what)
    if stmt.func == "scatter":
        return _scatter(args[0], args[1], args[2], stmt, what)
    raise TilecError(f"the interpreter does not know the intrinsic '{stmt.func}' in {what}")


def _reshape(data: np.ndarray, dims: tuple[int, ...], what: str) -> np.ndarray:
    if any(d < 0 for d in dims):
        raise BindError(f"{what}: negative dimension in the new shape {dims}")
    if math.prod(dims) != data.size:
        raise BindError(f"{what}: cannot reshape a tensor of shape {data.shape} ({data.size} elements) to "
                        f"{dims} ({math.prod(dims)} elements)")
    return data.reshape(dims).copy()


def _rows(indices: np.ndarray, rows: int, stmt: T.Intrinsic, what: str) -> np.ndarray:
    """`indices` clamped to [0, rows - 1], as int64 (rows >= 1)."""
    if indices.dtype.kind not in "iu":
        raise BindError(f"{what}: the indices '{stmt.tensors[1]}' are {indices.dtype.name}; {stmt.func} takes "
                        f"integer indices")
    if indices.dtype.kind == "u":
        indices = np.minimum(indices, np.asarray(rows - 1).astype(indices.dtype))
    return np.clip(indices.astype(np.int64), 0, rows - 1)


def _gather(data: np.ndarray, indices: np.ndarray, stmt: T.Intrinsic, what: str) -> np.ndarray:
    if data.ndim == 0:
        raise BindError(f"{what}: '{stmt.tensors[0]}' is a scalar; gather needs a tensor of rank 1 or more")
    if indices.dtype.kind not in "iu":
        _rows(indices, 1, stmt, what)
    shape = indices.shape + data.shape[1:]
    if indices.size == 0:
        return np.zeros(shape, dtype=data.dtype)
    if data.shape[0] == 0:
        raise BindError(f"{what}: '{stmt.tensors[0]}' has shape {data.shape}, no rows to gather from")
    return data[_rows(indices, data.shape[0], stmt, what)]


def _scatter(values: np.ndarray, indices: np.ndarray, like: np.ndarray, stmt: T.Intrinsic,
             what: str) -> np.ndarray:
    _rows(indices, 1, stmt, what)  # the dtype check alone
    if values.shape[:indices.ndim] != indices.shape:
        raise BindError(f"{what}: the values '{stmt.tensors[0]}' of shape {values.shape} must start with the "
                        f"shape of the indices '{stmt.tensors[1]}' {indices.shape}")
    if like.ndim == 0:
        raise BindError(f"{what}: '{stmt.tensors[2]}' is a scalar; its first dimension sizes the result")
    out = np.zeros(like.shape[:1] + values.shape[indices.ndim:], dtype=values.dtype)
    if values.size == 0:
        return out
    if like.shape[0] == 0:
        raise BindError(f"{what}: '{stmt.tensors[2]}' has shape {like.shape}, no rows to scatter into")
    rows = _rows(indices, like.shape[0], stmt, what)
    if out.dtype == np.bool_:
        np.logical_or.at(out, rows, values)
    else:
        np.add.at(out, rows, values)
    return out


__all__ = ["run_intrinsic"]
