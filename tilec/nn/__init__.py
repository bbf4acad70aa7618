"""torch.nn modules whose forward runs tilec kernels, and `tilec.nn.functional`.

Each module subclasses its torch.nn counterpart, so it takes the same constructor arguments, is
initialised the same way and holds its parameters and buffers under the same names:
`load_state_dict` moves state between the two and a model swaps them in unchanged. Only the
forward differs: it calls tilec.nn.functional. An option tilec cannot compute raises a
`tilec.TilecError` naming it, at construction or call.

This package imports torch; `import tilec` does not import it.
"""

from __future__ import annotations

from tilec.nn import functional
from tilec.nn.modules.activation import GELU, Dropout, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from tilec.nn.modules.attention import MultiheadAttention
from tilec.nn.modules.convolution import Conv1d, Conv2d, Conv3d, ConvTranspose2d
from tilec.nn.modules.linear import Linear
from tilec.nn.modules.loss import CrossEntropyLoss, MSELoss
from tilec.nn.modules.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, RMSNorm
from tilec.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from tilec.nn.modules.sparse import Embedding

__all__ = [
    "functional",
    "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Dropout",
    "MultiheadAttention",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d",
    "Linear",
    "CrossEntropyLoss", "MSELoss",
    "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "RMSNorm",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "Embedding",
]
