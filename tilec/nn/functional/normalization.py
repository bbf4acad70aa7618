"""Normalisations of tilec.nn.functional: layer_norm, group_norm, batch_norm, rms_norm.

Each normalises its input over some axes with the statistics of those axes (mean and biased
variance; rms_norm the mean square only), then applies an optional elementwise weight and bias.
One Tile program per call computes the statistics and the result, so the gradient (derived from
that program) flows through the statistics as torch's does; batch_norm in evaluation mode uses the
running statistics instead, and in training updates them in place from gradient-free programs
(the op tilec::batch_norm_running_stats; the unbiased variance, as torch).

Requires: float32 or float64 tensors of one dtype on one device, with torch.nn.functional's
arguments. Guarantees: torch's output shape, dtype and memory format (layer_norm contiguous;
group_norm, batch_norm and rms_norm channels_last for a channels_last input, contiguous otherwise);
empty inputs give empty outputs that still carry gradients (zero) to the weight and bias;
arguments torch refuses raise torch's error type with a message naming them, and what tilec cannot
compute (another dtype, momentum=None given to the function) raises a TilecError naming it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import torch

from tilec.nn.functional.layout import check_float, unpermute
from tilec.ops import normalization as normalization_op
from tilec.ops.arguments import LOW_PRECISION, OpError, same_dtype
from tilec.ops.kernels import run_forward
from tilec.ops.program import run_program


def _literal_sum(eps: float) -> str:
    """`+ eps` as Tile text (a negative eps as a subtraction: the grammar has no signed literals)."""
    return f"+ {float(eps)!r}" if eps >= 0 else f"- {-float(eps)!r}"


@lru_cache(maxsize=None)
def normalize_source(rank: int, reduced: tuple[int, ...], param_axes: tuple[int, ...], eps: float,
                     center: bool, has_weight: bool, has_bias: bool) -> str:
    """X (rank `rank`) normalised over the axes `reduced`: with `center`,
    ``(X - mean) / sqrt(var + eps)`` (biased variance), else ``X / sqrt(mean(X^2) + eps)``; times W
    and plus Bt where present (both of X's rank, of X's size on `param_axes` and 1 elsewhere: one
    size symbol per extent, so that the derived gradient knows the broadcast)."""
    sizes = [f"D{d}" for d in range(rank)]
    index = ", ".join(f"i{d}" for d in range(rank))
    kept = ", ".join("0" if d in reduced else f"i{d}" for d in range(rank))
    kept_sizes = ", ".join("1" if d in reduced else sizes[d] for d in range(rank))
    count = " * ".join(sizes[d] for d in reduced) or "1"
    param_sizes = ", ".join(sizes[d] if d in param_axes else "1" for d in range(rank))
    params = [f"{name}[{param_sizes}]" for name, present in (("W", has_weight), ("Bt", has_bias)) if present]
    lines = []
    if center:
        lines += [f"S[{kept}: {kept_sizes}] = +(X[{index}]);",
                  f"Xc = X - S / ({count});"]
    else:
        lines += ["Xc = X;"]
    lines += [f"Q[{kept}: {kept_sizes}] = +(Xc[{index}] * Xc[{index}]);",
              f"R = 1.0 / sqrt(Q / ({count}) {_literal_sum(eps)});",
              "O = Xc * R" + (" * W" if has_weight else "") + (" + Bt" if has_bias else "") + ";"]
    body = "\n".join(f"    {line}" for line in lines)
    return f"function (X[{', '.join(sizes)}]{''.join(', ' + p for p in params)}) -> (O) {{\n{body}\n}}"


@lru_cache(maxsize=None)
def batch_norm_eval_source(eps: float, has_weight: bool, has_bias: bool) -> str:
    """X[A, C, B] normalised with given statistics M and V (each [1, C, 1]), then W and Bt (same shape)."""
    params = "".join(f", {name}[1, C, 1]" for name, present in (("W", has_weight), ("Bt", has_bias)) if present)
    out = "(X - M) * R" + (" * W" if has_weight else "") + (" + Bt" if has_bias else "")
    return (f"function (X[A, C, B], M[1, C, 1], V[1, C, 1]{params}) -> (O) {{\n"
            f"    R = 1.0 / sqrt(V {_literal_sum(eps)});\n"
            f"    O = {out};\n"
            f"}}")


@lru_cache(maxsize=None)
def running_stat_source(statistic: str) -> str:
    """One running statistic R[1, C, 1] ("mean" or "var") after the training batch X[A, C, B], by
    torch's rule with momentum Mo[1]: ``Mo * batch + (1 - Mo) * R``, the batch variance unbiased."""
    update = {"mean": "O = Mo * Mu + (1.0 - Mo) * R;",
              "var": "Xc = X - Mu;\n"
                     "    Q[0, c, 0: 1, C, 1] = +(Xc[a, c, b] * Xc[a, c, b]);\n"
                     "    O = Mo * (Q / (A * B - 1)) + (1.0 - Mo) * R;"}[statistic]
    return ("function (X[A, C, B], R[1, C, 1], Mo[1]) -> (O) {\n"
            "    S[0, c, 0: 1, C, 1] = +(X[a, c, b]);\n"
            "    Mu = S / (A * B);\n"
            f"    {update}\n"
            "}")


def _affine(op: str, x: torch.Tensor, shape: tuple[int, ...], **params: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The parameters, checked (x's device, each of `shape`: torch's requirement for weight and bias)
    and in x's dtype: float32 parameters of a 16-bit float input (autocast's mixed modules) are
    converted, as a differentiable cast, as torch's CPU kernels read them; the full checks run only
    to word the error."""
    converted: list[torch.Tensor | None] = []
    for name, t in params.items():
        if t is None:
            converted.append(None)
            continue
        if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and x.dtype in LOW_PRECISION and t.device == x.device:
            t = t.to(x.dtype)
        if not isinstance(t, torch.Tensor) or t.dtype != x.dtype or t.device != x.device:
            check_float(op, name, t)
            same_dtype(f"nn.functional.{op}", input=x, **{name: t})
        if tuple(t.shape) != shape:
            raise RuntimeError(f"tilec.nn.functional.{op}: '{name}' has shape {tuple(t.shape)}, expected {shape}")
        converted.append(t)
    return converted


def _normalized(op: str, x: torch.Tensor, normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(s) for s in normalized_shape)
    if not shape or x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise RuntimeError(f"tilec.nn.functional.{op}: normalized_shape={list(shape)} must be the last axes of "
                           f"the input (shape {tuple(x.shape)}) and not empty")
    return shape


def _channels_last_order(x: torch.Tensor, empty_keeps_strides: bool = False) -> tuple[int, ...] | None:
    """The axis order (0, 2, ..., 1) when torch gives its group_norm, batch_norm or rms_norm of x
    in channels_last: x is channels_last and not also contiguous (an empty x counts as contiguous,
    except with `empty_keeps_strides`: torch's batch_norm and rms_norm keep an empty input's
    strides); else None."""
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    if x.dim() not in formats or not x.is_contiguous(memory_format=formats[x.dim()]):
        return None
    if x.is_contiguous() and not (empty_keeps_strides and x.numel() == 0):
        return None
    return (0, *range(2, x.dim()), 1)


def layer_norm(input: torch.Tensor, normalized_shape: int | Sequence[int],  # noqa: A002 (torch's name)
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm: a contiguous result, as torch's. A non-empty input goes to
    the op tilec::layer_norm (tilec.ops.normalization: the tuned row-wise program
    sources.layer_norm_source over the flattened normalised axes, its eager path and its fake
    kernel for torch.compile); an empty one to the generic program, which gives the empty result
    and zero gradients for the weight and bias."""
    check_float("layer_norm", "input", input)
    shape = _normalized("layer_norm", input, normalized_shape)
    weight, bias = _affine("layer_norm", input, shape, weight=weight, bias=bias)
    if input.numel():
        return normalization_op.layer_norm(input, shape, weight, bias, float(eps))
    k = math.prod(shape)
    rows = input.reshape(math.prod(input.shape[:input.dim() - len(shape)]), k)
    params = [t.reshape(1, k) for t in (weight, bias) if t is not None]
    source = normalize_source(2, (1,), (1,), float(eps), True, weight is not None, bias is not None)
    return run_program(source, [rows, *params], rows.shape).reshape(input.shape)


def rms_norm(input: torch.Tensor, normalized_shape: int | Sequence[int],  # noqa: A002 (torch's name)
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm (eps None: the dtype's machine epsilon), in torch's memory
    format: channels_last for a channels_last input (the program runs on its memory order: rows
    when the normalised axes are innermost, as C, H, W are; else those axes wherever they lie),
    contiguous otherwise."""
    check_float("rms_norm", "input", input)
    shape = _normalized("rms_norm", input, normalized_shape)
    weight, = _affine("rms_norm", input, shape, weight=weight)
    eps = torch.finfo(input.dtype).eps if eps is None else float(eps)
    lead = input.dim() - len(shape)
    order = _channels_last_order(input, empty_keeps_strides=True)
    if order is None:
        dense, order = input.contiguous(), tuple(range(input.dim()))
    else:
        dense = input.permute(order)
    if order[:lead] == tuple(range(lead)):  # the normalised axes are the innermost: rows
        k = math.prod(shape)
        view = dense.reshape(math.prod(dense.shape[:lead]), k)
        params = [] if weight is None else [weight.permute([d - lead for d in order[lead:]]).reshape(1, k)]
        source = normalize_source(2, (1,), (1,), eps, False, weight is not None, False)
    else:
        view = dense
        axes = tuple(p for p, d in enumerate(order) if d >= lead)
        kept = [1 if d < lead else s for d, s in zip(order, dense.shape)]
        params = [] if weight is None else [weight.permute([order[p] - lead for p in axes]).reshape(kept)]
        source = normalize_source(dense.dim(), axes, axes, eps, False, weight is not None, False)
    return unpermute(run_program(source, [view, *params], view.shape).reshape(dense.shape), order)


def group_norm(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,  # noqa: A002
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.group_norm: the input viewed as [N, S, G, C/G, T] (S the spatial axes of a
    channels_last input, T those of any other, copied contiguous) normalised over S, C/G and T."""
    check_float("group_norm", "input", input)
    if input.dim() < 2:
        raise RuntimeError(f"tilec.nn.functional.group_norm: the input must have rank 2 or more (N, C, ...), "
                           f"got shape {tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    groups = int(num_groups)
    if groups <= 0 or c % groups:
        raise RuntimeError(f"tilec.nn.functional.group_norm: the {c} channels do not divide into "
                           f"num_groups={num_groups} groups")
    weight, bias = _affine("group_norm", input, (c,), weight=weight, bias=bias)
    spatial = math.prod(input.shape[2:])
    order = _channels_last_order(input)
    if order is None:
        dense, order = input.contiguous(), tuple(range(input.dim()))
        view = dense.reshape(n, 1, groups, c // groups, spatial)
    else:
        dense = input.permute(order)
        view = dense.reshape(n, spatial, groups, c // groups, 1)
    params = [t.reshape(1, 1, groups, c // groups, 1) for t in (weight, bias) if t is not None]
    source = normalize_source(5, (1, 3, 4), (2, 3), float(eps), True, weight is not None, bias is not None)
    return unpermute(run_program(source, [view, *params], view.shape).reshape(dense.shape), order)


def batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None,  # noqa: A002 (torch's name)
               running_var: torch.Tensor | None, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.batch_norm. The input is viewed as [A, C, B] (channel axis 1; a
    channels_last input as [N*H*W, C, 1], giving a channels_last result). Training normalises with
    the batch statistics and, where running statistics are given, updates them in place (torch's
    rule: ``momentum * batch + (1 - momentum) * running``, the variance unbiased; not for an empty
    batch); evaluation uses the running statistics."""
    check_float("batch_norm", "input", input)
    c = input.shape[1] if input.dim() > 1 else (input.shape[0] if input.dim() == 1 else 1)
    stats = _affine("batch_norm", input, (c,), running_mean=running_mean, running_var=running_var)
    weight, bias = _affine("batch_norm", input, (c,), weight=weight, bias=bias)
    batch, spatial = (input.shape[0], math.prod(input.shape[2:])) if input.dim() > 1 else (1, 1)
    if training:
        if input.dim() > 0 and input.shape[0] * math.prod(input.shape[2:]) == 1:  # torch's own test
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.size()}")
    elif running_mean is None or running_var is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    if input.dim() < 2 and input.numel():
        raise RuntimeError(f"tilec.nn.functional.batch_norm: the input must have rank 2 or more (N, C, ...), "
                           f"got shape {tuple(input.shape)}")
    order = _channels_last_order(input, empty_keeps_strides=True)
    if order is None:
        dense, order = input.contiguous(), tuple(range(input.dim()))
        view = dense.reshape(batch, c, spatial)
    else:
        dense = input.permute(order)
        view = dense.reshape(batch * spatial, c, 1)
    params = [t.reshape(1, c, 1) for t in (weight, bias) if t is not None]
    if training:
        if running_mean is not None and running_var is not None and view.numel():
            _update_running_stats(view, running_mean, running_var, momentum)
        source = normalize_source(3, (0, 2), (1,), float(eps), True, weight is not None, bias is not None)
        out = run_program(source, [view, *params], view.shape)
    else:
        mean, var = stats
        assert mean is not None and var is not None
        source = batch_norm_eval_source(float(eps), weight is not None, bias is not None)
        out = run_program(source, [view, mean.reshape(1, c, 1), var.reshape(1, c, 1), *params], view.shape)
    return unpermute(out.reshape(dense.shape), order)


@torch.library.custom_op("tilec::batch_norm_running_stats", mutates_args=())
def _running_stats(view: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                   momentum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The new running statistics ([1, C, 1] each) after the batch view[A, C, B]: an op of its own,
    so that torch.compile traces the update (its fake kernel gives the shapes); a one-output
    program per statistic, so that it runs wherever run_forward does."""
    return (run_forward(running_stat_source("mean"), view, mean, momentum),
            run_forward(running_stat_source("var"), view, var, momentum))


@_running_stats.register_fake
def _(view: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
      momentum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(mean), torch.empty_like(var)


def _update_running_stats(view: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                          momentum: float | None) -> None:
    if momentum is None:
        raise OpError("tilec.nn.functional.batch_norm: momentum=None is a module option (a cumulative average "
                      "over num_batches_tracked); give the functional a number")
    c = view.shape[1]
    factor = torch.full((1,), float(momentum), dtype=running_mean.dtype, device=view.device)
    batch = view.detach().to(running_mean.dtype)  # float32 statistics of a 16-bit batch, as torch keeps them
    mean, var = torch.ops.tilec.batch_norm_running_stats(batch, running_mean.detach().reshape(1, c, 1),
                                                         running_var.detach().reshape(1, c, 1), factor)
    with torch.no_grad():
        running_mean.copy_(mean.reshape(running_mean.shape))
        running_var.copy_(var.reshape(running_var.shape))


__all__ = ["layer_norm", "group_norm", "batch_norm", "rms_norm", "normalize_source"]
