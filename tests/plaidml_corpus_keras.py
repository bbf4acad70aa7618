"""Corpus part 3: Tile programs of PlaidML's Keras backend (plaidml/keras/backend.py and its tests)
and the Tile text PlaidML's EDSL tests expect to print (plaidml2/edsl/edsl_test.cc), read at 0.7.0.

The Keras backend builds most programs from Python templates; each entry's `note` says how the
template was filled. The EDSL programs are PlaidML's printed text verbatim, fixed sizes included.
"""

# The references name their parameters after the Tile tensors (I, O, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, f32, ints, pos, relu, round_half_away, scalar, softmax_rows

KERAS = "plaidml/plaidml: plaidml/keras/backend.py @ 0.7.0"
KERAS_TEST = "plaidml/plaidml: plaidml/keras/backend_test.py @ 0.7.0"
EDSL = "plaidml/plaidml: plaidml2/edsl/edsl_test.cc @ 0.7.0"
EDSL_PY = "plaidml/plaidml: plaidml2/edsl/edsl_test.py @ 0.7.0"


def _resize_bilinear(I, HBase, WBase):
    hf, wf = len(HBase), len(WBase)
    hk = np.array([sum(HBase[y + j - hf + 1] for j in range(hf) if 0 <= y + j - hf + 1 < hf) for y in range(2 * hf - 1)])
    wk = np.array([sum(WBase[x + i - wf + 1] for i in range(wf) if 0 <= x + i - wf + 1 < wf) for x in range(2 * wf - 1)])
    k = np.outer(hk, wk)
    n, h, w, c = I.shape
    out = np.zeros((n, hf * h, wf * w, c))
    for j in range(2 * hf - 1):
        for i in range(2 * wf - 1):
            for y in range(h):
                oy = hf * y + j - hf + 1
                if not 0 <= oy < hf * h:
                    continue
                for x in range(w):
                    ox = wf * x + i - wf + 1
                    if 0 <= ox < wf * w:
                        out[:, oy, ox, :] += I[:, y, x, :] * k[j, i]
    return out


def _time_expand(I, P=None, step=0):
    out = np.zeros((I.shape[0], 4, I.shape[1])) if P is None else np.broadcast_to(P, (I.shape[0], 4, I.shape[1])).copy()
    out[:, step, :] = I
    return out


def _pad(I, before, after):
    return np.pad(I.astype(np.float64), [(0, 0)] + list(zip(before, after)) + [(0, 0)])


def _repeat_elts(X):
    return np.repeat(X, 3, axis=1)


def _use_default(X0, X1):
    out = X0.astype(np.float64).copy()
    out[:, 3, :, :] = X1
    return out


def _lars(X1, X3, X6, X11):
    x9 = np.sqrt((X6.astype(np.float64) ** 2).sum())
    x14 = np.sqrt((X11.astype(np.float64) ** 2).sum())
    x18 = (X3 * 0.000977 * x9) / (x14 + 0.000488 * x9)
    x23 = 0.125 * X1 + x18 * (X11 + 0.000488 * X6)
    return X6 - x23, x23


def _complex_conv(X0, X1):
    out = np.zeros((1, 112, 112, 3, 32))
    rows = 2 * np.arange(112)
    for kx in range(X1.shape[0]):
        for ky in range(X1.shape[1]):
            iy, ix = rows - 2 + 3 * kx, rows - 2 + 3 * ky
            oky, okx = (iy >= 0) & (iy < X0.shape[1]), (ix >= 0) & (ix < X0.shape[2])
            window = X0[:, np.clip(iy, 0, X0.shape[1] - 1)][:, :, np.clip(ix, 0, X0.shape[2] - 1)].astype(np.float64)
            window = window * (oky[None, :, None, None, None] & okx[None, None, :, None, None])
            out += np.einsum("nxygc,gco->nxygo", window, X1[kx, ky])
    return out


def _defract(I, K):
    """O[x0] = sum over x1 of I[(1 + x0 - x1) / 2] * K[x1], only where the index is an integer."""
    out = np.zeros(5)
    for x0 in range(5):
        for x1 in range(len(K)):
            if (1 + x0 - x1) % 2 == 0 and 0 <= (1 + x0 - x1) // 2 < len(I):
                out[x0] += I[(1 + x0 - x1) // 2] * K[x1]
    return out


def _defract_short(I):
    out = np.zeros(6)
    for x0 in range(6):
        if (x0 - 1) % 2 == 0 and 0 <= (x0 - 1) // 2 < len(I):
            out[x0] += I[(x0 - 1) // 2]
    return out


def _defract_long(I, K):
    """The transposed convolution, every access bounds-checked (x2, x4 range over K's extents)."""
    out = np.zeros((1, 5, 5, 1))
    for x1, x3, x6, x5 in np.ndindex(5, 5, 1, I.shape[3]):
        for x2 in range(3 - K.shape[0], 3):
            for x4 in range(3 - K.shape[1], 3):
                a, b = x1 + x2 - 1, x3 + x4 - 1
                if a % 2 or b % 2 or not (0 <= a // 2 < I.shape[1] and 0 <= b // 2 < I.shape[2]):
                    continue
                if x6 < K.shape[2] and x5 < K.shape[3]:
                    out[0, x1, x3, x6] += I[0, a // 2, b // 2, x5] * K[2 - x2, 2 - x4, x6, x5]
    return out


def _complex_conv_py(X0, X1):
    per_row = np.zeros((112, 3, 32))
    for x1 in range(112):
        for x2, x3 in np.ndindex(3, 3):
            iy, ix = -1 + x1 + x2, -1 + 2 * x1 + 2 * x3
            if 0 <= iy < X0.shape[1] and 0 <= ix < X0.shape[2]:
                per_row[x1] += np.einsum("gc,gco->go", X0[0, iy, ix].astype(np.float64), X1[x2, x3])
    return np.broadcast_to(per_row, (1, 224, 112, 3, 32))


def _multi_dot_grads(A, B):
    a, b = A.astype(np.float64), B.astype(np.float64)
    x0 = a @ b
    x1 = a @ x0
    x4 = (x1 == x1.max(axis=0, keepdims=True)).astype(np.float64)
    x5 = a.T @ x4
    return x4 @ x0.T + x5 @ b.T, a.T @ x5


def _dot_sqrt_grads(A, B):
    a, b = A.astype(np.float64), B.astype(np.float64)
    x6 = 1.0 / (2 * np.sqrt(a @ b))
    return x6 @ b.T, a.T @ x6


PROGRAMS: list[Program] = [
    Program("kb_batch_flatten", KERAS, "function (I[N0, N1, N2]) -> (O) {\n  O = reshape(I, N0, N1*N2);\n}",
            {"I": f32(2, 3, 4)}, lambda I: I.reshape(2, 12), note="3-D input"),
    Program("kb_categorical_crossentropy_1d", KERAS, """function (O[Y], T[Y]) -> (R) {
    LO = log(O);
    TR[] = +(T[y] * LO[y]);
    R = -TR;
}""", {"O": pos(5), "T": f32(5, lo=0, hi=1)}, lambda O, T: np.array(-(T * np.log(O.astype(np.float64))).sum())),
    Program("kb_categorical_crossentropy_2d", KERAS, """function (O[X0,Y], T[X0,Y]) -> (R) {
    LO = log(O);
    TR[x0:X0] = +(T[x0,y] * LO[x0,y]);
    R = -TR;
}""", {"O": pos(3, 5), "T": f32(3, 5, lo=0, hi=1)}, lambda O, T: -(T * np.log(O.astype(np.float64))).sum(axis=1),
        note="2-D output"),
    Program("kb_expand_dims", KERAS, """function (IN[S0, S1]) -> (OUT) {
    OUT[i0, 0, i1 : S0, 1, S1] = =(IN[i0, i1]);
}""", {"IN": f32(3, 4)}, lambda IN: IN[:, None, :], note="axis 1 of a 2-D tensor"),
    Program("kb_hard_sigmoid", KERAS, "function (X) -> (R) { R = (X < -2.5 ? 0 : (X > 2.5 ? 1 : 0.2 * X + 0.5)); }",
            {"X": f32(4, 5, lo=-4, hi=4)}, lambda X: np.clip(0.2 * X.astype(np.float64) + 0.5, 0, 1)),
    Program("kb_one_hot", KERAS, """function (Idx[I0], Count[C]) -> (O) {
    O[i0, c : I0, C] = =(Idx[i0] == Count[c]);
}""", {"Idx": ints(5, lo=0, hi=3), "Count": Arg((4,), "int32", value=np.arange(4))},
        lambda Idx, Count: (Idx[:, None] == Count[None, :]).astype(np.float64),
        note="1-D indices, 4 classes (Count is the arange the backend passes)"),
    Program("kb_ones_like", KERAS, """function (IN[S0, S1], ONE[SZ]) -> (OUT) {
    OUT[i0, i1 : S0, S1] = =(ONE[0]);
}""", {"IN": f32(3, 4), "ONE": Arg((1,), value=1.0)}, lambda IN, ONE: np.ones((3, 4)), note="2-D"),
    Program("kb_zeros_like", KERAS, """function (IN[S0, S1, S2], ZERO[SZ]) -> (OUT) {
    OUT[i0, i1, i2 : S0, S1, S2] = =(ZERO[0]);
}""", {"IN": f32(2, 3, 4), "ZERO": Arg((1,), value=0.0)}, lambda IN, ZERO: np.zeros((2, 3, 4)), note="3-D"),
    Program("kb_permute_dimensions", KERAS, """function (X[X0, X1, X2]) -> (R) {
    R[x2, x0, x1 : X2, X0, X1] = =(X[x0, x1, x2]);
}""", {"X": f32(2, 3, 4)}, lambda X: X.transpose(2, 0, 1), note="pattern (2, 0, 1)"),
    Program("kb_repeat", KERAS, """function (I[N0, N1]) -> (O) {
    O[i0, r, i1: N0, 3, N1] = =(I[i0, i1]);
}""", {"I": f32(2, 4)}, lambda I: np.repeat(I[:, None, :], 3, axis=1), note="n = 3"),
    Program("kb_repeat_elements", KERAS, """function (I[N0, N1, N2]) -> (O) {
    O[n0, 3*n1 + k, n2 : N0, 3*N1, N2] = =(I[n0, n1, n2]), k < 3 no_defract;
}""", {"I": f32(2, 3, 2)}, lambda I: np.repeat(I, 3, axis=1), note="rep 3, axis 1"),
    Program("kb_resize_images_bilinear", KERAS, """function (I[N, H, W, C], HBase[HFactor], WBase[WFactor]) -> (O) {
    HK[y : 2*HFactor - 1] = +(HBase[y + j - HFactor + 1]), j < HFactor;
    WK[x : 2*WFactor - 1] = +(WBase[x + i - WFactor + 1]), i < WFactor;
    K[y, x: 2*HFactor - 1, 2*WFactor - 1] = =(HK[y] * WK[x]);
    O[n, HFactor*h + j - HFactor + 1, WFactor*w + i - WFactor + 1, c : N, HFactor*H, WFactor*W, C] = +(I[n, h, w, c] * K[j, i]);
}""", {"I": f32(1, 3, 4, 2), "HBase": Arg((2,), value=0.5), "WBase": Arg((3,), value=1.0 / 3)}, _resize_bilinear,
        note="channels_last, height factor 2, width factor 3 (HBase, WBase as the backend builds them)"),
    Program("kb_reverse", KERAS, """function (I[N0, N1]) -> (O) {
    O[i0, N1 - 1 - i1: N0, N1] = =(I[i0, i1]);
}""", {"I": f32(3, 4)}, lambda I: I[:, ::-1], note="axes [1]"),
    Program("kb_time_expand_first", KERAS, "function (I[B, N0]) -> (O) { O[b, 0, i0 : B, 4, N0] = =(I[b, i0]); }",
            {"I": f32(2, 3)}, lambda I: _time_expand(I), note="rnn's time_expand at step 0 of 4"),
    Program("kb_time_expand_default", KERAS,
            "function (I[B, N0], P) -> (O) { O[b, 2, i0 : B, 4, N0] = =(I[b, i0]) default P; }",
            {"I": f32(2, 3), "P": f32(2, 4, 3)}, lambda I, P: _time_expand(I, P, 2), note="rnn's time_expand at step 2 of 4"),
    Program("kb_spatial_2d_padding", KERAS, """function (I[N, D0, D1, C]) -> (O) {
    O[n, d0, d1, c : N, D0 + 2, D1 + 2, C] = =(I[n, d0 - 1, d1 - 2, c]);
}""", {"I": f32(2, 3, 4, 2)}, lambda I: _pad(I, (1, 2), (1, 0)), note="channels_last, padding ((1, 1), (2, 0))"),
    Program("kb_temporal_padding", KERAS, """function (I[N, D0, C]) -> (O) {
    O[n, d0, c : N, D0 + 3, C] = =(I[n, d0 - 1, c]);
}""", {"I": f32(2, 4, 3)}, lambda I: _pad(I, (1,), (2,)), note="padding (1, 2)"),
    Program("kb_switch", KERAS, "function (C, T, E) -> (O) { O = (C ? T : E); }",
            {"C": Arg((3, 4), "bool"), "T": f32(3, 4), "E": f32(3, 4)}, np.where),
    Program("kb_tile", KERAS, """function (I[S0, S1]) -> (O) {
    O[t0 * S0 + i0, t1 * S1 + i1 : S0 * 2, S1 * 3] = =(I[i0, i1]), t0 < 2, t1 < 3 no_defract;
}""", {"I": f32(2, 3)}, lambda I: np.tile(I, (2, 3)), note="n = (2, 3)"),
    Program("kb_sign", KERAS, "function (I) -> (O) { O = I == 0 ? 0 : (I > 0 ? 1 : -1); }",
            {"I": Arg((3, 4), choices=(-2.0, 0.0, 1.5))}, np.sign, note="unary_op"),
    Program("kb_round", KERAS, "function (I) -> (O) { O = round(I); }", {"I": f32(3, 4, lo=-5, hi=5)},
            round_half_away, note="unary_op"),
    Program("kb_reverse_gradient", KERAS, "function (L, R) -> (O) { O = reverse_grad(L, R); }",
            {"L": f32(3, 4), "R": scalar(1.0)}, lambda L, R: L, note="binary_op; forward value is L"),
    Program("kb_assignment_single_writer", KERAS_TEST, """function (A[L, M], B[M, N]) -> (O) {
    O[i, k: L, N] = =(A[i, j] * B[j, k]);
}""", {"A": f32(5, 1), "B": f32(1, 5)}, lambda A, B: A.astype(np.float64) @ B,
        note="testAssignmentExceptions: each cell is written by exactly one tuple"),
    # ------------------------------------------------------------------ EDSL tests' expected Tile text
    Program("edsl_mnist_mlp", EDSL, """function (
  _X0[_X0_0, _X0_1],
  _X1[_X1_0, _X1_1],
  _X3[_X3_0],
  _X9[_X9_0, _X9_1],
  _X11[_X11_0],
  _X17[_X17_0, _X17_1],
  _X19[_X19_0]
) -> (
  _X25
) {
  _X2[i, j : 1, 512] = +(_X0[i, k] * _X1[k, j]);
  _X4 = add(_X2, _X3);
  _X5 = 0.000000;
  _X6 = cmp_lt(_X4, _X5);
  _X7 = 0.000000;
  _X8 = cond(_X6, _X7, _X4);
  _X10[i, j : 1, 512] = +(_X8[i, k] * _X9[k, j]);
  _X12 = add(_X10, _X11);
  _X13 = 0.000000;
  _X14 = cmp_lt(_X12, _X13);
  _X15 = 0.000000;
  _X16 = cond(_X14, _X15, _X12);
  _X18[i, j : 1, 10] = +(_X16[i, k] * _X17[k, j]);
  _X20 = add(_X18, _X19);
  _X21[x0, 0 : 1, 1] = >(_X20[x0, x1]);
  _X22 = sub(_X20, _X21);
  _X23 = exp(_X22);
  _X24[x0, 0 : 1, 1] = +(_X23[x0, x1]);
  _X25 = div(_X23, _X24);
}""", {"_X0": f32(1, 784), "_X1": f32(784, 512, lo=-0.05, hi=0.05), "_X3": f32(512), "_X9": f32(512, 512, lo=-0.05, hi=0.05),
       "_X11": f32(512), "_X17": f32(512, 10, lo=-0.05, hi=0.05), "_X19": f32(10)},
        lambda _X0, _X1, _X3, _X9, _X11, _X17, _X19: softmax_rows(
            relu(relu(_X0.astype(np.float64) @ _X1 + _X3) @ _X9 + _X11) @ _X17 + _X19), note="MnistMlp"),
    Program("edsl_lars_momentum4d", EDSL, """function (
  _X1[_X1_0, _X1_1, _X1_2, _X1_3],
  _X3[],
  _X6[_X6_0, _X6_1, _X6_2, _X6_3],
  _X11[_X11_0, _X11_1, _X11_2, _X11_3]
) -> (
  _X24,
  _X23
) {
  _X0 = 0.125000;
  _X2 = mul(_X0, _X1);
  _X4 = 0.000977;
  _X5 = mul(_X3, _X4);
  _X7 = mul(_X6, _X6);
  _X8[] = +(_X7[x0, x1, x2, x3]);
  _X9 = sqrt(_X8);
  _X10 = mul(_X5, _X9);
  _X12 = mul(_X11, _X11);
  _X13[] = +(_X12[x0, x1, x2, x3]);
  _X14 = sqrt(_X13);
  _X15 = 0.000488;
  _X16 = mul(_X15, _X9);
  _X17 = add(_X14, _X16);
  _X18 = div(_X10, _X17);
  _X19 = 0.000488;
  _X20 = mul(_X19, _X6);
  _X21 = add(_X11, _X20);
  _X22 = mul(_X18, _X21);
  _X23 = add(_X2, _X22);
  _X24 = sub(_X6, _X23);
}""", {"_X1": f32(4, 7, 3, 9), "_X3": scalar(0.5), "_X6": f32(4, 7, 3, 9), "_X11": f32(4, 7, 3, 9)}, _lars),
    Program("edsl_repeat_elts", EDSL, """function (
  _X0[_X0_0, _X0_1, _X0_2]
) -> (
  _X1
) {
  _X1[x0, 3*x1 + x3, x2 : 10, 30, 10] = =(_X0[x0, x1, x2]), x3 < 3 no_defract;
}""", {"_X0": f32(10, 10, 10)}, _repeat_elts),
    Program("edsl_use_default", EDSL, """function (
  _X0[_X0_0, _X0_1, _X0_2, _X0_3],
  _X1[_X1_0, _X1_1, _X1_2]
) -> (
  _X2
) {
  _X2[x0, 3, x1, x2 : 1, 7, 10, 10] = =(_X1[x0, x1, x2]) default _X0;
}""", {"_X0": f32(1, 7, 10, 10), "_X1": f32(1, 10, 10)}, _use_default),
    Program("edsl_arg_max", EDSL, """function (
  _X0[_X0_0, _X0_1, _X0_2]
) -> (
  _X8
) {
  _X1[x0, x2 : 1, 10] = >(_X0[x0, x1, x2]);
  _X2 = 1;
  _X3[x0 : 10] = =(_X2[]);
  _X4 = 0;
  _X5 = index(_X3, _X4);
  _X6[x0, x2 : 1, 10] = >(_X0[x0, x1, x2] == _X1[x0, x2] ? _X5[x1]);
  _X7 = 32;
  _X8 = as_uint(_X6, _X7);
}""", {"_X0": f32(1, 10, 10)}, lambda _X0: np.argmax(_X0, axis=1), dtype="uint32"),
    Program("edsl_unique_names", EDSL, """function (
  A[A_0],
  B[B_0],
  C[C_0],
  C0[C0_0]
) -> (
  _X2
) {
  _X0 = add(A, B);
  _X1 = add(_X0, C);
  _X2 = add(_X1, C0);
}""", {"A": f32(5), "B": f32(5), "C": f32(5), "C0": f32(5)}, lambda A, B, C, C0: A.astype(np.float64) + B + C + C0),
    Program("edsl_global_min", EDSL, """function (
  I[I_0, I_1, I_2]
) -> (
  _X2
) {
  _X0 = neg(I);
  _X1[] = >(_X0[x0, x1, x2]);
  _X2 = neg(_X1);
}""", {"I": f32(3, 4, 5)}, lambda I: np.array(I.min())),
    Program("edsl_cumsum", EDSL, """function (
  I[I_0]
) -> (
  _X0
) {
  _X0[x1 : 10] = +(I[x0]), -x0 + x1 < 10;
}""", {"I": f32(10)}, lambda I: np.cumsum(I.astype(np.float64))),
    Program("edsl_complex_conv_2d", EDSL, """function (
  _X0[_X0_0, _X0_1, _X0_2, _X0_3, _X0_4],
  _X1[_X1_0, _X1_1, _X1_2, _X1_3, _X1_4]
) -> (
  _X2
) {
  _X2[x0, x1, x3, x5, x7 : 1, 112, 112, 3, 32] = +(_X0[x0, -2 + 2*x1 + 3*x2, -2 + 2*x3 + 3*x4, x5, x6] * _X1[x2, x4, x5, x6, x7]);
}""", {"_X0": f32(1, 224, 224, 3, 3), "_X1": f32(3, 3, 3, 3, 32)}, _complex_conv,
        note="grouped, strided and dilated convolution with padding 2"),
    Program("edsl_reciprocal", EDSL, """function (
  A[A_0]
) -> (
  _X1
) {
  _X0 = 1;
  _X1 = div(_X0, A);
}""", {"A": pos(10)}, lambda A: 1.0 / A.astype(np.float64)),
    Program("edsl_select", EDSL, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X5
) {
  _X1 = 0;
  _X2 = cmp_eq(_X0, _X1);
  _X3 = 0;
  _X4 = 1;
  _X5 = cond(_X2, _X3, _X4);
}""", {"_X0": Arg((3, 4), choices=(0.0, 1.0, -2.0))}, lambda _X0: np.where(_X0 == 0, 0, 1)),
    Program("edsl_shape", EDSL, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X1
) {
  _X1 = shape(_X0);
}""", {"_X0": f32(2, 3)}, lambda _X0: np.array([2, 3])),
    Program("edsl_gradient_dot", EDSL, """function (
  A[A_0, A_1],
  B[B_0, B_1]
) -> (
  _X3,
  _X2
) {
  _X0 = 1.000000;
  _X1[x0, x1 : 100, 100] = +(_X0[]);
  _X2[k, j : 100, 100] = +(A[i, k] * _X1[i, j]);
  _X3[i, k : 100, 100] = +(_X1[i, j] * B[k, j]);
}""", {"A": f32(100, 100), "B": f32(100, 100)},
        lambda A, B: (np.ones((100, 100)) @ B.T.astype(np.float64), A.T.astype(np.float64) @ np.ones((100, 100)))),
    Program("edsl_gradient_multi_dot", EDSL, """function (
  A[A_0, A_1],
  B[B_0, B_1]
) -> (
  _X9,
  _X6
) {
  _X0[i, j : 100, 100] = +(A[i, k] * B[k, j]);
  _X1[i, j : 100, 100] = +(A[i, k] * _X0[k, j]);
  O[n : 100] = >(_X1[m, n]);
  _X2 = 1.000000;
  _X3[x0 : 100] = +(_X2[]);
  _X4[m, n : 100, 100] = +(_X1[m, n] == O[n] ? _X3[n]);
  _X5[k, j : 100, 100] = +(A[i, k] * _X4[i, j]);
  _X6[k, j : 100, 100] = +(A[i, k] * _X5[i, j]);
  _X7[i, k : 100, 100] = +(_X4[i, j] * _X0[k, j]);
  _X8[i, k : 100, 100] = +(_X5[i, j] * B[k, j]);
  _X9 = add(_X7, _X8);
}""", {"A": f32(100, 100), "B": f32(100, 100)}, _multi_dot_grads),
    Program("edsl_gradient_dot_sqrt", EDSL, """function (
  A[A_0, A_1],
  B[B_0, B_1]
) -> (
  _X8,
  _X7
) {
  _X0 = 1.000000;
  _X1[x0, x1 : 100, 100] = +(_X0[]);
  _X2 = 2;
  _X3[i, j : 100, 100] = +(A[i, k] * B[k, j]);
  _X4 = sqrt(_X3);
  _X5 = mul(_X2, _X4);
  _X6 = div(_X1, _X5);
  _X7[k, j : 100, 100] = +(A[i, k] * _X6[i, j]);
  _X8[i, k : 100, 100] = +(_X6[i, j] * B[k, j]);
}""", {"A": f32(100, 100, lo=0.1, hi=1.0), "B": f32(100, 100, lo=0.1, hi=1.0)}, _dot_sqrt_grads),
    # ------------------------------------------------------------------ the Python EDSL tests' expected Tile text
    Program("edslpy_sum_over_axis", EDSL_PY, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X1
) {
  _X1[x1 : 784] = +(_X0[x0, x1]);
}""", {"_X0": f32(1, 784)}, lambda _X0: _X0.sum(axis=0)),
    Program("edslpy_max_over_axis", EDSL_PY, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X1
) {
  _X1[x1 : 784] = >(_X0[x0, x1]);
}""", {"_X0": f32(1, 784)}, lambda _X0: _X0.max(axis=0)),
    Program("edslpy_matmul", EDSL_PY, """function (
  _X0[_X0_0, _X0_1],
  _X1[_X1_0, _X1_1]
) -> (
  _X2
) {
  _X2[x0, x2 : 1, 784] = +(_X0[x0, x1] * _X1[x1, x2]);
}""", {"_X0": f32(1, 784), "_X1": f32(784, 784, lo=-0.1, hi=0.1)}, lambda _X0, _X1: _X0.astype(np.float64) @ _X1),
    Program("edslpy_avg_stages", EDSL_PY, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X3
) {
  _X1[] = +(_X0[x0, x1]);
  _X2 = 784;
  _X3 = div(_X1, _X2);
}""", {"_X0": f32(1, 784)}, lambda _X0: np.array(_X0.mean())),
    Program("edslpy_max_pool_1d", EDSL_PY, """function (
  I[I_0]
) -> (
  _X0
) {
  _X0[x0 : 5] = >(I[2*x0 + x1]), x1 < 2;
}""", {"I": f32(10)}, lambda I: I.reshape(5, 2).max(axis=1)),
    Program("edslpy_skip", EDSL_PY, """function (
  _X0[_X0_0, _X0_1]
) -> (
  _X1
) {
  _X1[2*x0 : 784] = +(_X0[2*x0, x1]);
}""", {"_X0": f32(1, 784)}, lambda _X0: np.concatenate([[_X0[0].sum()], np.zeros(783)])),
    Program("edslpy_conv_1d", EDSL_PY, """function (
  _X0[_X0_0, _X0_1, _X0_2],
  _X1[_X1_0, _X1_1, _X1_2]
) -> (
  _X2
) {
  _X2[x0, x1, x4 : 1, 222, 1] = +(_X0[x0, x1 + x2, x3] * _X1[x2, x3, x4]);
}""", {"_X0": f32(1, 224, 3), "_X1": f32(3, 3, 1)},
        lambda _X0, _X1: sum(np.einsum("nxc,co->nxo", _X0[:, k:k + 222, :].astype(np.float64), _X1[k]) for k in range(3))),
    Program("edslpy_conv_2d_dilated", EDSL_PY, """function (
  _X0[_X0_0, _X0_1, _X0_2, _X0_3],
  _X1[_X1_0, _X1_1, _X1_2, _X1_3]
) -> (
  _X2
) {
  _X2[x0, x1, x3, x6 : 1, 220, 218, 32] = +(_X0[x0, x1 + 2*x2, x3 + 3*x4, x5] * _X1[x2, x4, x5, x6]);
}""", {"_X0": f32(1, 224, 224, 1), "_X1": f32(3, 3, 1, 32)},
        lambda _X0, _X1: sum(np.einsum("nxyc,co->nxyo", _X0[:, 2 * a:2 * a + 220, 3 * b:3 * b + 218, :].astype(np.float64), _X1[a, b])
                             for a in range(3) for b in range(3))),
    Program("edslpy_complex_conv_2d", EDSL_PY, """function (
  _X0[_X0_0, _X0_1, _X0_2, _X0_3, _X0_4],
  _X1[_X1_0, _X1_1, _X1_2, _X1_3, _X1_4]
) -> (
  _X2
) {
  _X2[x0, x7, x1, x4, x6 : 1, 224, 112, 3, 32] = +(_X0[x0, -1 + x1 + x2, -1 + 2*x1 + 2*x3, x4, x5] * _X1[x2, x3, x4, x5, x6]);
}""", {"_X0": f32(1, 224, 224, 3, 3), "_X1": f32(3, 3, 3, 3, 32)}, _complex_conv_py,
        note="as printed by PlaidML: x7 appears only on the left (every x7 gets the same value)"),
    Program("edslpy_arg_max", EDSL_PY, """function (
  _X0[_X0_0, _X0_1, _X0_2],
  _X2[]
) -> (
  _X8
) {
  _X1[x0, x2 : 1, 10] = >(_X0[x0, x1, x2]);
  _X3[x0 : 10] = =(_X2[]);
  _X4 = 0;
  _X5 = index(_X3, _X4);
  _X6[x0, x2 : 1, 10] = >(_X0[x0, x1, x2] == _X1[x0, x2] ? _X5[x1]);
  _X7 = 32;
  _X8 = as_uint(_X6, _X7);
}""", {"_X0": f32(1, 10, 10), "_X2": scalar(1.0)}, lambda _X0, _X2: np.argmax(_X0, axis=1), dtype="uint32"),
    Program("edslpy_scalar_adds", EDSL_PY, """function (
  A[],
  B[],
  C[],
  C0[]
) -> (
  _X2
) {
  _X0 = add(A, B);
  _X1 = add(_X0, C);
  _X2 = add(_X1, C0);
}""", {"A": f32(), "B": f32(), "C": f32(), "C0": f32()}, lambda A, B, C, C0: np.array(A.astype(np.float64) + B + C + C0),
        note="test_invalid_shape_error's program"),
    Program("edslpy_defract", EDSL_PY, """function (
  I[I_0],
  K[K_0]
) -> (
  _X0
) {
  _X0[x0 : 5] = +(I[1/2 + 1/2*x0 - 1/2*x1] * K[x1]);
}""", {"I": f32(3), "K": f32(3)}, _defract,
        note="rational index: a tuple contributes only where it is an integer (PlaidML's test: I = K = [1, 2, 3] "
             "gives [2, 5, 4, 9, 6])"),
    Program("edslpy_defract_short", EDSL_PY, """function (
  I[I_0]
) -> (
  _X0
) {
  _X0[x0 : 6] = +(I[-1/2 + 1/2*x0]);
}""", {"I": f32(3)}, _defract_short, note="PlaidML's test: I = [1, 2, 3] gives [0, 1, 0, 2, 0, 3]"),
    Program("edslpy_defract_long", EDSL_PY, """function (
  I[I_0, I_1, I_2, I_3],
  K[K_0, K_1, K_2, K_3]
) -> (
  _X0
) {
  _X0[x0, x1, x3, x6 : 1, 5, 5, 1] = +(I[x0, -1/2 + 1/2*x1 + 1/2*x2, -1/2 + 1/2*x3 + 1/2*x4, x5] * K[2 - x2, 2 - x4, x6, x5]);
}""", {"I": f32(1, 3, 3, 1), "K": f32(1, 3, 3, 1)}, _defract_long,
        note="a transposed (fractionally strided) convolution; the test binds K with shape [1, 3, 3, 1] "
             "like I, so K[2 - x2, ...] reaches only row 0 of K's first axis"),
    Program("edslpy_identity", EDSL_PY, """function (
  I[I_0]
) -> (
  _X0
) {
  _X0 = ident(I);
}""", {"I": f32(3)}, lambda I: I),
    Program("edslpy_two_idents", EDSL_PY, """function (
  I[I_0]
) -> (
  _X1,
  _X0
) {
  _X0 = ident(I);
  _X1 = ident(I);
}""", {"I": f32(3)}, lambda I: (I, I), note="test_assignment_exceptions' program"),
]
