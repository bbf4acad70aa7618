"""max_pool2d with indices (+ backward) as Tile contractions: the maximum over each window, the
first position holding it (a minimum over the flat indices where the window equals its maximum,
as ATen picks the first), and the backward scattering each window's gradient to that position.
avg_pool2d (+ backward): each window's sum divided by its divisor (torch's: the window's cells
within the padded input, within the input alone without `count_include_pad`, or the override),
a constant per output position that the kernel takes as an input; the backward spreads each
window's gradient, divided the same way, over the cells it covers (a scatter by a `+` contraction
whose output index is the window's tap)."""

from __future__ import annotations

from typing import Any


import torch
import torch.fx as fx

from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.registry import result, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value

aten = torch.ops.aten


def _pool_geometry(a: dict[str, Any]) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = list(a["kernel_size"])
    kernel = kernel * 2 if len(kernel) == 1 else kernel
    stride = list(a.get("stride") or kernel)
    stride = stride * 2 if len(stride) == 1 else stride
    padding = list(a.get("padding", [0, 0]))
    padding = padding * 2 if len(padding) == 1 else padding
    dilation = list(a.get("dilation", [1, 1]))
    dilation = dilation * 2 if len(dilation) == 1 else dilation
    return kernel, stride, padding, dilation


def _taps(stride: list[int], padding: list[int], dilation: list[int]) -> tuple[str, str]:
    """The input rows and columns a 2-D window at (y, x) reads, tap (i, j)."""
    h = f"{stride[0]}*y + {dilation[0]}*i - {padding[0]}"
    w = f"{stride[1]}*x + {dilation[1]}*j - {padding[1]}"
    return h, w


def _flat_positions(p: ProgramWriter, x: Value) -> Value:
    """Each cell's flat spatial index h * W + w (int64), as max_pool2d's indices count."""
    rows, cols = p.fresh(), p.fresh()
    p.statements.append(f"{rows} = index({x.name}, 2);")
    p.statements.append(f"{cols} = index({x.name}, 3);")
    return p.let(f"as_int({rows}, 64) * {x.shape[3]} + as_int({cols}, 64)", x.shape, torch.int64, x)


@tile(aten.max_pool2d_with_indices.default)
def _max_pool2d(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    a = arguments(node)
    x = p.materialise(p.tensor(a["self"]))
    if x.rank != 4 or 0 in x.shape:
        raise Unsupported("max_pool2d of an input other than a non-empty (N, C, H, W)")
    kernel, stride, padding, dilation = _pool_geometry(a)
    shape = tuple(int(s) for s in node.meta["val"][0].shape)
    h, w = _taps(stride, padding, dilation)
    taps = f", i < {kernel[0]}, j < {kernel[1]}"
    out = p.contract(["n", "c", "y", "x"], shape, f">({x.name}[n, c, {h}, {w}])", x.dtype, taps)
    flat = _flat_positions(p, x)
    first = p.contract(["n", "c", "y", "x"], shape,
                       f"<({x.name}[n, c, {h}, {w}] == {out.name}[n, c, y, x] ? {flat.name}[n, c, {h}, {w}])",
                       torch.int64, taps)
    return out, first


@tile(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    g, x = p.materialise(p.tensor(a["grad_output"])), p.materialise(p.tensor(a["self"]))
    ind = p.materialise(p.tensor(a["indices"]))
    if x.rank != 4:
        raise Unsupported("max_pool2d backward of an input other than (N, C, H, W)")
    kernel, stride, padding, dilation = _pool_geometry(a)
    h, w = _taps(stride, padding, dilation)
    flat = _flat_positions(p, x)
    return p.contract(["n", "c", h, w], shape,
                      f"+({ind.name}[n, c, y, x] == {flat.name}[n, c, {h}, {w}] ? {g.name}[n, c, y, x])", dtype,
                      f", i < {kernel[0]}, j < {kernel[1]}")


def _divisors(size: tuple[int, ...], out: tuple[int, ...], kernel: list[int], stride: list[int], padding: list[int],
              include_pad: bool, override: int | None, dtype: torch.dtype) -> torch.Tensor:
    """avg_pool2d's divisor at each output position (OH, OW), as ATen computes it: a window starts at
    s * o - p and ends at the padded input's end at the latest; without `include_pad` only its cells
    within the input count."""
    if override:
        return torch.full(out, float(override), dtype=dtype)
    counts = []
    for n, o, k, s, p in zip(size, out, kernel, stride, padding):
        start = torch.arange(o) * s - p
        end = torch.clamp(start + k, max=n + p)
        counts.append(end - start if include_pad else torch.clamp(end, max=n) - torch.clamp(start, min=0))
    return (counts[0][:, None] * counts[1][None, :]).to(dtype)


def _avg_pool_divisor(p: ProgramWriter, a: dict[str, Any], geometry: tuple[list[int], ...], size: tuple[int, ...],
                      out: tuple[int, ...], dtype: torch.dtype) -> Value:
    """The divisors (_divisors) of an avg_pool2d (`geometry`: _pool_geometry's) from input shape
    `size` to `out`, as a kernel input."""
    kernel, stride, padding, _ = geometry
    if len(size) != 4 or 0 in size:
        raise Unsupported("avg_pool2d of an input other than a non-empty (N, C, H, W)")
    args = (size[2:], out[2:], kernel, stride, padding, bool(a.get("count_include_pad", True)),
            a.get("divisor_override"), dtype)
    made: list[torch.Tensor] = []  # made at the first run (the rule runs under torch's fake tensors)

    def divisors() -> torch.Tensor:
        if not made:
            made.append(_divisors(*args))
        return made[0]

    return p.generate(tuple(out[2:]), dtype, divisors)


@tile(aten.avg_pool2d.default)
def _avg_pool2d(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    x = p.materialise(p.tensor(a["self"]))
    geometry = _pool_geometry(a)
    divisor = _avg_pool_divisor(p, a, geometry, x.shape, shape, dtype)
    kernel, stride, padding, _ = geometry
    h, w = _taps(stride, padding, [1, 1])
    total = p.contract(["n", "c", "y", "x"], shape, f"+({x.name}[n, c, {h}, {w}])", dtype,
                       f", i < {kernel[0]}, j < {kernel[1]}")
    return p.let(f"{total.name} / {divisor.name}", shape, dtype, total, divisor)


@tile(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    g = p.tensor(a["grad_output"])
    geometry = _pool_geometry(a)
    divisor = _avg_pool_divisor(p, a, geometry, shape, g.shape, dtype)  # (the input's values are not read: its shape is ours)
    share = p.let(f"{p.elementwise(g)} / {divisor.name}", g.shape, dtype, g, divisor)
    kernel, stride, padding, _ = geometry
    h, w = _taps(stride, padding, [1, 1])
    return p.contract(["n", "c", h, w], shape, f"+({share.name}[n, c, y, x])", dtype,
                      f", i < {kernel[0]}, j < {kernel[1]}")
