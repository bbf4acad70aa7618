"""torch.nn.Embedding whose forward runs tilec.nn.functional.embedding.

Requires: torch. Guarantees: the class is torch.nn.Embedding (constructor, `weight`, the padding
row zeroed at initialisation, `from_pretrained` through the base classmethod, which builds this
class) with a forward that calls tilec.nn.functional.embedding: padding_idx, max_norm (renormalising
`weight` in place) and scale_grad_by_freq as torch; sparse=True is refused at the call.
"""

from __future__ import annotations

import torch

from tilec.nn.functional import sparse


class Embedding(torch.nn.Embedding):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return sparse.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                                self.scale_grad_by_freq, self.sparse)


__all__ = ["Embedding"]
