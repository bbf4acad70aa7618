"""Views and layout ops: permutations, expansions, slices, selections and reshapes that split
axes stay lazy (the statement that reads them indexes through them, tilec.torch_backend.program.
Value); reshapes that merge axes, concatenation, padding and scatters are affine `=`
contractions (no division or modulo in an index).

A reshape is affine when it only splits or merges neighbouring axes (with size-1 axes anywhere):
`[B*T, C] -> [B, T, C]` reads `X[T*b + t, c]`, the reverse writes `O[T*b + t, c]`. Other reshapes
(`[6, 4] -> [4, 6]`) are refused inside a kernel; at a kernel's boundary every view is torch's.
"""

from __future__ import annotations


import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.lowering.registry import argv, axis, result, tile
from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, index_vars, literal, meta

aten = torch.ops.aten


@tile(aten.permute.default)
def _permute(p: ProgramWriter, node: fx.Node) -> Value:
    x = p.tensor(argv(node)[0])
    dims = [axis(d, x.rank) for d in argv(node)[1]]
    return permuted(p, x, dims)


def permuted(p: ProgramWriter, x: Value, dims: list[int]) -> Value:
    """x.permute(dims), lazily: logical axis dims[d] of x is the view's axis d."""
    mapping = [""] * x.rank
    for d, a in enumerate(dims):
        mapping[a] = f"{{{d}}}"
    return p.view(x, tuple(x.shape[a] for a in dims), mapping)


@tile(aten.transpose.int)
def _transpose(p: ProgramWriter, node: fx.Node) -> Value:
    x = p.tensor(argv(node)[0])
    d0, d1 = axis(argv(node)[1], x.rank), axis(argv(node)[2], x.rank)
    dims = list(range(x.rank))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permuted(p, x, dims)


@tile(aten.t.default)
def _t(p: ProgramWriter, node: fx.Node) -> Value:
    x = p.tensor(argv(node)[0])
    return permuted(p, x, [1, 0]) if x.rank == 2 else x


@tile(aten.expand.default)
def _expand(p: ProgramWriter, node: fx.Node) -> Value:
    shape, _ = result(node)
    return expanded(p, p.tensor(argv(node)[0]), shape)


def expanded(p: ProgramWriter, x: Value, shape: tuple[int, ...]) -> Value:
    """x broadcast to `shape` (torch's rule: axes aligned on the right, size-1 axes stretch), lazily."""
    if x.shape == shape:
        return x
    if x.index is None:  # dense or a broadcast already: a broadcast of the same Tile tensor
        return Value(x.name, shape, x.dtype, x.tile_shape if x.tile_shape != shape else None)
    lead = len(shape) - x.rank
    return p.view(x, shape, ["0" if x.shape[a] == 1 and shape[lead + a] != 1 else f"{{{lead + a}}}"
                             for a in range(x.rank)])


def _groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Pairs (source axes, destination axes) of equal products covering both shapes' axes of size
    > 1, each pair one axis on one side at least; None where the reshape is not of that form."""
    a = [d for d, s in enumerate(src) if s != 1]
    b = [d for d, s in enumerate(dst) if s != 1]
    out: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i >= len(a) or j >= len(b):
            return None
        ga, gb = [a[i]], [b[j]]
        pa, pb = src[a[i]], dst[b[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    return None
                ga.append(a[i])
                pa *= src[a[i]]
                i += 1
            else:
                if j >= len(b):
                    return None
                gb.append(b[j])
                pb *= dst[b[j]]
                j += 1
        if len(ga) > 1 and len(gb) > 1:
            return None
        out.append((ga, gb))
    return out


def _flat(axes: list[int], shape: tuple[int, ...], names: dict[int, str]) -> str:
    """The row-major flat index of `axes` (of `shape`) named by `names`."""
    terms, stride = [], 1
    for d in reversed(axes):
        terms.append(names[d] if stride == 1 else f"{stride}*{names[d]}")
        stride *= shape[d]
    return " + ".join(reversed(terms))


def reshaped(p: ProgramWriter, x: Value, shape: tuple[int, ...]) -> Value:
    """x viewed as `shape` (same element count): lazily where it only splits axes (each of x's axes
    is read at an affine index of the view's), else by an affine copy."""
    if x.shape == shape:
        return x
    groups = _groups(x.shape, shape)
    if groups is None:
        raise Unsupported(f"a reshape {list(x.shape)} -> {list(shape)} that is not a split or merge of axes")
    if all(len(sa) == 1 for sa, _ in groups):
        mapping = ["0"] * x.rank
        for sa, da in groups:
            mapping[sa[0]] = _flat(da, shape, {d: f"{{{d}}}" for d in da})
        return p.view(x, shape, mapping)
    x = p.materialise(x)
    src_idx = ["0"] * x.rank
    dst_idx = ["0"] * len(shape)
    for g, (sa, da) in enumerate(groups):
        if len(sa) == 1:  # a split (or a 1:1 axis): the destination's variables
            names = {d: f"v{g}_{d}" for d in da}
            for d in da:
                dst_idx[d] = names[d]
            src_idx[sa[0]] = _flat(da, shape, names)
        else:  # a merge: the source's variables
            names = {d: f"u{g}_{d}" for d in sa}
            for d in sa:
                src_idx[d] = names[d]
            dst_idx[da[0]] = _flat(sa, x.shape, names)
    return p.contract(dst_idx, shape, f"=({x.name}[{', '.join(src_idx)}])", x.dtype)


@tile(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
      aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.view.dtype, aten.flatten.using_ints)
def _reshape(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    x = p.tensor(argv(node)[0])
    if dtype != x.dtype:
        raise Unsupported("a view as another dtype")
    return reshaped(p, x, shape)


@tile(aten.as_strided.default)
def _as_strided(p: ProgramWriter, node: fx.Node) -> Value:
    """as_strided of a contiguous tensor at its own offset with the contiguous strides of the new
    size: a reshape (the decompositions of group norm write theirs so); any other is refused."""
    shape, dtype = result(node)
    base = meta(argv(node)[0])
    a = arguments(node)
    stride, offset = tuple(int(s) for s in a["stride"]), int(a.get("storage_offset") or 0)
    if not isinstance(base, torch.Tensor) or not base.is_contiguous() or base.numel() != math.prod(shape) \
            or offset != base.storage_offset() \
            or any(n > 1 and s != c for n, s, c in zip(shape, stride, _contiguous_strides(shape))):
        raise Unsupported("an as_strided other than a contiguous tensor's reshape")
    return reshaped(p, p.tensor(argv(node)[0]), shape)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of `shape` (a size-1 axis's stride does not matter: no index moves along it)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@tile(aten.slice.Tensor)
def _slice(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, _ = result(node)
    x = p.tensor(a["self"])
    dim = axis(a.get("dim", 0), x.rank)
    return window(p, x, shape, dim, _slice_start(a.get("start"), x.shape[dim]), a.get("step", 1))


def _slice_start(start: int | None, size: int) -> int:
    """A slice's first index as torch takes it (None: 0; negative: from the end), clamped to the axis."""
    start = start or 0
    return max(0, min(start + size if start < 0 else start, size))


def _strided(index: str, start: int, step: int) -> str:
    """The index of cell `index` of a slice start:...:step."""
    return f"{step}*{index} + {start}" if step != 1 else f"{index} + {start}"


def window(p: ProgramWriter, x: Value, shape: tuple[int, ...], dim: int, start: int, step: int) -> Value:
    """x's cells start, start + step, ... along `dim` (`shape` the result's), lazily."""
    if shape == x.shape:
        return x
    mapping = [f"{{{a}}}" for a in range(x.rank)]
    mapping[dim] = _strided(f"{{{dim}}}", start, step)
    return p.view(x, shape, mapping)


@tile(aten.select.int)
def _select(p: ProgramWriter, node: fx.Node) -> Value:
    shape, _ = result(node)
    x = p.tensor(argv(node)[0])
    dim = axis(argv(node)[1], x.rank)
    index = argv(node)[2] + (x.shape[dim] if argv(node)[2] < 0 else 0)
    mapping = [f"{{{a}}}" for a in range(dim)] + [str(index)] + [f"{{{a - 1}}}" for a in range(dim + 1, x.rank)]
    return p.view(x, shape, mapping)


@tile(aten.split.Tensor, aten.split_with_sizes.default)
def _split(p: ProgramWriter, node: fx.Node) -> tuple[Value, ...]:
    x = p.tensor(argv(node)[0])
    dim = axis(arguments(node)["dim"], x.rank)
    size = argv(node)[1]
    sizes = list(size) if isinstance(size, (list, tuple)) else \
        [min(size, x.shape[dim] - s) for s in range(0, x.shape[dim], size)]
    out, start = [], 0
    for n in sizes:
        shape = x.shape[:dim] + (n,) + x.shape[dim + 1:]
        out.append(window(p, x, shape, dim, start, 1))
        start += n
    return tuple(out)


@tile(aten.cat.default)
def _cat(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    tensors = [t for t in argv(node)[0] if list(t.meta["val"].shape) != [0]]  # torch skips 1-D empties
    dim = axis(arguments(node)["dim"], len(shape))
    idx = index_vars(len(shape))
    prev: Value | None = None
    offset = 0
    for t in tensors:
        v = p.cast(p.tensor(t), dtype)
        write = list(idx)
        write[dim] = f"{idx[dim]} + {offset}" if offset else idx[dim]
        tail = f" default {prev.name}" if prev is not None else ""
        prev = p.contract(write, shape, f"=({p.access(v, idx)})", dtype, tail)
        offset += v.shape[dim]
    if prev is None:
        raise Unsupported("cat of nothing")
    return prev


@tile(aten.constant_pad_nd.default)
def _pad(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    x = p.tensor(argv(node)[0])
    pad = list(argv(node)[1])
    value = argv(node)[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    if not dtype.is_floating_point and isinstance(value, float) and not value.is_integer():
        raise Unsupported(f"padding {dtype} with {value}")
    idx = index_vars(x.rank)
    write = list(idx)
    for k in range(len(pad) // 2):
        d = x.rank - 1 - k
        before = pad[2 * k]  # (negative: a crop; writes outside the result are dropped, as after < 0's)
        if before:
            write[d] = f"{idx[d]} + {before}" if before > 0 else f"{idx[d]} - {-before}"
    fill = value if dtype.is_floating_point or not isinstance(value, float) else int(value)
    return p.contract(write, shape, f"=({p.access(x, idx)})", dtype, f" default {literal(fill)}")


def _written_into(p: ProgramWriter, node: fx.Node, place: Callable[[list[str], int, dict[str, Any], int], list[str]]
                  ) -> Value:
    """`self` with `src` written into the cells `place(src's index, dim, arguments, dim's size)`
    names (slice_scatter, select_scatter): an `=` contraction onto a default of `self`."""
    a = arguments(node)
    shape, dtype = result(node)
    base, src = p.materialise(p.tensor(a["self"])), p.cast(p.tensor(a["src"]), dtype)
    dim = axis(a.get("dim", 0), len(shape))
    idx = index_vars(src.rank)
    return p.contract(place(idx, dim, a, shape[dim]), shape, f"=({p.access(src, idx)})", dtype,
                      f" default {base.name}")


@tile(aten.slice_scatter.default)
def _slice_scatter(p: ProgramWriter, node: fx.Node) -> Value:
    def place(idx: list[str], dim: int, a: dict[str, Any], size: int) -> list[str]:
        return idx[:dim] + [_strided(idx[dim], _slice_start(a.get("start"), size), a.get("step", 1))] + idx[dim + 1:]
    return _written_into(p, node, place)


@tile(aten.select_scatter.default)
def _select_scatter(p: ProgramWriter, node: fx.Node) -> Value:
    def place(idx: list[str], dim: int, a: dict[str, Any], size: int) -> list[str]:
        return idx[:dim] + [str(a["index"] + (size if a["index"] < 0 else 0))] + idx[dim:]
    return _written_into(p, node, place)


@tile(aten.copy.default)
def _copy(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    return expanded(p, p.cast(p.tensor(argv(node)[1]), dtype), shape)
