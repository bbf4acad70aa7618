"""`tilec.nn.functional`: torch.nn.functional's signatures, defaults and semantics, computed by Tile
programs that tilec compiles (forward, and backward through the derived gradient programs).

Each function takes exactly the arguments of its torch.nn.functional namesake and gives what it
gives (shape, dtype, memory format, gradients, including at NaN and inf); an input tilec cannot
compute raises a `tilec.TilecError` naming the option, never a wrong answer. No function calls
torch's own kernel for its computation: every value is computed by Tile programs run through
tilec.ops.program.run_program (or the tuned tilec.ops kernels); torch only makes views and layout
copies, allocates, concatenates (attention's bias_k and zero rows), checks index ranges, and draws
dropout's keep-mask (`bernoulli_`, so that one seed gives torch's mask).

One module per family: activation, convolution (and the padding modes), linear, attention (sdpa
and its program), multihead, normalization, pooling, sparse (embedding), loss; layout and plans
hold what they share (running on a tensor's memory order; memoised argument checks).

This module imports torch; `import tilec` does not import it.
"""

from __future__ import annotations

from tilec.nn.functional.activation import relu, gelu, silu, sigmoid, tanh, softmax, log_softmax, dropout
from tilec.nn.functional.convolution import conv1d, conv2d, conv3d, conv_transpose2d
from tilec.nn.functional.linear import linear
from tilec.nn.functional.attention import scaled_dot_product_attention
from tilec.nn.functional.multihead import multi_head_attention_forward
from tilec.nn.functional.normalization import layer_norm, group_norm, batch_norm, rms_norm
from tilec.nn.functional.pooling import max_pool2d, avg_pool2d, adaptive_avg_pool2d
from tilec.nn.functional.sparse import embedding
from tilec.nn.functional.loss import cross_entropy, mse_loss

__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout", "conv1d", "conv2d", "conv3d", "conv_transpose2d", "linear", "scaled_dot_product_attention", "multi_head_attention_forward", "layer_norm", "group_norm", "batch_norm", "rms_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "embedding", "cross_entropy", "mse_loss"]
