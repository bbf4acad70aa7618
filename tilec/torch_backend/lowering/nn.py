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

import math
from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.lowering import argv, result, tile
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
    x = p.materialise(p.cast(p.tensor(argv(node)[0]), dtype))
    _float(x, "softmax")
    if 0 in x.shape:
        raise Unsupported("an empty softmax")
    dim = _dim(argv(node)[1], x.rank) if x.rank else 0
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
    g, y = p.cast(p.tensor(argv(node)[0]), dtype), p.cast(p.tensor(argv(node)[1]), dtype)
    dim = _dim(argv(node)[2], len(shape))
    gy = p.let(f"{p.elementwise(g)} * {p.elementwise(y)}", shape, dtype, g, y)
    s = reduce(p, gy, [dim], True, "+", dtype)
    return p.let(f"{gy.name} - {p.elementwise(y)} * {s.name}", shape, dtype, gy, y, s)


@tile(aten._log_softmax_backward_data.default)
def _log_softmax_backward(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    g, y = p.cast(p.tensor(argv(node)[0]), dtype), p.cast(p.tensor(argv(node)[1]), dtype)
    dim = _dim(argv(node)[2], len(shape))
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
    x = p.materialise(p.tensor(argv(node)[0]))
    _float(x, "layer_norm")
    k = len(argv(node)[1])
    weight, bias, eps = argv(node)[2], argv(node)[3], argv(node)[4]
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
    from tilec.torch_backend.lowering.layout import reshaped
    g, x = p.materialise(p.tensor(a["grad_out"])), p.materialise(p.tensor(a["input"]))
    cs = _channel_shape(x)
    mean = p.materialise(reshaped(p, p.tensor(a["save_mean"]), cs))
    rstd = p.materialise(reshaped(p, p.tensor(a["save_invstd"]), cs))
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
    tcol = p.materialise(reshaped(p, t, (x.shape[0], 1)))
    scale = p.elementwise(g) if reduction != 1 else f"{p.elementwise(g)} / {p.elementwise(total)}"
    if reduction == 0:
        gcol = p.materialise(reshaped(p, p.materialise(g), (x.shape[0], 1)))
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
    w, i = p.materialise(p.tensor(argv(node)[0])), p.materialise(p.tensor(argv(node)[1]))
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
    x = p.tensor(argv(node)[0])
    prob, train = float(argv(node)[1]), argv(node)[2]
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
    g, m = p.tensor(argv(node)[0]), p.tensor(argv(node)[1])
    scale = float(argv(node)[2])
    return p.let(f"{p.elementwise(g)} * as_float({p.elementwise(m)}, {torch.finfo(dtype).bits}) * {literal(scale)}",
                 shape, dtype, g, m)


# ---------------------------------------------------------------------------------------------- pooling


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
    shape, dtype = result(p, node)
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


# ---------------------------------------------------------------------------------------------- indexing


@tile(aten.gather.default)
def _gather(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(p, node)
    x, ind = p.materialise(p.tensor(a["self"])), p.materialise(p.tensor(a["index"]))
    if x.rank == 0 or x.rank != ind.rank:
        raise Unsupported("gather of a 0-d tensor")
    dim = _dim(a["dim"], x.rank)
    coord = p.fresh()
    p.statements.append(f"{coord} = index({x.name}, {dim});")
    idx = [f"i{d}" for d in range(x.rank)]
    read = list(idx)
    read[dim] = "c"
    return p.contract(idx, shape, f"+({ind.name}[{', '.join(idx)}] == {coord}[{', '.join(read)}] ? "
                                  f"{x.name}[{', '.join(read)}])", dtype)


@tile(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(p, node)
    args = [a for a in node.args]
    start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    n = shape[0]
    donor = p.generate((n,), torch.int8, lambda: torch.empty(n, dtype=torch.int8))
    count = p.fresh()
    p.statements.append(f"{count} = index({donor.name}, 0);")
    base = Value(count, shape, torch.int32)
    expr = count if step == 1 else f"{count} * {literal(step)}"
    expr = expr if start == 0 else f"{expr} + {literal(start)}"
    if dtype.is_floating_point:
        expr = f"as_float({count}, {torch.finfo(dtype).bits})" + (f" * {literal(step)}" if step != 1 else "") + \
            (f" + {literal(start)}" if start != 0 else "")
        return p.let(expr, shape, dtype, base)
    return p.cast(p.let(f"as_int({expr}, 64)", shape, torch.int64, base), dtype)


# ---------------------------------------------------------------------------------------------- attention


def _attention_scores(p: ProgramWriter, a: dict[str, Any], q: Value, k: Value) -> tuple[Value, float, list[str]]:
    """Z = scale * Q K^T (masked: -1e30 where torch's mask or causality excludes a key), and the batch
    index variables."""
    if q.rank < 3 or q.rank != k.rank or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise Unsupported("attention with query and key of different batch or head shapes")
    if float(a.get("dropout_p", 0.0)) != 0.0:
        raise Unsupported("attention with dropout")
    if 0 in q.shape or 0 in k.shape:
        raise Unsupported("attention over empty tensors")
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    batch = [f"b{d}" for d in range(q.rank - 2)]
    s_len, t_len = q.shape[-2], k.shape[-2]
    shape = (*q.shape[:-2], s_len, t_len)
    scores = p.contract([*batch, "s", "t"], shape,
                        f"+({p.access(q, [*batch, 's', 'd'])} * {p.access(k, [*batch, 't', 'd'])})", q.dtype)
    z = p.let(f"{scores.name} * {literal(scale)}", shape, q.dtype, scores)
    mask = a.get("attn_mask")
    if mask is not None:
        m = p.tensor(mask)
        if q.rank == 5 and m.rank >= 3:  # grouped heads: the mask's head axis splits as the query's did
            from tilec.torch_backend.lowering.layout import reshaped
            heads = m.shape[-3]
            split = (1, 1) if heads == 1 else (k.shape[-4], heads // k.shape[-4])
            m = reshaped(p, m, (*m.shape[:-3], *split, *m.shape[-2:]))
        if m.dtype == torch.bool:
            z = p.let(f"{p.elementwise(m)} ? {z.name} : -1e30", shape, q.dtype, m, z)
        else:
            m = p.cast(m, q.dtype)
            z = p.let(f"{z.name} + {p.elementwise(m)}", shape, q.dtype, m, z)
    if a.get("is_causal"):
        if mask is not None:
            raise Unsupported("attention with both a mask and is_causal")
        neg = p.let(literal(-1e30), (), q.dtype)
        z = p.contract([*batch, "s", "t"], shape, f">({z.name}[{', '.join(batch)}, s, t])", q.dtype,
                       f", s - t < {s_len} default {neg.name}")
    return z, scale, batch


def _groups(q: Value, k: Value) -> int:
    """How many query heads share a key head (grouped-query attention: q (B, G*H, S, D) against k
    (B, H, T, D)); 1 for ordinary attention."""
    if q.rank == 4 and k.rank == 4 and q.shape[0] == k.shape[0] and q.shape[1] != k.shape[1] \
            and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0:
        return q.shape[1] // k.shape[1]
    return 1


def _grouped(p: ProgramWriter, x: Value, groups: int, query_side: bool) -> Value:
    """(B, H*G, ...) query-side tensors as (B, H, G, ...) and key-side (B, H, ...) ones as
    (B, H, G, ...) broadcast over G: lazy views, so grouped attention is attention over 5-D tensors."""
    from tilec.torch_backend.lowering.layout import reshaped
    if groups == 1:
        return x
    if query_side:
        return reshaped(p, x, (x.shape[0], x.shape[1] // groups, groups, *x.shape[2:]))
    one = reshaped(p, x, (x.shape[0], x.shape[1], 1, *x.shape[2:]))
    return p.view(one, (x.shape[0], x.shape[1], groups, *x.shape[2:]), ["{0}", "{1}", "0", "{3}", "{4}"])


def _ungrouped(p: ProgramWriter, x: Value, groups: int, query_side: bool) -> Value:
    """The inverse of `_grouped` for results: query-side ones merge (H, G), key-side ones sum over G."""
    from tilec.torch_backend.lowering.layout import reshaped
    if groups == 1:
        return x
    if query_side:
        return reshaped(p, x, (x.shape[0], x.shape[1] * groups, *x.shape[3:]))
    return reduce(p, x, [2], False, "+", x.dtype)


@tile(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    a = arguments(node)
    q, k, v = (p.tensor(a[n]) for n in ("query", "key", "value"))
    _float(q, "attention")
    if not (q.dtype == k.dtype == v.dtype) or v.shape[:-1] != k.shape[:-1]:
        raise Unsupported("attention with mixed dtypes or a value not shaped like the key")
    groups = _groups(q, k)
    q, k, v = _grouped(p, q, groups, True), _grouped(p, k, groups, False), _grouped(p, v, groups, False)
    z, _, batch = _attention_scores(p, a, q, k)
    last = z.rank - 1
    m = reduce(p, z, [last], True, ">", q.dtype)
    e = p.let(f"exp({z.name} - {m.name})", z.shape, q.dtype, z, m)
    r = reduce(p, e, [last], True, "+", q.dtype)
    prob = p.let(f"{e.name} / {r.name}", z.shape, q.dtype, e, r)
    out_shape = (*q.shape[:-1], v.shape[-1])
    out = p.contract([*batch, "s", "e"], out_shape,
                     f"+({prob.name}[{', '.join(batch)}, s, t] * {p.access(v, [*batch, 't', 'e'])})", q.dtype)
    lse = p.let(f"{m.name} + log({r.name})", m.shape, q.dtype, m, r)
    from tilec.torch_backend.lowering.layout import reshaped
    return _ungrouped(p, out, groups, True), _ungrouped(p, reshaped(p, lse, q.shape[:-1]), groups, True)


@tile(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_backward(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value, Value]:
    a = arguments(node)
    q, k, v = (p.tensor(a[n]) for n in ("query", "key", "value"))
    go, o = p.tensor(a["grad_out"]), p.tensor(a["out"])
    _float(q, "attention")
    if not (q.dtype == k.dtype == v.dtype == go.dtype) or v.shape[:-1] != k.shape[:-1]:
        raise Unsupported("attention with mixed dtypes or a value not shaped like the key")
    groups = _groups(q, k)
    lse = p.tensor(a["logsumexp"])
    q, go, o, lse = (_grouped(p, t, groups, True) for t in (q, go, o, lse))
    k, v = _grouped(p, k, groups, False), _grouped(p, v, groups, False)
    go = p.materialise(go)
    z, scale, batch = _attention_scores(p, a, q, k)
    from tilec.torch_backend.lowering.layout import reshaped
    lse = p.materialise(reshaped(p, lse, (*q.shape[:-1], 1)))
    prob = p.let(f"exp({z.name} - {lse.name})", z.shape, q.dtype, z, lse)
    bi = ", ".join(batch)
    gv = p.contract([*batch, "t", "e"], v.shape, f"+({prob.name}[{bi}, s, t] * {go.name}[{bi}, s, e])", q.dtype)
    gp = p.contract([*batch, "s", "t"], z.shape, f"+({go.name}[{bi}, s, e] * {p.access(v, [*batch, 't', 'e'])})",
                    q.dtype)
    row = p.contract([*batch, "s", "0"], (*q.shape[:-1], 1),
                     f"+({go.name}[{bi}, s, e] * {p.access(o, [*batch, 's', 'e'])})", q.dtype)
    gs = p.let(f"{prob.name} * ({gp.name} - {row.name}) * {literal(scale)}", z.shape, q.dtype, prob, gp, row)
    gq = p.contract([*batch, "s", "d"], q.shape, f"+({gs.name}[{bi}, s, t] * {p.access(k, [*batch, 't', 'd'])})",
                    q.dtype)
    gk = p.contract([*batch, "t", "d"], k.shape, f"+({gs.name}[{bi}, s, t] * {p.access(q, [*batch, 's', 'd'])})",
                    q.dtype)
    return _ungrouped(p, gq, groups, True), _ungrouped(p, gk, groups, False), _ungrouped(p, gv, groups, False)
