"""Attention of tilec.nn.functional: scaled_dot_product_attention and multi_head_attention_forward.

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
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from tilec.nn.functional.layout import check_float, physical, unpermute
from tilec.ops import torch_ops
from tilec.ops.arguments import OpError
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


def _error(op: str, message: str) -> OpError:
    return OpError(f"tilec.nn.functional.{op}: {message}")


def _dropout_noise(shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """torch's CPU dropout keep-mask for an attention matrix of `shape`: one bernoulli_(1 - p) draw
    from the default generator (none for p = 1, where torch multiplies by zero)."""
    noise = like.new_empty(shape)
    return noise.zero_() if p == 1 else noise.bernoulli_(1 - p)


def _check_dropout(op: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise _error(op, f"dropout probability has to be between 0 and 1, but got {p}")


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
            raise _error(op, f"attn_mask of shape {tuple(mask.shape)} does not broadcast to the attention "
                             f"weights' shape {full}")
    if min(t.numel() for t in (q, k) + ((v,) if v is not None else ())) == 0:
        raise _error(op, f"empty tensors are not supported (query {tuple(q.shape)}, key {tuple(k.shape)})")

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
    out_shape = (*batch, L, v.shape[-1]) if v is not None else full
    return run_program(attention_source(layout, scale), wide, out_shape).to(q.dtype)


def _check_inputs(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_float(op, name, t)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise _error(op, f"query, key and value must all have dtype {query.dtype}, got {key.dtype} and {value.dtype}")


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
    op = "scaled_dot_product_attention"
    _check_inputs(op, query, key, value)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() < 2:
            raise _error(op, f"'{name}' must have rank at least 2, got shape {tuple(t.shape)}")
    if key.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2]:
        raise _error(op, f"key {tuple(key.shape)} must match query {tuple(query.shape)} in its last dim and value "
                         f"{tuple(value.shape)} in its sequence length")
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, query.dtype):
        raise _error(op, f"attn_mask has dtype {attn_mask.dtype}; expected bool or the query's {query.dtype}")
    if is_causal and attn_mask is not None:
        raise _error(op, "an explicit attn_mask should not be set when is_causal=True")
    _check_dropout(op, dropout_p)
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
            raise _error(op, f"empty tensors with a non-empty output are not supported (query {tuple(query.shape)}, "
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
            raise _error(op, f"enable_gqa: query's {heads} heads must be a multiple of key's and value's "
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


def _project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias by tilec's linear op (the tuned GEMM template); a view whose leading
    dims are permuted (batch_first's transpose) is projected in its memory order, without a copy."""
    dense, order = physical(x)
    if order[-1] == x.dim() - 1:
        return unpermute(torch_ops.linear(dense, weight, bias), order)
    return torch_ops.linear(x, weight, bias)


def _in_projection(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, in_proj_weight: torch.Tensor | None,
                   in_proj_bias: torch.Tensor | None, separate: tuple[torch.Tensor | None, ...] | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v projected as torch does: one GEMM for self-attention with the packed weight."""
    e = query.shape[-1]
    biases = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
    if separate is None:
        if in_proj_weight is None:
            raise _error("multi_head_attention_forward", "use_separate_proj_weight is False but in_proj_weight is None")
        if query is key and key is value:
            q, k, v = _project(query, in_proj_weight, in_proj_bias).unflatten(-1, (3, e)).unbind(-2)
            return q, k, v
        weights: tuple[torch.Tensor | None, ...] = tuple(in_proj_weight.chunk(3))
    else:
        weights = separate
    if any(w is None for w in weights):
        raise _error("multi_head_attention_forward", "use_separate_proj_weight is True but q_proj_weight, "
                                                     "k_proj_weight or v_proj_weight is None")
    q, k, v = (_project(x, w, b) for x, w, b in zip((query, key, value), weights, biases))  # type: ignore[arg-type]
    return q, k, v


def _pad_last(mask: torch.Tensor | None) -> torch.Tensor | None:
    """`mask` with one more key column that masks nothing (0, or False)."""
    if mask is None:
        return None
    return torch.cat([mask, mask.new_zeros((*mask.shape[:-1], 1))], dim=-1)


def _mask_kind(mask: torch.Tensor, dtype: torch.dtype, name: str) -> MaskKind:
    if mask.dtype == torch.bool:
        return "drop"
    if mask.dtype != dtype:
        raise _error("multi_head_attention_forward", f"{name} has dtype {mask.dtype}; bool and the query's {dtype} "
                                                     f"are supported")
    return "add"


def multi_head_attention_forward(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: torch.Tensor | None, in_proj_bias: torch.Tensor | None, bias_k: torch.Tensor | None,
        bias_v: torch.Tensor | None, add_zero_attn: bool, dropout_p: float, out_proj_weight: torch.Tensor,
        out_proj_bias: torch.Tensor | None, training: bool = True, key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True, attn_mask: torch.Tensor | None = None, use_separate_proj_weight: bool = False,
        q_proj_weight: torch.Tensor | None = None, k_proj_weight: torch.Tensor | None = None,
        v_proj_weight: torch.Tensor | None = None, static_k: torch.Tensor | None = None,
        static_v: torch.Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch.nn.functional.multi_head_attention_forward (see the module docstring): inputs [L, B, E]
    or unbatched [L, E]; masks bool (True = masked out) or float (added)."""
    op = "multi_head_attention_forward"
    _check_inputs(op, query, key, value)
    batched = query.dim() == 3
    if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
        raise _error(op, f"query, key and value must all be 3-D (batched) or 2-D (unbatched), got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if is_causal and attn_mask is None:
        raise _error(op, "is_causal=True needs attn_mask (torch.nn.Transformer.generate_square_subsequent_mask)")
    _check_dropout(op, dropout_p)
    if key_padding_mask is not None and attn_mask is not None and key_padding_mask.dtype != attn_mask.dtype:
        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for "
                      "both instead.", stacklevel=2)  # torch's warning, word for word
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    if embed_dim != embed_dim_to_check or embed_dim % num_heads:
        raise _error(op, f"embedding dimension {embed_dim} must be {embed_dim_to_check} and divisible by "
                         f"num_heads={num_heads}")
    head_dim = embed_dim // num_heads
    separate = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, in_proj_weight, in_proj_bias, separate)
    sdpa_causal = is_causal and key_padding_mask is None and not need_weights
    if sdpa_causal:
        attn_mask = None
    if attn_mask is not None:
        expected = (tgt_len, key.shape[0]) if attn_mask.dim() == 2 else (bsz * num_heads, tgt_len, key.shape[0])
        if attn_mask.dim() not in (2, 3) or tuple(attn_mask.shape) != expected:
            raise _error(op, f"attn_mask has shape {tuple(attn_mask.shape)}, expected {expected}")
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise _error(op, "bias_k and bias_v cannot be added to static_k and static_v")
        k = torch.cat([k, bias_k.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        v = torch.cat([v, bias_v.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise _error(op, "bias_k and bias_v must be given together")
    # [S, B, E] -> [B, H, S, hd]; static_k / static_v come as [B * H, S, hd]
    q = q.reshape(tgt_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    k = k.reshape(k.shape[0], bsz, num_heads, head_dim).permute(1, 2, 0, 3) if static_k is None else \
        static_k.reshape(bsz, num_heads, -1, head_dim)
    v = v.reshape(v.shape[0], bsz, num_heads, head_dim).permute(1, 2, 0, 3) if static_v is None else \
        static_v.reshape(bsz, num_heads, -1, head_dim)
    if add_zero_attn:
        k = torch.cat([k, k.new_zeros((bsz, num_heads, 1, head_dim))], dim=2)
        v = torch.cat([v, v.new_zeros((bsz, num_heads, 1, head_dim))], dim=2)
        attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
    src_len = k.shape[2]
    masks: list[tuple[MaskKind, torch.Tensor]] = []
    if attn_mask is not None:
        shaped = attn_mask.reshape(1, 1, tgt_len, src_len) if attn_mask.dim() == 2 else \
            attn_mask.reshape(bsz, num_heads, tgt_len, src_len)
        masks.append((_mask_kind(attn_mask, query.dtype, "attn_mask"), shaped))
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise _error(op, f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected {(bsz, src_len)}")
        masks.append((_mask_kind(key_padding_mask, query.dtype, "key_padding_mask"),
                      key_padding_mask.reshape(bsz, 1, 1, src_len)))
    p = dropout_p if training else 0.0
    scale = 1.0 / math.sqrt(head_dim)
    weights = None
    if need_weights:
        weights = attend(q, k, None, masks, False, p, scale, False, op)  # torch's plain softmax: NaN rows stay
        out = _batched_matmul(weights, v)
    elif masks or p:
        out = attend(q, k, v, masks, sdpa_causal, p, scale, True, op)
    else:
        out = torch_ops.attention(q, k, v, causal=sdpa_causal, scale=scale)
    out = _project(out.permute(2, 0, 1, 3).reshape(tgt_len * bsz, embed_dim), out_proj_weight, out_proj_bias)
    out = out.reshape(tgt_len, bsz, embed_dim)
    if weights is not None and average_attn_weights:
        weights = _head_mean(weights)
    if not batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights


@lru_cache(maxsize=None)
def _matmul_source() -> str:
    return "function (P[B, H, L, S], V[B, H, S, D]) -> (O) { O[b, h, l, d: B, H, L, D] = +(P[b, h, l, s] * V[b, h, s, d]); }"


def _batched_matmul(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return run_program(_matmul_source(), [p, v], (*p.shape[:3], v.shape[3]))


@lru_cache(maxsize=None)
def _head_mean_source(heads: int) -> str:
    return (f"function (W[B, H, L, S]) -> (A) {{ T[b, l, s: B, L, S] = +(W[b, h, l, s]); "
            f"A = T / {float(heads)!r}; }}")


def _head_mean(w: torch.Tensor) -> torch.Tensor:
    """The weights averaged over heads, as torch's mean(dim=1) (a sum, then a division)."""
    return run_program(_head_mean_source(w.shape[1]), [w], (w.shape[0], *w.shape[2:]))


__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward", "attention_source", "Layout"]
