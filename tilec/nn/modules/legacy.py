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

__all__ = ["Conv2d", "Linear", "LayerNorm", "ReLU", "GELU", "Softmax"]


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
