"""Tile sources of the operator library, one builder per op.

Each builder takes the op's static parameters (strides, padding, the softmax scale, ...) and
returns Tile text with them substituted as literals; builders are cached, so one parameter tuple
gives one string object and so one compiled `tilec.Function` (see tilec/ops/torch_ops.py).
"""

from __future__ import annotations

import re
from functools import lru_cache

#: `gelu` is the exact (erf) form, as torch.nn.functional.gelu's default approximate="none".
GELU_EXPR = "0.5 * ({x}) * (1.0 + erf(({x}) * 0.7071067811865476))"

ACTIVATIONS = ("none", "relu", "gelu")


def _activation(name: str, x: str) -> str:
    if name == "none":
        return x
    if name == "relu":
        return f"relu({x})"
    if name == "gelu":
        return GELU_EXPR.format(x=x)
    raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}")


#: The spatial axes of a convolution with 1, 2 or 3 of them: (input size, kernel size, output index,
#: kernel index) per axis; the 2-D names are the ones conv2d_source has always used.
_SPATIAL = {1: (("W", "KW", "y", "j"),),
            2: (("H", "KH", "x", "i"), ("W", "KW", "y", "j")),
            3: (("D", "KD", "z", "k"), ("H", "KH", "x", "i"), ("W", "KW", "y", "j"))}


@lru_cache(maxsize=None)
def conv_source(stride: tuple[int, ...], padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...],
                has_bias: bool, groups: int = 1, channels_last: bool = False, wide: bool = False) -> str:
    """The convolution over 1, 2 or 3 spatial axes (len(stride)), torch.nn.functional.conv*d's:
    input X[N, C, *S], filter F[CO, C, *K], optional Bias[CO] -> O[N, CO, *OS]; `padding` gives the
    zeros (before, after) each spatial axis (torch's padding="same" puts the odd one after).

    The program converts to channels-last/HWIO inside so that the channels are the implicit GEMM's
    reduction; the bias is added in the channels-last stage (its last axis is CO, so it broadcasts)
    and fuses into the GEMM's epilogue. With `channels_last` the input and output are taken and
    given channels-last, X[N, *S, C] -> O[N, *OS, CO] (a view of a channels_last tensor), and those
    conversions vanish.

    With `groups` > 1 the channels carry a group axis, which the caller exposes with free views of
    the contiguous tensors: X[N, G, C, *S] (C input channels per group; X[N, *S, G, C] channels
    last), F[G, CO, C, *K] (CO output channels per group), Bias[G, CO] -> O[N, G, CO, *OS]
    (O[N, *OS, G, CO]). Every group is a conv of its own channels (depthwise: C == 1); the text is
    the same for every groups value > 1 (G binds from the shapes), so they share one Function.

    With `wide` (for float32 tensors) the sums accumulate in float64 and the result is rounded
    once to float32: the program reads X and F through float64 copies and writes float32 O."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if not len(stride) == len(padding) == len(dilation) or len(stride) not in _SPATIAL:
        raise ValueError(f"one stride, padding and dilation per spatial axis (1 to 3), got {stride}, {padding}, "
                         f"{dilation}")
    axes = _SPATIAL[len(stride)]
    sizes, kernel, outs, taps, out_sizes, reads = [], [], [], [], [], []
    for (size, ksize, out, tap), s, (before, after), d in zip(axes, stride, padding, dilation):
        sizes.append(size)
        kernel.append(ksize)
        outs.append(out)
        taps.append(tap)
        # (S + before + after - d (K - 1) - 1) / s + 1
        pad = before + after
        out_sizes.append(f"({size} + {pad + d - 1} - {d}*{ksize}) / {s} + 1" if d != 1
                         else f"({size} + {pad} - {ksize}) / {s} + 1")
        reads.append(f"{s}*{out} + {d}*{tap} - {before}" if d != 1 else f"{s}*{out} + {tap} - {before}")
    out_index = ", ".join(outs)
    return _channels_last_gemm(sizes, kernel, taps, has_bias, groups, channels_last, transposed=False,
                               gemm_index=out_index, gemm_shape=", ".join(out_sizes), image_index=", ".join(reads),
                               out_index=out_index, wide=wide)


def _channels_last_gemm(sizes: list[str], kernel: list[str], taps: list[str], has_bias: bool, groups: int,
                        channels_last: bool, transposed: bool, gemm_index: str, gemm_shape: str, image_index: str,
                        out_index: str, wide: bool = False) -> str:
    """The program of conv_source and conv_transpose_source: X (NC* or N*C) converted to channels
    last (I), F to K[*K, C, CO] (F[CO, C, *K], transposed: F[C, CO, *K]), the sum
    Y[n, `gemm_index`, co: N, `gemm_shape`, CO] = +(I[n, `image_index`, c] * K[taps, c, co]), the
    bias, and the result back to NC* O[n, co, `out_index`] (group axes where groups > 1)."""
    g, gd = ("", "") if groups == 1 else ("g, ", "G, ")  # the group index and its dimension
    spatial, kernel_sizes = ", ".join(sizes), ", ".join(kernel)
    lower, tap_index = ", ".join(size.lower() for size in sizes), ", ".join(taps)
    x_decl = f"X[N, {spatial}, {gd}C]" if channels_last else f"X[N, {gd}C, {spatial}]"
    f_channels, f_read = ("C, CO", f"{g}c, co") if transposed else ("CO, C", f"{g}co, c")
    inputs = f"{x_decl}, F[{gd}{f_channels}, {kernel_sizes}]" + (f", Bias[{gd}CO]" if has_bias else "")
    image = "X" if channels_last else "I"
    gemm = "O" if channels_last and not has_bias else "Y"
    lines = [] if channels_last else [f"I[n, {lower}, {g}c: N, {spatial}, {gd}C] = =(X[n, {g}c, {lower}]);"]
    lines += [f"K[{g}{tap_index}, c, co: {gd}{kernel_sizes}, C, CO] = =(F[{f_read}, {tap_index}]);",
              f"{gemm}[n, {gemm_index}, {g}co: N, {gemm_shape}, {gd}CO] = "
              f"+({image}[n, {image_index}, {g}c] * K[{g}{tap_index}, c, co]);"]
    result = gemm
    if has_bias:
        result = "O" if channels_last else "Yb"
        lines.append(f"{result} = Y + Bias;")
    if not channels_last:
        lines.append(f"O[n, {g}co, {out_index}: N, {gd}CO, {gemm_shape}] = =({result}[n, {out_index}, {g}co]);")
    if wide:
        lines = _widened(lines)
    body = "".join(f"    {line}\n" for line in lines)
    return f"function ({inputs}) -> (O) {{\n{body}}}"


def _widened(lines: list[str]) -> list[str]:
    """`lines` (which read X and F and write O) computing in float64: they read float64 copies Xw
    and Fw and write Ow, which is rounded once to float32 O."""
    renamed = [re.sub(r"\bX\[", "Xw[", re.sub(r"\bF\[", "Fw[", re.sub(r"^O\b", "Ow", line))) for line in lines]
    renamed = [re.sub(r"\bO\b(?=\s*=)", "Ow", line) for line in renamed]
    return ["Xw = as_float(X, 64);", "Fw = as_float(F, 64);", *renamed, "O = as_float(Ow, 32);"]


@lru_cache(maxsize=None)
def depthwise_source(stride: tuple[int, int], padding: tuple[tuple[int, int], tuple[int, int]],
                     dilation: tuple[int, int], has_bias: bool) -> str:
    """A depthwise 2-D convolution (groups = channels, one filter per channel): input
    X[N, C, H, W], filter F[C, 1, KH, KW] (torch's layout), optional Bias[C] -> O[N, C, OH, OW],
    written directly, a sum of the KH x KW taps per output cell (the `stencil` template's form:
    it reads y at stride 1 or 2),
    not as conv_source's grouped GEMM with one channel per group. `padding`: (before, after) per
    spatial axis; its gradient program (tilec.autodiff) reads the same taps backwards, another stencil."""
    (top, bottom), (left, right) = padding
    (sh, sw), (dh, dw) = stride, dilation
    spans = (f"H + {top + bottom + dh - 1} - {dh}*KH" if dh != 1 else f"H + {top + bottom} - KH",
             f"W + {left + right + dw - 1} - {dw}*KW" if dw != 1 else f"W + {left + right} - KW")
    sizes = tuple(f"({span}) / {st} + 1" if st != 1 else f"{span} + 1" for span, st in zip(spans, (sh, sw)))
    rows = (f"{sh}*x" if sh != 1 else "x") + (f" + {dh}*i" if dh != 1 else " + i") + f" - {top}"
    cols = (f"{sw}*y" if sw != 1 else "y") + (f" + {dw}*j" if dw != 1 else " + j") + f" - {left}"
    out = "Y" if has_bias else "O"
    lines = [f"{out}[n, c, x, y: N, C, {sizes[0]}, {sizes[1]}] = +(X[n, c, {rows}, {cols}] * F[c, 0, i, j]);"]
    if has_bias:
        lines.append(f"O[n, c, x, y: N, C, {sizes[0]}, {sizes[1]}] = +(Y[n, c, x, y] + Bias[c]);")
    inputs = "X[N, C, H, W], F[C, M, KH, KW]" + (", Bias[C]" if has_bias else "")
    body = "".join(f"    {line}\n" for line in lines)
    return f"function ({inputs}) -> (O) {{\n{body}}}"


@lru_cache(maxsize=None)
def conv2d_source(stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
                  has_bias: bool, groups: int = 1) -> str:
    """NCHW input X[N, C, H, W], OIHW filter F[CO, C, KH, KW], optional Bias[CO] -> NCHW O, with
    `padding` zeros on both sides of each axis: conv_source's 2-D case (like
    tilec/bench/ops/sources.py's conv2d)."""
    return conv_source(stride, tuple((p, p) for p in padding), dilation, has_bias, groups)


def _plus(constant: int) -> str:
    """` + c` or ` - |c|` (nothing for 0): a constant term of a size or index expression."""
    return "" if constant == 0 else f" + {constant}" if constant > 0 else f" - {-constant}"


@lru_cache(maxsize=None)
def conv_transpose_source(stride: tuple[int, ...], padding: tuple[int, ...], output_padding: tuple[int, ...],
                          dilation: tuple[int, ...], has_bias: bool, groups: int = 1,
                          channels_last: bool = False) -> str:
    """The transposed convolution over 1, 2 or 3 spatial axes, torch.nn.functional.conv_transpose*d's
    (the gradient of conv_source with respect to its input): X[N, C, *S], filter F[C, CO, *K],
    optional Bias[CO] -> O[N, CO, *OS] with OS = (S - 1) s - 2 p + d (K - 1) + output_padding + 1.

    Each input cell scatters its kernel-weighted value to the output cells s*x + d*i - p (cells
    outside the output are skipped: the padding crops). The sum runs in a channels-last stage, where
    the bias broadcasts, with the filter converted to K[*K, C, CO] so that the channels are the
    contiguous reduction, as in conv_source (4-5x faster than reading F in place); `channels_last` takes and gives X[N, *S, C] -> O[N, *OS, CO]. With `groups`
    > 1 the caller exposes the group axis with free views, as for conv_source: X[N, G, C, *S],
    F[G, C, CO, *K], Bias[G, CO] -> O[N, G, CO, *OS] (channels last: X[N, *S, G, C] ->
    O[N, *OS, G, CO])."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if not len(stride) == len(padding) == len(output_padding) == len(dilation) or len(stride) not in _SPATIAL:
        raise ValueError(f"one stride, padding, output_padding and dilation per spatial axis (1 to 3), got "
                         f"{stride}, {padding}, {output_padding}, {dilation}")
    axes = _SPATIAL[len(stride)]
    sizes, kernel, taps, writes, out_sizes = [], [], [], [], []
    for (size, ksize, _, tap), s, p, extra, d in zip(axes, stride, padding, output_padding, dilation):
        sizes.append(size)
        kernel.append(ksize)
        taps.append(tap)
        writes.append(f"{s}*{size.lower()} + {d}*{tap}{_plus(-p)}")
        out_sizes.append(f"{s}*{size} + {d}*{ksize}{_plus(extra + 1 - s - d - 2 * p)}")
    lower = ", ".join(size.lower() for size in sizes)
    dims = ", ".join(f"o{size.lower()}" for size in sizes)
    return _channels_last_gemm(sizes, kernel, taps, has_bias, groups, channels_last, transposed=True,
                               gemm_index=", ".join(writes), gemm_shape=", ".join(out_sizes), image_index=lower,
                               out_index=dims)


@lru_cache(maxsize=None)
def linear_source(has_bias: bool, activation: str) -> str:
    """X[M, K] @ W[OUT, K]^T (+ Bias[OUT]), then the activation; leading axes are flattened into M."""
    inputs = "X[M, K], W[OUT, K]" + (", Bias[OUT]" if has_bias else "")
    pre = "Y + Bias" if has_bias else "Y"
    return (f"function ({inputs}) -> (O) {{\n"
            f"    Y[m, o: M, OUT] = +(X[m, k] * W[o, k]);\n"
            f"    O = {_activation(activation, pre)};\n"
            f"}}")


@lru_cache(maxsize=None)
def attention_source(causal: bool, scale: float) -> str:
    """softmax(scale * Q K^T [causal mask]) V on [B, H, S, D]; K and V have T rows (T may differ
    from S). Causal keeps t <= s (torch's top-left aligned mask)."""
    scores = "Zc" if causal else "Z"
    mask = ("    Neg = -1.0e30;\n"
            "    Zc[b, h, s, t: B, H, S, T] = >(Z[b, h, s, t]), s - t < S default Neg;\n") if causal else ""
    return (f"function (Q[B, H, S, D], K[B, H, T, D], V[B, H, T, DV]) -> (O) {{\n"
            f"    L[b, h, s, t: B, H, S, T] = +(Q[b, h, s, d] * K[b, h, t, d]);\n"
            f"    Z = L * {float(scale)!r};\n"
            f"{mask}"
            f"    M[b, h, s, 0: B, H, S, 1] = >({scores}[b, h, s, t]);\n"
            f"    E = exp({scores} - M);\n"
            f"    R[b, h, s, 0: B, H, S, 1] = +(E[b, h, s, t]);\n"
            f"    P = E / R;\n"
            f"    O[b, h, s, d: B, H, S, DV] = +(P[b, h, s, t] * V[b, h, t, d]);\n"
            f"}}")


@lru_cache(maxsize=None)
def unary_source(activation: str) -> str:
    """An elementwise activation on X[N] (the op flattens its input: grad needs declared ranks)."""
    return f"function (X[N]) -> (O) {{ O = {_activation(activation, 'X')}; }}"


@lru_cache(maxsize=None)
def softmax_source() -> str:
    """Softmax over the last axis of X[N, K] (leading axes flattened into N)."""
    return ("function (X[N, K]) -> (O) {\n"
            "    M[i, 0: N, 1] = >(X[i, j]);\n"
            "    E = exp(X - M);\n"
            "    S[i, 0: N, 1] = +(E[i, j]);\n"
            "    O = E / S;\n"
            "}")


@lru_cache(maxsize=None)
def layer_norm_source(k: int, eps: float, has_weight: bool, has_bias: bool) -> str:
    """Layer norm over the last axis of X[N, K] (K = k, substituted as 1/k), biased variance."""
    inputs = "X[N, K]" + (", G[K]" if has_weight else "") + (", Bt[K]" if has_bias else "")
    out = "Xc * R" + (" * G" if has_weight else "") + (" + Bt" if has_bias else "")
    inv = repr(1.0 / k)
    return (f"function ({inputs}) -> (O) {{\n"
            f"    S[i, 0: N, 1] = +(X[i, j]);\n"
            f"    Mu = S * {inv};\n"
            f"    Xc = X - Mu;\n"
            f"    Q[i, 0: N, 1] = +(Xc[i, j] * Xc[i, j]);\n"
            f"    R = 1.0 / sqrt(Q * {inv} + {float(eps)!r});\n"
            f"    O = {out};\n"
            f"}}")
