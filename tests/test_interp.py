"""The reference interpreter (target "interp") against hand-written numpy on the README's examples,
the issue's known-bug programs and its calling conventions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.errors import BindError, SemanticError, TilecError

RNG = np.random.default_rng(15)


def interp(src: str, **sizes: int) -> tilec.Function:
    return tilec.compile(src, target="interp", **sizes)


def test_matmul():
    a, b = RNG.random((3, 4), np.float32), RNG.random((4, 5), np.float32)
    got = interp("C[i, j: M, N] = +(A[i, k] * B[k, j])")(a, b)
    assert got.dtype == np.float32 and got.shape == (3, 5)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)


def test_matmul_with_empty_reduction_is_zeros():
    got = interp("C[i, j: M, N] = +(A[i, k] * B[k, j])")(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32))
    np.testing.assert_array_equal(got, np.zeros((3, 4), np.float32))


def test_cumulative_sum_with_constraint():
    x = RNG.random(7)
    got = interp("function (I[N]) -> (O) { O[i: N] = +(I[k]), i - k < N; }")(x)
    np.testing.assert_allclose(got, np.cumsum(x))


def test_full_convolution_complex_lhs():
    x, k = RNG.random(6), RNG.random(3)
    got = interp("O[x + i] = +(I[x] * K[i])")(x, k)
    np.testing.assert_allclose(got, np.convolve(x, k))


def test_gather_by_label_ternary():
    labels = np.array([2, 0, 1, 2, 5], np.int32)
    keys = np.array([0, 1, 2], np.int32)
    values = np.array([10.0, 20.0, 30.0], np.float32)
    got = interp("function (L[N], R[C], V[C]) -> (O) { O[n: N] = +(L[n] == R[c] ? V[c]); }")(labels, keys, values)
    np.testing.assert_array_equal(got, np.array([30, 10, 20, 30, 0], np.float32))


def test_max_pool_skips_out_of_range():
    x = RNG.random((5, 7))
    got = interp("O[x, y] = >(I[2x + i, 2y + j]), i < 2, j < 2")(x)
    want = np.array([[x[2 * r:2 * r + 2, 2 * c:2 * c + 2].max() for c in range(4)] for r in range(3)])
    np.testing.assert_array_equal(got, want)  # the last row and column see a 1-wide window


def test_same_padding_conv():
    img, ker = RNG.random((1, 4, 5, 2)), RNG.random((3, 3, 2, 3))
    src = ("function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {"
           " O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]); }")
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 4, 5, 3))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nxyc,co->nxyo", padded[:, i:i + 4, j:j + 5], ker[i, j])
    np.testing.assert_allclose(interp(src)(img, ker), want)


def test_default_and_rational_index():
    a, d = RNG.random(6).astype(np.float32), RNG.random(4).astype(np.float32)
    got = interp("function (A[N], D[M]) -> (O) { O[i: M] = +(A[(i + j) / 2]), j < 2 default D; }")(a, d)
    want = d.copy()
    for i in range(4):
        for j in range(2):
            if (i + j) % 2 == 0 and (i + j) // 2 < 6:
                want[i] += a[(i + j) // 2]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_issue_known_bugs_are_right_here():
    a = np.array([1, 2, 3], np.float32)
    huge = interp("O[i, j: 9, 9] = +(A[2305843009213693952*i - 2305843009213693952*j])")(a)
    np.testing.assert_array_equal(huge, np.eye(9, dtype=np.float32))
    inexact = interp("O[i, j: 2, 2] = +(A[9007199254740993*i - 9007199254740992*j])")(np.array([1, 2], np.float32))
    np.testing.assert_array_equal(inexact, [[1, 0], [0, 2]])
    assert interp("O[i] = +(A[i, j])")(np.ones((3, 0), np.float32)).shape == (3,)
    np.testing.assert_array_equal(interp("O[i / 18446744073709551616] = +(A[i])")(a), [1])
    assert interp("O[i, k: 5, 0] = +(A[2i - m])")(a).shape == (5, 0)


def test_elementwise_softmax_and_several_outputs():
    x = RNG.random((3, 4))
    src = """function (X[N, K]) -> (O, M) {
        M[i, 0: N, 1] = >(X[i, j]);
        E = exp(X - M);
        S[i, 0: N, 1] = +(E[i, j]);
        O = E / S;
    }"""
    o, m = interp(src)(x)
    np.testing.assert_allclose(m[:, 0], x.max(axis=1))
    np.testing.assert_allclose(o, np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))


def test_integer_types_and_division():
    a = np.array([7, -7, 5], np.int32)
    got = interp("function (A[N]) -> (B) { B = A / 2 + (A < 0 ? 100 : 0); }")(a)
    assert got.dtype == tilec.compile("function (A[N]) -> (B) { B = A / 2 + (A < 0 ? 100 : 0); }")(a).dtype
    assert got.dtype == np.int32  # literals are weak: they take A's type (PlaidML's promotion)
    np.testing.assert_array_equal(got, [3, 97, 2])  # -7 / 2 rounds toward zero (PlaidML's C division)


def test_trace_and_log():
    f = interp("function (A[N]) -> (C) { B = A * 2; C[] = +(B[i]); }")
    lines: list[str] = []
    f.log = lines.append
    env = f.trace(np.arange(4.0, dtype=np.float32))
    assert list(env) == ["A", "B", "C"] and float(env["C"]) == 12.0
    np.testing.assert_array_equal(env["B"], [0, 2, 4, 6])
    assert len(lines) == 2 and "float32[4]" in lines[0] and "max 12.0" in lines[1]


def test_binding_errors_like_a_compiled_function():
    f = interp("function (A[N], B[N]) -> (C) { C = A + B; }")
    with pytest.raises(BindError, match="disagrees"):
        f(np.ones(3), np.ones(4))
    with pytest.raises(BindError, match="missing"):
        f(np.ones(3))
    with pytest.raises(BindError, match="unknown argument"):
        f(np.ones(3), np.ones(3), Z=1)
    np.testing.assert_array_equal(f(B=np.ones(2), A=np.zeros(2)), [1, 1])


def test_refusals_are_tilec_errors():
    with pytest.raises(TilecError, match="candidate tuples"):
        interp("O[i: 400] = +(A[i, j, k])")(np.ones((400, 300, 300), np.float32))
    with pytest.raises(TilecError, match="too large for the interpreter"):
        interp("O[i, j, k: 400, 400, 400] = +(A[i])")(np.ones(400, np.float32))
    with pytest.raises(SemanticError, match="more than once"):
        interp("O[i: 2] = =(A[i + j])")(np.ones(4, np.float32))
    with pytest.raises(SemanticError, match="unbounded"):
        interp("O[i: 3] = +(A[i + j - k])")(np.ones(4, np.float32))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 5), st.integers(0, 5), st.integers(-3, 3), st.integers(1, 3))
def test_shifted_strided_window_matches_numpy(n: int, m: int, shift: int, stride: int):
    """O[x] = +(I[stride*x + k + shift]), k < m: a sum over a window, skipped where out of range."""
    data = RNG.random(n)
    got = interp(f"function (I[N]) -> (O) {{ O[x: 4] = +(I[{stride}*x + k + ({shift})]), k < {m}; }}")(data)
    want = [sum(data[p] for k in range(m) if 0 <= (p := stride * x + k + shift) < n) for x in range(4)]
    np.testing.assert_allclose(got, want)
