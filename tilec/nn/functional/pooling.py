"""Pooling of tilec.nn.functional: max_pool2d, avg_pool2d, adaptive_avg_pool2d.

Requires: float32/float64 tensors of rank 3 (unbatched) or 4, whose non-batch dimensions are
non-zero, on the CPU (max_pool2d refuses others; avg_pool2d and adaptive_avg_pool2d hand CUDA
tensors to run_program, untested); torch.nn.functional's arguments (an int or a pair per size).
Anything else is an OpError naming the function.
Guarantees: torch's output shape, values, memory format (a channels_last input gives a
channels_last output) and gradients:

- max_pool2d: torch's window rule for ``ceil_mode`` (the last window starts inside the input or
  the left padding) and its choice of one element per window, which alone receives the gradient:
  the first maximum in window order, or, where the window holds a NaN, the last NaN (torch's
  ``val > max || isnan(val)`` scan). Two programs do it: an index program without autograd
  finds each window's element (its flat position in the input's memory and torch's flat index in
  its plane), then a gather of those elements is the differentiable output, whose derived
  gradient is a scatter to exactly those elements. A `>` contraction alone would not do: its
  derived gradient goes to every element equal to the maximum (docs/LANGUAGE.md section 9).
- avg_pool2d: torch's divisor: the window clipped to the padded input (``count_include_pad``),
  or to the input, or ``divisor_override``.
- adaptive_avg_pool2d: windows ``[floor(i*H/O), ceil((i+1)*H/O))``, written as constraints on
  an offset from ``floor(H/O)*i`` (sources per input size there), or, where O divides H, as
  avg_pool2d.

Every source is cached per parameter tuple; max_pool2d's and avg_pool2d's read the input's sizes
from its shape, so inputs of any size share one compiled Function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from tilec.nn.functional.layout import check_float
from tilec.ops.arguments import OpError
from tilec.ops.program import run_program, run_program_no_grad

Pair = tuple[int, int]

# The input as a program declares it (dimensions in memory order), and where its height is.
_DECLARATION = {"NCHW": "I[N, C, H, W]", "NHWC": "I[N, H, W, C]"}
_HEIGHT_AXIS = {"NCHW": 2, "NHWC": 1}
_GATHER_SOURCE = "function (T[L], G[A, B, P, Q]) -> (O) { O = gather(T, G); }"
_SCATTER_SOURCE = "function (D[A, B, P, Q], G[A, B, P, Q], T[L]) -> (O) { O = scatter(D, G, T); }"


def _pair(op: str, name: str, value: int | Sequence[int]) -> Pair:
    """An int or a sequence of one or two ints as (height, width), as torch reads it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (list, tuple)) and len(value) in (1, 2) and all(isinstance(v, int) for v in value):
        return (value[0], value[-1])
    raise OpError(f"tilec.nn.functional.{op}: '{name}' must be an int or a tuple of one or two ints, got {value!r}")


@dataclass(frozen=True)
class Planes:
    """A rank-3 or rank-4 input as a rank-4 tensor contiguous in `layout` ("NCHW" or "NHWC": the
    order of its dimensions in memory), viewed in that order."""

    dense: torch.Tensor
    layout: str
    unbatched: bool

    @staticmethod
    def of(op: str, x: torch.Tensor) -> Planes:
        check_float(op, "input", x)
        if x.dim() not in (3, 4) or any(s == 0 for s in x.shape[-3 if x.dim() == 3 else 1:]):
            raise OpError(f"tilec.nn.functional.{op}: expected a 3-D or 4-D input with non-zero sizes except "
                          f"the batch dimension, got shape {list(x.shape)}")
        unbatched = x.dim() == 3
        x4 = x.unsqueeze(0) if unbatched else x
        if not unbatched and not x4.is_contiguous() and x4.is_contiguous(memory_format=torch.channels_last):
            return Planes(x4.permute(0, 2, 3, 1), "NHWC", False)
        return Planes(x4.contiguous(), "NCHW", unbatched)

    @property
    def height_width(self) -> Pair:
        h = _HEIGHT_AXIS[self.layout]
        return (int(self.dense.shape[h]), int(self.dense.shape[h + 1]))

    def out_shape(self, height: int, width: int) -> tuple[int, ...]:
        """The physical shape of an output of these planes with the given spatial size."""
        n, c = self.dense.shape[0], self.dense.shape[1 if self.layout == "NCHW" else 3]
        return (n, c, height, width) if self.layout == "NCHW" else (n, height, width, c)

    def to_torch(self, y: torch.Tensor) -> torch.Tensor:
        """A physical output as torch's logical one (a view)."""
        logical = y.permute(0, 3, 1, 2) if self.layout == "NHWC" else y
        return logical.squeeze(0) if self.unbatched else logical

    def empty_result(self, shape: tuple[int, ...]) -> torch.Tensor:
        """An empty output of `shape` that still joins the autograd graph (no kernel over nothing)."""
        return self.dense.reshape(-1).narrow(0, 0, 0).reshape(shape)


def _pooled_size(op: str, size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    """torch's pooling_output_shape, checked as torch checks it."""
    if kernel <= 0 or stride <= 0 or dilation <= 0 or pad < 0:
        raise OpError(f"tilec.nn.functional.{op}: kernel_size, stride and dilation must be positive and padding "
                      f"non-negative, got {kernel}, {stride}, {dilation}, {pad}")
    if pad > kernel // 2:
        raise OpError(f"tilec.nn.functional.{op}: padding {pad} must be at most half the kernel size {kernel}")
    out = (size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    if out < 1:
        raise OpError(f"tilec.nn.functional.{op}: the output size {out} is too small for an input size {size}, "
                      f"kernel {kernel}, stride {stride}, padding {pad}, dilation {dilation}")
    return out


def _empty_window(size: int, out: int, kernel: int, stride: int, pad: int, dilation: int) -> bool:
    """Whether some window along one axis has no element inside the input (dilated windows can
    step over it)."""
    return any(all(not 0 <= x * stride - pad + dilation * i < size for i in range(kernel)) for x in range(out))


@dataclass(frozen=True)
class Geometry:
    """The windows of one call: (height, width) pairs, and ceil_mode only where it changes the
    output's size (so that both settings share compiled kernels otherwise)."""

    kernel: Pair
    stride: Pair
    padding: Pair
    dilation: Pair
    ceil_mode: bool
    out_size: Pair = field(compare=False)  # this input's; not part of the sources' cache key

    @staticmethod
    def of(op: str, planes: Planes, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
           padding: int | Sequence[int], dilation: int | Sequence[int], ceil_mode: bool) -> Geometry:
        kernel = _pair(op, "kernel_size", kernel_size)
        no_stride = stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
        steps = kernel if no_stride else _pair(op, "stride", stride)  # type: ignore[arg-type]
        pads, dilations = _pair(op, "padding", padding), _pair(op, "dilation", dilation)

        def sizes(ceil: bool) -> Pair:
            h, w = (_pooled_size(op, size, kernel[a], steps[a], pads[a], dilations[a], ceil)
                    for a, size in enumerate(planes.height_width))
            return (h, w)

        out_size = sizes(bool(ceil_mode))
        for axis, (name, size) in enumerate(zip(("height", "width"), planes.height_width)):
            if dilations[axis] > 1 and _empty_window(size, out_size[axis], kernel[axis], steps[axis], pads[axis],
                                                     dilations[axis]):
                raise OpError(f"tilec.nn.functional.{op}: with dilation {dilations[axis]}, a window along the "
                              f"{name} ({size}) holds padding only, where torch gives -inf and an index outside "
                              f"the input; tilec does not compute such windows")
        ceil = bool(ceil_mode) and out_size != sizes(False)
        return Geometry(kernel, steps, pads, dilations, ceil, out_size)


def _size_expression(size: str, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> str:
    """`_pooled_size` of the input size symbol `size` as a Tile size expression (valid arguments:
    the numerators are non-negative, so '/' rounds down). With ceil_mode, the min says that the
    last window starts before `size + pad` (torch's decrement, which removes at most one window).
    Inline, not a size statement: the derived gradient declares the output's gradient with the
    output's size names, which a size statement would define a second time."""
    offset = 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    pooled = f"({size} + {offset}) / {stride} + 1"
    return f"min({pooled}, ({size} + {pad - 1}) / {stride} + 1)" if ceil_mode else pooled


def _window(layout: str, geometry: Geometry) -> tuple[str, str, str]:
    """(output indices with sizes, the input access of window element (i, j), its constraints)."""
    kernel, stride, padding, dilation, ceil_mode = (geometry.kernel, geometry.stride, geometry.padding,
                                                    geometry.dilation, geometry.ceil_mode)
    oh = _size_expression("H", kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = _size_expression("W", kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    row = f"{stride[0]}*x + {dilation[0]}*i - {padding[0]}"
    col = f"{stride[1]}*y + {dilation[1]}*j - {padding[1]}"
    if layout == "NCHW":
        out, access = f"n, c, x, y: N, C, {oh}, {ow}", f"n, c, {row}, {col}"
    else:
        out, access = f"n, x, y, c: N, {oh}, {ow}, C", f"n, {row}, {col}, c"
    return out, access, f"i < {kernel[0]}, j < {kernel[1]}"


@lru_cache(maxsize=None)
def max_index_source(layout: str, geometry: Geometry, bits: int) -> str:
    """The program giving, per window, the position in memory of torch's chosen element (G) and
    torch's index of it in its plane (Index): the first maximum in window order, or the last NaN.

    One contraction finds the maximum M (NaN propagates through `>`); a second takes the largest
    Key over the window's candidates: the elements equal to M, or, in a window whose M is NaN,
    the NaNs (Value maps them, and Target maps such an M, to 0; an element equal to 0 there is
    a candidate too, but loses). A NaN's Key is its Position + 1 (the last NaN wins), any other
    candidate's -Position (the first maximum wins); NaN keys are positive, the others not."""
    out, access, window = _window(layout, geometry)
    dims = _DECLARATION[layout][2:-1].split(", ")
    memory = "((as_int(R0, {0}) * {2} + R1) * {3} + R2) * {4} + R3".format(bits, *dims)
    within_plane = "G - (G / (H * W)) * (H * W)" if layout == "NCHW" else "G / C - (G / C / (H * W)) * (H * W)"
    return f"""function ({_DECLARATION[layout]}) -> (G, Index) {{
  R0 = index(I, 0); R1 = index(I, 1); R2 = index(I, 2); R3 = index(I, 3);
  Position = {memory};
  Key = I != I ? Position + 1 : -Position;
  Value = I != I ? 0 : I;
  M[{out}] = >(I[{access}]), {window};
  Target = M != M ? 0 : M;
  Chosen[{out}] = >(Value[{access}] == Target[{out.split(":")[0]}] ? Key[{access}]), {window};
  G = Chosen > 0 ? Chosen - 1 : -Chosen;
  Index = as_int({within_plane}, 64);
}}"""


class _GatherElements(torch.autograd.Function):
    """values[positions] (values flat, positions integers of rank 4), whose gradient is
    _ScatterElements of the output's gradient to those positions, and so on to any order (each a
    Tile program). autograd.Functions of their own because run_program's derived gradient
    compiles every input with the first one's dtype, which integer positions do not have
    (tilec/ops/eager.py, Node.grad)."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(values, positions)
        return run_program(_GATHER_SOURCE, [values, positions], positions.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        values, positions = ctx.saved_tensors
        return _ScatterElements.apply(grad, positions, values), None


class _ScatterElements(torch.autograd.Function):
    """zeros shaped like `like` (flat) plus `grad` added at `positions`; its gradient is a gather."""

    @staticmethod
    def forward(ctx: Any, grad: torch.Tensor, positions: torch.Tensor,  # type: ignore[override]
                like: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(positions)
        return run_program(_SCATTER_SOURCE, [grad.contiguous(), positions, like], like.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        positions, = ctx.saved_tensors
        return _GatherElements.apply(grad.contiguous(), positions), None, None


def max_pool2d(input: torch.Tensor, kernel_size: int | Sequence[int],  # noqa: A002 (torch's name)
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """torch.nn.functional.max_pool2d (see the module docstring for the gradient's convention)."""
    planes = Planes.of("max_pool2d", input)
    if input.device.type != "cpu":  # the index program runs through run_program_no_grad, CPU only
        raise OpError(f"tilec.nn.functional.max_pool2d: inputs on {input.device} are not supported yet; CPU only")
    geometry = Geometry.of("max_pool2d", planes, kernel_size, stride, padding, dilation, ceil_mode)
    shape = planes.out_shape(*geometry.out_size)
    if planes.dense.numel() == 0:
        out, indices = planes.empty_result(shape), torch.empty(shape, dtype=torch.int64, device=input.device)
    else:
        bits = 32 if planes.dense.numel() < 2**31 - 1 else 64  # positions in memory: 32 bits where they fit
        source = max_index_source(planes.layout, geometry, bits)
        positions, indices = run_program_no_grad(source, [planes.dense])
        out = _GatherElements.apply(planes.dense.reshape(-1), positions)
    if return_indices:
        return planes.to_torch(out), planes.to_torch(indices)
    return planes.to_torch(out)


@lru_cache(maxsize=None)
def avg_pool_source(layout: str, geometry: Geometry, count_include_pad: bool, divisor_override: int | None) -> str:
    """The window sums divided by torch's divisor (see the module docstring); differentiable."""
    out, access, window = _window(layout, geometry)
    kernel, stride, padding = geometry.kernel, geometry.stride, geometry.padding
    axis = _HEIGHT_AXIS[layout]
    if divisor_override is not None:
        divisor = f"Divisor = {divisor_override};"
    else:
        bounds = []
        for name, size, a in (("Row", "H", 0), ("Col", "W", 1)):
            bounds.append(f"{name}Start = {name} * {stride[a]} - {padding[a]}; "
                          f"{name}End = min({name}Start + {kernel[a]}, {size} + {padding[a]});")
        if count_include_pad:
            divisor = "Divisor = (RowEnd - RowStart) * (ColEnd - ColStart);"
        else:
            divisor = "Divisor = (min(RowEnd, H) - max(RowStart, 0)) * (min(ColEnd, W) - max(ColStart, 0));"
        divisor = "\n  ".join([f"Row = index(Sum, {axis}); Col = index(Sum, {axis + 1});", *bounds, divisor])
    return f"""function ({_DECLARATION[layout]}) -> (O) {{
  Sum[{out}] = +(I[{access}]), {window};
  {divisor}
  O = Sum / Divisor;
}}"""


def avg_pool2d(input: torch.Tensor, kernel_size: int | Sequence[int],  # noqa: A002 (torch's name)
               stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> torch.Tensor:
    """torch.nn.functional.avg_pool2d."""
    planes = Planes.of("avg_pool2d", input)
    geometry = Geometry.of("avg_pool2d", planes, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override == 0):
        raise OpError(f"tilec.nn.functional.avg_pool2d: divisor_override must be a non-zero int, "
                      f"got {divisor_override!r}")
    shape = planes.out_shape(*geometry.out_size)
    if planes.dense.numel() == 0:
        return planes.to_torch(planes.empty_result(shape))
    source = avg_pool_source(planes.layout, geometry, bool(count_include_pad), divisor_override)
    return planes.to_torch(run_program(source, [planes.dense], shape))


def _adaptive_window(var: str, offset: str, size: int, out: int) -> tuple[str, str]:
    """(the input index, the constraints) of element `offset` of window `var` along one axis.

    Window x covers [floor(x*S/O), ceil((x+1)*S/O)) of an input size S and output size O. With
    S = Q*O + R, the element h = Q*x + k of it satisfies O*k + O - 1 - R*x >= 0 (h is not before
    the start) and R*x + S - 1 - O*k >= 0 (h is before the end); k runs over about S/O + R values
    rather than S, and so does the derived gradient."""
    q, r = divmod(size, out)
    bound = size * out + out * out + size + out  # larger than both expressions can be
    return (f"{q}*{var} + {offset}",
            f"{out}*{offset} + {out - 1} - {r}*{var} < {bound}, {r}*{var} + {size - 1} - {out}*{offset} < {bound}")


@lru_cache(maxsize=None)
def adaptive_avg_source(layout: str, in_size: Pair, out_size: Pair) -> str:
    """The sums over the adaptive windows (see _adaptive_window), divided by their sizes."""
    (h, w), (oh, ow) = in_size, out_size
    row, row_window = _adaptive_window("x", "i", h, oh)
    col, col_window = _adaptive_window("y", "j", w, ow)
    if layout == "NCHW":
        out, access = f"n, c, x, y: N, C, {oh}, {ow}", f"n, c, {row}, {col}"
    else:
        out, access = f"n, x, y, c: N, {oh}, {ow}, C", f"n, {row}, {col}, c"
    axis = _HEIGHT_AXIS[layout]
    return f"""function ({_DECLARATION[layout]}) -> (O) {{
  Sum[{out}] = +(I[{access}]), {row_window}, {col_window};
  Row = index(Sum, {axis}); Col = index(Sum, {axis + 1});
  Rows = ((Row + 1) * H + {oh - 1}) / {oh} - Row * H / {oh};
  Cols = ((Col + 1) * W + {ow - 1}) / {ow} - Col * W / {ow};
  O = Sum / (Rows * Cols);
}}"""


def adaptive_avg_pool2d(input: torch.Tensor, output_size: int | None | Sequence[int | None]  # noqa: A002
                        ) -> torch.Tensor:
    """torch.nn.functional.adaptive_avg_pool2d. Where each output size divides its input size, the
    windows are an avg_pool2d's with kernel = stride = input / output (one fast contraction)."""
    planes = Planes.of("adaptive_avg_pool2d", input)
    h, w = planes.height_width
    requested = (output_size, output_size) if output_size is None or isinstance(output_size, int) else tuple(
        output_size)
    if len(requested) != 2 or not all(s is None or (isinstance(s, int) and s >= 0) for s in requested):
        raise OpError(f"tilec.nn.functional.adaptive_avg_pool2d: output_size must be an int, None or a pair of "
                      f"them (non-negative), got {output_size!r}")
    oh, ow = (h if requested[0] is None else requested[0]), (w if requested[1] is None else requested[1])
    shape = planes.out_shape(oh, ow)
    if planes.dense.numel() == 0 or oh == 0 or ow == 0:
        return planes.to_torch(planes.empty_result(shape))
    if h % oh == 0 and w % ow == 0:
        kernel = (h // oh, w // ow)
        source = avg_pool_source(planes.layout, Geometry(kernel, kernel, (0, 0), (1, 1), False, (oh, ow)), True, None)
    else:
        source = adaptive_avg_source(planes.layout, (h, w), (oh, ow))
    return planes.to_torch(run_program(source, [planes.dense], shape))


__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]
