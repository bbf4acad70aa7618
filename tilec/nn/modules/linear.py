"""torch.nn.Linear on tilec.nn.functional.linear (same constructor, parameters and initialisation).

Requires: what torch.nn.Linear requires. Guarantees: its outputs and gradients.
"""

from __future__ import annotations

import torch

from tilec.nn.functional.linear import linear

__all__ = ["Linear"]


class Linear(torch.nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return linear(input, self.weight, self.bias)
