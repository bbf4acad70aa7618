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
from tilec.nn.modules.legacy import GELU, Conv2d, LayerNorm, Linear, MultiheadAttention, ReLU, Softmax
from tilec.nn.modules.loss import CrossEntropyLoss, MSELoss
from tilec.nn.modules.sparse import Embedding

__all__ = ["functional", "Conv2d", "Linear", "LayerNorm", "ReLU", "GELU", "Softmax", "MultiheadAttention",
           "CrossEntropyLoss", "MSELoss", "Embedding"]
