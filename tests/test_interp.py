"""The reference interpreter (target "interp") against hand-written numpy on the README's examples,
the issue's known-bug programs and its calling conventions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.errors import BindError, SemanticError, TilecError
from tilec.interp.builtins import IMPLEMENTATIONS
from tilec.ir.builtins import BUILTINS

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


# ------------------------------------------------------------------ sizes as values


def test_a_size_read_as_a_value_gives_the_mean():
    x = RNG.random((4, 5))
    got = interp("function (I[X, Y]) -> (O) { S[] = +(I[x, y]); O = S / (X * Y); }")(x)
    np.testing.assert_allclose(got, x.mean())


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 5))
def test_padding_statement_over_sizes_gives_a_same_convolution(n: int, k: int):
    """P = (K - 1) / 2 (a size statement) used in an index: numpy's 'same' correlation."""
    x, w = RNG.random(n), RNG.random(k)
    src = "function (I[N], K[KN]) -> (O) { P = (KN - 1) / 2; O[x: N] = +(I[x + k - P] * K[k]); }"
    pad = (k - 1) // 2
    padded = np.pad(x, (pad, k))
    want = np.array([sum(padded[i + j] * w[j] for j in range(k)) for i in range(n)])
    np.testing.assert_allclose(interp(src)(x, w), want)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 12])
def test_size_statements_truncate_toward_zero_and_take_max_and_min(n: int):
    """PlaidML folds integer statements in double precision cast to int64: `/` rounds toward zero."""
    src = """function (I[N]) -> (P, Q, O, R) {
        P = (N - 7) / 2;
        Q = max(0, min(N - 3, 5));
        O[i: N + P + 4] = +(I[i]);
        R[i: max(N, 3)] = +(I[i - Q]);
    }"""
    x = RNG.random(n)
    p, q, o, r = interp(src)(x)
    want_p = int((n - 7) / 2)  # toward zero
    assert p.dtype == np.int32 and p.shape == () and int(p) == want_p
    assert int(q) == max(0, min(n - 3, 5))
    np.testing.assert_array_equal(o, np.concatenate([x, np.zeros(max(0, want_p + 4))])[:n + want_p + 4])
    want_r = np.zeros(max(n, 3))
    want_r[int(q):int(q) + n] = x[:max(n, 3) - int(q)]
    np.testing.assert_array_equal(r, want_r)


def test_a_size_statement_is_also_an_integer_tensor():
    x = np.arange(5, dtype=np.int8)
    got = interp("function (I[N]) -> (O) { P = N * 2; O = I + P; }")(x)
    assert got.dtype == np.int8  # P is a weak integer where it is read as a size
    np.testing.assert_array_equal(got, x + 10)


def test_size_statement_errors_name_the_statement():
    with pytest.raises(SemanticError, match="'P' is a size symbol"):  # sema: a keyword size is taken
        interp("function (I[N]) -> (O) { P = N - 1; O[i: P] = +(I[i]); }", P=4)
    with pytest.raises(BindError, match="division by zero in statement 'P = 3 / \\(N - 3\\)'"):
        interp("function (I[N]) -> (O) { P = 3 / (N - 3); O[i: P] = +(I[i]); }")(np.ones(3))


def test_scalar_integer_inputs_are_sizes_per_call():
    src = "function (I[N], S[], C) -> (O) { O[i: C] = +(I[S * i]); }"
    f = interp(src)
    x = RNG.random(10)
    np.testing.assert_array_equal(f(x, np.int32(3), np.int64(4)), x[::3][:4])
    np.testing.assert_array_equal(f(x, np.int32(2), np.int64(6)), np.concatenate([x[::2], [0.0]]))
    with pytest.raises(BindError, match="'S' is used as a size"):
        f(x, np.float32(2.0), np.int64(4))
    with pytest.raises(BindError, match="keyword C=5"):
        interp(src, C=5)(x, np.int32(1), np.int64(4))


# ------------------------------------------------------------------ desugared forms


def test_literal_operands_literal_defaults_and_attributes():
    a = (RNG.random(6) * 4).astype(np.float16)
    src = """function (A[N]) -> (O, P, Q) {
        [[pid(scale)]] O[i: N] = +(A[i] * 0.5);
        P[i: N] = +(2 * A[i]);
        Q[i: N] = >(A[i - 1]) default -1e30;
    }"""
    o, p, q = interp(src)(a)
    assert o.dtype == p.dtype == q.dtype == np.float16  # the literals are weak, the default too
    np.testing.assert_array_equal(o, a * np.float16(0.5))
    np.testing.assert_array_equal(p, a * np.float16(2))
    np.testing.assert_array_equal(q, np.concatenate([[np.float16(-np.inf)], a[:-1]]))


# ------------------------------------------------------------------ structural intrinsics


def test_index_and_shape():
    x = RNG.random((2, 3, 4))
    i0, i2, s = interp("function (A) -> (I0, I2, S) { I0 = index(A, 0); I2 = index(A, 2); S = shape(A); }")(x)
    assert i0.dtype == i2.dtype == s.dtype == np.int32
    np.testing.assert_array_equal(i0, np.indices(x.shape)[0])
    np.testing.assert_array_equal(i2, np.indices(x.shape)[2])
    np.testing.assert_array_equal(s, [2, 3, 4])
    with pytest.raises(BindError, match="dimension 3 is out of range"):
        interp("function (A) -> (O) { O = index(A, 3); }")(x)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(0, 3), picks=st.lists(st.integers(-8, 8), max_size=7),
       dtype=st.sampled_from(["int8", "int32", "int64"]))
def test_gather_clamps_and_scatter_sums_like_numpy(rows: int, cols: int, picks: list[int], dtype: str):
    data = RNG.random((rows, cols))
    idx = np.array(picks, dtype)
    clamped = np.clip(idx.astype(np.int64), 0, rows - 1)
    gathered = interp("function (T, I) -> (O) { O = gather(T, I); }")(data, idx)
    np.testing.assert_array_equal(gathered, data[clamped])
    values = RNG.random((len(picks), cols))
    scattered = interp("function (T, I, U) -> (O) { O = scatter(T, I, U); }")(values, idx, np.zeros((rows, 2)))
    want = np.zeros((rows, cols))
    np.add.at(want, clamped, values)
    np.testing.assert_allclose(scattered, want)


def test_intrinsic_misuse_is_a_bind_error():
    with pytest.raises(BindError, match="integer indices"):
        interp("function (T, I) -> (O) { O = gather(T, I); }")(np.ones((3, 2)), np.ones(2))
    with pytest.raises(BindError, match="no rows to gather from"):
        interp("function (T, I) -> (O) { O = gather(T, I); }")(np.ones((0, 2)), np.zeros(2, np.int32))
    with pytest.raises(BindError, match="must start with the shape"):
        interp("function (T, I, U) -> (O) { O = scatter(T, I, U); }")(np.ones((3, 2)), np.zeros(2, np.int32),
                                                                      np.ones(4))
    with pytest.raises(BindError, match="cannot reshape"):
        interp("function (T[N, M]) -> (O) { O = reshape(T, N, N); }")(np.ones((2, 3)))


def test_reshape_is_row_major_with_size_expressions():
    x = RNG.random((2, 3, 4))
    got = interp("function (T[A, B, C]) -> (O) { O = reshape(T, B, A * C); }")(x)
    np.testing.assert_array_equal(got, x.reshape(3, 8))


def test_builtin_library_functions():
    x = RNG.random((3, 4)).astype(np.float32)
    soft, logsoft = interp("function (X) -> (S, L) { S = builtin_softmax(X, 3, 4); L = builtin_logsoftmax(X, 3, 4); }")(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(logsoft, np.log(e / e.sum(axis=1, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_every_builtin_has_an_interpretation():
    """A builtin the language gains needs a numpy equivalent in tilec.interp.builtins (aliases are
    rewritten into operators by sema and need none)."""
    missing = [name for name, b in BUILTINS.items() if getattr(b, "kind", "") != "alias" and name not in IMPLEMENTATIONS]
    assert not missing, missing


# ------------------------------------------------------------------ PlaidML's elementwise intrinsics and types


FLOAT_REFERENCES = {
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "recip": np.reciprocal, "round": np.round,
    "sign": np.sign, "exp": np.exp, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("func", sorted(FLOAT_REFERENCES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_builtins_match_numpy(func: str, dtype: str):
    x = RNG.uniform(-0.95, 0.95, 9).astype(dtype)
    x[:3] = [0.5, -0.5, 2.5] if func == "round" else x[:3]
    if func == "acosh":
        x = 1 + np.abs(x)
    got = interp(f"O = {func}(A)")(x)
    assert got.dtype == np.dtype(dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, FLOAT_REFERENCES[func](x), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint64"])
def test_integer_builtins_bits_and_conversions(dtype: str):
    info = np.iinfo(dtype)
    x = RNG.integers(max(info.min, -50), min(info.max, 50), 11, endpoint=True).astype(dtype)
    y = RNG.integers(0, 4, 11).astype(dtype)
    x[:2] = [info.min, info.max]
    src = """function (A, B) -> (P, Q, N, L, R, X, F, S, U) {
        P = pow(A, B); Q = A & B | ~A; N = bit_xor(A, B); L = A << B; R = A >> B; X = sign(A);
        F = as_float(A, 64); S = as_int(A, 8); U = as_uint(A, 16);
    }"""
    p, q, n, left, right, sign, f, s, u = interp(src)(x, y)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(p, np.power(x, y))
    np.testing.assert_array_equal(q, (x & y) | ~x)
    np.testing.assert_array_equal(n, x ^ y)
    np.testing.assert_array_equal(left, np.left_shift(x, y))
    np.testing.assert_array_equal(right, np.right_shift(x, y))
    np.testing.assert_array_equal(sign, np.sign(x))
    assert (f.dtype, s.dtype, u.dtype) == (np.float64, np.int8, np.uint16)
    np.testing.assert_array_equal(f, x.astype(np.float64))
    np.testing.assert_array_equal(s, x.astype(np.int8))
    np.testing.assert_array_equal(u, x.astype(np.uint16))


def test_integer_pow_with_negative_exponents_is_zero_and_booleans_are_refused():
    x, y = np.array([2, -3, 5, 7], np.int32), np.array([-1, -2, 0, 2], np.int32)
    np.testing.assert_array_equal(interp("O = pow(A, B)")(x, y), [0, 0, 1, 49])
    with pytest.raises(BindError, match="'pow' is not defined on booleans"):
        interp("O = pow(A, B)")(x > 0, y > 0)
    with pytest.raises(BindError, match="'bit_left' shifts integers"):
        interp("O = A << B")(x > 0, y > 0)


def test_float_to_integer_conversions_truncate_and_refuse_nan():
    x = np.array([-3.7, 3.7, 300.0, -0.5], np.float32)
    np.testing.assert_array_equal(interp("O = as_int(A, 32)")(x), [-3, 3, 300, 0])
    np.testing.assert_array_equal(interp("O = as_int(A, 8)")(x), x.astype(np.int8))  # wraps, as numpy's astype
    with pytest.raises(BindError, match="converts nan to int16"):
        interp("O = as_int(A, 16)")(np.array([1.0, np.nan], np.float32))


def test_plaidml_promotion_in_elementwise_and_comparisons():
    a, b = np.array([100, -100], np.int8), np.array([200, 3], np.uint8)
    got = interp("function (A, B) -> (S, C, F) { S = A + B; C = A < B; F = A * 0.5; }")(a, b)
    assert [o.dtype for o in got] == [np.int8, np.bool_, np.float32]  # the first operand wins a tie of widths
    np.testing.assert_array_equal(got[0], (a.astype(np.int64) + b).astype(np.int8))
    np.testing.assert_array_equal(got[1], [True, True])  # compared exactly, not wrapped
    np.testing.assert_array_equal(got[2], [50.0, -50.0])


def test_a_literal_default_out_of_range_of_an_integer_output_is_refused():
    with pytest.raises(BindError, match="does not fit in its output type int8"):
        interp("function (A[N]) -> (O) { O[] = <(A[i]) default -1e30; }")(np.array([2], np.int8))
    assert int(interp("function (A[N]) -> (O) { O[] = <(A[i]) default 2.5; }")(np.array([9], np.int8))) == 2


def test_order_dependent_names_sums_and_products_that_leave_their_range_in_some_order():
    # a float16 product (accumulated in float32) of twelve 60000s onto the default 0: 0 in the
    # written order, NaN (inf * 0) if the 60000s are multiplied first, as a reassociating kernel may
    src = "function (D[M], S) -> (O, P, Q, R) { O[] = *(D[j]), k < 4 default S; P = O + 1; Q[] = +(D[j]); R[] = >(D[j]), k < 4 default S; }"
    f = tilec.compile(src, target="interp")
    d, s = np.full(3, 60000, np.float16), np.array(0, np.float16)
    assert f.order_dependent(d, s) == {"O", "P"}      # O, and P computed from it; not the sum, nor the max
    assert f(d, s)[0] == 0
    assert f.order_dependent(np.ones(3, np.float16), s) == set()
    assert f.order_dependent(np.full(3, 3, np.int8), s) == set()  # 3^12 overflows float16, not its float32 accumulator
    # a sum whose partial sums overflow float32 in some order, and one with an inf that decides it
    g = tilec.compile("O[] = +(A[i])", target="interp")
    assert g.order_dependent(np.array([3e38, 3e38, -3e38], np.float32)) == {"O"}
    assert g.order_dependent(np.array([np.inf, 1.0, -np.nan], np.float32)) == set()
    assert g.order_dependent(np.array([1e308, 1e308], np.float64)) == {"O"}
    assert g.order_dependent(np.arange(5, dtype=np.int8) * 100) == set()  # integers wrap in any order alike
