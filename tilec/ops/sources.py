"""Tile sources of the operator library, one builder per op.

Each builder takes the op's static parameters (strides, padding, the softmax scale, ...) and
returns Tile text with them substituted as literals; builders are cached, so one parameter tuple
gives one string object and so one compiled `tilec.Function` (see tilec/ops/torch_ops.py).
"""

from __future__ import annotations

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


@lru_cache(maxsize=None)
def conv2d_source(stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
                  has_bias: bool, groups: int = 1) -> str:
    """NCHW input X[N, C, H, W], OIHW filter F[CO, C, KH, KW], optional Bias[CO] -> NCHW O.

    Like tilec/bench/ops/sources.py's conv2d: converts to NHWC/HWIO inside the program so that the
    channels are the implicit GEMM's reduction; the bias is added in the NHWC stage (its last
    axis is CO, so it broadcasts) and fuses into the GEMM's epilogue.

    With `groups` > 1 the channels carry a group axis, which the caller exposes with free views of
    the contiguous tensors: X[N, G, C, H, W] (C input channels per group), F[G, CO, C, KH, KW] (CO
    output channels per group), Bias[G, CO] -> O[N, G, CO, OH, OW]. Every group is a conv of its
    own channels (depthwise: C == 1); the text is the same for every groups value > 1 (G binds
    from the shapes), so they share one compiled Function."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    # (H + 2p - d (KH - 1) - 1) / s + 1
    oh = f"(H + {2 * ph + dh - 1} - {dh}*KH) / {sh} + 1" if dh != 1 else f"(H + {2 * ph} - KH) / {sh} + 1"
    ow = f"(W + {2 * pw + dw - 1} - {dw}*KW) / {sw} + 1" if dw != 1 else f"(W + {2 * pw} - KW) / {sw} + 1"
    ih = f"{sh}*x + {dh}*i - {ph}" if dh != 1 else f"{sh}*x + i - {ph}"
    iw = f"{sw}*y + {dw}*j - {pw}" if dw != 1 else f"{sw}*y + j - {pw}"
    g, gd = ("", "") if groups == 1 else ("g, ", "G, ")  # the group index and its dimension
    inputs = f"X[N, {gd}C, H, W], F[{gd}CO, C, KH, KW]" + (f", Bias[{gd}CO]" if has_bias else "")
    y = "Y"
    epilogue = ""
    if has_bias:
        y = "Yb"
        epilogue = "    Yb = Y + Bias;\n"
    return (f"function ({inputs}) -> (O) {{\n"
            f"    I[n, h, w, {g}c: N, H, W, {gd}C] = =(X[n, {g}c, h, w]);\n"
            f"    K[{g}i, j, c, co: {gd}KH, KW, C, CO] = =(F[{g}co, c, i, j]);\n"
            f"    Y[n, x, y, {g}co: N, {oh}, {ow}, {gd}CO] = +(I[n, {ih}, {iw}, {g}c] * K[{g}i, j, c, co]);\n"
            f"{epilogue}"
            f"    O[n, {g}co, x, y: N, {gd}CO, {oh}, {ow}] = =({y}[n, x, y, {g}co]);\n"
            f"}}")


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
