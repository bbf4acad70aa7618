"""Reductions over axes (sum, mean, var_mean, amax, amin, any) as Tile contractions: the output keeps an
index variable per kept axis (a literal 0 for a kept size-1 axis), the reduced axes' variables
run free. A mean is the sum divided once by the count, as torch computes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.fx as fx

from tilec.torch_backend.lowering.registry import axis, result, tile
from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.layout import reshaped
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, index_vars

aten = torch.ops.aten


def reduce(p: ProgramWriter, x: Value, dims: Sequence[int], keepdim: bool, agg: str, dtype: torch.dtype) -> Value:
    """x reduced with `agg` (+ > <) over `dims` (all axes when empty), in `dtype`."""
    rank = x.rank
    axes = sorted({axis(d, rank) for d in dims}) if dims else list(range(rank))
    x = p.cast(x, dtype)
    idx = index_vars(rank)
    out_idx, shape = [], []
    for d in range(rank):
        if d in axes:
            if keepdim:
                out_idx.append("0")
                shape.append(1)
        else:
            out_idx.append(idx[d])
            shape.append(x.shape[d])
    if not axes:
        return x
    if any(x.shape[d] == 0 for d in axes):
        raise Unsupported("a reduction over an empty axis")
    return p.contract(out_idx, tuple(shape), f"{agg}({p.access(x, idx)})", dtype)


def count(x: Value, dims: Sequence[int]) -> int:
    """How many cells of x a reduction over `dims` (all axes when empty) takes together."""
    axes = {axis(d, x.rank) for d in dims} if dims else set(range(x.rank))
    return math.prod(x.shape[d] for d in axes)


@tile(aten.sum.dim_IntList, aten.sum.default)
def _sum(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    _, dtype = result(node)
    x = p.tensor(a["self"])
    return reduce(p, x, a.get("dim") or [], a.get("keepdim", False), "+", dtype)


@tile(aten.mean.dim, aten.mean.default)
def _mean(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    if not dtype.is_floating_point:
        raise Unsupported(f"mean in {dtype}")
    x = p.tensor(a["self"])
    dims = a.get("dim") or []
    s = reduce(p, x, dims, a.get("keepdim", False), "+", dtype)
    return p.let(f"{s.name} / {float(count(x, dims))!r}", shape, dtype, s)


@tile(aten.var_mean.correction)
def _var_mean(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    """(variance, mean) over `dim` with torch's `correction` (default 1): the mean first, then the
    squared deviations from it summed and divided by max(0, count - correction), as torch does."""
    a = arguments(node)
    x = p.tensor(a["self"])
    if not x.dtype.is_floating_point:
        raise Unsupported(f"var_mean in {x.dtype}")
    dims = a.get("dim") or []
    correction = a.get("correction")
    correction = 1 if correction is None else correction
    keepdim = bool(a.get("keepdim", False))
    n = count(x, dims)
    total = reduce(p, x, dims, True, "+", x.dtype)
    mean = p.let(f"{total.name} / {float(n)!r}", total.shape, x.dtype, total)
    deviation = p.let(f"{p.elementwise(x)} - {mean.name}", x.shape, x.dtype, x, mean)
    squares = reduce(p, p.let(f"{deviation.name} * {deviation.name}", x.shape, x.dtype, deviation), dims, keepdim,
                     "+", x.dtype)
    var = p.let(f"{squares.name} / {float(max(0, n - correction))!r}", squares.shape, x.dtype, squares)
    return var, (mean if keepdim else reshaped(p, mean, var.shape))


@tile(aten.amax.default, aten.amin.default)
def _extremum(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    _, dtype = result(node)
    x = p.tensor(a["self"])
    agg = ">" if node.target == aten.amax.default else "<"
    return reduce(p, x, a.get("dim") or [], a.get("keepdim", False), agg, dtype)


@tile(aten.any.dim, aten.any.dims, aten.any.default)
def _any(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, _ = result(node)
    x = p.tensor(a["self"])
    dims = a.get("dim")
    dims = [dims] if isinstance(dims, int) else (dims or [])
    flags = p.let(f"as_int(as_bool({p.elementwise(x)}), 32)", x.shape, torch.int32, x)
    r = reduce(p, flags, dims, a.get("keepdim", False), ">", torch.int32)
    return p.let(f"as_bool({r.name})", shape, torch.bool, r)
