"""NLL loss (+ backward) on (N, C) scores: the target's column picked by a ternary contraction; the
mean divides by the number of targets not equal to ignore_index, as ATen's does."""

from __future__ import annotations


import torch
import torch.fx as fx

from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.layout import reshaped
from tilec.torch_backend.lowering.reductions import reduce
from tilec.torch_backend.lowering.registry import result, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, convert

aten = torch.ops.aten


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
    valid = p.let(convert(f"{t.name} != {ignore} ? 1.0 : 0.0", x.dtype), t.shape, x.dtype, t)  # (float32 otherwise)
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
    shape, dtype = result(node)
    x, t = p.tensor(a["self"]), p.materialise(p.tensor(a["target"]))
    if x.rank != 2 or a.get("weight") is not None:
        raise Unsupported("nll_loss other than (N, C) input without class weights")
    g, total = p.tensor(a["grad_output"]), p.tensor(a["total_weight"])
    ignore, reduction = int(a["ignore_index"]), int(a["reduction"])
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
