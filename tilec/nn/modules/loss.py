"""torch.nn's losses whose forward runs tilec.nn.functional: CrossEntropyLoss and MSELoss.

Requires: torch. Guarantees: each class is its torch.nn counterpart (constructor, the `weight`
buffer, the deprecated size_average/reduce arguments folded into `reduction` by torch's own
constructor) with a forward that calls tilec.nn.functional, so values and gradients are that
function's.
"""

from __future__ import annotations

import torch

from tilec.nn.functional import loss


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return loss.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                  reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(torch.nn.MSELoss):
    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return loss.mse_loss(input, target, reduction=self.reduction)


__all__ = ["CrossEntropyLoss", "MSELoss"]
