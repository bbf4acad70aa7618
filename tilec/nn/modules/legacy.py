"""torch.nn modules whose forward runs tilec kernels (the ops of tilec/ops/torch_ops.py).

Each module subclasses its torch.nn counterpart, so it takes the same constructor arguments, is
initialised the same way and holds its parameters under the same names: `load_state_dict` moves
weights between the two and a model swaps them in unchanged. Only the forward differs; options
the tilec ops do not support yet are refused with a `tilec.TilecError` at construction or call.

This module imports torch; `import tilec` does not import it.
"""

from __future__ import annotations

from typing import Any

import torch

from tilec.ops import torch_ops
from tilec.ops.torch_ops import OpError

__all__ = ["Conv2d", "Linear", "LayerNorm", "ReLU", "GELU", "Softmax", "MultiheadAttention"]


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d on tilec's conv2d (padding_mode="zeros", integer padding; any groups)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.padding_mode != "zeros":
            raise OpError(f"tilec.nn.Conv2d: padding_mode={self.padding_mode!r} is not supported; only 'zeros'")
        if isinstance(self.padding, str):
            raise OpError(f"tilec.nn.Conv2d: padding={self.padding!r} is not supported; give integers")

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return torch_ops.conv2d(input, self.weight, self.bias, self.stride, self.padding,  # type: ignore[arg-type]
                                self.dilation, self.groups)


class Linear(torch.nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return torch_ops.linear(input, self.weight, self.bias)


class LayerNorm(torch.nn.LayerNorm):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return torch_ops.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class ReLU(torch.nn.ReLU):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return torch_ops.relu(input)


class GELU(torch.nn.GELU):
    """The exact (erf) GELU; approximate="tanh" is refused."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate != "none":
            raise OpError(f"tilec.nn.GELU: approximate={approximate!r} is not supported; only 'none'")
        super().__init__(approximate)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return torch_ops.gelu(input)


class Softmax(torch.nn.Softmax):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return torch_ops.softmax(input, -1 if self.dim is None else self.dim)


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention (same arguments, defaults and parameter names: in_proj_weight,
    in_proj_bias, out_proj.weight, out_proj.bias) on tilec's linear and attention ops.

    Not supported: dropout > 0, add_bias_kv, add_zero_attn, kdim/vdim != embed_dim,
    need_weights=True, key_padding_mask, and an attn_mask other than the causal one (pass
    is_causal=True, with or without the mask)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.dropout != 0.0:
            raise OpError(f"tilec.nn.MultiheadAttention: dropout={self.dropout} is not supported; only 0.0")
        if self.bias_k is not None or self.add_zero_attn:
            raise OpError("tilec.nn.MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        if not self._qkv_same_embed_dim:
            raise OpError("tilec.nn.MultiheadAttention: kdim/vdim different from embed_dim are not supported")

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # type: ignore[override]
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = False,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, None]:
        if need_weights:
            raise OpError("tilec.nn.MultiheadAttention: need_weights=True is not supported; pass need_weights=False")
        if key_padding_mask is not None:
            raise OpError("tilec.nn.MultiheadAttention: key_padding_mask is not supported")
        if attn_mask is not None and not is_causal:
            raise OpError("tilec.nn.MultiheadAttention: only the causal attn_mask is supported; pass is_causal=True")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3:
                raise OpError(f"tilec.nn.MultiheadAttention: '{name}' must have rank 3 (batched), got shape "
                              f"{tuple(t.shape)}")
        packed = query is key and key is value  # self-attention: one projection (and gradient) for q, k, v
        if not self.batch_first:  # [S, B, E] -> [B, S, E]
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        e, h = self.embed_dim, self.num_heads
        w = self.in_proj_weight
        b = self.in_proj_bias
        if packed:
            qkv = torch_ops.linear(query, w, b)  # [B, S, 3E] -> 3 x [B, H, S, E/H]
            q, k, v = qkv.reshape(query.shape[0], query.shape[1], 3, h, e // h).permute(2, 0, 3, 1, 4).unbind(0)
        else:
            bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])

            def heads(t: torch.Tensor) -> torch.Tensor:  # [B, S, E] -> [B, H, S, E/H]
                return t.reshape(t.shape[0], t.shape[1], h, e // h).transpose(1, 2)

            q = heads(torch_ops.linear(query, w[:e], bq))
            k = heads(torch_ops.linear(key, w[e:2 * e], bk))
            v = heads(torch_ops.linear(value, w[2 * e:], bv))

        o = torch_ops.attention(q, k, v, causal=is_causal)
        o = o.transpose(1, 2).reshape(query.shape[0], query.shape[1], e)
        out = torch_ops.linear(o, self.out_proj.weight, self.out_proj.bias)
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, None
