"""Activations, softmax and dropout of tilec.nn.functional.

Requires: float32 or float64 tensors on the CPU or a CUDA device (softmax's `dtype=` may name the
one to convert to first, as torch converts). Guarantees: torch.nn.functional's signatures,
defaults, values, output layouts and gradients:

- elementwise activations keep the input's strides (channels_last in, channels_last out) and are
  written in the form whose derived gradient is torch's formula: sigmoid and tanh differentiate
  through their output (``y (1 - y)``, ``1 - y^2``), so the saturated tails give 0, not 0 * inf;
  silu is ``x * sigmoid(x)`` (NaN at -inf, as torch's ``x / (1 + exp(-x))`` is), gelu spells
  torch's ``x * 0.5 * (1 + erf(x / sqrt 2))`` and its tanh approximation term by term;
- softmax and log_softmax subtract the row's maximum (an all -inf or a +inf row gives NaN, as
  torch's does) and give a contiguous result; along the last axis the program is
  `tilec.ops.sources.softmax_source`'s, which the row-wise template fuses into one kernel (with
  the maximum held constant for the gradient), along any other axis the same program on [A, K, B];
- dropout draws its Bernoulli mask from torch's generator (so torch.manual_seed reproduces it) and
  scales in a Tile program, so its gradient is ``mask * grad / (1 - p)``;
- ``inplace=True`` writes into the input and returns it; the program reads a copy of the input
  when autograd needs its old value (as torch keeps the original self of an in-place op).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import torch

from tilec.nn.functional.layout import FLOATS, check_float, elementwise, physical, unpermute
from tilec.ops.arguments import OpError
from tilec.ops.program import run_program

# gelu's constants as torch's CPU kernels spell them: 1/sqrt(2), and sqrt(2/pi) with 0.044715
_SQRT1_2 = repr(math.sqrt(0.5))
_SQRT_2_OVER_PI = repr(math.sqrt(2.0 / math.pi))
_GELU_TANH_CUBE = "0.044715"
GELU_EXPRESSIONS = {
    "none": f"X * 0.5 * (1 + erf(X * {_SQRT1_2}))",
    "tanh": f"0.5 * X * (1 + tanh({_SQRT_2_OVER_PI} * (X + {_GELU_TANH_CUBE} * (X * X * X))))",
}


def _before_overwrite(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """The input to give a program whose result will overwrite it: a copy when autograd will need
    its current values for the gradient, else the input itself."""
    return input.clone() if input.requires_grad and torch.is_grad_enabled() else input


def _in_place_or_new(name: str, input: torch.Tensor, inplace: bool, expr: str,  # noqa: A002
                     grad_from_output: bool = False) -> torch.Tensor:
    """``expr`` of the input, written back into it with `inplace` (see the module docstring)."""
    check_float(name, "input", input)
    if not inplace:
        return elementwise(input, expr, grad_from_output)
    return input.copy_(elementwise(_before_overwrite(input), expr, grad_from_output))


def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:  # noqa: A002 (torch's name)
    """torch.nn.functional.relu; its gradient passes through at NaN, as torch's does (the program
    selects 0 where X <= 0, so NaN takes the other branch). The gradient program, DX = X <= 0 ? 0 :
    DO, reads the output in X's place (relu(X) <= 0 exactly where X <= 0, NaN included), so autograd
    keeps the output, as torch's relu does, not the input."""
    return _in_place_or_new("relu", input, inplace, "X <= 0 ? 0 : X", grad_from_output=True)


def gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.gelu: the exact (erf) form or approximate='tanh'."""
    check_float("gelu", "input", input)
    if approximate not in GELU_EXPRESSIONS:
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return elementwise(input, GELU_EXPRESSIONS[approximate])


def silu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.silu, x * sigmoid(x); the gradient is torch's s (1 + x (1 - s))."""
    return _in_place_or_new("silu", input, inplace, "X * sigmoid(X)")


def sigmoid(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.sigmoid, 1 / (1 + exp(-x)); the gradient is torch's y (1 - y)."""
    check_float("sigmoid", "input", input)
    return elementwise(input, "sigmoid(X)")


def tanh(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """torch.nn.functional.tanh; the gradient is torch's 1 - y^2."""
    check_float("tanh", "input", input)
    return elementwise(input, "tanh(X)")


# ------------------------------------------------------------------ softmax and log_softmax


@lru_cache(maxsize=None)
def normalize_source(log: bool, inner: bool) -> str:
    """(log_)softmax along K of X[N, K], or with `inner` along the middle axis of X[A, K, B].

    The row maximum is held constant for the gradient (``reverse_grad(Max, 0)``, PlaidML's gradient
    control): (log_)softmax does not change when its row is shifted, so the gradient through the
    maximum is zero, and deriving it would only add a rounding residue (about eps * K * |grad|) at the
    maximum, a few times torch's own float32 error for K in the thousands. The [N, K] form is
    `tilec.ops.sources.softmax_source` with that one statement more: the same row-wise fused kernel."""
    x, row = ("X[a, k, b]", "a, 0, b: A, 1, B") if inner else ("X[i, k]", "i, 0: N, 1")
    inputs = "X[A, K, B]" if inner else "X[N, K]"
    out = "Z - log(S)" if log else "E / S"
    return (f"function ({inputs}) -> (O) {{\n"
            f"    Max[{row}] = >({x});\n"
            f"    M = reverse_grad(Max, 0);\n"
            f"    Z = X - M;\n"
            f"    E = exp(Z);\n"
            f"    S[{row}] = +({x.replace('X', 'E')});\n"
            f"    O = {out};\n"
            f"}}")


def _implicit_dim(name: str, ndim: int, stacklevel: int) -> int:
    """torch's legacy choice of axis when dim is None (torch.nn.functional._get_softmax_dim)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                  "Change the call to include dim=X as an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def _wrap_dim(dim: int, ndim: int) -> int:
    """dim in [0, ndim) (a 0-d tensor has the one axis 0 = -1), or torch's IndexError."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
                         f"but got {dim})")
    return dim % rank


def _normalize(name: str, log: bool, input: torch.Tensor, dim: int | None, stacklevel: int,  # noqa: A002
               dtype: torch.dtype | None) -> torch.Tensor:
    """softmax (or with `log`, log_softmax) of the input along `dim`, as a contiguous tensor: the
    axes before `dim` flatten into A, those after it into B (B = 1 takes the [N, K] program)."""
    if dtype is not None:
        if dtype not in FLOATS:
            raise OpError(f"tilec.nn.functional.{name}: dtype={dtype} is not supported; "
                          "float32, float64, bfloat16 and float16 are")
        input = input.to(dtype)  # noqa: A001 (torch converts first, then normalises)
    check_float(name, "input", input)
    if dim is None:
        dim = _implicit_dim(name, input.dim(), stacklevel + 1)
    d = _wrap_dim(dim, input.dim())
    if input.numel() == 0:  # nothing to normalise: an empty result that joins the autograd graph
        return elementwise(input.contiguous(), "X")
    shape = tuple(input.shape) or (1,)
    outer, size, inner = math.prod(shape[:d]), shape[d], math.prod(shape[d + 1:])
    view = (outer, size, inner) if inner > 1 else (outer, size)
    x = input.contiguous().reshape(view)
    out = run_program(normalize_source(log, inner > 1), [x], view)
    return out.reshape(input.shape)


def softmax(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3,  # noqa: A002
            dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.nn.functional.softmax: exp(x - max) / sum, along `dim` (None: torch's legacy rule,
    with its warning); `dtype` converts the input first."""
    return _normalize("softmax", False, input, dim, _stacklevel, dtype)


def log_softmax(input: torch.Tensor, dim: int | None = None, _stacklevel: int = 3,  # noqa: A002
                dtype: torch.dtype | None = None) -> torch.Tensor:
    """torch.nn.functional.log_softmax: (x - max) - log(sum(exp(x - max))), along `dim`."""
    return _normalize("log_softmax", True, input, dim, _stacklevel, dtype)


# ------------------------------------------------------------------ dropout


@lru_cache(maxsize=None)
def dropout_source(scale: float) -> str:
    """X * Keep * scale over X[N] and a 0/1 mask Keep[N]: the gradient to X is Keep * scale * grad."""
    return f"function (X[N], Keep[N]) -> (O) {{ O = X * Keep * {scale!r}; }}"


def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True,  # noqa: A002
            inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.dropout: zeroes each element with probability p (a Bernoulli mask from
    torch's generator) and scales the rest by 1 / (1 - p); the input itself when not training,
    with p = 0 or when empty (as torch returns it); x * 0 with p = 1."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    check_float("dropout", "input", input)
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return _in_place_or_new("dropout", input, inplace, "X * 0")
    dense, order = physical(_before_overwrite(input) if inplace else input)
    keep = torch.empty_like(dense).bernoulli_(1 - p)  # randomness only: the product is the program
    flat = dense.reshape(-1)
    out = unpermute(run_program(dropout_source(1.0 / (1.0 - p)), [flat, keep.reshape(-1)], flat.shape)
                    .reshape(dense.shape), order)
    return input.copy_(out) if inplace else out


__all__ = ["relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout",
           "GELU_EXPRESSIONS", "normalize_source", "dropout_source"]
