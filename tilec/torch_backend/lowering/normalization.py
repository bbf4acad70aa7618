"""Softmax and log-softmax (+ backward), layer norm and batch norm in training (+ backward, running
statistics) as Tile statements, with ATen's CPU formulas: softmax shifts by the maximum; the norms
normalise with the biased variance and (batch norm) update the running variance with the unbiased
one."""

from __future__ import annotations

from typing import Any


import torch
import torch.fx as fx

from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.layout import reshaped
from tilec.torch_backend.lowering.reductions import count, reduce
from tilec.torch_backend.lowering.registry import argv, axis, require_float, result, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, literal

aten = torch.ops.aten


def softmax(p: ProgramWriter, x: Value, dim: int, log: bool) -> Value:
    m = reduce(p, x, [dim], True, ">", x.dtype)
    xn = p.elementwise(x)
    if log:
        e = p.let(f"exp({xn} - {m.name})", x.shape, x.dtype, x, m)
        s = reduce(p, e, [dim], True, "+", x.dtype)
        return p.let(f"{xn} - {m.name} - log({s.name})", x.shape, x.dtype, x, m, s)
    e = p.let(f"exp({xn} - {m.name})", x.shape, x.dtype, x, m)
    s = reduce(p, e, [dim], True, "+", x.dtype)
    return p.let(f"{e.name} / {s.name}", x.shape, x.dtype, e, s)


@tile(aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default)
def _softmax(p: ProgramWriter, node: fx.Node) -> Value:
    _, dtype = result(node)
    x = p.materialise(p.cast(p.tensor(argv(node)[0]), dtype))
    require_float(x, "softmax")
    if 0 in x.shape:
        raise Unsupported("an empty softmax")
    dim = axis(argv(node)[1], x.rank) if x.rank else 0
    if x.rank == 0:
        raise Unsupported("a 0-d softmax")
    out = softmax(p, x, dim, node.target == aten._log_softmax.default)
    if node.target == aten._safe_softmax.default:  # rows of -inf only give 0, not NaN
        m = reduce(p, x, [dim], True, ">", x.dtype)
        return p.let(f"{m.name} == {literal(float('-inf'))} ? 0.0 : {out.name}", x.shape, x.dtype, m, out)
    return out


@tile(aten._softmax_backward_data.default)
def _softmax_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    g, y = p.cast(p.tensor(argv(node)[0]), dtype), p.cast(p.tensor(argv(node)[1]), dtype)
    dim = axis(argv(node)[2], len(shape))
    gy = p.let(f"{p.elementwise(g)} * {p.elementwise(y)}", shape, dtype, g, y)
    s = reduce(p, gy, [dim], True, "+", dtype)
    return p.let(f"{gy.name} - {p.elementwise(y)} * {s.name}", shape, dtype, gy, y, s)


@tile(aten._log_softmax_backward_data.default)
def _log_softmax_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    g, y = p.cast(p.tensor(argv(node)[0]), dtype), p.cast(p.tensor(argv(node)[1]), dtype)
    dim = axis(argv(node)[2], len(shape))
    s = reduce(p, g, [dim], True, "+", dtype)
    return p.let(f"{p.elementwise(g)} - exp({p.elementwise(y)}) * {s.name}", shape, dtype, g, y, s)


# ---------------------------------------------------------------------------------------------- norms


def _moments(p: ProgramWriter, x: Value, dims: list[int]) -> tuple[Value, Value, int]:
    """mean and biased variance of x over `dims` (kept as size-1 axes), and the count."""
    n = count(x, dims)
    s = reduce(p, x, dims, True, "+", x.dtype)
    mean = p.let(f"{s.name} / {float(n)!r}", s.shape, x.dtype, s)
    xc = p.let(f"{p.elementwise(x)} - {mean.name}", x.shape, x.dtype, x, mean)
    q = reduce(p, p.let(f"{xc.name} * {xc.name}", x.shape, x.dtype, xc), dims, True, "+", x.dtype)
    var = p.let(f"{q.name} / {float(n)!r}", q.shape, x.dtype, q)
    return mean, var, n


@tile(aten.native_layer_norm.default)
def _layer_norm(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value, Value]:
    x = p.materialise(p.tensor(argv(node)[0]))
    require_float(x, "layer_norm")
    k = len(argv(node)[1])
    weight, bias, eps = argv(node)[2], argv(node)[3], argv(node)[4]
    dims = list(range(x.rank - k, x.rank))
    if 0 in x.shape:
        raise Unsupported("an empty layer_norm")
    mean, var, _ = _moments(p, x, dims)
    rstd = p.let(f"1.0 / sqrt({var.name} + {literal(float(eps))})", var.shape, x.dtype, var)
    expr = f"({x.name} - {mean.name}) * {rstd.name}"
    operands = [x, mean, rstd]
    if weight is not None:
        w = p.tensor(weight)
        expr += f" * {p.elementwise(w)}"
        operands.append(w)
    if bias is not None:
        b = p.tensor(bias)
        expr += f" + {p.elementwise(b)}"
        operands.append(b)
    out = p.let(expr, x.shape, x.dtype, *operands)
    return out, mean, rstd


@tile(aten.native_layer_norm_backward.default)
def _layer_norm_backward(p: ProgramWriter, node: fx.Node) -> tuple[Any, ...]:
    a = arguments(node)
    g, x = p.materialise(p.tensor(a["grad_out"])), p.materialise(p.tensor(a["input"]))
    mean, rstd = p.tensor(a["mean"]), p.tensor(a["rstd"])
    k = len(a["normalized_shape"])
    mask = a["output_mask"]
    dims = list(range(x.rank - k, x.rank))
    batch = list(range(x.rank - k))
    n = count(x, dims)
    xhat = p.let(f"({x.name} - {p.elementwise(mean)}) * {p.elementwise(rstd)}", x.shape, x.dtype, x, mean, rstd)
    weight = a["weight"]
    gw_expr = g.name
    ops = [g]
    if weight is not None:
        w = p.tensor(weight)
        gw_expr = f"{g.name} * {p.elementwise(w)}"
        ops.append(w)
    gxw = p.let(gw_expr, x.shape, x.dtype, *ops)
    outs: list[Any] = [None, None, None]
    if mask[0]:
        s1 = reduce(p, gxw, dims, True, "+", x.dtype)
        s2 = reduce(p, p.let(f"{gxw.name} * {xhat.name}", x.shape, x.dtype, gxw, xhat), dims, True, "+", x.dtype)
        outs[0] = p.let(f"{p.elementwise(rstd)} * ({gxw.name} - {s1.name} / {float(n)!r} - {xhat.name} * "
                        f"{s2.name} / {float(n)!r})", x.shape, x.dtype, rstd, gxw, s1, xhat, s2)
    # (no batch axes: the parameter gradients are the per-element terms; reduce() over no
    # axes would sum over all of them)
    if mask[1] and weight is not None:
        gwx = p.let(f"{g.name} * {xhat.name}", x.shape, x.dtype, g, xhat)
        outs[1] = reduce(p, gwx, batch, False, "+", x.dtype) if batch else gwx
    if mask[2] and a["bias"] is not None:
        outs[2] = reduce(p, g, batch, False, "+", x.dtype) if batch else g
    return tuple(outs)


def _channel_shape(x: Value) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.rank - 2)


@tile(aten._native_batch_norm_legit_functional.default)
def _batch_norm(p: ProgramWriter, node: fx.Node) -> tuple[Value, ...]:
    a = arguments(node)
    if not a["training"]:
        raise Unsupported("batch norm in eval mode")
    x = p.materialise(p.tensor(a["input"]))
    require_float(x, "batch_norm")
    dims = [0] + list(range(2, x.rank))
    mean, var, n = _moments(p, x, dims)
    eps, momentum = float(a["eps"]), float(a["momentum"])
    rstd = p.let(f"1.0 / sqrt({var.name} + {literal(eps)})", var.shape, x.dtype, var)
    expr, ops = f"({x.name} - {mean.name}) * {rstd.name}", [x, mean, rstd]
    c = (x.shape[1],)
    cs = _channel_shape(x)
    if a["weight"] is not None:
        w = p.materialise(reshaped(p, p.tensor(a["weight"]), cs))
        expr += f" * {w.name}"
        ops.append(w)
    if a["bias"] is not None:
        b = p.materialise(reshaped(p, p.tensor(a["bias"]), cs))
        expr += f" + {b.name}"
        ops.append(b)
    out = p.let(expr, x.shape, x.dtype, *ops)
    mean_c, rstd_c = p.materialise(reshaped(p, mean, c)), p.materialise(reshaped(p, rstd, c))
    var_c = p.materialise(reshaped(p, var, c))
    rm, rv = p.tensor(a["running_mean"]), p.tensor(a["running_var"])
    unbiased = n / (n - 1) if n > 1 else float("inf")
    new_rm = p.let(f"{rm.name} * {literal(1 - momentum)} + {mean_c.name} * {literal(momentum)}", c, rm.dtype,
                   rm, mean_c)
    new_rv = p.let(f"{rv.name} * {literal(1 - momentum)} + {var_c.name} * {literal(momentum * unbiased)}", c,
                   rv.dtype, rv, var_c)
    return out, mean_c, rstd_c, new_rm, new_rv


@tile(aten.native_batch_norm_backward.default)
def _batch_norm_backward(p: ProgramWriter, node: fx.Node) -> tuple[Any, ...]:
    a = arguments(node)
    if not a["train"]:
        raise Unsupported("batch norm backward in eval mode")
    g, x = p.materialise(p.tensor(a["grad_out"])), p.materialise(p.tensor(a["input"]))
    cs = _channel_shape(x)
    mean = p.materialise(reshaped(p, p.tensor(a["save_mean"]), cs))
    rstd = p.materialise(reshaped(p, p.tensor(a["save_invstd"]), cs))
    dims = [0] + list(range(2, x.rank))
    n = count(x, dims)
    xhat = p.let(f"({x.name} - {mean.name}) * {rstd.name}", x.shape, x.dtype, x, mean, rstd)
    gb = reduce(p, g, dims, True, "+", x.dtype)
    gw = reduce(p, p.let(f"{g.name} * {xhat.name}", x.shape, x.dtype, g, xhat), dims, True, "+", x.dtype)
    mask = a["output_mask"]
    outs: list[Any] = [None, None, None]
    c = (x.shape[1],)
    if mask[0]:
        scale = rstd.name
        ops = [rstd, g, gb, xhat, gw]
        if a["weight"] is not None:
            w = p.materialise(reshaped(p, p.tensor(a["weight"]), cs))
            scale = f"{rstd.name} * {w.name}"
            ops.append(w)
        outs[0] = p.let(f"{scale} * ({g.name} - {gb.name} / {float(n)!r} - {xhat.name} * {gw.name} / {float(n)!r})",
                        x.shape, x.dtype, *ops)
    if mask[1]:
        outs[1] = reshaped(p, gw, c)
    if mask[2]:
        outs[2] = reshaped(p, gb, c)
    return tuple(outs)
