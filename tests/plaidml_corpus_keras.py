"""Corpus part 3: Tile programs of PlaidML's Keras backend (plaidml/keras/backend.py and its tests),
read at 0.7.0. The backend builds most programs from Python templates; each entry's `note` says how
the template was filled.
"""

# The references name their parameters after the Tile tensors (I, O, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Arg, Program, f32, ints, pos, round_half_away, scalar

KERAS = "plaidml/plaidml: plaidml/keras/backend.py @ 0.7.0"
KERAS_TEST = "plaidml/plaidml: plaidml/keras/backend_test.py @ 0.7.0"


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
]
