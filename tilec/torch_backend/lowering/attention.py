"""scaled_dot_product_attention's CPU flash op (+ backward) as Tile statements: scores, masks
(boolean, additive, causal), the softmax, the output and torch's logsumexp (which torch's own
backward reads, so either side may run without the other; the backward here reads it too, not
the forward's output); grouped-query attention as attention over lazy 5-D views."""

from __future__ import annotations

import math
from typing import Any


import torch
import torch.fx as fx

from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.lowering.layout import reshaped
from tilec.torch_backend.lowering.reductions import reduce
from tilec.torch_backend.lowering.registry import require_float, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, convert, literal

aten = torch.ops.aten


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
    if groups == 1:
        return x
    if query_side:
        return reshaped(p, x, (x.shape[0], x.shape[1] // groups, groups, *x.shape[2:]))
    one = reshaped(p, x, (x.shape[0], x.shape[1], 1, *x.shape[2:]))
    return p.view(one, (x.shape[0], x.shape[1], groups, *x.shape[2:]), ["{0}", "{1}", "0", "{3}", "{4}"])


def _ungrouped(p: ProgramWriter, x: Value, groups: int, query_side: bool) -> Value:
    """The inverse of `_grouped` for results: query-side ones merge (H, G), key-side ones sum over G."""
    if groups == 1:
        return x
    if query_side:
        return reshaped(p, x, (x.shape[0], x.shape[1] * groups, *x.shape[3:]))
    return reduce(p, x, [2], False, "+", x.dtype)


@tile(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value]:
    a = arguments(node)
    q, k, v = (p.tensor(a[n]) for n in ("query", "key", "value"))
    require_float(q, "attention")
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
    # torch's logsumexp is float32 whatever q's type (rounded to bfloat16, its error would grow
    # through the gradient's exp into whole units of the probabilities' last place)
    lse_dtype = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
    lse = p.cast(p.let(f"{m.name} + log({r.name})", m.shape, q.dtype, m, r), lse_dtype)
    return _ungrouped(p, out, groups, True), _ungrouped(p, reshaped(p, lse, q.shape[:-1]), groups, True)


@tile(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _sdpa_backward(p: ProgramWriter, node: fx.Node) -> tuple[Value, Value, Value]:
    a = arguments(node)
    q, k, v = (p.tensor(a[n]) for n in ("query", "key", "value"))
    go = p.tensor(a["grad_out"])
    require_float(q, "attention")
    if not (q.dtype == k.dtype == v.dtype == go.dtype) or v.shape[:-1] != k.shape[:-1]:
        raise Unsupported("attention with mixed dtypes or a value not shaped like the key")
    groups = _groups(q, k)
    lse = p.tensor(a["logsumexp"])
    q, go, lse = (_grouped(p, t, groups, True) for t in (q, go, lse))
    k, v = _grouped(p, k, groups, False), _grouped(p, v, groups, False)
    go = p.materialise(go)
    z, scale, batch = _attention_scores(p, a, q, k)
    lse = p.materialise(reshaped(p, lse, (*q.shape[:-1], 1)))
    # the softmax shifted by the forward's logsumexp, not by the maximum, and normalised by its own sum
    # (about 1): the gradient must not see the logsumexp's rounding (see `row`)
    exp = f"exp({z.name} - {lse.name})"
    e = p.let(exp if lse.dtype == q.dtype else convert(exp, q.dtype), z.shape, q.dtype, z, lse)  # (lse: float32)
    total = reduce(p, e, [z.rank - 1], True, "+", q.dtype)
    prob = p.let(f"{e.name} / {total.name}", z.shape, q.dtype, e, total)
    bi = ", ".join(batch)
    gv = p.contract([*batch, "t", "e"], v.shape, f"+({prob.name}[{bi}, s, t] * {go.name}[{bi}, s, e])", q.dtype)
    gp = p.contract([*batch, "s", "t"], z.shape, f"+({go.name}[{bi}, s, e] * {p.access(v, [*batch, 't', 'e'])})",
                    q.dtype)
    # Delta = rowsum(P dP), as tilec.grad derives it, not torch's rowsum(dO out): a 16-bit out is
    # rounded, and where dP is close to Delta that rounding is all dS keeps (the fused template,
    # tilec.schedule.cpu.attention_backward, sums P dP in float32 from the scores it recomputes)
    row = p.contract([*batch, "s", "0"], (*q.shape[:-1], 1), f"+({prob.name}[{bi}, s, t] * {gp.name}[{bi}, s, t])",
                     q.dtype)
    gs = p.let(f"{prob.name} * ({gp.name} - {row.name}) * {literal(scale)}", z.shape, q.dtype, prob, gp, row)
    gq = p.contract([*batch, "s", "d"], q.shape, f"+({gs.name}[{bi}, s, t] * {p.access(k, [*batch, 't', 'd'])})",
                    q.dtype)
    gk = p.contract([*batch, "t", "d"], k.shape, f"+({gs.name}[{bi}, s, t] * {p.access(q, [*batch, 's', 'd'])})",
                    q.dtype)
    return _ungrouped(p, gq, groups, True), _ungrouped(p, gk, groups, False), _ungrouped(p, gv, groups, False)
