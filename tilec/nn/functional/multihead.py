"""multi_head_attention_forward of tilec.nn.functional: torch's full signature (packed or separate
projection weights, bias_k/bias_v, add_zero_attn, static_k/static_v, key_padding_mask and
attn_mask bool or float, need_weights with or without averaging, dropout, is_causal, unbatched
inputs) on tilec's linear op for the projections and the attention program of
tilec.nn.functional.attention (see its docstring for masks, empty rows and dropout).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import torch

from tilec.nn.functional.attention import MaskKind, attend, attention_error, check_dropout, check_inputs
from tilec.nn.functional.layout import physical, unpermute
from tilec.nn.functional.linear import linear
from tilec.ops import torch_ops
from tilec.ops.program import run_program


def _project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ weight.T + bias by tilec.nn.functional.linear (the tuned GEMM template; empty tensors
    too); a view whose leading dims are permuted (batch_first's transpose) is projected in its
    memory order, without a copy."""
    dense, order = physical(x)
    if order[-1] == x.dim() - 1:
        return unpermute(linear(dense, weight, bias), order)
    return linear(x, weight, bias)


def _in_projection(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, in_proj_weight: torch.Tensor | None,
                   in_proj_bias: torch.Tensor | None, separate: tuple[torch.Tensor | None, ...] | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v projected as torch does: one GEMM for self-attention with the packed weight."""
    e = query.shape[-1]
    biases = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3)
    if separate is None:
        if in_proj_weight is None:
            raise attention_error("multi_head_attention_forward", "use_separate_proj_weight is False but in_proj_weight is None")
        if query is key and key is value:
            q, k, v = _project(query, in_proj_weight, in_proj_bias).unflatten(-1, (3, e)).unbind(-2)
            return q, k, v
        weights: tuple[torch.Tensor | None, ...] = tuple(in_proj_weight.chunk(3))
    else:
        weights = separate
    if any(w is None for w in weights):
        raise attention_error("multi_head_attention_forward", "use_separate_proj_weight is True but q_proj_weight, "
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
        raise attention_error("multi_head_attention_forward", f"{name} has dtype {mask.dtype}; bool and the query's {dtype} "
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
    check_inputs(op, query, key, value)
    batched = query.dim() == 3
    if query.dim() not in (2, 3) or key.dim() != query.dim() or value.dim() != query.dim():
        raise attention_error(op, f"query, key and value must all be 3-D (batched) or 2-D (unbatched), got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if is_causal and attn_mask is None:
        raise attention_error(op, "is_causal=True needs attn_mask (torch.nn.Transformer.generate_square_subsequent_mask)")
    check_dropout(op, dropout_p)
    if key_padding_mask is not None and attn_mask is not None and key_padding_mask.dtype != attn_mask.dtype:
        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for "
                      "both instead.", stacklevel=2)  # torch's warning, word for word
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    if embed_dim != embed_dim_to_check or embed_dim % num_heads:
        raise attention_error(op, f"embedding dimension {embed_dim} must be {embed_dim_to_check} and divisible by "
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
            raise attention_error(op, f"attn_mask has shape {tuple(attn_mask.shape)}, expected {expected}")
    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise attention_error(op, "bias_k and bias_v cannot be added to static_k and static_v")
        k = torch.cat([k, bias_k.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        v = torch.cat([v, bias_v.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        attn_mask, key_padding_mask = _pad_last(attn_mask), _pad_last(key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise attention_error(op, "bias_k and bias_v must be given together")
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
            raise attention_error(op, f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected {(bsz, src_len)}")
        masks.append((_mask_kind(key_padding_mask, query.dtype, "key_padding_mask"),
                      key_padding_mask.reshape(bsz, 1, 1, src_len)))
    p = dropout_p if training else 0.0
    scale = 1.0 / math.sqrt(head_dim)
    weights = None
    if need_weights:
        weights = attend(q, k, None, masks, False, p, scale, False, op)  # torch's plain softmax: NaN rows stay
        out = _batched_matmul(weights, v)
    elif masks or p or min(q.numel(), k.numel(), v.numel()) == 0:  # (the tuned kernel takes no empty tensor)
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


__all__ = ["multi_head_attention_forward"]
