"""Pooling modules of tilec.nn: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d.

Requires: what tilec.nn.functional's pooling requires (rank 3 or 4 float inputs). Guarantees:
each is its torch.nn counterpart (same constructor and attributes; no parameters or buffers)
whose forward calls tilec.nn.functional with the module's options, so outputs, gradients and
memory format are torch's.
"""

from __future__ import annotations

import torch

from tilec.nn.functional import pooling


class MaxPool2d(torch.nn.MaxPool2d):
    def forward(self, input: torch.Tensor):  # type: ignore[no-untyped-def]  # noqa: A002 (torch's name)
        return pooling.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                                  ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(torch.nn.AvgPool2d):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return pooling.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                  self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool2d(torch.nn.AdaptiveAvgPool2d):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return pooling.adaptive_avg_pool2d(input, self.output_size)


__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]
