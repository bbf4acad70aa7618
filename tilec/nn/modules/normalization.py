"""Normalisation modules of tilec.nn: LayerNorm, GroupNorm, BatchNorm1d/2d/3d, RMSNorm.

Requires: what their torch.nn counterparts require (each is a subclass: same constructor,
parameters, buffers and initialisation). Guarantees: the forward calls tilec.nn.functional with
the arguments torch.nn's forward passes to torch.nn.functional, so outputs, gradients and the
running statistics (batch norm: momentum, the cumulative average of momentum=None over
num_batches_tracked, evaluation with or without running statistics) are torch's.
"""

from __future__ import annotations

import torch

from tilec.nn import functional as F


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (elementwise_affine, bias) on tilec.nn.functional.layer_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm (affine, bias) on tilec.nn.functional.group_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm (elementwise_affine; eps None: the dtype's epsilon) on tilec.nn.functional.rms_norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class _BatchNormForward(torch.nn.modules.batchnorm._BatchNorm):
    """torch's _BatchNorm.forward, calling tilec.nn.functional.batch_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)  # the module's batch counter, as torch's forward counts
            if self.momentum is None:  # the cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        tracked = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if tracked else None, self.running_var if tracked else None,
                            self.weight, self.bias, use_batch_stats, factor, self.eps)


class BatchNorm1d(_BatchNormForward, torch.nn.BatchNorm1d):
    """torch.nn.BatchNorm1d on tilec.nn.functional.batch_norm."""


class BatchNorm2d(_BatchNormForward, torch.nn.BatchNorm2d):
    """torch.nn.BatchNorm2d on tilec.nn.functional.batch_norm (channels_last in, channels_last out)."""


class BatchNorm3d(_BatchNormForward, torch.nn.BatchNorm3d):
    """torch.nn.BatchNorm3d on tilec.nn.functional.batch_norm (channels_last_3d in, channels_last_3d out)."""


__all__ = ["LayerNorm", "GroupNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]
