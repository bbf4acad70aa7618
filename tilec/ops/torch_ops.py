"""PyTorch ops backed by Tile kernels, registered under the `tilec` namespace.

Every op here is a `torch.library.custom_op` whose forward builds the Tile source for its static
parameters (tilec/ops/sources.py, cached per parameter tuple), compiles it once (`tilec.compile`,
cached per source; the kernel is looked up once per (shapes, dtypes)) and runs it on the tensors'
memory by address, its outputs allocated as torch tensors. Its backward is `tilec::tile_grad`, a
custom op running the kernel derived (tilec.autodiff, renaming copies removed) from the same
source for all the inputs that need a gradient at once (cached per (source, wrt)). Every op has
a fake (meta) implementation so `torch.compile` can trace it. CUDA tensors run on target "cuda"
on the tensors themselves (device pointers, torch's current stream; tilec.runtime.torch_cuda).

The Python wrappers (`conv2d`, `linear`, ...; what tilec.nn calls) run the same checks, kernels
and gradients through `_TileOp` (tilec.ops.eager), an autograd.Function, when called eagerly on
plain tensors: the dispatcher's two hops per op cost more than a small kernel. Under
torch.compile, and for fake or subclassed tensors, they call the registered ops.

    tilec::conv2d(x, weight, bias, stride, padding, dilation, groups)   NCHW, OIHW
    tilec::linear(x, weight, bias, activation)                          "none" | "relu" | "gelu"
    tilec::attention(q, k, v, causal, scale)                            [B, H, S, D]
    tilec::relu(x), tilec::gelu(x)                                      gelu: exact (erf) form
    tilec::softmax(x, dim)
    tilec::layer_norm(x, normalized_shape, weight, bias, eps)

Errors: wrong dtypes (float32 and float64 are supported, one per op), ranks, shapes, devices (CPU or
one CUDA device per op, not a mix) and parameters raise
`OpError`, a `tilec.TilecError` (and `ValueError`) that names the argument at fault. Non-
contiguous inputs are copied to contiguous ones first, so they give the same result.

This module gathers the op library: importing it registers every op above, once (each op's
module registers its own when first imported). The ops live one per module, `conv2d`, `linear`,
`attention`, `activations` (relu, gelu) and `normalization` (softmax, layer_norm), on shared
parts: `arguments` (the checks, OpError), `kernels` (the compiled functions and their caches),
`tile_grad` (the backward op) and `eager` (the fast path).
"""

from __future__ import annotations

from tilec.ops.activations import gelu, relu
from tilec.ops.arguments import OpError
from tilec.ops.attention import attention
from tilec.ops.conv2d import conv2d
from tilec.ops.linear import linear
from tilec.ops.normalization import layer_norm, softmax
from tilec.ops.tile_grad import tile_grad

__all__ = ["OpError", "conv2d", "linear", "attention", "relu", "gelu", "softmax", "layer_norm", "tile_grad"]
