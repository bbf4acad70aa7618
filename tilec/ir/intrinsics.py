"""PlaidML's structural intrinsics: their shapes and types once the arguments are bound.

Each is a statement ``O = func(...)`` (tilec.ir.tensor.Intrinsic) with PlaidML's meaning
(its Tile compiler's primitive ops and special kernels):

* ``index(T, d)``: int32, T's shape; each element is its own coordinate along dimension d.
* ``gather(T, I)``: T's dtype, shape ``I.shape + T.shape[1:]``;
  ``O[i.., j..] = T[clamp(I[i..], 0, T.shape[0] - 1), j..]``. I holds integers; an index out of
  range is clamped to the nearest row, as PlaidML's gather kernel does.
* ``scatter(T, I, U)``: T's dtype, shape ``U.shape[:1] + T.shape[I.rank:]``; starting from
  zeros, ``O[clamp(I[i..]), j..] += T[i.., j..]`` for every i.. (T.shape must start with
  I.shape): the adjoint of gather, which PlaidML derives gather's gradient with.
* ``reshape(T, d1, ..., dn)``: T's dtype and elements in row-major order, shape (d1, ..., dn)
  (size expressions); the element counts must agree.
* ``shape(T)``: int32 ``[rank]`` holding T's dimensions.

Requires: the argument tensors' shapes and dtypes and the bound size symbols. Guarantees: a
BoundIntrinsic with the result's shape and dtype, or a BindError naming the statement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilec.errors import BindError
from tilec.ir import tensor as T
from tilec.ir.affine import evaluate_size
from tilec.ir.dtypes import is_float

INDEX_DTYPE = "int32"  # what PlaidML's index and shape produce

# name -> (number of tensor arguments, whether integer parameters follow, what they are)
SIGNATURES: dict[str, tuple[int, str]] = {
    "index": (1, "one dimension number (an integer literal)"),
    "gather": (2, ""),
    "scatter": (3, ""),
    "reshape": (1, "the new dimensions (integers or size expressions)"),
    "shape": (1, ""),
}


@dataclass(frozen=True)
class BoundIntrinsic:
    stmt: T.Intrinsic
    shape: tuple[int, ...]
    dtype: str
    params: tuple[int, ...]  # the integer arguments, evaluated

    @property
    def output(self) -> str:
        return self.stmt.output


def bind_intrinsic(stmt: T.Intrinsic, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
                   sizes: dict[str, int]) -> BoundIntrinsic:
    """The result shape and dtype of `stmt` given its arguments' (see the module doc)."""
    what = f"'{stmt}'"
    params = tuple(evaluate_size(p, sizes, f"argument of {what}") for p in stmt.params)
    args = [shapes[t] for t in stmt.tensors]
    first = stmt.tensors[0]
    if stmt.func == "index":
        (dim,) = params
        if not 0 <= dim < len(args[0]):
            raise BindError(f"{what}: dimension {dim} is out of range for '{first}' of shape {args[0]} "
                            f"(rank {len(args[0])})")
        return BoundIntrinsic(stmt, args[0], INDEX_DTYPE, params)
    if stmt.func == "shape":
        return BoundIntrinsic(stmt, (len(args[0]),), INDEX_DTYPE, params)
    if stmt.func == "reshape":
        if any(d < 0 for d in params):
            raise BindError(f"{what}: negative dimension in the new shape {params}")
        if math.prod(params) != math.prod(args[0]):
            raise BindError(f"{what}: cannot reshape '{first}' of shape {args[0]} ({math.prod(args[0])} "
                            f"elements) to {params} ({math.prod(params)} elements)")
        return BoundIntrinsic(stmt, params, dtypes[first], params)
    _check_indices(stmt, dtypes, what)
    if stmt.func == "gather":
        data, indices = args
        if not data:
            raise BindError(f"{what}: '{first}' is a scalar; gather needs a tensor of rank 1 or more")
        if data[0] == 0 and math.prod(indices) > 0:
            raise BindError(f"{what}: '{first}' has shape {data}, no rows to gather from")
        return BoundIntrinsic(stmt, indices + data[1:], dtypes[first], params)
    assert stmt.func == "scatter"
    values, indices, like = args
    if values[:len(indices)] != indices:
        raise BindError(f"{what}: the values '{first}' of shape {values} must start with the shape of the "
                        f"indices '{stmt.tensors[1]}' {indices}")
    if not like:
        raise BindError(f"{what}: '{stmt.tensors[2]}' is a scalar; its first dimension sizes the result")
    if like[0] == 0 and math.prod(values) > 0:
        raise BindError(f"{what}: '{stmt.tensors[2]}' has shape {like}, no rows to scatter into")
    return BoundIntrinsic(stmt, like[:1] + values[len(indices):], dtypes[first], params)


def _check_indices(stmt: T.Intrinsic, dtypes: dict[str, str], what: str) -> None:
    name = stmt.tensors[1]
    dtype = dtypes[name]
    if is_float(dtype) or dtype == "bool" or dtype.startswith(("bfloat", "complex")):
        raise BindError(f"{what}: the indices '{name}' are {dtype}; {stmt.func} takes integer indices "
                        f"(convert them with a cast first)")


__all__ = ["INDEX_DTYPE", "SIGNATURES", "BoundIntrinsic", "bind_intrinsic"]
