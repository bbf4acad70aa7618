"""Corpus part 2: Tile programs of PlaidML's op library (plaidml/op.py) and value operators
(plaidml/tile.py), read at tag 0.7.0.

Both build their programs from Python templates; each entry's `note` says how the template was
filled (axes, strides, padding mode, ...). Padding is computed by the programs themselves, as
integer statements from sizes (`Pad0 = ...;`), exactly as op.py writes it.
"""

# The references name their parameters after the Tile tensors (I, O, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, conv, f32, ints, pool, pos, relu, same_pad, scalar, sigmoid, softmax_rows

OP = "plaidml/plaidml: plaidml/op.py @ 0.7.0"
TILE = "plaidml/plaidml: plaidml/tile.py @ 0.7.0"
UNARY = "tile.unary_op template 'function (I) -> (O) {{ O = {}; }}' filled with op.py's expression"
BINARY = "tile.binary_op template 'function (L, R) -> (O) {{ O = {}; }}' filled with a Value operator's expression"


def unary(name: str, expr: str, arg: Arg, ref, cite: str = OP, dtype: str | None = None) -> Program:
    return Program(name, cite, f"function (I) -> (O) {{ O = {expr}; }}", {"I": arg}, ref, note=UNARY, dtype=dtype)


def binary(name: str, expr: str, left: Arg, right: Arg, ref, dtype: str | None = None) -> Program:
    return Program(name, TILE, f"function (L, R) -> (O) {{ O = {expr}; }}", {"L": left, "R": right}, ref,
                   note=BINARY, dtype=dtype)


def _conv_same_upper_s2(I, K):
    (o0, p0), (o1, p1) = same_pad(I.shape[1], 3, 2, False), same_pad(I.shape[2], 3, 2, False)
    return conv(I, K, channels_first=False, strides=(2, 2), dilations=(1, 1), pads=(p0, p1), out=(o0, o1))


def _conv_same_lower_nchw(I, K):
    (o0, p0), (o1, p1) = same_pad(I.shape[2], 2, 1, True), same_pad(I.shape[3], 2, 1, True)
    return conv(I, K, channels_first=True, strides=(1, 1), dilations=(1, 1), pads=(p0, p1), out=(o0, o1))


def _pool_avg_same(I):
    (o0, p0), (o1, p1) = same_pad(I.shape[2], 3, 1, False), same_pad(I.shape[3], 3, 1, False)
    args = dict(channels_first=True, kernel=(3, 3), strides=(1, 1), pads=(p0, p1), out=(o0, o1))
    return pool(I, op="sum", **args) / pool(np.ones_like(I), op="count", **args)


def _pool_max_same_s2(I):
    (o0, p0), (o1, p1) = same_pad(I.shape[2], 3, 2, False), same_pad(I.shape[3], 3, 2, False)
    return pool(I, channels_first=True, kernel=(3, 3), strides=(2, 2), pads=(p0, p1), out=(o0, o1), op="max")


def _argmax(I):
    return np.argmax(I, axis=-1)


def _patches(I):
    b, _, _, d = I.shape
    out = np.zeros((b, 3, 4, 2, 2, d))
    for y in range(2):
        for x in range(2):
            out[:, :, :, y, x, :] = I[:, y:y + 3, x:x + 4, :]
    return out.reshape(b, 3, 4, 4 * d)


def _slice(I):
    return I[1:3]


def _concat(I0, I1, I2):
    return np.concatenate([I0, I1, I2], axis=1)


PROGRAMS: list[Program] = [
    Program("op_all", OP, """function (I[X0, X1]) -> (O) {
    Temp = (I == 0.0 ? 0.0 : 1.0);
    M[x0 : X0] = *(Temp[x0, x1]);
    O = as_uint(M, 8);
}""", {"I": Arg((4, 3), choices=(0.0, 1.0, 2.0))}, lambda I: np.all(I != 0, axis=1).astype(np.uint8),
        note="axis 1 of a 2-D tensor", dtype="uint8"),
    Program("op_any", OP, """function (I[X0, X1]) -> (O) {
    Temp = (I == 0.0 ? 0.0 : 1.0);
    S[x0 : X0] = +(Temp[x0, x1]);
    F = (S == 0.0 ? 0.0 : 1.0);
    O = as_uint(F, 8);
}""", {"I": Arg((5, 2), choices=(0.0, 0.0, 3.0))}, lambda I: np.any(I != 0, axis=1).astype(np.uint8),
        note="axis 1 of a 2-D tensor", dtype="uint8"),
    Program("op_argmax", OP, """function (I[X0, X1], One[]) -> (O) {
    Max[x0 : X0] = >(I[x0, x1]);
    IndexT[x1 : X1] = =(One[]);
    Index = index(IndexT, 0);
    AM[x0 : X0] = >(I[x0, x1] == Max[x0] ? Index[x1]);
    O = as_uint(AM, 32);
}""", {"I": f32(4, 6), "One": scalar(1.0)}, lambda I, One: _argmax(I), note="axis -1 of a 2-D tensor",
        dtype="uint32"),
    Program("op_binary_crossentropy", OP, """function (O[I0,I1], T[I0,I1]) -> (R) {
    R = builtin_binary_crossentropy(O,T,I0*I1);
}""", {"O": f32(3, 4, lo=0.1, hi=0.9), "T": f32(3, 4, lo=0.0, hi=1.0)},
        lambda O, T: -T * np.log(O.astype(np.float64)) - (1 - T) * np.log(1 - O.astype(np.float64)), note="2-D"),
    Program("op_cast_float16", OP, "function (I) -> (O) { O = as_float(I, 16); }", {"I": f32(3, 4)},
            lambda I: I.astype(np.float16), note="Cast to float16", dtype="float16"),
    Program("op_cast_float64", OP, "function (I) -> (O) { O = as_float(I, 64); }", {"I": ints(3, 4)},
            lambda I: I.astype(np.float64), note="Cast of an int32 tensor to float64", dtype="float64"),
    Program("op_cast_int8", OP, "function (I) -> (O) { O = as_int(I, 8); }", {"I": ints(3, 4, lo=-100, hi=100)},
            lambda I: I.astype(np.int8), note="Cast of an int32 tensor to int8", dtype="int8"),
    Program("op_cast_int16_from_float", OP, "function (I) -> (O) { O = as_int(I, 16); }", {"I": f32(3, 4, lo=-50, hi=50)},
            lambda I: np.trunc(I).astype(np.int16), note="Cast of float32 to int16 (truncation, as C casts)",
            dtype="int16"),
    Program("op_cast_uint16", OP, "function (I) -> (O) { O = as_uint(I, 16); }", {"I": ints(3, 4, lo=0, hi=1000)},
            lambda I: I.astype(np.uint16), note="Cast of an int32 tensor to uint16", dtype="uint16"),
    Program("op_cast_int64", OP, "function (I) -> (O) { O = as_int(I, 64); }", {"I": ints(3, 4, dtype="uint8", lo=0, hi=255)},
            lambda I: I.astype(np.int64), note="Cast of a uint8 tensor to int64", dtype="int64"),
    Program("op_cast_uint64", OP, "function (I) -> (O) { O = as_uint(I, 64); }", {"I": ints(3, 4, dtype="int16", lo=0, hi=300)},
            lambda I: I.astype(np.uint64), note="Cast of an int16 tensor to uint64", dtype="uint64"),
    unary("op_ceiling", "ceil(I)", f32(3, 4), np.ceil),
    unary("op_cos", "cos(I)", f32(3, 4), np.cos),
    unary("op_exp", "exp(I)", f32(3, 4), np.exp),
    unary("op_floor", "floor(I)", f32(3, 4), np.floor),
    unary("op_log", "log(I)", pos(3, 4), np.log),
    unary("op_sigmoid", "sigmoid(I)", f32(3, 4), sigmoid),
    unary("op_sin", "sin(I)", f32(3, 4), np.sin),
    unary("op_tanh", "tanh(I)", f32(3, 4), np.tanh),
    Program("op_clip_min", OP, """function (I, MIN_VAL) -> (O) {
    O = (MIN_VAL < I ? I : MIN_VAL);
}""", {"I": f32(3, 4), "MIN_VAL": scalar(-0.5)}, lambda I, MIN_VAL: np.maximum(I, -0.5)),
    Program("op_clip_max", OP, """function (I, MAX_VAL) -> (O) {
    O = (I < MAX_VAL ? I : MAX_VAL);
}""", {"I": f32(3, 4), "MAX_VAL": scalar(0.5)}, lambda I, MAX_VAL: np.minimum(I, 0.5)),
    Program("op_concatenate", OP, """function (I0[N0, A0, N2], I1[N0, A1, N2], I2[N0, A2, N2]) -> (O) {
  T0[n0, a+0, n2: N0, A0+A1+A2, N2] = =(I0[n0, a, n2]);
  T1[n0, a+A0, n2: N0, A0+A1+A2, N2] = =(I1[n0, a, n2]);
  T2[n0, a+A0+A1, n2: N0, A0+A1+A2, N2] = =(I2[n0, a, n2]);
  O = T0 + T1 + T2;
}""", {"I0": f32(4, 3, 2), "I1": f32(4, 5, 2), "I2": f32(4, 1, 2)}, _concat,
        note="axis 1, symbolic axis sizes (the offsets are sums of sizes)"),
    Program("op_conv2d_valid_nhwc", OP, """function (I[N, L0, L1, CI], K[LK0, LK1, CI, CO]) -> (O) {
    Pad0 = 0;
    Pad1 = 0;
    O[n, x0, x1, co: N, (L0 - 3 + 1) / 1, (L1 - 3 + 1) / 1, CO] = +(I[n, 1*x0 + 1*k0 - Pad0, 1*x1 + 1*k1 - Pad1, ci]*K[k0, k1, ci, co]);
}""", {"I": f32(2, 6, 5, 3), "K": f32(3, 3, 3, 4)},
        lambda I, K: conv(I, K, channels_first=False, strides=(1, 1), dilations=(1, 1), pads=(0, 0),
                          out=(I.shape[1] - 2, I.shape[2] - 2)),
        note="Convolution: rank 2, channels-last data and kernel, 3x3 kernel, strides 1, VALID"),
    Program("op_conv2d_same_upper_stride2", OP, """function (I[N, L0, L1, CI], K[LK0, LK1, CI, CO]) -> (O) {
    Pad0 = (max(0, ((L0 + 2 - 1) / 2 - 1) * 2 + 3 - L0)) / 2;
    Pad1 = (max(0, ((L1 + 2 - 1) / 2 - 1) * 2 + 3 - L1)) / 2;
    O[n, x0, x1, co: N, (L0 + 2 - 1) / 2, (L1 + 2 - 1) / 2, CO] = +(I[n, 2*x0 + 1*k0 - Pad0, 2*x1 + 1*k1 - Pad1, ci]*K[k0, k1, ci, co]);
}""", {"I": f32(1, 7, 6, 2), "K": f32(3, 3, 2, 3)}, _conv_same_upper_s2,
        note="Convolution: rank 2, channels-last, 3x3 kernel, strides 2, SAME_UPPER"),
    Program("op_conv2d_same_lower_nchw", OP, """function (I[N, CI, L0, L1], K[CO, CI, LK0, LK1]) -> (O) {
    Pad0 = ((max(0, ((L0 + 1 - 1) / 1 - 1) * 1 + 2 - L0)) + 1) / 2;
    Pad1 = ((max(0, ((L1 + 1 - 1) / 1 - 1) * 1 + 2 - L1)) + 1) / 2;
    O[n, co, x0, x1: N, CO, (L0 + 1 - 1) / 1, (L1 + 1 - 1) / 1] = +(I[n, ci, 1*x0 + 1*k0 - Pad0, 1*x1 + 1*k1 - Pad1]*K[co, ci, k0, k1]);
}""", {"I": f32(2, 3, 5, 4), "K": f32(2, 3, 2, 2)}, _conv_same_lower_nchw,
        note="Convolution: rank 2, channels-first data and kernel, 2x2 kernel, strides 1, SAME_LOWER"),
    Program("op_conv1d_explicit_pads", OP, """function (I[N, L0, CI], K[LK0, CI, CO]) -> (O) {
    Pad0 = 1;
    O[n, x0, co: N, (L0 + 1 + 2 - 3 + 1) / 1, CO] = +(I[n, 1*x0 + 1*k0 - Pad0, ci]*K[k0, ci, co]);
}""", {"I": f32(2, 7, 3), "K": f32(3, 3, 2)},
        lambda I, K: conv(I, K, channels_first=False, strides=(1,), dilations=(1,), pads=(1,), out=(I.shape[1] + 1,)),
        note="Convolution: rank 1, channels-last, kernel 3, strides 1, explicit pads (1, 2)"),
    Program("op_conv2d_dilated", OP, """function (I[N, L0, L1, CI], K[LK0, LK1, CI, CO]) -> (O) {
    Pad0 = 0;
    Pad1 = 0;
    O[n, x0, x1, co: N, (L0 - 5 + 1) / 1, (L1 - 3 + 1) / 1, CO] = +(I[n, 1*x0 + 2*k0 - Pad0, 1*x1 + 1*k1 - Pad1, ci]*K[k0, k1, ci, co]);
}""", {"I": f32(1, 8, 6, 2), "K": f32(3, 3, 2, 2)},
        lambda I, K: conv(I, K, channels_first=False, strides=(1, 1), dilations=(2, 1), pads=(0, 0),
                          out=(I.shape[1] - 4, I.shape[2] - 2)),
        note="Convolution: rank 2, channels-last, 3x3 kernel, dilation (2, 1), VALID"),
    Program("op_cumsum", OP, """function (I[N0, N1]) -> (O) {
    O[i0, i1: N0, N1] = +(I[i0 - k, i1]), k < N0;
}""", {"I": f32(5, 3)}, lambda I: np.cumsum(I.astype(np.float64), axis=0), note="axis 0 of a 2-D tensor"),
    Program("op_cumprod", OP, """function (I[N0, N1]) -> (O) {
    O[i0, i1: N0, N1] = *(I[i0, i1 - k]), k < N1;
}""", {"I": f32(3, 5, lo=0.5, hi=1.5)}, lambda I: np.cumprod(I.astype(np.float64), axis=1), note="axis 1 of a 2-D tensor"),
    Program("op_dot_1d", OP, "function (X[I], Y[I]) -> (R) { R[i:I] = +(X[i] * Y[i]); }",
            {"X": f32(6), "Y": f32(6)}, lambda X, Y: X.astype(np.float64) * Y),
    Program("op_dot_nd", OP, """function(X[X0, X1], Y[Y0, Y1, Y2]) -> (R) {
    R[x0, y0, y2 : X0, Y0, Y2] = +(X[x0, z] * Y[y0, z, y2]);
}""", {"X": f32(3, 4), "Y": f32(2, 4, 5)}, lambda X, Y: np.einsum("xz,yzw->xyw", X.astype(np.float64), Y),
        note="x 2-D, y 3-D"),
    Program("op_elu", OP, """function (X) -> (R) {
    A = exp(X)-1;
    R = (X < 0 ? A : X);
}""", {"X": f32(3, 4)}, lambda X: np.where(X < 0, np.expm1(X.astype(np.float64)), X), note="alpha = 1"),
    Program("op_elu_alpha", OP, """function (X) -> (R) {
    A = 0.5*exp(X) - 0.5;
    R = X < 0 ? A : X;
}""", {"X": f32(3, 4)}, lambda X: np.where(X < 0, 0.5 * np.expm1(X.astype(np.float64)), X), note="alpha = 0.5"),
    Program("op_equal", OP, "function (L, R) -> (O) { O = (L == R); }", {"L": ints(4, 3, lo=0, hi=2), "R": ints(4, 3, lo=0, hi=2)},
            np.equal, dtype="bool"),
    Program("op_equal_constant", OP, "function (L) -> (O) { O = (L == 2); }", {"L": ints(4, 3, lo=0, hi=3)},
            lambda L: L == 2, note="rhs the Python integer 2", dtype="bool"),
    Program("op_not_equal", OP, "function (L, R) -> (O) { O = (L != R); }", {"L": ints(4, 3, lo=0, hi=2), "R": ints(4, 3, lo=0, hi=2)},
            np.not_equal, dtype="bool"),
    Program("op_flatten", OP, "function (I[N0, N1, N2]) -> (O) { O = reshape(I, N0*N1*N2); }", {"I": f32(2, 3, 4)},
            lambda I: I.reshape(-1), note="3-D input"),
    Program("op_gather", OP, "function (V, I) -> (O) { O = gather(V, I); }",
            {"V": f32(6, 3), "I": ints(2, 4, lo=0, hi=5)}, lambda V, I: V[I], note="int32 indices into axis 0"),
    Program("op_gemm", OP, """function (A[ROW, MID], B[COL, MID], C) -> (O) {
  OM[row, col : ROW, COL] = +(A[row, mid] * B[col, mid]);
  OA = OM * 0.5;
  CB = C * 2.0;
  O = OA + CB;
}""", {"A": f32(3, 4), "B": f32(5, 4), "C": f32(5)}, lambda A, B, C: 0.5 * (A.astype(np.float64) @ B.T) + 2.0 * C,
        note="Gemm with alpha 0.5, beta 2.0, transB"),
    Program("op_hardmax", OP, """function (I[X, Y]) -> (O) {
    MAXX[x : X] = >(I[x, y]);
    MAX[x, y : X, Y] = =(MAXX[x]);
    O = (MAX == I ? 1.0 : 0.0);
}""", {"I": f32(3, 5)}, lambda I: (I == I.max(axis=1, keepdims=True)).astype(np.float64)),
    Program("op_identity", OP, "function (X) -> (Y) { Y = X; }", {"X": f32(3, 4)}, lambda X: X),
    Program("op_ismax", OP, """function (I[X0, X1]) -> (O) {
    MAX[x0 : X0] = >(I[x0, x1]);
    O = (MAX == I);
}""", {"I": f32(4, 4)}, lambda I: I.max(axis=1) == I, note="axes [1] of a square 2-D tensor (MAX broadcasts "
        "against I's last axis, as in PlaidML)", dtype="bool"),
    Program("op_logsoftmax", OP, """function (I[X, Y]) -> (O) {
    O = builtin_logsoftmax(I, X, Y);
}""", {"I": f32(3, 5)}, lambda I: np.log(softmax_rows(I.astype(np.float64)))),
    Program("op_max_reduce_keepdims", OP, """function (I[X0, X1]) -> (O) {
    O[x0, sx1 : X0, 1] = >(I[x0, x1]);
}""", {"I": f32(4, 5)}, lambda I: I.max(axis=1, keepdims=True), note="axis 1, keepdims"),
    Program("op_mean", OP, """function (I[X0, X1, X2]) -> (O) {
    SO[x1 : X1] = +(I[x0, x1, x2]);
     O = SO / (X2*X0);
}""", {"I": f32(2, 3, 4)}, lambda I: I.mean(axis=(0, 2)), note="axes [0, 2] of a 3-D tensor"),
    Program("op_min_reduce_all", OP, """function (I[X0, X1]) -> (O) {
    O[] = <(I[x0, x1]);
}""", {"I": f32(4, 5)}, lambda I: np.array(I.min()), note="all axes"),
    Program("op_pool_max_valid_nxc", OP, """
function (I[N, L0, L1, C]) -> (O) {
    Pad0 = 0;
    Pad1 = 0;
    O[n, x0, x1, c : N, (L0 - 2 + 2) / 2, (L1 - 2 + 2) / 2, C] = >(I[n, 2*x0 + k0 - Pad0, 2*x1 + k1 - Pad1, c]), k0 < 2, k1 < 2;
}""", {"I": f32(2, 6, 5, 3)},
        lambda I: pool(I, channels_first=False, kernel=(2, 2), strides=(2, 2), pads=(0, 0),
                       out=(I.shape[1] // 2, I.shape[2] // 2), op="max"),
        note="Pool MAX, NXC, 2x2 kernel, strides 2, VALID"),
    Program("op_pool_max_same_upper_ncx", OP, """
function (I[N, C, L0, L1]) -> (O) {
    Pad0 = (max(0, ((L0 + 2 - 1) / 2 - 1) * 2 + 3 - L0)) / 2;
    Pad1 = (max(0, ((L1 + 2 - 1) / 2 - 1) * 2 + 3 - L1)) / 2;
    O[n, c, x0, x1 : N, C, (L0 + 2 - 1) / 2, (L1 + 2 - 1) / 2] = >(I[n, c, 2*x0 + k0 - Pad0, 2*x1 + k1 - Pad1]), k0 < 3, k1 < 3;
}""", {"I": f32(1, 2, 7, 6)}, _pool_max_same_s2, note="Pool MAX, NCX, 3x3 kernel, strides 2, SAME_UPPER"),
    Program("op_pool_avg_same_ncx", OP, """
function (I[N, C, L0, L1], One[]) -> (O) {
    Pad0 = (max(0, ((L0 + 1 - 1) / 1 - 1) * 1 + 3 - L0)) / 2;
    Pad1 = (max(0, ((L1 + 1 - 1) / 1 - 1) * 1 + 3 - L1)) / 2;
    Ones[n, c, o0, o1 : N, C, L0, L1] = =(One[]);
    Count[n, c, x0, x1 : N, C, (L0 + 1 - 1) / 1, (L1 + 1 - 1) / 1] = +(Ones[n, c, 1*x0 + k0 - Pad0, 1*x1 + k1 - Pad1]), k0 < 3, k1 < 3;
    S[n, c, x0, x1 : N, C, (L0 + 1 - 1) / 1, (L1 + 1 - 1) / 1] = +(I[n, c, 1*x0 + k0 - Pad0, 1*x1 + k1 - Pad1]), k0 < 3, k1 < 3;
    O = S / Count;
}""", {"I": f32(2, 2, 5, 4), "One": scalar(1.0)}, lambda I, One: _pool_avg_same(I),
        note="Pool AVG, NCX, 3x3 kernel, strides 1, SAME_UPPER (the count excludes padding)"),
    Program("op_pool_avg_explicit_nxc", OP, """
function (I[N, L0, C], One[]) -> (O) {
    Pad0 = 1;
    Ones[n, o0, c : N, L0, C] = =(One[]);
    Count[n, x0, c : N, (L0 + 1 + 1 - 2 + 2) / 2, C] = +(Ones[n, 2*x0 + k0 - Pad0, c]), k0 < 2;
    S[n, x0, c : N, (L0 + 1 + 1 - 2 + 2) / 2, C] = +(I[n, 2*x0 + k0 - Pad0, c]), k0 < 2;
    O = S / Count;
}""", {"I": f32(2, 7, 3), "One": scalar(1.0)},
        lambda I, One: (lambda a: pool(I, op="sum", **a) / pool(np.ones_like(I), op="count", **a))(
            dict(channels_first=False, kernel=(2,), strides=(2,), pads=(1,), out=((I.shape[1] + 2) // 2,))),
        note="Pool AVG, NXC, rank 1, kernel 2, strides 2, explicit pads (1, 1)"),
    Program("op_pow", OP, "function (I, P) -> (O) { O = pow(I, P); }", {"I": pos(3, 4), "P": f32(3, 4)},
            lambda I, P: np.power(I.astype(np.float64), P)),
    Program("op_prod", OP, """function (I[X0, X1, X2]) -> (O) {
    O[x0, x2 : X0, X2] = *(I[x0, x1, x2]);
}""", {"I": f32(2, 3, 4, lo=0.5, hi=1.5)}, lambda I: np.prod(I.astype(np.float64), axis=1), note="axes [1]"),
    Program("op_relu", OP, "function (X) -> (Y) { Y = relu(X); }", {"X": f32(3, 4)}, relu),
    Program("op_relu_alpha_max", OP, "function (X, Alpha, MaxValue) -> (Y) { \n    M = (X < 0.0 ? Alpha*X : X);"
            "\n    Y = (M < MaxValue ? M : MaxValue);\n}", {"X": f32(3, 4), "Alpha": scalar(0.1), "MaxValue": scalar(0.8)},
            lambda X, Alpha, MaxValue: np.minimum(np.where(X < 0, 0.1 * X.astype(np.float64), X), 0.8),
            note="Relu with alpha and max_value"),
    Program("op_relu_threshold", OP, "function (X, Alpha, Thresh) -> (Y) { \n    Y = (X < Thresh ? Alpha*(X - Thresh) : X);\n}",
            {"X": f32(3, 4), "Alpha": scalar(0.2), "Thresh": scalar(0.3)},
            lambda X, Alpha, Thresh: np.where(X < 0.3, 0.2 * (X.astype(np.float64) - 0.3), X),
            note="Relu with alpha and threshold"),
    Program("op_reshape", OP, "function (I) -> (O) { O = reshape(I, 6, 4); }", {"I": f32(2, 3, 4)},
            lambda I: I.reshape(6, 4), note="concrete dims (6, 4)"),
    Program("op_reshape_symbolic", OP, "function (I, D0) -> (O) { O = reshape(I, D0, 12); }",
            {"I": f32(2, 3, 4), "D0": scalar(2, "int32")}, lambda I, D0: I.reshape(2, 12),
            note="dims (D0, 12) with D0 a symbolic size passed as an integer input"),
    Program("op_slice_symbolic", OP, """
function (I[D0, D1]) -> (O) {
    O[d0, d1 : min(3, D0)-min(1, D0), D1] = =(I[d0+min(1, D0), d1]);
}""", {"I": f32(5, 3)}, lambda I: _slice(I), note="starts [1], ends [3] on axis 0 of a tensor whose dims are symbolic"),
    Program("op_softmax", OP, """function (I[X, Y]) -> (O) {
    O = builtin_softmax(I, X, Y);
}""", {"I": f32(3, 5)}, lambda I: softmax_rows(I.astype(np.float64))),
    Program("op_sqrt", OP, """function (I) -> (O) {
    IC = (I < 0 ? 0 : I);
    O = sqrt(IC);
}""", {"I": f32(3, 4)}, lambda I: np.sqrt(np.maximum(I.astype(np.float64), 0))),
    Program("op_summation", OP, """function (I[X0, X1]) -> (O) {
    O[x1 : X1] = +(I[x0, x1]);
}""", {"I": f32(4, 5)}, lambda I: I.sum(axis=0), note="axes [0]"),
    Program("op_variance", OP, """function (I[X0, X1], M[Y0, Y1]) -> (O) {
    DIFF_SQ = (I - M) * (I - M);
    SUM[x0 : X0] = +(DIFF_SQ[x0, x1]);
    O = SUM / (X1);
}""", {"I": f32(4, 5), "M": f32(4, 1)}, lambda I, M: ((I.astype(np.float64) - M) ** 2).sum(axis=1) / 5,
        note="axes [1]; M is the keepdims mean input (any values: the program is checked as written)"),
    Program("op_extract_image_patches", OP, """function (I[B,Y,X,D]) -> (O) {
    PAD = I;
    TMP[b, ny, nx, y, x, d: B, 3, 4, 2, 2, D] =
        =(PAD[b, ny * 1 + y * 1, nx * 1 + x * 1, d]);
    O = reshape(TMP, B, 3, 4, 2 * 2 * D);
}""", {"I": f32(1, 4, 5, 2)}, _patches, note="ksizes (1, 2, 2, 1), strides 1, rates 1, VALID on a 1x4x5x2 image"),
    # ------------------------------------------------------------------ tile.py value operators
    binary("t_add", "L + R", f32(3, 4), f32(3, 4), np.add),
    binary("t_sub", "L - R", f32(3, 4), f32(4), np.subtract),
    binary("t_mul", "L * R", f32(3, 4), f32(3, 1), np.multiply),
    binary("t_div", "L / R", f32(3, 4), pos(3, 4), lambda L, R: L.astype(np.float64) / R),
    binary("t_floor_div", "floor(L / R)", f32(3, 4), pos(3, 4), lambda L, R: np.floor(L.astype(np.float64) / R)),
    binary("t_bit_and", "L & R", ints(3, 4, lo=0, hi=255), ints(3, 4, lo=0, hi=255), np.bitwise_and),
    binary("t_bit_or", "L | R", ints(3, 4, lo=0, hi=255), ints(3, 4, lo=0, hi=255), np.bitwise_or),
    binary("t_bit_xor", "L ^ R", ints(3, 4, lo=-50, hi=255), ints(3, 4, lo=0, hi=255), np.bitwise_xor),
    binary("t_shift_left", "L << R", ints(3, 4, lo=0, hi=1000), ints(3, 4, lo=0, hi=7), np.left_shift),
    binary("t_shift_right", "L >> R", ints(3, 4, lo=0, hi=100000), ints(3, 4, lo=0, hi=7), np.right_shift),
    binary("t_ge", "L >= R", f32(3, 4), f32(3, 4), np.greater_equal, dtype="bool"),
    binary("t_lt", "L < R", ints(3, 4), ints(3, 4), np.less, dtype="bool"),
    binary("t_max", "max(L, R)", f32(3, 4), f32(3, 4), np.maximum),
    binary("t_min", "min(L, R)", ints(3, 4), ints(3, 4), np.minimum),
    unary("t_invert", "~I", ints(3, 4, lo=-100, hi=100), np.invert, cite=TILE),
    unary("t_negate", "-I", f32(3, 4), np.negative, cite=TILE),
    unary("t_abs", "abs(I)", ints(3, 4, dtype="int8", lo=-100, hi=100), lambda I: np.abs(I.astype(np.int64)), cite=TILE),
    Program("t_shape_of", TILE, "function (I) -> (O) { O = shape(I); }", {"I": f32(3, 5, 2)},
            lambda I: np.array(I.shape), note="ShapeOf"),
    Program("t_symbolic_dim", TILE, "function (I[D0,D1,D2]) -> (O) { O = D1; }", {"I": f32(3, 5, 2)},
            lambda I: np.array(5), note="SymbolicDim for dimension 1 of a 3-D value: a size used as a value"),
]
