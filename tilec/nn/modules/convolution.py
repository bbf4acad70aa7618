"""torch.nn's convolution modules on tilec.nn.functional: Conv1d, Conv2d, Conv3d, ConvTranspose2d.

Each subclasses its torch.nn namesake (same constructor, initialisation, parameters and
`load_state_dict`); only the convolution runs on tilec. Every padding_mode torch has: "zeros"
pads inside the convolution program; "reflect", "replicate" and "circular" pad the input first with
Tile programs (`pad_for_conv`) and convolve without padding, as torch does.

Requires: what torch.nn's modules require. Guarantees: torch's outputs, memory format and
gradients (tilec.nn.functional.convolution says within what).
"""

from __future__ import annotations

from collections.abc import Callable
import torch

from tilec.nn.functional import convolution as F
from tilec.ops.arguments import OpError

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"]


def _forward(module: torch.nn.modules.conv._ConvNd, conv: Callable[..., torch.Tensor], input: torch.Tensor,  # noqa: A002
             weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """torch's _ConvNd._conv_forward with tilec's `conv` (and padding)."""
    if module.padding_mode == "zeros":
        return conv(input, weight, bias, module.stride, module.padding, module.dilation, module.groups)
    # torch keeps the padding last axis first, (before, after) each: [w0, w1, h0, h1, ...]
    flat = module._reversed_padding_repeated_twice
    pads = [(flat[k], flat[k + 1]) for k in range(0, len(flat), 2)][::-1]
    padded = F.pad_for_conv(type(module).__name__, input, pads, module.padding_mode)
    return conv(padded, weight, bias, module.stride, 0, module.dilation, module.groups)


class Conv1d(torch.nn.Conv1d):
    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002 (torch's name)
                      bias: torch.Tensor | None) -> torch.Tensor:
        return _forward(self, F.conv1d, input, weight, bias)


class Conv2d(torch.nn.Conv2d):
    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
                      bias: torch.Tensor | None) -> torch.Tensor:
        return _forward(self, F.conv2d, input, weight, bias)


class Conv3d(torch.nn.Conv3d):
    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,  # noqa: A002
                      bias: torch.Tensor | None) -> torch.Tensor:
        return _forward(self, F.conv3d, input, weight, bias)


class ConvTranspose2d(torch.nn.ConvTranspose2d):
    """torch.nn.ConvTranspose2d, output_size included (padding_mode "zeros" only, as torch)."""

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:  # noqa: A002
        if self.padding_mode != "zeros":
            raise OpError(f"tilec.nn.ConvTranspose2d: padding_mode={self.padding_mode!r}; only 'zeros' is "
                            f"supported, as in torch")
        output_padding = self._output_padding(input, output_size, self.stride, self.padding,  # type: ignore[arg-type]
                                              self.kernel_size, 2, self.dilation)  # type: ignore[arg-type]
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,  # type: ignore[arg-type]
                                  output_padding, self.groups, self.dilation)  # type: ignore[arg-type]
