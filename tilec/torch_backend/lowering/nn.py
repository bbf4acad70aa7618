"""Neural-network ATen ops written as Tile statements: softmax and log-softmax (+ backward), layer
norm and batch norm in training (+ backward, running statistics), NLL loss (+ backward),
embedding (+ dense backward), dropout (+ backward).

Formulas follow ATen's CPU kernels: softmax shifts by the row maximum; layer and batch norm use
the biased variance for normalising and (batch norm) the unbiased one for the running variance;
NLL's mean divides by the number of targets not equal to ignore_index. Dropout's mask comes from
torch's generator (`bernoulli_` on a tensor of the input's shape, as ATen's CPU dropout draws it),
so a compiled model draws the same masks as eager under one seed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.lowering import result, tile
from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.reductions import reduce
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, literal

aten = torch.ops.aten


def _float(v: Value, what: str) -> None:
    if not v.dtype.is_floating_point:
        raise Unsupported(f"{what} of {v.dtype}")


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


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
    _, dtype = result(p, node)
    x = p.materialise(p.cast(p.tensor(node.args[0]), dtype))
    _float(x, "softmax")
    if 0 in x.shape:
        raise Unsupported("an empty softmax")
    dim = _dim(node.args[1], x.rank) if x.rank else 0
    if x.rank == 0:
        raise Unsupported("a 0-d softmax")
    out = softmax(p, x, dim, node.target == aten._log_softmax.default)
    if node.target == aten._safe_softmax.default:  # rows of -inf only give 0, not NaN
        m = reduce(p, x, [dim], True, ">", x.dtype)
        return p.let(f"{m.name} == {literal(float('-inf'))} ? 0.0 : {out.name}", x.shape, x.dtype, m, out)
    return out


@tile(aten._softmax_backward_data.default)
def _softmax_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    g, y = p.cast(p.tensor(node.args[0]), dtype), p.cast(p.tensor(node.args[1]), dtype)
    dim = _dim(node.args[2], len(shape))
    gy = p.let(f"{p.elementwise(g)} * {p.elementwise(y)}", shape, dtype, g, y)
    s = reduce(p, gy, [dim], True, "+", dtype)
    return p.let(f"{gy.name} - {p.elementwise(y)} * {s.name}", shape, dtype, gy, y, s)


@tile(aten._log_softmax_backward_data.default)
def _log_softmax_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    g, y = p.cast(p.tensor(node.args[0]), dtype), p.cast(p.tensor(node.args[1]), dtype)
    dim = _dim(node.args[2], len(shape))
    s = reduce(p, g, [dim], True, "+", dtype)
    return p.let(f"{p.elementwise(g)} - exp({p.elementwise(y)}) * {s.name}", shape, dtype, g, y, s)


# ---------------------------------------------------------------------------------------------- norms


def _moments(p: ProgramWriter, x: Value, dims: list[int], keep: bool) -> tuple[Value, Value, int]:
    """mean and biased variance of x over `dims` (kept as size-1 axes when `keep`), and the count."""
    n = 1
    for d in dims:
        n *= x.shape[d]
    s = reduce(p, x, dims, True, "+", x.dtype)
    mean = p.let(f"{s.name} / {float(n)!r}", s.shape, x.dtype, s)
    xc = p.let(f"{p.elementwise(x)} - {mean.name}", x.shape, x.dtype, x, mean)
    q = reduce(p, p.let(f"{xc.name} * {xc.name}", x.shape, x.dtype, xc), dims, True, "+", x.dtype)
    var = p.let(f"{q.name} / {float(n)!r}", q.shape, x.dtype, q)
    return mean, var, n


@tile(aten.native_layer_norm.default)
def _layer_norm(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value, Value]:
    x = p.materialise(p.tensor(node.args[0]))
    _float(x, "layer_norm")
    k = len(node.args[1])
    weight, bias, eps = node.args[2], node.args[3], node.args[4]
    dims = list(range(x.rank - k, x.rank))
    if 0 in x.shape:
        raise Unsupported("an empty layer_norm")
    mean, var, _ = _moments(p, x, dims, True)
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
    n = 1
    for d in dims:
        n *= x.shape[d]
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
    _float(x, "batch_norm")
    dims = [0] + list(range(2, x.rank))
    mean, var, n = _moments(p, x, dims, True)
    eps, momentum = float(a["eps"]), float(a["momentum"])
    rstd = p.let(f"1.0 / sqrt({var.name} + {literal(eps)})", var.shape, x.dtype, var)
    expr, ops = f"({x.name} - {mean.name}) * {rstd.name}", [x, mean, rstd]
    c = (x.shape[1],)
    cs = _channel_shape(x)
    from tilec.torch_backend.lowering.layout import reshaped
    if a["weight"] is not None:
        w = reshaped(p, p.tensor(a["weight"]), cs)
        expr += f" * {w.name}"
        ops.append(w)
    if a["bias"] is not None:
        b = reshaped(p, p.tensor(a["bias"]), cs)
        expr += f" + {b.name}"
        ops.append(b)
    out = p.let(expr, x.shape, x.dtype, *ops)
    mean_c, rstd_c = reshaped(p, mean, c), reshaped(p, rstd, c)
    var_c = reshaped(p, var, c)
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
    from tilec.torch_backend.lowering.layout import reshaped
    g, x = p.materialise(p.tensor(a["grad_out"])), p.materialise(p.tensor(a["input"]))
    cs = _channel_shape(x)
    mean = reshaped(p, p.tensor(a["save_mean"]), cs)
    rstd = reshaped(p, p.tensor(a["save_invstd"]), cs)
    dims = [0] + list(range(2, x.rank))
    n = 1
    for d in dims:
        n *= x.shape[d]
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
            w = reshaped(p, p.tensor(a["weight"]), cs)
            scale = f"{rstd.name} * {w.name}"
            ops.append(w)
        outs[0] = p.let(f"{scale} * ({g.name} - {gb.name} / {float(n)!r} - {xhat.name} * {gw.name} / {float(n)!r})",
                        x.shape, x.dtype, *ops)
    if mask[1]:
        outs[1] = reshaped(p, gw, c)
    if mask[2]:
        outs[2] = reshaped(p, gb, c)
    return tuple(outs)


# ---------------------------------------------------------------------------------------------- losses


@tile(aten.nll_loss_forward.default)
def _nll_loss(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    a = arguments(node)
    x, t = p.materialise(p.tensor(a["self"])), p.materialise(p.tensor(a["target"]))
    if x.rank != 2 or a.get("weight") is not None:
        raise Unsupported("nll_loss other than (N, C) input without class weights")
    ignore, reduction = int(a["ignore_index"]), int(a["reduction"])
    idx = p.fresh()
    p.statements.append(f"{idx} = index({x.name}, 1);")
    picked = p.contract(["n"], (x.shape[0],), f"+({t.name}[n] == {idx}[n, c] ? {x.name}[n, c])", x.dtype)
    valid = p.let(f"{t.name} != {ignore} ? 1.0 : 0.0", t.shape, x.dtype, t)
    terms = p.let(f"-{picked.name} * {valid.name}", t.shape, x.dtype, picked, valid)
    total = reduce(p, valid, [], False, "+", x.dtype)
    if reduction == 0:
        return terms, total
    s = reduce(p, terms, [], False, "+", x.dtype)
    if reduction == 2:
        return s, total
    return p.let(f"{s.name} / {total.name}", (), x.dtype, s, total), total


@tile(aten.nll_loss_backward.default)
def _nll_loss_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(p, node)
    x, t = p.tensor(a["self"]), p.materialise(p.tensor(a["target"]))
    if x.rank != 2 or a.get("weight") is not None:
        raise Unsupported("nll_loss other than (N, C) input without class weights")
    g, total = p.tensor(a["grad_output"]), p.tensor(a["total_weight"])
    ignore, reduction = int(a["ignore_index"]), int(a["reduction"])
    from tilec.torch_backend.lowering.layout import reshaped
    idx = p.fresh()
    xs = p.materialise(x)
    p.statements.append(f"{idx} = index({xs.name}, 1);")
    tcol = reshaped(p, t, (x.shape[0], 1))
    scale = p.elementwise(g) if reduction != 1 else f"{p.elementwise(g)} / {p.elementwise(total)}"
    if reduction == 0:
        gcol = reshaped(p, p.materialise(g), (x.shape[0], 1))
        scale = gcol.name
        ops = [tcol, gcol]
    else:
        ops = [tcol, g, total]
    hit = f"{idx} == {tcol.name} & {tcol.name} != {ignore}"
    return p.let(f"({hit}) ? -({scale}) : 0.0", shape, dtype, xs, *ops)


# ---------------------------------------------------------------------------------------------- embedding, dropout


@tile(aten.embedding.default)
def _embedding(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    w, i = p.materialise(p.tensor(node.args[0])), p.materialise(p.tensor(node.args[1]))
    if w.rank != 2:
        raise Unsupported("embedding with a weight of rank other than 2")
    v = p.fresh()
    p.statements.append(f"{v} = gather({w.name}, {i.name});")
    return Value(v, shape, dtype)


@tile(aten.embedding_dense_backward.default)
def _embedding_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(p, node)
    if a["scale_grad_by_freq"]:
        raise Unsupported("embedding backward with scale_grad_by_freq")
    g, i = p.materialise(p.tensor(a["grad_output"])), p.materialise(p.tensor(a["indices"]))
    rows = int(a["num_weights"])
    donor = p.generate((rows,), torch.int8, lambda: torch.empty(rows, dtype=torch.int8))
    s = p.fresh()
    p.statements.append(f"{s} = scatter({g.name}, {i.name}, {donor.name});")
    out = Value(s, shape, dtype)
    pad = int(a["padding_idx"])
    if 0 <= pad < rows:
        r = p.fresh()
        p.statements.append(f"{r} = index({s}, 0);")
        return p.let(f"{r} == {pad} ? 0.0 : {s}", shape, dtype, out)
    return out


@tile(aten.native_dropout.default)
def _dropout(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    x = p.tensor(node.args[0])
    prob, train = float(node.args[1]), node.args[2]
    _float(x, "dropout")
    if not train or prob == 0.0:
        ones = p.let("as_bool(1)", x.shape, torch.bool)
        return x, ones
    keep = 1.0 - prob
    scale = 1.0 / keep if keep > 0 else 0.0
    shape, dtype = x.shape, x.dtype
    mask = p.generate(shape, dtype, lambda: torch.empty(shape, dtype=dtype).bernoulli_(keep))
    out = p.let(f"{p.elementwise(x)} * {mask.name} * {literal(scale)}", shape, dtype, x, mask)
    return out, p.let(f"as_bool({mask.name})", shape, torch.bool, mask)


@tile(aten.native_dropout_backward.default)
def _dropout_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    g, m = p.tensor(node.args[0]), p.tensor(node.args[1])
    scale = float(node.args[2])
    return p.let(f"{p.elementwise(g)} * as_float({p.elementwise(m)}, {torch.finfo(dtype).bits}) * {literal(scale)}",
                 shape, dtype, g, m)
