"""The activation, softmax and dropout modules of tilec.nn.

Requires: what tilec.nn.functional.activation requires. Guarantees: each class subclasses its
torch.nn namesake (same constructor, attributes and defaults, no parameters or buffers) and its
forward calls the tilec.nn.functional function torch's forward calls, with the same arguments,
so the output keeps torch's layout (elementwise: the input's; softmax: contiguous).
"""

from __future__ import annotations

import torch

from tilec.nn import functional as F

__all__ = ["ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Dropout"]


class ReLU(torch.nn.ReLU):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (torch's name)
        return F.relu(input, inplace=self.inplace)


class GELU(torch.nn.GELU):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.gelu(input, approximate=self.approximate)


class SiLU(torch.nn.SiLU):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.silu(input, inplace=self.inplace)


class Sigmoid(torch.nn.Sigmoid):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.sigmoid(input)


class Tanh(torch.nn.Tanh):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.tanh(input)


class Softmax(torch.nn.Softmax):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.softmax(input, self.dim, _stacklevel=5)


class LogSoftmax(torch.nn.LogSoftmax):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.log_softmax(input, self.dim, _stacklevel=5)


class Dropout(torch.nn.Dropout):
    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training, self.inplace)
