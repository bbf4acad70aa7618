"""Corpus part 6: the Tile text PlaidML's Python EDSL tests expect PlaidML to print (plaidml2/edsl/
edsl_test.py, read at 0.7.0), verbatim. The 'defract' programs have rational index coefficients: a
tuple contributes only where every index is an integer (checked against PlaidML's own expected
outputs, quoted in the notes).
"""

# The references name their parameters after the Tile tensors (I, O, _X0, ...), hence E741.
# ruff: noqa: E741

from __future__ import annotations

import numpy as np

from plaidml_corpus_base import Program, f32, scalar

EDSL_PY = "plaidml/plaidml: plaidml2/edsl/edsl_test.py @ 0.7.0"


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


PROGRAMS: list[Program] = [
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
