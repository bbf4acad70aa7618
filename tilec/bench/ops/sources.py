"""The Tile source of every op that `tilec bench` times.

Every Tile source of the benchmark lives in this module (the `*_source` functions), so that
schedule work can replace them with tuned templates in one place. A source is plain text with
the op's static parameters (strides, padding, the softmax scale) substituted as literals.

Requires: the op's sizes (a parsed --shape). Guarantees: a Tile program whose inputs are the
op's inputs in the baseline's layout (torch's NCHW/OIHW for conv2d) and whose output is the
baseline's result.
"""

from __future__ import annotations

import math

from tilec.bench.ops.op import Shape


def gemm_source(shape: Shape) -> str:
    return "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"


def gemm_bias_relu_source(shape: Shape) -> str:
    return ("function (A[M, K], B[K, N], Bias[N]) -> (C) {\n"
            "    T[i, j: M, N] = +(A[i, k] * B[k, j]);\n"
            "    C = relu(T + Bias);\n"
            "}")


def conv2d_source(shape: Shape) -> str:
    """NCHW in and out (torch's layout). A 1x1 kernel is a GEMM per output row straight on NCHW
    (no copy of the input, of which a strided conv reads only part); larger kernels convert to
    NHWC/HWIO inside the program (part of the timed call) so the channels are the GEMM's
    reduction and the output channels its vector axis."""
    s, p = shape["stride"], shape["pad"]
    oh, ow = f"(H + {2 * p} - KH) / {s} + 1", f"(W + {2 * p} - KW) / {s} + 1"
    if shape.get("KH") == 1 and shape.get("KW") == 1 and p == 0:
        return (f"function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {{\n"
                f"    O[n, co, x, y: N, CO, {oh}, {ow}] = +(X[n, c, {s}*x, {s}*y] * F[co, c, 0, 0]);\n"
                f"}}")
    return (f"function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) {{\n"
            f"    I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]);\n"
            f"    K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]);\n"
            f"    Y[n, x, y, co: N, {oh}, {ow}, CO] = +(I[n, {s}*x + i - {p}, {s}*y + j - {p}, c] * K[i, j, c, co]);\n"
            f"    O[n, co, x, y: N, CO, {oh}, {ow}] = =(Y[n, x, y, co]);\n"
            f"}}")


def attention_source(shape: Shape, causal: bool = False) -> str:
    """softmax(Q K^T / sqrt(D)) V as the op library writes it (tilec/ops/sources.py), unfused in Tile;
    the templates turn it into one fused kernel."""
    from tilec.ops.sources import attention_source as library_source

    return library_source(causal, 1.0 / math.sqrt(shape["D"]))
