"""Losses of tilec.nn.functional: cross_entropy and mse_loss, each one Tile program per option tuple.

Requires: float32/float64 inputs; cross_entropy's class-index targets int64 (torch's own
requirement), its probability targets float of the input's shape. Guarantees: torch's values,
shapes and gradients (w.r.t. the input, and w.r.t. probability targets and mse_loss's target),
including torch's formulas for label smoothing with class weights, mean reductions that divide by
the summed target weights (NaN when every target is ignored, or the input is empty), and mse_loss's
broadcasting (with torch's warning). Class indices out of range raise a TilecError, as torch
raises. The log-softmax is written out in Tile (max-shifted exp, sum, log) so its gradient is the
one tilec derives from it.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch
from torch.nn import _reduction

from tilec.nn.functional.layout import check_float, physical, unpermute
from tilec.ops.arguments import OpError
from tilec.ops.autocast import full_precision
from tilec.ops.program import run_program

# Rows of X[R, C] (one row per sample and position, classes contiguous: the reductions run along
# rows, which is several times faster than over a middle axis).
_LOG_SOFTMAX = """
    M[r, 0: R, 1] = >(X[r, c]);
    Z = X - M;
    E = exp(Z);
    Total[r, 0: R, 1] = +(E[r, c]);
    LogTotal = log(Total);"""


def _reduction_of(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """torch's reduction string, from the deprecated pair where given; ValueError as torch for a bad one."""
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce, emit_warning=True)
    _reduction.get_enum(reduction)  # raises torch's ValueError for an unknown reduction
    return reduction


def _literal(value: float) -> str:
    return repr(float(value))


_BLOCK, _LEVELS = 64, 4


def _total(name: str, tensor: str, length: str) -> list[str]:
    """Statements giving `name`[], the sum of the 1-D `tensor` of `length` elements, in blocks of
    64 over 4 levels: a float32 sum of many terms run in one order drifts from the exact sum
    further than torch's cascade summation does. (Not in float64 through as_float: its derived
    gradient would stay float64.)"""
    lines, current, size = [], tensor, length
    for level in range(_LEVELS):
        blocks = f"{name}Blocks{level}"
        lines += [f"{blocks} = ({size} + {_BLOCK - 1}) / {_BLOCK};",
                  f"{name}{level}[b: {blocks}] = +({current}[{_BLOCK}*b + k]), k < {_BLOCK};"]
        current, size = f"{name}{level}", blocks
    return [*lines, f"{name}[] = +({current}[b]);"]


@lru_cache(maxsize=None)
def class_target_source(reduction: str, weighted: bool, ignore_index: int, label_smoothing: float,
                        dtype: str) -> str:
    """cross_entropy with class indices: X[R, C] logits of `dtype`, T[R, 1] int64 classes and, when
    `weighted`, W[1, C] class weights; the output is [R, 1] ('none') or a scalar of `dtype`."""
    inputs = "X[R, C], T[R, 1]" + (", W[1, C]" if weighted else "")
    smoothing = label_smoothing > 0.0
    lines = [_LOG_SOFTMAX,
             "Class = index(X, 1);",
             "Hit = Class == T;",
             f"Keep = T != {ignore_index};",
             "Picked = Hit ? X : 0;",  # the target's logit, then its log-probability: no [R, C] log-softmax
             "Target[r, 0: R, 1] = +(Picked[r, c]);",
             "LogP = Target - M - LogTotal;"]
    if weighted:
        lines += ["HitWeight = Hit ? W : 0;",
                  "TargetWeight[r, 0: R, 1] = +(HitWeight[r, c]);",
                  "Kept = Keep ? TargetWeight : 0;",
                  "Nll = Keep ? -(TargetWeight * LogP) : 0;"]
    else:
        to_float = "as_bfloat16(Keep)" if dtype == "bfloat16" else f"as_float(Keep, {dtype.removeprefix('float')})"
        lines += [f"Kept = {to_float};",
                  "Nll = Keep ? -LogP : 0;"]
    if smoothing:
        lines += ["L = Z - LogTotal;", "Weighted = W * L;" if weighted else "Weighted = L;",
                  "ClassSum[r, 0: R, 1] = +(Weighted[r, c]);",
                  "Smooth = Keep ? -ClassSum : 0;"]
    keep_share, smooth_share = _literal(1.0 - label_smoothing), f"({_literal(label_smoothing)} / C)"
    if reduction == "none":
        lines.append(f"O = {keep_share} * Nll + Smooth * {smooth_share};" if smoothing else "O = Nll;")
    else:
        lines += ["NllRows = reshape(Nll, R);", *_total("NllSum", "NllRows", "R")]
        if smoothing:
            lines += ["SmoothRows = reshape(Smooth, R);", *_total("SmoothSum", "SmoothRows", "R")]
        if reduction == "sum":
            lines.append(f"O = {keep_share} * NllSum + SmoothSum * {smooth_share};" if smoothing else "O = NllSum;")
        else:
            lines += ["KeptRows = reshape(Kept, R);", *_total("KeptSum", "KeptRows", "R")]
            lines.append(f"O = {keep_share} * (NllSum / KeptSum) + (SmoothSum / KeptSum) * {smooth_share};"
                         if smoothing else "O = NllSum / KeptSum;")
    body = "\n    ".join(lines)
    return f"function ({inputs}) -> (O) {{{body}\n}}"


@lru_cache(maxsize=None)
def probability_target_source(reduction: str, weighted: bool, label_smoothing: float) -> str:
    """cross_entropy with class probabilities: X[R, C] logits, P[R, C] targets and, when
    `weighted`, W[1, C]; the output is [R, 1] ('none') or a scalar."""
    inputs = "X[R, C], P[R, C]" + (", W[1, C]" if weighted else "")
    target = (f"P * {_literal(1.0 - label_smoothing)} + {_literal(label_smoothing)} / C"
              if label_smoothing > 0.0 else "P")
    lines = [_LOG_SOFTMAX, "L = Z - LogTotal;", f"Target = {target};", "Product = L * Target * W;" if weighted else "Product = L * Target;"]
    lines.append("ClassSum[r, 0: R, 1] = +(Product[r, c]);")
    if reduction == "none":
        lines.append("O = -ClassSum;")
    else:
        lines += ["Rows = reshape(ClassSum, R);", *_total("Sum", "Rows", "R")]
        lines.append("O = -Sum;" if reduction == "sum" else "O = -Sum / R;")
    body = "\n    ".join(lines)
    return f"function ({inputs}) -> (O) {{{body}\n}}"


def _class_rows(t: torch.Tensor) -> torch.Tensor:
    """[N, C, d1, ...] as rows [N * d1 * ..., C] (a view where the classes are innermost, as in
    channels_last; else one copy)."""
    return t.movedim(1, -1).reshape(-1, t.shape[1])


def _check_classes(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    counted = target[target != ignore_index]
    if counted.numel() and (int(counted.min()) < 0 or int(counted.max()) >= classes):
        bad = counted[(counted < 0) | (counted >= classes)][0]
        raise OpError(f"tilec.nn.functional.cross_entropy: target {int(bad)} is out of bounds for {classes} classes")


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,  # noqa: A002
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy (see the module docstring)."""
    input, target, weight = full_precision(input, target, weight)  # noqa: A001 (under torch.autocast)
    check_float("cross_entropy", "input", input)
    reduction = _reduction_of(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise OpError(f"tilec.nn.functional.cross_entropy: label_smoothing must be between 0.0 and 1.0, "
                      f"got {label_smoothing}")
    if input.dim() == 0:
        raise OpError("tilec.nn.functional.cross_entropy: 'input' must have at least one dimension (the classes)")
    batched = input.dim() >= 2
    logits = input if batched else input.unsqueeze(0)
    batch, classes = logits.shape[0], logits.shape[1]
    extra = tuple(logits.shape[2:])
    tensors = [_class_rows(logits)]
    weighted = weight is not None
    probabilities = target.is_floating_point()
    if probabilities:
        check_float("cross_entropy", "target", target)
        if target.shape != input.shape:
            raise OpError(f"tilec.nn.functional.cross_entropy: probability targets must have the input's shape "
                          f"{tuple(input.shape)}, got {tuple(target.shape)}")
        tensors.append(_class_rows(target if batched else target.unsqueeze(0)))
    else:
        if target.dtype != torch.int64:
            raise OpError(f"tilec.nn.functional.cross_entropy: class-index targets must be int64 (torch.long), "
                          f"got {target.dtype}")
        want = (batch, *extra) if batched else ()
        if tuple(target.shape) != want:
            raise OpError(f"tilec.nn.functional.cross_entropy: for input {tuple(input.shape)} the class-index "
                          f"target must have shape {want}, got {tuple(target.shape)}")
        _check_classes(target, classes, ignore_index)
        tensors.append(target.reshape(-1, 1))
    if weighted:
        assert weight is not None
        check_float("cross_entropy", "weight", weight)
        if weight.shape != (classes,) or weight.dtype != input.dtype:
            raise OpError(f"tilec.nn.functional.cross_entropy: 'weight' must be {input.dtype} of shape ({classes},) "
                          f"(one per class), got {weight.dtype} of shape {tuple(weight.shape)}")
        tensors.append(weight.detach().reshape(1, classes))  # torch gives the class weights no gradient
    if probabilities:
        source = probability_target_source(reduction, weighted, float(label_smoothing))
    else:
        source = class_target_source(reduction, weighted, int(ignore_index), float(label_smoothing),
                                     str(input.dtype).removeprefix("torch."))
    if reduction != "none":
        return run_program(source, tensors, ())
    out = run_program(source, tensors, (tensors[0].shape[0], 1))
    return out.reshape((batch, *extra) if batched else ())


@lru_cache(maxsize=None)
def squared_error_source(reduction: str, dims: tuple[str, ...], count: int, rows: int) -> str:
    """(X - T)^2 (times W where a third input is declared) with numpy broadcasting, unreduced,
    summed, or averaged over its `count` elements (over the weights' sum where weighted, as torch).
    `dims` declares the inputs (``X[B0, 1]`` ...: a broadcast dimension is the literal 1, the others
    name the broadcast shape's sizes B0, B1, ..., so the gradient program knows what to sum). A sum
    adds each of the `rows` rows along the last axis (fused with the squares), then the row sums in
    blocks (see `_total`)."""
    weighted = len(dims) == 3
    rank = max(len(d.split(", ")) for d in dims)
    inputs = ", ".join(f"{name}[{d}]" for name, d in zip("XTW", dims))
    lines = ["D = X - T;", "E = D * D * W;" if weighted else "E = D * D;"]
    if reduction == "none":
        lines[-1] = "O" + lines[-1][1:]
    else:
        every = ", ".join(f"i{k}" for k in range(rank))
        if rank == 1 or count == 0:
            lines.append(f"Sum[] = +(E[{every}]);")
        else:
            outer = ", ".join(f"i{k}" for k in range(rank - 1))
            sizes = ", ".join(f"B{k}" for k in range(rank - 1))
            lines += [f"RowSum[{outer}: {sizes}] = +(E[{every}]);", f"Rows = reshape(RowSum, {rows});",
                      *_total("Sum", "Rows", str(rows))]
        if reduction == "sum":
            lines.append("O = Sum;")
        elif weighted:
            weight_indices = ", ".join(f"j{k}" for k in range(len(dims[2].split(", "))))
            lines += [f"WeightSum[] = +(W[{weight_indices}]);", "O = Sum / WeightSum;"]
        else:
            lines.append(f"O = Sum / {count};")
    body = " ".join(lines)
    return f"function ({inputs}) -> (O) {{ {body} }}"


def _broadcast_dims(own: torch.Size, shape: tuple[int, ...]) -> str:
    """The Tile declaration of a tensor of shape `own` broadcast to `shape` (see squared_error_source)."""
    offset = len(shape) - len(own)
    return ", ".join("1" if size == 1 and shape[offset + k] != 1 else f"B{offset + k}" for k, size in enumerate(own))


def mse_loss(input: torch.Tensor, target: torch.Tensor, size_average: bool | None = None,  # noqa: A002
             reduce: bool | None = None, reduction: str = "mean", weight: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.mse_loss (see the module docstring); `weight` (the input's shape)
    multiplies each squared error, and the mean divides by the weights' sum, as torch's."""
    input, target, weight = full_precision(input, target, weight)  # noqa: A001 (under torch.autocast)
    check_float("mse_loss", "input", input)
    check_float("mse_loss", "target", target)
    if target.shape != input.shape:
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input size ({input.shape}). "
                      "This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", stacklevel=2)
    reduction = _reduction_of(size_average, reduce, reduction)
    tensors = [input, target]
    if weight is not None:
        check_float("mse_loss", "weight", weight)
        if weight.shape != input.shape:
            raise ValueError("Weights and input must have the same size.")
        tensors.append(weight)
    shape = tuple(torch.broadcast_shapes(input.shape, target.shape))
    dtype = torch.result_type(input, target)
    count = 1
    for size in shape:
        count *= size
    order = tuple(range(len(shape)))
    if all(t.shape == input.shape and t.stride() == input.stride() for t in tensors):
        _, order = physical(input)  # one layout for all: channels_last in, channels_last out
        tensors = [t.permute(order) for t in tensors]
    tensors = [t.reshape(1) if t.dim() == 0 else t for t in tensors]  # broadcasts as a 0-d tensor would
    dense_shape = tuple(shape[d] for d in order)
    dims = tuple(_broadcast_dims(t.shape, dense_shape or (1,)) for t in tensors)
    rows = count // dense_shape[-1] if dense_shape and dense_shape[-1] else 0
    source = squared_error_source(reduction, dims, count, rows)
    if reduction != "none":
        return run_program(source, tensors, (), dtype)
    out = run_program(source, tensors, dense_shape or (1,), dtype)
    return unpermute(out.reshape(dense_shape), order)


__all__ = ["cross_entropy", "mse_loss", "class_target_source", "probability_target_source", "squared_error_source"]
