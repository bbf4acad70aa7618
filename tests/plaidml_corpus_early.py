"""Corpus part 4: Tile programs of PlaidML's first public Keras backend (plaidml/keras/backend.py at
tag 0.1.3), which writes several ops differently from later versions (cmp_* intrinsics, the
original convolution and pooling templates, depthwise convolution), and op.py's Winograd
convolution (0.7.0).
"""

# The references name their parameters after the Tile tensors (I, O, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, conv, f32, pool, same_pad, scalar

EARLY = "plaidml/plaidml: plaidml/keras/backend.py @ 0.1.3"
OP = "plaidml/plaidml: plaidml/op.py @ 0.7.0"

WINOGRAD_A = np.array([[1, 0], [1, 1], [1, -1], [0, -1]], dtype=np.float32)
WINOGRAD_B = np.array([[1, 0, 0, 0], [0, 1, -1, 1], [-1, 1, 1, 0], [0, 0, 0, -1]], dtype=np.float32)
WINOGRAD_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], dtype=np.float32)


def _cmp(name: str, op: str, ref) -> Program:
    return Program(f"kb013_{name}", EARLY, f"function (B, C) -> (A) {{ A = {op}(B, C); }}",
                   {"B": f32(3, 4), "C": f32(3, 4)}, ref, note="the comparison operators of _Var", dtype="bool")


def _conv_same(I, K):
    (o0, p0), (o1, p1) = same_pad(I.shape[1], 3, 1, False), same_pad(I.shape[2], 3, 1, False)
    return conv(I, K, channels_first=False, strides=(1, 1), dilations=(1, 1), pads=(p0, p1), out=(o0, o1))


def _depthwise(I, K):
    n, l0, l1, c = I.shape
    m = K.shape[3]
    o0, o1 = (l0 - 3 + 2) // 2, (l1 - 3 + 2) // 2
    out = np.zeros((n, o0, o1, c * m))
    for k0 in range(3):
        for k1 in range(3):
            window = I[:, k0:k0 + 2 * o0:2, k1:k1 + 2 * o1:2, :].astype(np.float64)  # (n, o0, o1, c)
            out += (window[..., :, None] * K[k0, k1][None, None, None, :, :]).reshape(n, o0, o1, c * m)
    return out


PROGRAMS: list[Program] = [
    _cmp("cmp_lt", "cmp_lt", np.less),
    _cmp("cmp_le", "cmp_le", np.less_equal),
    _cmp("cmp_gt", "cmp_gt", np.greater),
    _cmp("cmp_ge", "cmp_ge", np.greater_equal),
    Program("kb013_neg", EARLY, "function (B) -> (A) { A = -B; }", {"B": f32(3, 4)}, np.negative),
    Program("kb013_and", EARLY, """function (B, C) -> (A) {
    A = B ? (C ? 1 : 0) : 0;
}""", {"B": Arg((3, 4), "bool"), "C": Arg((3, 4), "bool")}, lambda B, C: (B & C).astype(np.int32),
        note="argmax's max_arg_match"),
    Program("kb013_positive", EARLY, """function (I) -> (O) {
    O = 0 < I;
}""", {"I": Arg((3, 4), "int32", 0, 2)}, lambda I: I > 0, note="argmax's eq_argmax", dtype="bool"),
    Program("kb013_maximum", EARLY, "function (X, Y) -> (R) { R = (X < Y ? Y : X); }",
            {"X": f32(3, 4), "Y": f32(4)}, np.maximum),
    Program("kb013_not_equal", EARLY, "function (X, Y) -> (R) { R = (X != Y); }",
            {"X": Arg((3, 4), "int32", 0, 2), "Y": Arg((3, 4), "int32", 0, 2)}, np.not_equal, dtype="bool"),
    Program("kb013_clip", EARLY, """function (I, MIN_VAL, MAX_VAL) -> (O) {
    M = (I < MAX_VAL ? I : MAX_VAL);
    O = (MIN_VAL < M ? M : MIN_VAL);
}""", {"I": f32(3, 4), "MIN_VAL": scalar(-0.5), "MAX_VAL": scalar(0.25)},
        lambda I, MIN_VAL, MAX_VAL: np.clip(I, -0.5, 0.25)),
    Program("kb013_relu_alpha", EARLY, "function (X, Alpha) -> (R) { R = (X < 0 ? Alpha*X : X); }",
            {"X": f32(3, 4), "Alpha": scalar(0.1)}, lambda X, Alpha: np.where(X < 0, 0.1 * X.astype(np.float64), X)),
    Program("kb013_reverse_grad", EARLY, "function (I, C) -> (O) { O = reverse_grad(I, C); }",
            {"I": f32(3, 4), "C": scalar(2.0)}, lambda I, C: I),
    Program("kb013_shape", EARLY, """function (T) -> (OUT) {
    OUT = shape(T);
}""", {"T": f32(2, 5, 3)}, lambda T: np.array([2, 5, 3])),
    Program("kb013_spatial_2d_padding", EARLY, """
function (I[N, H, W, C]) -> (O) {
    O[n, y, x, c : N, H + 2, W + 3, C] = =(I[n, y - 1, x - 2, c]);
}""", {"I": f32(2, 3, 4, 2)},
        lambda I: np.pad(I.astype(np.float64), [(0, 0), (1, 1), (2, 1), (0, 0)]), note="padding ((1, 1), (2, 1))"),
    Program("kb013_batch_dot_example", EARLY, """function (X[B, M1, M2, M3, D], Y[B, N1, D, N3]) -> (O) {
  O[b, m1, m2, m3, n1, n3: B, M1, M2, M3, N1, N3] = +(X[b, m1, m2, m3, d] * Y[b, n1, d, n3]);
}""", {"X": f32(2, 2, 3, 2, 4), "Y": f32(2, 3, 4, 2)},
        lambda X, Y: np.einsum("bxyzd,bndm->bxyznm", X.astype(np.float64), Y), note="the example in batch_dot's comment"),
    Program("kb013_concatenate_example", EARLY, """function (I0[N0, A0, N2], I1[N0, A1, N2], I2[N0, A2, N2]) -> (O) {
  T0[n0, a, n2: N0, 9, N2] = =(I0[n0, a, n2]);
  T1[n0, a+3, n2: N0, 9, N2] = =(I1[n0, a, n2]);
  T2[n0, a+8, n2: N0, 9, N2] = =(I2[n0, a, n2]);
  O = T0 + T1 + T2;
}""", {"I0": f32(4, 3, 2), "I1": f32(4, 5, 2), "I2": f32(4, 1, 2)},
        lambda I0, I1, I2: np.concatenate([I0, I1, I2], axis=1), note="the example in concatenate's comment"),
    Program("kb013_conv2d_same", EARLY, """function (I[N, L0, L1, CI], K[LK0, LK1, CI, CO]) -> (O) {
  Pad0 = (max(0, ((L0 + 1 - 1) / 1 - 1) * 1 + 3 - L0)) / 2;
  Pad1 = (max(0, ((L1 + 1 - 1) / 1 - 1) * 1 + 3 - L1)) / 2;
  O[n, x0, x1, co : N, (L0 + 1 - 1) / 1, (L1 + 1 - 1) / 1, CO]= +(I[n, 1*x0 + 1*k0 - Pad0, 1*x1 + 1*k1 - Pad1, ci]*K[k0, k1, ci, co]);
}""", {"I": f32(2, 5, 4, 3), "K": f32(3, 3, 3, 2)}, _conv_same,
        note="conv: channels_last, 3x3 kernel, strides 1, padding 'same'"),
    Program("kb013_depthwise_conv2d", EARLY, """function (I[N, L0, L1, C], K[LK0, LK1, C, M]) -> (O) {
  Pad0 = 0;
  Pad1 = 0;
  O[n, x0, x1, c*M + m : N, (L0 - 3 + 2) / 2, (L1 - 3 + 2) / 2, C*M]= +(I[n, 2*x0 + 1*k0 - Pad0, 2*x1 + 1*k1 - Pad1, c]*K[k0, k1, c, m]);
}""", {"I": f32(1, 7, 6, 3), "K": f32(3, 3, 3, 2)}, _depthwise,
        note="conv with channelwise=True: channels_last, 3x3 kernel, strides 2, padding 'valid'"),
    Program("kb013_pool2d_max", EARLY, """function (I[N, C, L0, L1]) -> (O) {
  Pad0 = 0;
  Pad1 = 0;
  O[n, c, x0, x1: N, C, (L0 - 2 + 2) / 2, (L1 - 2 + 2) / 2]= >(I[n, c, 2*x0 + k0 - Pad0, 2*x1 + k1 - Pad1]), k0 < 2, k1 < 2;

}""", {"I": f32(2, 3, 5, 4)},
        lambda I: pool(I, channels_first=True, kernel=(2, 2), strides=(2, 2), pads=(0, 0),
                       out=(I.shape[2] // 2, I.shape[3] // 2), op="max"),
        note="pool2d: channels_first, 2x2 pool, strides 2, padding 'valid', mode 'max'"),
    Program("op_winograd", OP, """
function (I[N, X, Y, CI], K[S, S, CI, CO], A[BI, BO], B[BI, BI], G[BI, S] ) -> (O) {
    Assert = assert_winograd_valid(BI - CI + 1 == BO);
    XO = (X - 3 + 1) / 1;
    YO = (Y - 3 + 1) / 1;
    XB = (XO + BO - 1) / BO;
    YB = (YO + BO - 1) / BO;
    XP = 0;
    YP = 0;
    U1[i, j, ci, co : BI, S, CI, CO] = +(G[i, k] * K[k, j, ci, co]);
    U[i, j, ci, co : BI, BI, CI, CO] = +(U1[i, k, ci, co] * G[j, k]);
    V1[n, i, j, x, y, ci : N, BI, BI, XB, YB, CI] = +(B[k, i] * I[n, BO*x + k - XP, BO*y + j - YP, ci]);
    V[n, i, j, x, y, ci : N, BI, BI, XB, YB, CI] = +(V1[n, i, k, x, y, ci] * B[k, j]);
    M[n, i, j, x, y, co : N, BI, BI, XB, YB, CO] = +(V[n, i, j, x, y, ci] * U[i, j, ci, co]);
    O1[n, i, j, x, y, co : N, BO, BI, XB, YB, CO] = +(A[k, i] * M[n, k, j, x, y, co]);
    O[n, BO*x + i, BO*y + j, co : N, XO, YO, CO] = +(O1[n, i, k, x, y, co] * A[k, j]) no_defract;
}""", {"I": f32(1, 7, 6, 3), "K": f32(3, 3, 3, 2), "A": Arg((4, 2), value=WINOGRAD_A),
       "B": Arg((4, 4), value=WINOGRAD_B), "G": Arg((4, 3), value=WINOGRAD_G)},
        lambda I, K, A, B, G: conv(I, K, channels_first=False, strides=(1, 1), dilations=(1, 1), pads=(0, 0),
                                   out=(I.shape[1] - 2, I.shape[2] - 2)),
        note="Winograd F(2x2, 3x3) (block 4) with op.py's A, B, G transforms, VALID padding; CI = 3 so that "
             "the template's assertion BI - CI + 1 == BO holds. The result is the plain 3x3 convolution"),
]
