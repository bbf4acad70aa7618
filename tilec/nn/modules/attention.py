"""tilec.nn.MultiheadAttention: torch.nn.MultiheadAttention whose forward runs tilec's kernels.

Requires: what torch.nn.MultiheadAttention requires (every constructor option: bias, add_bias_kv,
add_zero_attn, kdim/vdim, batch_first, dropout). Guarantees: the same parameters under the same
names (in_proj_weight or q/k/v_proj_weight, in_proj_bias, bias_k, bias_v, out_proj.*), and a
forward computed by tilec.nn.functional.multi_head_attention_forward with torch's defaults
(need_weights=True returns the weights averaged over heads). torch's eval-mode fast path is not
imitated: the result is the regular path's, which torch's fast path approximates.
"""

from __future__ import annotations

import torch

from tilec.nn.functional.multihead import multi_head_attention_forward


class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention (see the module docstring)."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # type: ignore[override]
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        batched = query.dim() == 3
        if self.batch_first and batched:  # [B, L, E] -> [L, B, E], keeping q is k is v (one projection)
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        separate = not self._qkv_same_embed_dim
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.bias_k, self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=separate,
            q_proj_weight=self.q_proj_weight if separate else None,
            k_proj_weight=self.k_proj_weight if separate else None,
            v_proj_weight=self.v_proj_weight if separate else None,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights


__all__ = ["MultiheadAttention"]
