"""Embedding (+ dense backward: a scatter), gather along an axis, and arange as Tile statements."""

from __future__ import annotations


import torch
import torch.fx as fx

from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.registry import argv, axis, result, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, convert, literal

aten = torch.ops.aten


@tile(aten.embedding.default)
def _embedding(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    w, i = p.materialise(p.tensor(argv(node)[0])), p.materialise(p.tensor(argv(node)[1]))
    if w.rank != 2:
        raise Unsupported("embedding with a weight of rank other than 2")
    v = p.fresh()
    p.statements.append(f"{v} = gather({w.name}, {i.name});")
    return Value(v, shape, dtype)


@tile(aten.embedding_dense_backward.default)
def _embedding_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
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


@tile(aten.gather.default)
def _gather(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    x, ind = p.materialise(p.tensor(a["self"])), p.materialise(p.tensor(a["index"]))
    if x.rank == 0 or x.rank != ind.rank:
        raise Unsupported("gather of a 0-d tensor")
    dim = axis(a["dim"], x.rank)
    coord = p.fresh()
    p.statements.append(f"{coord} = index({x.name}, {dim});")
    idx = [f"i{d}" for d in range(x.rank)]
    read = list(idx)
    read[dim] = "c"
    return p.contract(idx, shape, f"+({ind.name}[{', '.join(idx)}] == {coord}[{', '.join(read)}] ? "
                                  f"{x.name}[{', '.join(read)}])", dtype)


@tile(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
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
        expr = convert(count, dtype) + (f" * {literal(step)}" if step != 1 else "") + \
            (f" + {literal(start)}" if start != 0 else "")
        return p.let(expr, shape, dtype, base)
    return p.cast(p.let(f"as_int({expr}, 64)", shape, torch.int64, base), dtype)
