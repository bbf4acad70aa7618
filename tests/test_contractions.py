"""Contractions against numpy references on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

import tilec
from reference import (
    assert_matches,
    conv2d_nhwc,
    correlate1d_same_offset,
    max_pool_2x2_nhwc,
    max_pool_3x3_same,
    randn,
    rng,
    uniform,
)

MATMUL = "C[i,j:M,N] = +(A[i,k]*B[k,j])"
MATMUL_FN = "function (A[M, L], B[L, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"


# --------------------------------------------------------------------------- matmul

def test_matmul_single_statement():
    r = rng(0)
    a, b = randn(r, 5, 7), randn(r, 7, 3)
    f = tilec.compile(MATMUL)
    assert f.inputs == ("A", "B")
    assert f.outputs == ("C",)
    assert_matches(f(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_matmul_single_statement_with_semicolon_and_spaces():
    r = rng(1)
    a, b = randn(r, 4, 6), randn(r, 6, 2)
    f = tilec.compile("  C[i, j : M, N] = +( A[i, k] * B[k, j] ) ;  ")
    assert_matches(f(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_matmul_function_form_positional_and_keyword():
    r = rng(2)
    a, b = randn(r, 6, 9), randn(r, 9, 4)
    f = tilec.compile(MATMUL_FN)
    assert tuple(f.inputs) == ("A", "B")
    assert tuple(f.outputs) == ("C",)
    ref = (a.astype(np.float64) @ b).astype(np.float32)
    assert_matches(f(a, b), ref)
    assert_matches(f(A=a, B=b), ref)
    assert_matches(f(B=b, A=a), ref)
    assert_matches(f(a, B=b), ref)


def test_matmul_larger_than_a_tile():
    # Sizes that are not multiples of any plausible vector width / tile size.
    r = rng(3)
    a, b = randn(r, 67, 45), randn(r, 45, 38)
    f = tilec.compile(MATMUL_FN)
    assert_matches(f(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_matmul_inner_dims_disagree_uses_intersection():
    # Single-statement form declares no dims, so A's k range (4) and B's (6) may differ:
    # a tuple only contributes where every access is in bounds, so k runs over [0, 4).
    r = rng(4)
    a, b = randn(r, 3, 4), randn(r, 6, 5)
    with pytest.warns(tilec.TilecWarning, match="index 'k'.*4 values in 'A'.*6 in 'B'"):
        out = tilec.compile(MATMUL)(a, b)
    assert_matches(out, a.astype(np.float64) @ b[:4], dtype=np.float32)


def test_elementwise_product_lengths_disagree_uses_intersection():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([10.0, 20.0, 30.0, 40.0, 50.0], np.float32)
    with pytest.warns(tilec.TilecWarning, match="intersection"):
        out = tilec.compile("O[i: N] = +(A[i] * B[i])")(a, b)
    assert_matches(out, np.array([10.0, 40.0, 90.0], np.float32))


def test_matmul_size_one_dims():
    r = rng(5)
    a, b = randn(r, 1, 1), randn(r, 1, 7)
    assert_matches(tilec.compile(MATMUL)(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_batched_matmul():
    r = rng(6)
    x, y = randn(r, 3, 4, 5), randn(r, 3, 5, 2)
    f = tilec.compile("C[b, i, j: NB, M, N] = +(X[b, i, k] * Y[b, k, j])")
    assert tuple(f.inputs) == ("X", "Y")
    assert_matches(f(x, y), np.einsum("bik,bkj->bij", x.astype(np.float64), y), dtype=np.float32)


# --------------------------------------------------------------------------- aggregations

def test_sum_over_rows():
    r = rng(10)
    a = randn(r, 6, 11)
    out = tilec.compile("O[i: N] = +(A[i, j])")(a)
    assert_matches(out, a.astype(np.float64).sum(axis=1), dtype=np.float32)


def test_sum_over_columns():
    r = rng(11)
    a = randn(r, 6, 11)
    out = tilec.compile("O[j: N] = +(A[i, j])")(a)
    assert_matches(out, a.astype(np.float64).sum(axis=0), dtype=np.float32)


def test_product_aggregation():
    r = rng(12)
    a = uniform(r, 0.9, 1.1, 5, 8)
    out = tilec.compile("O[i: N] = *(A[i, j])")(a)
    assert_matches(out, a.astype(np.float64).prod(axis=1), dtype=np.float32)


def test_max_aggregation_of_negative_values():
    # All values negative: the max must not be clamped at 0 by the accumulator's start value.
    r = rng(13)
    a = -uniform(r, 0.5, 3.0, 7, 5)
    assert_matches(tilec.compile("O[i: N] = >(A[i, j])")(a), a.max(axis=1))


def test_min_aggregation_of_positive_values():
    r = rng(14)
    a = uniform(r, 0.5, 3.0, 7, 5)
    assert_matches(tilec.compile("O[j: N] = <(A[i, j])")(a), a.min(axis=0))


def test_max_min_mixed_sign():
    r = rng(15)
    a = randn(r, 4, 9)
    assert_matches(tilec.compile("O[i: N] = >(A[i, j])")(a), a.max(axis=1))
    assert_matches(tilec.compile("O[i: N] = <(A[i, j])")(a), a.min(axis=1))


def test_assign_copy():
    r = rng(16)
    a = randn(r, 3, 4)
    assert_matches(tilec.compile("O[i, j: N, M] = =(A[i, j])")(a), a)


def test_transpose():
    r = rng(17)
    a = randn(r, 3, 5)
    assert_matches(tilec.compile("O[j, i: M, N] = =(A[i, j])")(a), a.T)


def test_permute_3d():
    r = rng(18)
    a = randn(r, 2, 3, 4)
    out = tilec.compile("O[k, i, j: P, Q, R] = =(A[i, j, k])")(a)
    assert_matches(out, np.transpose(a, (2, 0, 1)))


def test_total_sum_scalar_output():
    r = rng(19)
    a = randn(r, 5, 6)
    out = tilec.compile("O[] = +(A[i, j])")(a)
    assert_matches(out, np.float64(a.astype(np.float64).sum()), dtype=np.float32)


def test_trace_scalar_output():
    r = rng(20)
    a = randn(r, 6, 6)
    out = tilec.compile("O[] = +(A[i, i])")(a)
    assert np.shape(out) == ()
    assert_matches(out, np.trace(a.astype(np.float64)), dtype=np.float32)


def test_trace_of_non_square_matrix():
    # i must satisfy both bounds: 0 <= i < 4 and 0 <= i < 7.
    r = rng(21)
    a = randn(r, 4, 7)
    out = tilec.compile("O[] = +(A[i, i])")(a)
    assert_matches(out, np.trace(a.astype(np.float64)), dtype=np.float32)


def test_diagonal_extraction():
    r = rng(22)
    a = randn(r, 5, 5)
    assert_matches(tilec.compile("O[i: N] = =(A[i, i])")(a), np.diag(a))


def test_outer_product():
    r = rng(23)
    a, b = randn(r, 4), randn(r, 6)
    f = tilec.compile("O[i, j: M, N] = +(A[i] * B[j])")
    assert_matches(f(a, b), np.outer(a.astype(np.float64), b), dtype=np.float32)


def test_outer_sum_combination_plus():
    r = rng(24)
    a, b = randn(r, 4), randn(r, 3)
    f = tilec.compile("O[i, j: M, N] = =(A[i] + B[j])")
    assert_matches(f(a, b), a[:, None].astype(np.float64) + b[None, :], dtype=np.float32)


def test_sum_of_plus_combination():
    # +(A[i, j] + B[j]) sums the pairwise sums over j.
    r = rng(25)
    a, b = randn(r, 3, 5), randn(r, 5)
    f = tilec.compile("O[i: N] = +(A[i, j] + B[j])")
    assert_matches(f(a, b), (a.astype(np.float64) + b[None, :]).sum(axis=1), dtype=np.float32)


def test_constant_index():
    r = rng(26)
    a = randn(r, 5, 4)
    assert_matches(tilec.compile("O[i: N] = +(A[i, 2])")(a), a[:, 2])


def test_constant_index_on_output():
    r = rng(27)
    a = randn(r, 4, 3)
    out = tilec.compile("function (A[N, M]) -> (O) { O[i, 1: N, 3] = +(A[i, j]); }")(a)
    ref = np.zeros((4, 3))
    ref[:, 1] = a.astype(np.float64).sum(axis=1)
    assert_matches(out, ref, dtype=np.float32)


def test_matrix_vector():
    r = rng(28)
    a, v = randn(r, 7, 5), randn(r, 5)
    out = tilec.compile("O[i: M] = +(A[i, k] * V[k])")(a, v)
    assert_matches(out, a.astype(np.float64) @ v, dtype=np.float32)


def test_dot_product_scalar():
    r = rng(29)
    a, b = randn(r, 13), randn(r, 13)
    out = tilec.compile("O[] = +(A[i] * B[i])")(a, b)
    assert_matches(out, np.dot(a.astype(np.float64), b), dtype=np.float32)


# --------------------------------------------------------------------------- unwritten cells

def test_unwritten_cells_are_zero_for_sum():
    r = rng(30)
    a = randn(r, 5)
    out = tilec.compile("function (A[L]) -> (O) { O[i: L + 3] = +(A[i]); }")(a)
    assert_matches(out, np.concatenate([a, np.zeros(3, np.float32)]))


@pytest.mark.parametrize("agg", [">", "<", "*", "="])
def test_unwritten_cells_are_zero_for_every_aggregation(agg):
    r = rng(31)
    # Values chosen so that a wrong accumulator start value (-inf for >, +inf for <, 1 for *)
    # leaking into unwritten cells is visible.
    a = uniform(r, 1.5, 2.5, 4)
    if agg == ">":
        a = -a
    out = tilec.compile(f"function (A[L]) -> (O) {{ O[i: L + 2] = {agg}(A[i]); }}")(a)
    assert_matches(out, np.concatenate([a, np.zeros(2, np.float32)]))


def test_keyword_size_for_output():
    # N is bound only by the keyword; cells 5..7 are never written.
    r = rng(32)
    a = randn(r, 5)
    f = tilec.compile("function (A[L]) -> (O) { O[i: N] = =(A[i]); }", N=8)
    assert_matches(f(a), np.concatenate([a, np.zeros(3, np.float32)]))


def test_keyword_size_in_single_statement():
    r = rng(33)
    a = randn(r, 6)
    f = tilec.compile("O[i: N] = =(A[i + S])", N=4, S=2)
    assert_matches(f(a), a[2:6])


# --------------------------------------------------------------------------- convolutions

CONV_VALID = """
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, x, y, co: N, H - KH + 1, W - KW + 1, CO] = +(I[n, x + i, y + j, ci] * K[i, j, ci, co]);
}
"""

CONV_SAME = """
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, ci] * K[i, j, ci, co]);
}
"""

CONV_STRIDE2 = """
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, x, y, co: N, (H - KH) / 2 + 1, (W - KW) / 2 + 1, CO] =
        +(I[n, 2x + i, 2y + j, ci] * K[i, j, ci, co]);
}
"""

CONV_DILATION2 = """
function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, x, y, co: N, H - 2*(KH - 1), W - 2*(KW - 1), CO] =
        +(I[n, x + 2i, y + 2j, ci] * K[i, j, ci, co]);
}
"""


def test_reference_conv_sanity():
    # The numpy reference itself, against a direct loop, so a failure below is tilec's.
    r = rng(39)
    I, K = randn(r, 1, 5, 6, 2), randn(r, 2, 3, 2, 3)
    ref = conv2d_nhwc(I, K, stride=2, dilation=1, pad=1)
    oh, ow = ref.shape[1:3]
    direct = np.zeros_like(ref)
    for x in range(oh):
        for y in range(ow):
            for i in range(2):
                for j in range(3):
                    xx, yy = 2 * x + i - 1, 2 * y + j - 1
                    if 0 <= xx < 5 and 0 <= yy < 6:
                        direct[0, x, y] += I[0, xx, yy].astype(np.float64) @ K[i, j]
    np.testing.assert_allclose(ref, direct, rtol=1e-12, atol=1e-12)


def test_conv2d_valid():
    r = rng(40)
    I, K = randn(r, 2, 7, 6, 3), randn(r, 3, 2, 3, 4)
    out = tilec.compile(CONV_VALID)(I, K)
    assert_matches(out, conv2d_nhwc(I, K), dtype=np.float32)


def test_conv2d_same_padding():
    r = rng(41)
    I, K = randn(r, 2, 6, 5, 3), randn(r, 3, 3, 3, 4)
    out = tilec.compile(CONV_SAME)(I, K)
    assert out.shape == (2, 6, 5, 4)
    assert_matches(out, conv2d_nhwc(I, K, pad=1), dtype=np.float32)


def test_conv2d_stride2():
    r = rng(42)
    I, K = randn(r, 1, 9, 8, 2), randn(r, 3, 3, 2, 3)
    out = tilec.compile(CONV_STRIDE2)(I, K)
    assert out.shape == (1, 4, 3, 3)
    assert_matches(out, conv2d_nhwc(I, K, stride=2), dtype=np.float32)


def test_conv2d_dilation2():
    r = rng(43)
    I, K = randn(r, 2, 8, 7, 2), randn(r, 3, 2, 2, 3)
    out = tilec.compile(CONV_DILATION2)(I, K)
    assert out.shape == (2, 4, 5, 3)
    assert_matches(out, conv2d_nhwc(I, K, dilation=2), dtype=np.float32)


def test_conv2d_same_padding_repeated_calls_other_shape():
    f = tilec.compile(CONV_SAME)
    for seed, shape in [(44, (1, 4, 4, 1)), (45, (3, 5, 7, 2)), (46, (1, 4, 4, 1))]:
        r = rng(seed)
        I = randn(r, *shape)
        K = randn(r, 3, 3, shape[3], 2)
        assert_matches(f(I, K), conv2d_nhwc(I, K, pad=1), dtype=np.float32)


def test_conv1d_negative_offsets_centered():
    r = rng(47)
    I, K = randn(r, 11), randn(r, 5)
    out = tilec.compile("function (I[N], K[KN]) -> (O) { O[x: N] = +(I[x + i - 2] * K[i]); }")(I, K)
    assert_matches(out, correlate1d_same_offset(I, K, 2), dtype=np.float32)


def test_conv1d_causal_negative_coefficient():
    # O[x] = sum_i I[x - i] * K[i]: a true (flipped) causal convolution.
    r = rng(48)
    I, K = randn(r, 10), randn(r, 3)
    out = tilec.compile("function (I[N], K[KN]) -> (O) { O[x: N] = +(I[x - i] * K[i]); }")(I, K)
    assert_matches(out, np.convolve(I.astype(np.float64), K)[:10], dtype=np.float32)


def test_full_convolution_complex_lhs():
    r = rng(49)
    I, K = randn(r, 9), randn(r, 4)
    f = tilec.compile("function (I[X], K[KX]) -> (O) { O[x + i: X + KX - 1] = +(I[x] * K[i]); }")
    out = f(I, K)
    assert out.shape == (12,)
    assert_matches(out, np.convolve(I.astype(np.float64), K), dtype=np.float32)


# --------------------------------------------------------------------------- pooling & constraints

def test_max_pool_2x2_with_constraints_even():
    r = rng(50)
    I = randn(r, 2, 6, 8, 3)
    f = tilec.compile(
        "function (I[N, X, Y, C]) -> (O) {"
        " O[n, x, y, c: N, X/2, Y/2, C] = >(I[n, 2x + i, 2y + j, c]), i < 2, j < 2; }"
    )
    assert_matches(f(I), max_pool_2x2_nhwc(I))


def test_max_pool_2x2_with_constraints_odd_sizes():
    # X/2 floors: the last row (and column) of an odd-sized input is dropped.
    r = rng(51)
    I = randn(r, 1, 7, 5, 2)
    f = tilec.compile(
        "function (I[N, X, Y, C]) -> (O) {"
        " O[n, x, y, c: N, X/2, Y/2, C] = >(I[n, 2x + i, 2y + j, c]), i < 2, j < 2; }"
    )
    out = f(I)
    assert out.shape == (1, 3, 2, 2)
    assert_matches(out, max_pool_2x2_nhwc(I))


def test_max_pool_3x3_same_ignores_border():
    # Out-of-range cells are skipped, not read as 0: with all-negative input a zero-padded
    # window would give 0 at the border.
    r = rng(52)
    I = -uniform(r, 0.5, 3.0, 6, 7)
    f = tilec.compile(
        "function (I[X, Y]) -> (O) { O[x, y: X, Y] = >(I[x + i - 1, y + j - 1]), i < 3, j < 3; }"
    )
    assert_matches(f(I), max_pool_3x3_same(I))


def test_sum_pool_3x3_same_is_zero_padded():
    r = rng(53)
    I = randn(r, 5, 4)
    f = tilec.compile(
        "function (I[X, Y]) -> (O) { O[x, y: X, Y] = +(I[x + i - 1, y + j - 1]), i < 3, j < 3; }"
    )
    Ip = np.pad(I.astype(np.float64), 1)
    ref = sum(Ip[i:i + 5, j:j + 4] for i in range(3) for j in range(3))
    assert_matches(f(I), ref, dtype=np.float32)


def test_cumulative_sum_via_constraint():
    r = rng(54)
    I = randn(r, 9)
    f = tilec.compile("function (I[N]) -> (O) { O[i: N] = +(I[k]), i - k < N; }")
    assert_matches(f(I), np.cumsum(I.astype(np.float64)), dtype=np.float32)


def test_window_sum_constraint_with_literal_bound():
    # O[i] = I[i] + I[i-1] + I[i-2]  (0 <= i - k < 3)
    r = rng(55)
    I = randn(r, 8)
    f = tilec.compile("function (I[N]) -> (O) { O[i: N] = +(I[k]), i - k < 3; }")
    c = np.concatenate([[0.0], np.cumsum(I.astype(np.float64))])
    ref = np.array([c[i + 1] - c[max(0, i - 2)] for i in range(8)])
    assert_matches(f(I), ref, dtype=np.float32)


def test_constraint_on_plain_index():
    # Only the first 3 columns contribute.
    r = rng(56)
    a = randn(r, 4, 7)
    out = tilec.compile("O[i: N] = +(A[i, j]), j < 3")(a)
    assert_matches(out, a[:, :3].astype(np.float64).sum(axis=1), dtype=np.float32)


# --------------------------------------------------------------------------- complex LHS, sizes

def test_even_rows_complex_lhs():
    r = rng(60)
    I = randn(r, 4, 3)
    out = tilec.compile("function (I[N, M]) -> (O) { O[2i, j: 2N, M] = =(I[i, j]); }")(I)
    ref = np.zeros((8, 3), np.float32)
    ref[::2] = I
    assert_matches(out, ref)


def test_odd_rows_complex_lhs():
    r = rng(61)
    I = randn(r, 3, 2)
    out = tilec.compile("function (I[N, M]) -> (O) { O[2i + 1, j: 2*N, M] = =(I[i, j]); }")(I)
    ref = np.zeros((6, 2), np.float32)
    ref[1::2] = I
    assert_matches(out, ref)


def test_repeat_elements_with_no_defract():
    # PlaidML's repeat_elts: O[x, 3y + k] = I[x, y] for k < 3.
    r = rng(62)
    I = randn(r, 2, 4)
    out = tilec.compile(
        "function (I[N, M]) -> (O) { O[x, 3*y + k: N, 3*M] = =(I[x, y]), k < 3 no_defract; }"
    )(I)
    assert_matches(out, np.repeat(I, 3, axis=1))


def test_no_defract_accepted_without_constraints():
    r = rng(63)
    a, b = randn(r, 3, 4), randn(r, 4, 2)
    out = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j]) no_defract")(a, b)
    assert_matches(out, a.astype(np.float64) @ b, dtype=np.float32)


@pytest.mark.parametrize("n", [6, 7])
def test_output_size_half_rounded_up(n):
    r = rng(64 + n)
    I = randn(r, n)
    out = tilec.compile("function (I[N]) -> (O) { O[i: (N + 1)/2] = =(I[2i]); }")(I)
    assert out.shape == ((n + 1) // 2,)
    assert_matches(out, I[::2])


def test_output_size_half():
    r = rng(66)
    I = randn(r, 9)
    out = tilec.compile("function (I[N]) -> (O) { O[i: N/2] = +(I[2i] + I[2i + 1]); }")(I)
    assert_matches(out, I[0:8:2].astype(np.float64) + I[1:9:2], dtype=np.float32)


def test_output_size_product_expression():
    r = rng(67)
    I = randn(r, 3, 4)
    out = tilec.compile("function (I[N, M]) -> (O) { O[M*i + j: N*M] = +(I[i, j]); }")(I)
    assert_matches(out, I.reshape(-1))


@pytest.mark.parametrize(
    "lhs",
    ["O[M*i + j: N*M]", "O[4*i + j: 12]"],
)
def test_flatten_with_assign(lhs):
    # (i, j) -> M*i + j is one-to-one because 0 <= j < M: no cell is written twice, so `=`
    # is legal here (PlaidML's reshape/tile idiom).
    r = rng(75)
    I = randn(r, 3, 4)
    out = tilec.compile(f"function (I[N, M]) -> (O) {{ {lhs} = =(I[i, j]); }}")(I)
    assert_matches(out, I.reshape(-1))


def test_interleave_with_assign():
    # O[i + 3j] = I[i, j] with i < 3: a transpose-then-flatten, also one-to-one.
    r = rng(76)
    I = randn(r, 3, 5)
    out = tilec.compile("function (I[N, M]) -> (O) { O[i + N*j: N*M] = =(I[i, j]); }")(I)
    assert_matches(out, I.T.reshape(-1))


def test_size_symbol_coefficient_in_index():
    # Blocked sum: O[x] = sum_{k < BO} I[BO*x + k]; BO given as a keyword size.
    r = rng(68)
    I = randn(r, 14)
    f = tilec.compile("function (I[N]) -> (O) { O[x: N/BO] = +(I[BO*x + k]), k < BO; }", BO=3)
    out = f(I)
    assert out.shape == (4,)
    assert_matches(out, I[:12].astype(np.float64).reshape(4, 3).sum(axis=1), dtype=np.float32)


def test_size_symbol_from_input_in_index():
    # Flatten then un-flatten using the input's own size symbol as a coefficient.
    r = rng(69)
    F = randn(r, 12)
    f = tilec.compile("function (F[L], W[M]) -> (O) { O[i, j: L/M, M] = +(F[M*i + j] * W[j]); }")
    w = randn(r, 4)
    out = f(F, w)
    assert_matches(out, F.reshape(3, 4).astype(np.float64) * w, dtype=np.float32)


def test_juxtaposed_coefficients():
    r = rng(70)
    I = randn(r, 13)
    out = tilec.compile("function (I[N]) -> (O) { O[i: 4] = =(I[3i + 1]); }")(I)
    assert_matches(out, I[1:13:3])


# --------------------------------------------------------------------------- == and ?

def test_equality_combination_gives_one_or_zero():
    a = np.array([1, 2, 3, 2], np.int32)
    b = np.array([2, 3, 5], np.int32)
    out = tilec.compile("O[i, j: N, M] = =(A[i] == B[j])")(a, b)
    assert_matches(out, (a[:, None] == b[None, :]).astype(np.int32))


def test_equality_combination_float_dtype():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([3.0, 1.0], np.float64)
    out = tilec.compile("O[i, j: N, M] = =(A[i] == B[j])")(a, b)
    assert_matches(out, (a[:, None] == b[None, :]).astype(np.float64))


def test_equality_count_matches():
    # Histogram: O[c] = #{i : L[i] == C[c]}
    r = rng(71)
    labels = r.integers(0, 5, size=30).astype(np.int32)
    classes = np.arange(5, dtype=np.int32)
    out = tilec.compile("O[c: K] = +(L[i] == Cls[c])")(labels, classes)
    assert_matches(out, np.bincount(labels, minlength=5).astype(np.int32))


def test_one_hot_via_ternary():
    r = rng(72)
    labels = r.integers(0, 4, size=6).astype(np.int32)
    classes = np.arange(4, dtype=np.int32)
    ones = np.ones(4, np.float32)
    f = tilec.compile(
        "function (L[N], Cls[K], V[K]) -> (O) { O[i, c: N, K] = =(L[i] == Cls[c] ? V[c]); }"
    )
    out = f(labels, classes, ones)
    # ternary takes the dtype of its value operand (V: float32)
    assert_matches(out, np.eye(4, dtype=np.float32)[labels])


def test_argmax_via_ternary():
    r = rng(73)
    X = randn(r, 5, 7)
    J = np.arange(7, dtype=np.int32)
    f = tilec.compile(
        """
        function (X[N, C], J[C]) -> (Idx, M) {
            M[i: N] = >(X[i, j]);
            Idx[i: N] = >(X[i, j] == M[i] ? J[j]);
        }
        """
    )
    idx, m = f(X, J)
    assert_matches(m, X.max(axis=1))
    assert_matches(idx, X.argmax(axis=1).astype(np.int32))


def test_gather_via_ternary_sum():
    # O[i, d] = E[Ids[i], d] written as a contraction over the table rows.
    r = rng(74)
    E = randn(r, 6, 3)
    ids = np.array([4, 0, 4, 2], np.int32)
    rows = np.arange(6, dtype=np.int32)
    f = tilec.compile(
        "function (Ids[N], R[V], E[V, D]) -> (O) { O[i, d: N, D] = +(Ids[i] == R[v] ? E[v, d]); }"
    )
    assert_matches(f(ids, rows, E), E[ids])


# --------------------------------------------------------------------------- default

def test_default_initialises_sum():
    r = rng(80)
    a, t = randn(r, 4, 5), randn(r, 4)
    f = tilec.compile("function (A[N, M], T[N]) -> (O) { O[i: N] = +(A[i, j]) default T; }")
    ref = t.astype(np.float64) + a.astype(np.float64).sum(axis=1)
    assert_matches(f(a, t), ref, dtype=np.float32)


def test_default_with_assign_keeps_unwritten_cells():
    r = rng(81)
    a, t = randn(r, 3), randn(r, 6)
    f = tilec.compile("function (A[N], T[M]) -> (O) { O[2i: 2N] = =(A[i]) default T; }")
    ref = t.copy()
    ref[::2] = a
    assert_matches(f(a, t), ref)


def test_default_with_max():
    r = rng(82)
    a, t = randn(r, 5, 3), randn(r, 5)
    f = tilec.compile("function (A[N, M], T[N]) -> (O) { O[i: N] = >(A[i, j]) default T; }")
    assert_matches(f(a, t), np.maximum(t, a.max(axis=1)))


def test_default_promotes_dtype():
    r = rng(83)
    a, t = randn(r, 2, 3), randn(r, 2, dtype=np.float64)
    f = tilec.compile("function (A[N, M], T[N]) -> (O) { O[i: N] = +(A[i, j]) default T; }")
    out = f(a, t)
    ref = t + a.astype(np.float64).sum(axis=1)
    assert_matches(out, ref, dtype=np.float64, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- multiple outputs

def test_multiple_outputs_in_declared_order():
    r = rng(90)
    a = randn(r, 4, 6)
    f = tilec.compile(
        """
        function (A[N, M]) -> (Mx, S) {
            S[i: N] = +(A[i, j]);
            Mx[i: N] = >(A[i, j]);
        }
        """
    )
    assert tuple(f.outputs) == ("Mx", "S")
    out = f(a)
    assert isinstance(out, tuple) and len(out) == 2
    mx, s = out
    assert_matches(mx, a.max(axis=1))
    assert_matches(s, a.astype(np.float64).sum(axis=1), dtype=np.float32)


def test_output_used_by_later_statement():
    r = rng(91)
    a, b, c = randn(r, 3, 4), randn(r, 4, 5), randn(r, 5, 2)
    f = tilec.compile(
        """
        function (A[M, K], B[K, N], C[N, P]) -> (AB, ABC) {
            AB[i, j: M, N] = +(A[i, k] * B[k, j]);
            ABC[i, j: M, P] = +(AB[i, k] * C[k, j]);
        }
        """
    )
    ab, abc = f(a, b, c)
    ab_ref = a.astype(np.float64) @ b
    assert_matches(ab, ab_ref, dtype=np.float32)
    assert_matches(abc, ab_ref @ c, dtype=np.float32)


# --------------------------------------------------------------------------- dtypes

def test_int32_matmul_exact():
    r = rng(100)
    a = r.integers(-20, 20, size=(5, 6)).astype(np.int32)
    b = r.integers(-20, 20, size=(6, 4)).astype(np.int32)
    out = tilec.compile(MATMUL)(a, b)
    assert_matches(out, a @ b)


@pytest.mark.parametrize("agg,fn", [(">", np.max), ("<", np.min), ("+", np.sum)])
def test_int32_reductions(agg, fn):
    r = rng(101)
    a = r.integers(-100, 100, size=(6, 5)).astype(np.int32)
    out = tilec.compile(f"O[i: N] = {agg}(A[i, j])")(a)
    assert_matches(out, fn(a, axis=1).astype(np.int32))


def test_int32_product():
    r = rng(102)
    a = r.integers(-3, 4, size=(4, 5)).astype(np.int32)
    out = tilec.compile("O[i: N] = *(A[i, j])")(a)
    assert_matches(out, np.prod(a, axis=1).astype(np.int32))


def test_float64_matmul():
    r = rng(103)
    a, b = randn(r, 8, 5, dtype=np.float64), randn(r, 5, 3, dtype=np.float64)
    out = tilec.compile(MATMUL)(a, b)
    assert_matches(out, a @ b)


def test_float64_conv_same():
    r = rng(104)
    I, K = randn(r, 1, 5, 5, 2, dtype=np.float64), randn(r, 3, 3, 2, 2, dtype=np.float64)
    out = tilec.compile(CONV_SAME)(I, K)
    assert_matches(out, conv2d_nhwc(I, K, pad=1))


@pytest.mark.parametrize(
    "da,db",
    [
        (np.float32, np.float64),
        (np.float64, np.float32),
        (np.int32, np.float32),
        (np.int32, np.float64),
        (np.float32, np.int32),
    ],
)
def test_mixed_dtype_matmul_promotes(da, db):
    r = rng(105)
    a, b = randn(r, 3, 4, dtype=da), randn(r, 4, 2, dtype=db)
    out = tilec.compile(MATMUL)(a, b)
    floats = [d for d in (np.dtype(da), np.dtype(db)) if d.kind == "f"]
    expected = max(floats, key=lambda d: d.itemsize)  # PlaidML: the float type, not numpy's float64
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert_matches(out, ref, dtype=expected, rtol=1e-5, atol=1e-5)


def test_mixed_dtype_plus_combination():
    a = np.array([1, 2, 3], np.int32)
    b = np.array([0.5, 0.25], np.float32)
    out = tilec.compile("O[i, j: N, M] = =(A[i] + B[j])")(a, b)
    assert_matches(out, (a[:, None] + b[None, :]).astype(np.float32))  # PlaidML: int32 + float32 -> float32


def test_single_access_keeps_input_dtype():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert tilec.compile("O[j, i: M, N] = =(A[i, j])")(a).dtype == np.int32
    assert tilec.compile("O[j, i: M, N] = =(A[i, j])")(a.astype(np.float64)).dtype == np.float64


def test_non_contiguous_input():
    r = rng(106)
    a = randn(r, 8, 6)[::2, ::-1]  # strided, negative stride view
    b = randn(r, 6, 3).T.copy().T  # Fortran order
    out = tilec.compile(MATMUL)(a, b)
    assert_matches(out, a.astype(np.float64) @ b, dtype=np.float32)


# --------------------------------------------------------------------------- larger shapes
# Big enough for the default schedule to tile, vectorise and parallelise, with sizes that
# are not multiples of any vector width or tile size (remainder loops, partial tiles).

def test_large_matmul_odd_sizes():
    r = rng(110)
    a, b = randn(r, 203, 157), randn(r, 157, 301)
    out = tilec.compile(MATMUL_FN)(a, b)
    assert_matches(out, a.astype(np.float64) @ b, dtype=np.float32, rtol=1e-4, atol=1e-3)


def test_large_matmul_float64_and_int32():
    r = rng(111)
    a, b = randn(r, 130, 67, dtype=np.float64), randn(r, 67, 95, dtype=np.float64)
    assert_matches(tilec.compile(MATMUL)(a, b), a @ b)
    ai, bi = randn(r, 70, 129, dtype=np.int32), randn(r, 129, 33, dtype=np.int32)
    assert_matches(tilec.compile(MATMUL)(ai, bi), ai @ bi)


def test_same_array_passed_twice():
    r = rng(112)
    a = randn(r, 33, 33)
    out = tilec.compile(MATMUL)(a, a)
    assert_matches(out, a.astype(np.float64) @ a, dtype=np.float32)


def test_large_conv2d_same_padding():
    r = rng(113)
    I, K = randn(r, 2, 23, 19, 13), randn(r, 3, 3, 13, 21)
    out = tilec.compile(CONV_SAME)(I, K)
    assert_matches(out, conv2d_nhwc(I, K, pad=1), dtype=np.float32, rtol=1e-4, atol=1e-3)


def test_large_conv2d_stride2():
    r = rng(114)
    I, K = randn(r, 1, 31, 28, 6), randn(r, 3, 3, 6, 17)
    out = tilec.compile(CONV_STRIDE2)(I, K)
    assert_matches(out, conv2d_nhwc(I, K, stride=2), dtype=np.float32, rtol=1e-4, atol=1e-3)


def test_large_max_pool():
    r = rng(115)
    I = randn(r, 2, 37, 30, 19)
    f = tilec.compile(
        "function (I[N, X, Y, C]) -> (O) {"
        " O[n, x, y, c: N, X/2, Y/2, C] = >(I[n, 2x + i, 2y + j, c]), i < 2, j < 2; }"
    )
    assert_matches(f(I), max_pool_2x2_nhwc(I))


def test_large_reductions():
    r = rng(116)
    a = randn(r, 129, 1031)
    assert_matches(tilec.compile("O[i: N] = >(A[i, j])")(a), a.max(axis=1))
    out = tilec.compile("O[j: N] = +(A[i, j])")(a)
    assert_matches(out, a.astype(np.float64).sum(axis=0), dtype=np.float32, rtol=1e-4, atol=1e-3)
    out = tilec.compile("O[] = +(A[i, j])")(a)
    assert_matches(out, a.astype(np.float64).sum(), dtype=np.float32, rtol=1e-4, atol=1e-2)
