"""Corpus part 5: the Tile text PlaidML's C++ EDSL tests expect PlaidML to print (plaidml2/edsl/
edsl_test.cc, read at 0.7.0): PlaidML's printed programs verbatim, fixed sizes, `_X` names and
function-call operators (add, cmp_lt, cond, ...) included.
"""

# The references name their parameters after the Tile tensors (I, O, _X0, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, f32, pos, relu, scalar, softmax_rows

EDSL = "plaidml/plaidml: plaidml2/edsl/edsl_test.cc @ 0.7.0"


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
]
