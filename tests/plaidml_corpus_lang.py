"""Corpus part 1: Tile programs from PlaidML's tutorial, language tests, builtins and C++ tests.

Each program's text is PlaidML's (leading indentation normalised); each `cite` names the file
and tag it was read at. References follow PlaidML's documented semantics (see plaidml_corpus_base).
"""

# The references name their parameters after the Tile tensors (I, O, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, f32, ints, pos, relu, scalar, sigmoid, softmax_rows

TUTORIAL = "plaidml/plaidml: plaidml/keras/tutorial_test.py @ 0.7.0"
LANG = "plaidml/plaidml: tile/lang/lang_test.cc @ 0.7.0"
BUILTINS = "plaidml/plaidml: tile/lang/builtins.cc @ 0.7.0"
DDEF = "ddef() template of builtins.cc filled with this derivative's expressions"
CPP = "plaidml/plaidml: plaidml/cpp_test.cc @ 0.7.0"
PYTEST = "plaidml/plaidml: plaidml/plaidml_test.py @ 0.7.0"
CTEST = "plaidml/plaidml: plaidml/plaidml_test.cc @ 0.7.0"
UINT8 = "plaidml/plaidml: plaidml/uint8_test.cc @ 0.7.0"
GEN = "plaidml/plaidml: tile/lang/gen_test.cc @ 0.7.0"


def _cumsum(I):
    return np.cumsum(I.astype(np.float64))


def _conv1d_valid(I, K):
    n, length, _ = I.shape
    lk = K.shape[0]
    return sum(np.einsum("nxc,co->nxo", I[:, k:k + length - lk + 1, :].astype(np.float64), K[k]) for k in range(lk))


def _dilated_conv2d(I, K):
    lkx, lky = K.shape[:2]
    ox, oy = I.shape[1] - 2 * (lkx - 1), I.shape[2] - 3 * (lky - 1)
    return sum(np.einsum("nxyc,co->nxyo", I[:, 2 * kx:2 * kx + ox, 3 * ky:3 * ky + oy, :].astype(np.float64), K[kx, ky])
               for kx in range(lkx) for ky in range(lky))


def _strided_conv_derivative(DC, B):
    n, xs, ys, _ = DC.shape
    bi, bj, ci, _ = B.shape
    out = np.zeros((n, bi + xs - 1, bj + 2 * (ys - 1), ci))
    for i in range(bi):
        for j in range(bj):
            for x in range(xs):
                for y in range(ys):
                    out[:, i + x, j + 2 * y, :] += DC[:, x, y, :] @ B[i, j].T
    return out


def _skipping(I):
    out = np.zeros(I.shape[0])
    out[0::2] = I[0::2].sum(axis=1)
    return out


def _valid_maxpool(I, n_out):
    padded = np.concatenate([I, np.full(2 * n_out - len(I), -np.inf)])
    return padded.reshape(n_out, 2).max(axis=1)


def _multidep(I0, I1, I2):
    n0, _, n2 = I0.shape
    t = np.zeros((n0, 6, n2))
    for src, off in ((I0, 0), (I1, 2), (I2, 3)):
        width = min(src.shape[1], 6 - off)
        t[:, off:off + width, :] += src[:, :width, :]
    return t


def _manual_reshape(I):
    f = np.full(12, -np.inf)
    for j in range(I.shape[0]):
        for k in range(I.shape[1]):
            f[3 * j + k] = max(f[3 * j + k], I[j, k])
    return f.reshape(6, 2)


def _scatter_rows(DY, X2, X1):
    out = np.zeros(X1.shape)
    np.add.at(out, X2, DY)
    return out


def _binary_crossentropy(X1, X2):
    return -X2 * np.log(X1) - (1 - X2) * np.log(1 - X1)


PROGRAMS: list[Program] = [
    # ------------------------------------------------------------------ the Tile tutorial
    Program("tut_sum_over_axis", TUTORIAL, """function (I[M, N]) -> (O) {
    O[n: N] = +(I[m, n]);
}""", {"I": f32(4, 5)}, lambda I: I.sum(axis=0)),
    Program("tut_matmul", TUTORIAL, """function (A[M, L], B[L, N]) -> (C) {
    C[i, j: M, N] = +(A[i, k] * B[k, j]);
}""", {"A": f32(3, 4), "B": f32(4, 5)}, lambda A, B: A.astype(np.float64) @ B),
    Program("tut_max_over_axis", TUTORIAL, """function (I[M, N]) -> (O) {
    O[n: N] = >(I[m, n]);
}""", {"I": f32(4, 5)}, lambda I: I.max(axis=0)),
    Program("tut_global_min", TUTORIAL, """function (I) -> (O) {
    Neg = -I;
    O_Neg[] = >(Neg[i, j, k]);
    O = -O_Neg;
}""", {"I": f32(2, 3, 4)}, lambda I: np.array(I.min())),
    Program("tut_mean_over_axis", TUTORIAL, """function (I[X, Y]) -> (O) {
    Sum[y: Y] = +(I[x, y]);
    O = Sum / X;
}""", {"I": f32(4, 5)}, lambda I: I.mean(axis=0)),
    Program("tut_global_mean_awkward", TUTORIAL, """function (I[X, Y]) -> (O) {
    Sum[] = +(I[x, y]);
    PartialMean = Sum / X;
    O = PartialMean / Y;
}""", {"I": f32(4, 5)}, lambda I: np.array(I.mean())),
    Program("tut_global_mean", TUTORIAL, """function (I[X, Y]) -> (O) {
    Sum[] = +(I[x, y]);
    O = Sum / (X * Y);
}""", {"I": f32(4, 5)}, lambda I: np.array(I.mean())),
    Program("tut_broken_maxpool", TUTORIAL, """function (I[N]) -> (O) {
    O[i: N / 2] = >(I[2 * i + j]);
}""", {"I": f32(7)}, lambda I: np.full(len(I) // 2, I.max()),
        note="j is bounded only by I's extent, so every O[i] is the max of all of I (PlaidML's test expects [5, 5])"),
    Program("tut_valid_maxpool", TUTORIAL, """function (I[N]) -> (O) {
    O[i: N / 2] = >(I[2 * i + j]), j < 2;
}""", {"I": f32(7)}, lambda I: _valid_maxpool(I[:6], 3)),
    Program("tut_valid_maxpool_ceil", TUTORIAL, """function (I[N]) -> (O) {
    O[i: (N + 1) / 2] = >(I[2 * i + j]), j < 2;
}""", {"I": f32(7)}, lambda I: _valid_maxpool(I, 4)),
    Program("tut_skipping", TUTORIAL, """function (I[N, M]) -> (O) {
    O[2 * i: N] = +(I[2 * i, j]);
}""", {"I": f32(5, 2)}, _skipping),
    Program("tut_cumsum", TUTORIAL, """function (I[N]) -> (O) {
    O[i: N] = +(I[i - j]), j < N;
}""", {"I": f32(6)}, _cumsum),
    Program("tut_cumsum_k", TUTORIAL, """function (I[N]) -> (O) {
    O[i: N] = +(I[k]), i - k < N;
}""", {"I": f32(6)}, _cumsum),
    Program("tut_conv1d", TUTORIAL, """function (I[N, L, CI], K[LK, CI, CO]) -> (O) {
    O[n, x, co: N, L - LK + 1, CO] = +(I[n, x + k, ci] * K[k, ci, co]);
}""", {"I": f32(2, 8, 3), "K": f32(3, 3, 2)}, _conv1d_valid),
    Program("tut_dilated_conv2d", TUTORIAL, """function (I[N, Lx, Ly, CI], K[LKx, LKy, CI, CO]) -> (O) {
    O[n, x, y, co: N, Lx - 2 * (LKx - 1), Ly - 3 * (LKy - 1), CO] =
            +(I[n, x + 2 * kx, y + 3 * ky, ci] * K[kx, ky, ci, co]);
}""", {"I": f32(2, 6, 10, 3), "K": f32(3, 2, 3, 2)}, _dilated_conv2d),
    # ------------------------------------------------------------------ tile/lang unit tests
    Program("lang_agg_prod", LANG, "O[] = *(A[x,y])", {"A": f32(3, 4, lo=0.5, hi=1.5)},
            lambda A: np.array(np.prod(A.astype(np.float64)))),
    Program("lang_compile_matmul", LANG, "O[i,j] = +(A[i,k] * B[k,j])", {"A": f32(3, 4), "B": f32(4, 5)},
            lambda A, B: A.astype(np.float64) @ B),
    Program("lang_strided_conv_derivative", LANG,
            "DA[n, i + x, j + 2*y, ci] = +(DC[n, x, y, co] * B[i, j, ci, co])",
            {"DC": f32(1, 2, 3, 1), "B": f32(2, 2, 1, 1)}, _strided_conv_derivative,
            note="PlaidML's test gives DA the shape (1, 3, 6, 1): the largest written index plus one"),
    Program("lang_awkward_flatten", LANG, "X_T10[24*n0 + 8*n1 + 4*n2 + n3 : 168] = +(X_I_0[n0, n1, n2, n3])",
            {"X_I_0": f32(7, 3, 2, 4)}, lambda X_I_0: X_I_0.reshape(-1)),
    Program("lang_trivial_parallel", LANG, "O[i] = +(I[2*i])", {"I": f32(10)}, lambda I: I[::2]),
    Program("lang_condense_size_1", LANG, "O[n0, n2, n3] = +(I[n0, n1, n2, n3])", {"I": f32(5, 1, 2, 3)},
            lambda I: I.sum(axis=1)),
    Program("lang_whole_ball_of_wax", LANG,
            "function (A[I,K], B[K,J]) -> (O) { O[i,j : I,J] = +(A[i,k] * B[k,j]); }",
            {"A": f32(3, 4), "B": f32(4, 2)}, lambda A, B: A.astype(np.float64) @ B),
    Program("lang_two_outputs", LANG, "function (I[N]) -> (O1, O2) { O1 = I; O2 = I; }", {"I": f32(3)},
            lambda I: (I, I)),
    Program("lang_program_parsing", LANG, """function (A[X], B[X]) -> (THREE) {
    ONE[] = +(A[x]);
    TWO[] = +(A[x] * B[y]), x+ y< 9, x < 2;
    THREE = relu(TWO);
}""", {"A": f32(5), "B": f32(5)}, lambda A, B: np.array(max(0.0, A[:2].sum() * B.sum()))),
    Program("lang_function_relu", LANG, "function (A) -> (B) { B = relu(A); }", {"A": f32(3, 4)}, relu),
    Program("lang_type_checking", LANG, """function (Input[D, I], Weights[O, I], Biases[O], ReluLeak) -> (Output) {
    O1[d, o : D, O] = +(Weights[o, i] * Input[d, i]);
    O2[d, o : D, O] = +(O1[d, o] * Biases[o]);
    Output = (O2 < 0 ? ReluLeak * O2 : O2);
}""", {"Input": f32(4, 6), "Weights": f32(5, 6), "Biases": ints(5), "ReluLeak": scalar(0.05)},
        lambda Input, Weights, Biases, ReluLeak: (lambda o2: np.where(o2 < 0, 0.05 * o2, o2))(
            (Input.astype(np.float64) @ Weights.T) * Biases),
        note="Biases is int32 and ReluLeak a float scalar, as in PlaidML's test bindings"),
    Program("lang_mean", LANG, """function (Input[D]) -> (Mean) {
    Sum[] = +(Input[i]);
    Mean = Sum / D;
}""", {"Input": f32(11)}, lambda Input: np.array(Input.mean())),
    Program("lang_just_relu", LANG, "function (X[N]) -> (Y) { Y = (X < 0 ? 0 : X); }", {"X": f32(10)}, relu),
    Program("lang_builtin_softmax", LANG, """function (IN[X,Y]) -> (OUT) {
    OUT = builtin_softmax(IN, X, Y);
}""", {"IN": f32(3, 5)}, softmax_rows),
    Program("lang_crossentropy", LANG, """function (Y[I,J], TY[I,J]) -> (E) {
    P = -log(Y) * TY;
\tE[] = +(P[i, j]);
}""", {"Y": pos(3, 4), "TY": f32(3, 4)}, lambda Y, TY: np.array((-np.log(Y.astype(np.float64)) * TY).sum())),
    Program("lang_function_deriv", LANG, """function (X) -> (Y) {
    Y = 3*X*X + exp(X);
}""", {"X": f32(4, 3)}, lambda X: 3 * X.astype(np.float64) ** 2 + np.exp(X.astype(np.float64))),
    Program("lang_switch", LANG, """function (T, X[I, J], Y[I, J]) -> (O) {
    O1[] = +(X[i, j] * Y[j, i]);
    O2[] = +(X[i, j] * Y[i, j]);
    O = T ? O1 : O2;
}""", {"T": scalar(1.0), "X": f32(4, 4), "Y": f32(4, 4)},
        lambda T, X, Y: np.array((X.astype(np.float64) * Y.T).sum() if T else (X.astype(np.float64) * Y).sum())),
    Program("lang_attribute", LANG,
            "function (A[I,K], B[K,J]) -> (O) { [[hello(world)]] O[i,j : I,J] = +(A[i,k] * B[k,j]); }",
            {"A": f32(3, 4), "B": f32(4, 2)}, lambda A, B: A.astype(np.float64) @ B),
    Program("lang_combine_conv_relu", LANG, "function (B[X,Y], C[Y,Z]) -> (A) {   T[x,z:X,Z] = +(B[x,y] * C[y,z]);"
            "   M = (T < 0 ? 0.3 * T : T);   A = (M < 0.9 ? M : 0.9); }",
            {"B": f32(4, 5), "C": f32(5, 3)},
            lambda B, C: (lambda t: np.minimum(np.where(t < 0, 0.3 * t, t), 0.9))(B.astype(np.float64) @ C)),
    Program("lang_tupleism", LANG, """function (A[I, K], B[K, J]) -> (O) {
  T = tuple(A, B);
  C = element(T, 0);
  D = element(T, 1);
  O[i, j : I, J] = +(C[i, k] * D[k, j]);
}""", {"A": f32(4, 5), "B": f32(5, 3)}, lambda A, B: A.astype(np.float64) @ B),
    # ------------------------------------------------------------------ builtins.cc: inline definitions
    Program("bi_abs", BUILTINS, "function (X1) -> (Y) { Y = (X1 < 0 ? -X1 : X1); }", {"X1": f32(3, 4)}, np.abs),
    Program("bi_max", BUILTINS, "function (X1, X2) -> (Y) { Y = (X1 < X2 ? X2 : X1); }",
            {"X1": f32(3, 4), "X2": f32(3, 4)}, np.maximum),
    Program("bi_min", BUILTINS, "function (X1, X2) -> (Y) { Y = (X1 < X2 ? X1 : X2); }",
            {"X1": f32(3, 4), "X2": f32(4)}, np.minimum),
    Program("bi_relu_pid", BUILTINS, """function (X1) -> (Y) {
  [[pid(relu_0)]] C = X1 < 0.0;
  [[pid(relu_1)]] Y = C ? 0.0 : X1;
}""", {"X1": f32(3, 4)}, relu),
    Program("bi_sigmoid", BUILTINS, "function (X1) -> (Y) { Y = (1.0 / (1.0 + exp(-X1))); }",
            {"X1": f32(3, 4)}, lambda X1: sigmoid(X1.astype(np.float64))),
    Program("bi_softmax_definition", BUILTINS, """function (X1, X2, X3) -> (Y) {
  M[i, 0 : X2, 1] = >(X1[i, j]);
  E = exp(X1 - M);
  N[i, 0 : X2, 1] = +(E[i, j]);
  Y = E / N;
}""", {"X1": f32(3, 5), "X2": scalar(3, "int32"), "X3": scalar(5, "int32")},
        lambda X1, X2, X3: softmax_rows(X1.astype(np.float64)),
        note="X2, X3 are the integer sizes builtin_softmax(I, X, Y) passes: scalar inputs used as output sizes"),
    Program("bi_logsoftmax_definition", BUILTINS, """function (X1, X2, X3) -> (Y) {
  M[i, 0 : X2, 1] = >(X1[i, j]);
  E = exp(X1 - M);
  N[i, 0 : X2, 1] = +(E[i, j]);
  Y = X1 - (M + log(N));
}""", {"X1": f32(3, 5), "X2": scalar(3, "int32"), "X3": scalar(5, "int32")},
        lambda X1, X2, X3: np.log(softmax_rows(X1.astype(np.float64)))),
    Program("bi_binary_crossentropy_definition", BUILTINS, """function (X1, X2, X3) -> (Y) {
  Y = -X2*log(X1) - (1-X2)*log(1-X1);
}""", {"X1": f32(3, 4, lo=0.1, hi=0.9), "X2": f32(3, 4, lo=0.0, hi=1.0), "X3": scalar(12, "int32")},
        lambda X1, X2, X3: _binary_crossentropy(X1.astype(np.float64), X2)),
    Program("bi_reverse_grad_definition", BUILTINS, "function (X1, X2) -> (Y) { Y = X1; }",
            {"X1": f32(3, 4), "X2": scalar(0.5)}, lambda X1, X2: X1),
    # ------------------------------------------------------------------ builtins.cc: derivative definitions
    Program("d_abs", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = (X1 < 0 ? -DY : DY);}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: np.where(X1 < 0, -DY, DY), note=DDEF),
    Program("d_acos", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = -DY/sqrt(1 - X1*X1);}",
            {"X1": f32(3, 4, lo=-0.9, hi=0.9), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, Y, DY: -DY / np.sqrt(1 - X1.astype(np.float64) ** 2), note=DDEF),
    Program("d_asin", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = DY/sqrt(1 - X1*X1);}",
            {"X1": f32(3, 4, lo=-0.9, hi=0.9), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, Y, DY: DY / np.sqrt(1 - X1.astype(np.float64) ** 2), note=DDEF),
    Program("d_atan", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = DY/(1 + X1*X1);}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, Y, DY: DY / (1 + X1.astype(np.float64) ** 2), note=DDEF),
    Program("d_mul", BUILTINS, "function (X1, X2, Y, DY) -> (DX1, DX2) {DX1 = X2*DY;DX2 = X1*DY;}",
            {"X1": f32(3, 4), "X2": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, Y, DY: (X2 * DY, X1 * DY), note=DDEF),
    Program("d_div", BUILTINS, "function (X1, X2, Y, DY) -> (DX1, DX2) {DX1 = DY/X2;DX2 = -X1*DY/(X2*X2);}",
            {"X1": f32(3, 4), "X2": pos(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, Y, DY: (DY / X2.astype(np.float64), -X1 * DY.astype(np.float64) / X2.astype(np.float64) ** 2),
            note=DDEF),
    Program("d_cond", BUILTINS,
            "function (X1, X2, X3, Y, DY) -> (DX1, DX2, DX3) {DX1 = 0;DX2 = cond(X1, DY, 0);DX3 = cond(X1, 0, DY);}",
            {"X1": Arg((3, 4), "bool"), "X2": f32(3, 4), "X3": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, X3, Y, DY: (np.array(0), np.where(X1, DY, 0), np.where(X1, 0, DY)), note=DDEF),
    Program("d_recip", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = -Y*Y*DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: -Y.astype(np.float64) * Y * DY, note=DDEF),
    Program("d_sqrt", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = DY/(2*Y);}",
            {"X1": f32(3, 4), "Y": pos(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: DY / (2 * Y.astype(np.float64)), note=DDEF),
    Program("d_exp", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = exp(X1)*DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: np.exp(X1.astype(np.float64)) * DY, note=DDEF),
    Program("d_log", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = DY/X1;}",
            {"X1": pos(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: DY / X1.astype(np.float64), note=DDEF),
    Program("d_neg", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = -DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: -DY, note=DDEF),
    Program("d_pow", BUILTINS,
            "function (X1, X2, Y, DY) -> (DX1, DX2) {DX1 = DY * X2 * pow(X1, X2 - 1);DX2 = log(X1)*Y*DY;}",
            {"X1": pos(3, 4), "X2": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, Y, DY: (DY * X2 * np.power(X1.astype(np.float64), X2 - 1.0), np.log(X1.astype(np.float64)) * Y * DY),
            note=DDEF),
    Program("d_cos", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = -sin(X1) * DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: -np.sin(X1.astype(np.float64)) * DY, note=DDEF),
    Program("d_cosh", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = sinh(X1) * DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: np.sinh(X1.astype(np.float64)) * DY, note=DDEF),
    Program("d_sinh", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = cosh(X1) * DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: np.cosh(X1.astype(np.float64)) * DY, note=DDEF),
    Program("d_tan", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = (1 + Y*Y) * DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: (1 + Y.astype(np.float64) ** 2) * DY, note=DDEF),
    Program("d_tanh", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = DY*(1 - Y*Y);}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: DY * (1 - Y.astype(np.float64) ** 2), note=DDEF),
    Program("d_max", BUILTINS,
            "function (X1, X2, Y, DY) -> (DX1, DX2) {DX1 = X1 < X2 ? 0 : DY;DX2 = X1 < X2 ? DY : 0;}",
            {"X1": f32(3, 4), "X2": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, Y, DY: (np.where(X1 < X2, 0, DY), np.where(X1 < X2, DY, 0)), note=DDEF),
    Program("d_relu", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = (Y <= 0.0 ? 0.0 : DY);}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: np.where(Y <= 0, 0, DY), note=DDEF),
    Program("d_sigmoid", BUILTINS, "function (X1, Y, DY) -> (DX1) {DX1 = Y*(1.0 - Y)*DY;}",
            {"X1": f32(3, 4), "Y": f32(3, 4), "DY": f32(3, 4)}, lambda X1, Y, DY: Y.astype(np.float64) * (1 - Y) * DY, note=DDEF),
    Program("d_gather", BUILTINS, """function (X1, X2, Y, DY) -> (DX1, DX2) {
  DX1 = scatter(DY, X2, X1);
  DX2 = 0;
}""", {"X1": f32(5, 3), "X2": ints(4, lo=0, hi=4), "Y": f32(4, 3), "DY": f32(4, 3)},
        lambda X1, X2, Y, DY: (_scatter_rows(DY, X2, X1), np.array(0)),
        note="scatter(DY, X2, X1): a tensor shaped like X1 whose row X2[i] accumulates DY[i]"),
    Program("d_softmax", BUILTINS, """function (X1, X2, X3, Y, DY) -> (DX1, DX2, DX3) {
  DYY = (DY * Y);
  T[i : X2] = +(DYY[i, j]);
  TB[i, j : X2, X3] = +(T[i]);
  DX1 = DYY - TB * Y;
  DX2 = 0;
  DX3 = 0;
}""", {"X1": f32(3, 5), "X2": scalar(3, "int32"), "X3": scalar(5, "int32"), "Y": f32(3, 5), "DY": f32(3, 5)},
        lambda X1, X2, X3, Y, DY: (lambda dyy: (dyy - dyy.sum(axis=1, keepdims=True) * Y, np.array(0), np.array(0)))(
            DY.astype(np.float64) * Y)),
    Program("d_logsoftmax", BUILTINS, """function (X1, X2, X3, Y, DY) -> (DX1, DX2, DX3) {
  SM = builtin_softmax(X1, X2, X3);
  TDY[i, 0 : X2, 1] = +(DY[i, j]);
  DX1 = DY - SM * TDY;
  DX2 = 0;
  DX3 = 0;
}""", {"X1": f32(3, 5), "X2": scalar(3, "int32"), "X3": scalar(5, "int32"), "Y": f32(3, 5), "DY": f32(3, 5)},
        lambda X1, X2, X3, Y, DY: (DY - softmax_rows(X1.astype(np.float64)) * DY.sum(axis=1, keepdims=True),
                                   np.array(0), np.array(0))),
    Program("d_binary_crossentropy", BUILTINS,
            "function (X1, X2, X3, Y, DY) -> (DX1, DX2, DX3) {DX1 = (-X2/X1 + (1-X2)/(1-X1))/X3;"
            "DX2 = (log(1-X1) - log(X1))/X3;DX3 = 0;}",
            {"X1": f32(3, 4, lo=0.1, hi=0.9), "X2": f32(3, 4, lo=0.0, hi=1.0), "X3": scalar(12, "int32"),
             "Y": f32(3, 4), "DY": f32(3, 4)},
            lambda X1, X2, X3, Y, DY: (lambda x1: ((-X2 / x1 + (1 - X2) / (1 - x1)) / 12,
                                                   (np.log(1 - x1) - np.log(x1)) / 12, np.array(0)))(X1.astype(np.float64)),
            note=DDEF),
    Program("d_reverse_grad", BUILTINS, """function (X1, X2, Y, DY) -> (DX1, DX2) {
  DX1 = -X2*DY;
  DX2 = 0;
}""", {"X1": f32(3, 4), "X2": scalar(0.5), "Y": f32(3, 4), "DY": f32(3, 4)},
        lambda X1, X2, Y, DY: (-0.5 * DY.astype(np.float64), np.array(0))),
    # ------------------------------------------------------------------ PlaidML's C++ / Python API tests
    Program("cpp_weight_mul", CPP, "function (A[I, K], B[J, K]) -> (C) { C[i,j : I, J] = +(A[i, k] * B[j, k]); }",
            {"A": f32(3, 5), "B": f32(4, 5)}, lambda A, B: A.astype(np.float64) @ B.T),
    Program("cpp_add_bias", CPP, "function (A[N, I], B[I]) -> (C) { C[n, i : N, I] = +(A[n, i] + B[i]); }",
            {"A": f32(3, 5), "B": f32(5)}, lambda A, B: A.astype(np.float64) + B),
    Program("cpp_relu", CPP, "function (A) -> (R) { R = (A > 0 ? A : 0); }", {"A": f32(3, 5)}, relu),
    Program("cpp_sq_err", CPP, "function (A, B) -> (R) { D = A - B; S = D * D; R[] = +(S[i, j]); }",
            {"A": f32(3, 5), "B": f32(3, 5)}, lambda A, B: np.array(((A.astype(np.float64) - B) ** 2).sum())),
    Program("cpp_add_update", CPP, "function (X, Alpha, DX) -> (R) { R = X + Alpha * DX; }",
            {"X": f32(4, 5), "Alpha": scalar(-0.25), "DX": f32(4, 5)}, lambda X, Alpha, DX: X - 0.25 * DX.astype(np.float64)),
    Program("cpp_multidep", CPP, """function (I0[N0, A0, N2], I1[N0, A1, N2], I2[N0, A2, N2]) -> (O) {
  T0[n0, a, n2: N0, 6, N2] = +(I0[n0, a, n2]);
  T1[n0, a+2, n2: N0, 6, N2] = +(I1[n0, a, n2]);
  T2[n0, a+3, n2: N0, 6, N2] = +(I2[n0, a, n2]);
  O = T0 + T1 + T2;
}""", {"I0": f32(2, 6, 3), "I1": f32(2, 6, 3), "I2": f32(2, 6, 3)}, _multidep),
    Program("pytest_manual_reshape", PYTEST,
            "function (I) -> (O) { F[3*j + k: 4 * 3] = >(I[j,k]); O[p,q : 6,2] = >(F[2*p + q]);}",
            {"I": f32(4, 3)}, _manual_reshape),
    Program("pytest_matmul", PYTEST, "function (B[X,Z], C[Z,Y]) -> (A) { A[x,y : X,Y] = +(B[x,z] * C[z,y]); }",
            {"B": f32(3, 3), "C": f32(3, 3)}, lambda B, C: B.astype(np.float64) @ C),
    Program("ctest_add", CTEST, "function (A, B) -> (C) { C = A + B; }", {"A": f32(3, 4), "B": f32(4)},
            lambda A, B: A.astype(np.float64) + B, note="B broadcasts against A"),
    Program("uint8_dot", UINT8, "function (A[N], B[N]) -> (C) { C[n : N] = +(A[n] * B[n]); }",
            {"A": ints(3, lo=-3, hi=3), "B": ints(3, dtype="uint8", lo=150, hi=255)},
            lambda A, B: A.astype(np.int64) * B.astype(np.int64),
            note="A is int32 and B uint8 with values above 127, as in the test (200 must not read as -56)"),
    Program("gen_transpose_mul", GEN, """function (A[X, Y], B[Y, X]) -> (C) {
  C[x, y : X, Y] = +(A[x, y] * B[y, x]);
}""", {"A": f32(4, 4), "B": f32(4, 4)}, lambda A, B: A.astype(np.float64) * B.T),
]
