"""Attention of tilec.nn.functional: scaled_dot_product_attention, and the attention program that
multi_head_attention_forward (tilec.nn.functional.multihead) shares.

Requires: float32 or float64 query, key and value of one dtype (masks bool or of that dtype).
Guarantees: torch.nn.functional's signatures, defaults, output shapes and semantics, computed by
Tile programs (gradients derived from the same programs):

- the plain case (no mask, no dropout, one batch shape) runs `tilec.ops.attention`, the tuned
  fused template; everything else runs one program built here (`attention_source`), which takes
  any leading batch dimensions, broadcasting (size-1 batch dims of q, k or v are read at index 0,
  masks broadcast elementwise), grouped-query heads (q viewed as [..., Hk, G, L, E] against k and
  v of [..., Hk, 1, S, E]), additive float masks, bool masks (True = take part for sdpa, True =
  masked out for multi-head attention, as torch), torch's top-left causal mask, and dropout;
- a row with no key left gives what torch gives: 0 in sdpa (its safe softmax, gradient 0), NaN in
  the attention weights of multi_head_attention_forward (need_weights=True uses a plain softmax);
- dropout draws its keep-mask from torch's default generator exactly as torch's CPU kernel does
  (``empty(attn.shape).bernoulli_(1 - p)`` once, after the projections; none for p = 1), and
  scales kept weights by 1/(1 - p): the same statistics as torch, and under one
  ``torch.manual_seed`` the same bits (the mask is an input of the program, so the gradient uses
  the same mask).

Empty tensors: sdpa gives torch's zeros (and zero gradients) where the output is empty or there is
no key; an empty head dim with a non-empty output, and empty inputs of multi_head_attention_forward
(its projections), raise a TilecError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from tilec.nn.functional.layout import check_float
from tilec.ops import torch_ops
from tilec.ops.arguments import OpError
from tilec.ops.autocast import lower_precision
from tilec.ops.program import run_program

MaskKind = str  # "add" (float, added), "keep" (bool, True takes part), "drop" (bool, True masked out)
LOWEST = "-1.7976931348623157e+308"  # float64's lowest: the programs compute in float64


@dataclass(frozen=True)
class Layout:
    """The static shape facts of one attention program: `rank` batch dims, which of them q, k and v
    broadcast (size 1 against a larger size), the masks' kinds and which of their rank + 2 dims
    broadcast, causal, dropout's keep probability (None: no dropout), safe softmax, and the output
    ("O" attention, "P" weights)."""
    rank: int
    q_broadcast: tuple[bool, ...]
    k_broadcast: tuple[bool, ...]
    v_broadcast: tuple[bool, ...]
    masks: tuple[tuple[MaskKind, tuple[bool, ...]], ...]
    causal: bool
    keep_prob: float | None
    safe: bool
    output: str


def _dims(name: str, broadcast: tuple[bool, ...], rows: str, cols: str) -> tuple[str, str]:
    """(declared sizes, access indices) of a q/k/v input: a broadcast batch dim has its own size
    symbol and is read at index 0."""
    sizes = [f"{name}1_{i}" if b else f"B{i}" for i, b in enumerate(broadcast)]
    index = ["0" if b else f"b{i}" for i, b in enumerate(broadcast)]
    return ", ".join([*sizes, rows, cols]), ", ".join(index)


@lru_cache(maxsize=None)
def attention_source(layout: Layout, scale: float) -> str:
    """The Tile program of softmax(scale * Q K^T + masks) [dropout] (V) for `layout`."""
    r = layout.rank
    batch = "".join(f"b{i}, " for i in range(r))
    sizes = "".join(f"B{i}, " for i in range(r))
    q_sizes, q_idx = _dims("Q", layout.q_broadcast, "L", "E")
    k_sizes, k_idx = _dims("K", layout.k_broadcast, "S", "E")
    sep = lambda idx: idx + ", " if idx else ""  # noqa: E731
    inputs = [f"Q[{q_sizes}]", f"K[{k_sizes}]"]
    if layout.output == "O":
        v_sizes, v_idx = _dims("V", layout.v_broadcast, "S", "DV")
        inputs.append(f"V[{v_sizes}]")
    lines = [f"Sc[{batch}l, s: {sizes}L, S] = +(Q[{sep(q_idx)}l, e] * K[{sep(k_idx)}s, e]);"]
    z = f"Sc * {float(scale)!r}"
    keeps = []
    full = [f"B{i}" for i in range(r)] + ["L", "S"]
    for j, (kind, broadcast) in enumerate(layout.masks):
        inputs.append(f"A{j}[{', '.join('1' if b else size for b, size in zip(broadcast, full))}]")
        if kind == "add":
            z = f"{z} + A{j}"
        else:
            keeps.append(f"A{j} != 0" if kind == "keep" else f"A{j} == 0")
    lines.append(f"Z = {z};")
    if layout.causal:
        lines += [f"Row = index(Z, {r});", f"Col = index(Z, {r + 1});"]
        keeps.append("Col <= Row")
    neg = LOWEST
    if keeps:
        lines.append(f"Keep = {' & '.join(f'({k})' for k in keeps)};")
        lines.append(f"Zk = Keep ? Z : {neg};")
    zk = "Zk" if keeps else "Z"
    lines.append(f"M[{batch}l, 0: {sizes}L, 1] = >({zk}[{batch}l, s]);")
    # the shift is floor(max): exp stays <= e, and floor's zero gradient keeps the max out of the
    # backward (the shift cancels in the softmax; routing its gradient to the argmax, as a max
    # would, adds a rounding-noise term that costs float32 gradients digits on sharp rows)
    if layout.safe:  # a row of -inf only: shift by 0 so that exp gives 0, not NaN
        lines.append(f"Ms = M < {neg} ? 0 : floor(M);")
    else:
        lines.append("Ms = floor(M);")
    lines.append(f"D = Keep ? Z - Ms : {neg};" if keeps else "D = Z - Ms;")
    lines += ["Ex = exp(D);", f"R[{batch}l, 0: {sizes}L, 1] = +(Ex[{batch}l, s]);"]
    if layout.safe:  # torch's safe softmax: a row with no key left gives 0 (and gradient 0)
        lines += ["Rs = R == 0 ? 1 : R;", "P = Ex / Rs;"]
    else:
        lines.append("P = Ex / R;")
    weights = "P"
    if layout.keep_prob is not None:
        inputs.append(f"Dn[{sizes}L, S]")
        noise = "Dn" if layout.keep_prob == 0 else f"Dn / {layout.keep_prob!r}"
        lines.append(f"Pd = P * ({noise});")
        weights = "Pd"
    if layout.output == "O":
        lines.append(f"O[{batch}l, d: {sizes}L, DV] = +({weights}[{batch}l, s] * V[{sep(v_idx)}s, d]);")
    else:
        lines.append(f"W = {weights};")
    out = "O" if layout.output == "O" else "W"
    body = "\n".join(f"    {line}" for line in lines)
    return f"function ({', '.join(inputs)}) -> ({out}) {{\n{body}\n}}"


def attention_error(op: str, message: str) -> OpError:
    return OpError(f"tilec.nn.functional.{op}: {message}")


def _dropout_noise(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """torch's CPU dropout keep-mask for an attention matrix of `shape`: one bernoulli_(1 - p) draw
    from the default generator (none for p = 1, where torch multiplies by zero)."""
    noise = like.new_empty(shape)
    return noise.zero_() if p == 1 else noise.bernoulli_(1 - p)


def check_dropout(op: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise attention_error(op, f"dropout probability has to be between 0 and 1, but got {p}")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, masks: list[tuple[MaskKind, torch.Tensor]],
           causal: bool, dropout_p: float, scale: float, safe: bool, op: str) -> torch.Tensor:
    """softmax(scale * q k^T + masks) [dropout] v (or, when `v` is None, the weights) on q, k, v
    of one rank R + 2 whose batch dims broadcast; each mask has rank R + 2 and broadcasts to the
    weights' shape [*batch, L, S]."""
    rank = q.dim() - 2
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], *([v.shape[:-2]] if v is not None else []))
    L, S = q.shape[-2], k.shape[-2]
    full = (*batch, L, S)
    for _, mask in masks:
        if torch.broadcast_shapes(mask.shape, full) != full:
            raise attention_error(op, f"attn_mask of shape {tuple(mask.shape)} does not broadcast to the attention "
                             f"weights' shape {full}")
    out_shape = (*batch, L, v.shape[-1]) if v is not None else full
    if min(t.numel() for t in (q, k) + ((v,) if v is not None else ())) == 0:
        if math.prod(out_shape) and not (safe and v is not None):
            raise attention_error(op, f"empty tensors with a non-empty result are not supported (query "
                                      f"{tuple(q.shape)}, key {tuple(k.shape)})")
        # an empty result, or sdpa's safe softmax over no key: zeros, and zero gradients
        floats = [t for t in (q, k, v, *(m for _, m in masks)) if t is not None and t.is_floating_point()]
        return _NothingToAttend.apply(out_shape, *floats)

    def flags(t: torch.Tensor, dims: tuple[int, ...] = tuple(batch)) -> tuple[bool, ...]:
        return tuple(t.shape[i] == 1 and dims[i] != 1 for i in range(len(dims)))

    keep_prob = None if dropout_p == 0 else 1.0 - dropout_p
    layout = Layout(rank, flags(q), flags(k), flags(v) if v is not None else (),
                    tuple((kind, flags(m, full)) for kind, m in masks), causal, keep_prob, safe,
                    "O" if v is not None else "P")
    tensors = [q, k] + ([v] if v is not None else []) + [m for _, m in masks]
    if keep_prob is not None:
        tensors.append(_dropout_noise(full, dropout_p, q))
    # Every input goes in as float64, bool masks as 0/1 (the eager path's gradient kernel takes
    # all inputs in the output's dtype: tilec/ops/eager.py, Node.grad). float32 attention computed
    # in float32 loses digits on sharp softmax rows (scores of ~100 in torch's samples) where
    # torch's own float32 kernels lose fewer; in float64, one rounding at the end remains.
    wide = [t.to(torch.float64) for t in tensors]
    return run_program(attention_source(layout, scale), wide, out_shape).to(q.dtype)


def check_inputs(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_float(op, name, t)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise attention_error(op, f"query, key and value must all have dtype {query.dtype}, got {key.dtype} and {value.dtype}")


class _NothingToAttend(torch.autograd.Function):
    """torch's attention where q, k or v is empty and the output is empty or has no key to attend
    to: zeros of the output's shape, and zero gradients (no kernel runs over nothing)."""

    @staticmethod
    def forward(ctx: Any, shape: tuple[int, ...], *tensors: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in tensors]
        return tensors[0].new_zeros(shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return (None, *(torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.inputs))


def _lead(t: torch.Tensor, rank: int) -> torch.Tensor:
    """t viewed with leading size-1 dims up to `rank`."""
    return t.reshape((1,) * (rank - t.dim()) + tuple(t.shape))


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention (see the module docstring)."""
    query, key, value, attn_mask = lower_precision(query, key, value, attn_mask)  # under torch.autocast
    op = "scaled_dot_product_attention"
    check_inputs(op, query, key, value)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise attention_error(op, f"'{name}' must have rank at least 2, got shape {tuple(t.shape)}")
    if key.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2]:
        raise attention_error(op, f"key {tuple(key.shape)} must match query {tuple(query.shape)} in its last dim and value "
                         f"{tuple(value.shape)} in its sequence length")
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, query.dtype):
        raise attention_error(op, f"attn_mask has dtype {attn_mask.dtype}; expected bool or the query's {query.dtype}")
    if is_causal and attn_mask is not None:
        raise attention_error(op, "an explicit attn_mask should not be set when is_causal=True")
    check_dropout(op, dropout_p)
    rank = max(query.dim(), key.dim(), value.dim())
    if attn_mask is not None:
        rank = max(rank, attn_mask.dim())
    q, k, v = (_lead(t, rank) for t in (query, key, value))
    heads = q.shape[-3] if rank > 2 else 1
    kv_heads = k.shape[-3] if rank > 2 else 1
    if min(t.numel() for t in (q, k, v)) == 0:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        shape = (*batch, q.shape[-2], v.shape[-1])[rank - max(query.dim(), key.dim(), value.dim()):]
        if math.prod(shape) and k.shape[-2]:
            raise attention_error(op, f"empty tensors with a non-empty output are not supported (query {tuple(query.shape)}, "
                             f"key {tuple(key.shape)}, value {tuple(value.shape)})")
        tensors = [t for t in (query, key, value, attn_mask) if t is not None and t.is_floating_point()]
        return _NothingToAttend.apply(shape, *tensors)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    plain = attn_mask is None and dropout_p == 0 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
    if plain:
        n = math.prod(q.shape[:-2])
        fq, fk, fv = (t.reshape(n, 1, *t.shape[-2:]) for t in (q, k, v))
        out = torch_ops.attention(fq, fk, fv, causal=is_causal, scale=factor)
        return out.reshape(*q.shape[:-1], v.shape[-1])
    masks = [] if attn_mask is None else [("keep" if attn_mask.dtype == torch.bool else "add", _lead(attn_mask, rank))]
    if enable_gqa and rank > 2 and heads != kv_heads:
        if heads % kv_heads or k.shape[-3] != v.shape[-3]:
            raise attention_error(op, f"enable_gqa: query's {heads} heads must be a multiple of key's and value's "
                             f"({k.shape[-3]}, {v.shape[-3]})")
        group = heads // kv_heads
        q = q.unflatten(-3, (kv_heads, group))
        k, v = k.unsqueeze(-3), v.unsqueeze(-3)
        masks = [(kind, m.unflatten(-3, (kv_heads, group)) if m.shape[-3] == heads else m.unsqueeze(-3))
                 for kind, m in masks]
        out = attend(q, k, v, masks, is_causal, dropout_p, factor, True, op).flatten(-4, -3)
    else:
        out = attend(q, k, v, masks, is_causal, dropout_p, factor, True, op)
    return out.reshape(out.shape[rank - max(query.dim(), key.dim(), value.dim()):])


__all__ = ["scaled_dot_product_attention", "attend", "attention_source", "attention_error", "check_dropout",
           "check_inputs", "Layout", "MaskKind"]
