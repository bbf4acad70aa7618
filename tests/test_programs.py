"""Multi-statement programs and elementwise statements against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import tilec
from reference import SOFTMAX, assert_matches, int_trunc_div, randn, rng, sigmoid, softmax_rows, uniform


def call_by_name(f, **arrays):
    """Call with keyword arrays, checking the signature lists exactly those names."""
    assert set(f.inputs) == set(arrays), (f.inputs, sorted(arrays))
    return f(**arrays)


# --------------------------------------------------------------------------- whole programs



def test_softmax():
    r = rng(0)
    x = randn(r, 5, 9) * 3
    out = tilec.compile(SOFTMAX)(x)
    assert_matches(out, softmax_rows(x), dtype=np.float32, rtol=1e-5, atol=1e-6)


def test_softmax_large_values_are_stable():
    # Subtracting the row max keeps exp from overflowing.
    x = np.array([[1000.0, 1001.0, 999.0], [-5.0, 0.0, 5.0]], np.float32)
    out = tilec.compile(SOFTMAX)(x)
    assert np.all(np.isfinite(out))
    assert_matches(out, softmax_rows(x), dtype=np.float32, rtol=1e-5, atol=1e-6)


def test_softmax_float64():
    r = rng(1)
    x = randn(r, 4, 6, dtype=np.float64)
    out = tilec.compile(SOFTMAX)(x)
    assert_matches(out, softmax_rows(x))


def test_softmax_repeated_calls_with_different_shapes():
    f = tilec.compile(SOFTMAX)
    for seed, shape in [(2, (3, 5)), (3, (7, 2)), (4, (1, 1)), (5, (3, 5))]:
        x = randn(rng(seed), *shape)
        assert_matches(f(x), softmax_rows(x), dtype=np.float32, rtol=1e-5, atol=1e-6)


ATTENTION = """
function (Q[S, D], K[T, D], V[T, DV]) -> (O) {
    L[i, j: S, T] = +(Q[i, d] * K[j, d]);
    Ls = L * 0.25;
    Mx[i, 0: S, 1] = >(Ls[i, j]);
    P = exp(Ls - Mx);
    Z[i, 0: S, 1] = +(P[i, j]);
    A = P / Z;
    O[i, e: S, DV] = +(A[i, j] * V[j, e]);
}
"""


def attention_ref(q, k, v, scale):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    return softmax_rows(q @ k.T * scale) @ v


def test_attention():
    r = rng(10)
    q, k, v = randn(r, 6, 16), randn(r, 9, 16), randn(r, 9, 5)
    out = tilec.compile(ATTENTION)(q, k, v)
    assert_matches(out, attention_ref(q, k, v, 0.25), dtype=np.float32, rtol=1e-4, atol=1e-5)


def test_attention_keyword_call():
    r = rng(11)
    q, k, v = randn(r, 3, 4), randn(r, 5, 4), randn(r, 5, 2)
    f = tilec.compile(ATTENTION)
    assert tuple(f.inputs) == ("Q", "K", "V")
    out = f(V=v, Q=q, K=k)
    assert_matches(out, attention_ref(q, k, v, 0.25), dtype=np.float32, rtol=1e-4, atol=1e-5)


def test_batched_multihead_attention_with_scalar_scale():
    src = """
    function (Q[NB, H, S, D], K[NB, H, T, D], V[NB, H, T, D], Scale[]) -> (O) {
        L[b, h, i, j: NB, H, S, T] = +(Q[b, h, i, d] * K[b, h, j, d]);
        Ls = L * Scale;
        Mx[b, h, i, 0: NB, H, S, 1] = >(Ls[b, h, i, j]);
        P = exp(Ls - Mx);
        Z[b, h, i, 0: NB, H, S, 1] = +(P[b, h, i, j]);
        U[b, h, i, e: NB, H, S, D] = +(P[b, h, i, j] * V[b, h, j, e]);
        O = U / Z;  // normalise after the product this time
    }
    """
    r = rng(12)
    q, k, v = randn(r, 2, 3, 4, 8), randn(r, 2, 3, 5, 8), randn(r, 2, 3, 5, 8)
    scale = np.array(1 / np.sqrt(8), np.float32)
    out = tilec.compile(src)(q, k, v, scale)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * float(scale)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = np.einsum("bhij,bhjd->bhid", p / p.sum(axis=-1, keepdims=True), v)
    assert_matches(out, ref, dtype=np.float32, rtol=1e-4, atol=1e-5)


GEMM_BIAS_RELU_TERNARY = """
function (A[M, K], B[K, N], Bias[N]) -> (O) {
    C[i, j: M, N] = +(A[i, k] * B[k, j]);
    R = C + Bias;
    O = R < 0 ? 0 : R;
}
"""

GEMM_BIAS_RELU_MAX = """
function (A[M, K], B[K, N], Bias[N]) -> (O) {
    C[i, j: M, N] = +(A[i, k] * B[k, j]);
    R = C + Bias;
    O = max(R, 0);
}
"""


@pytest.mark.parametrize(
    "src", [GEMM_BIAS_RELU_TERNARY, GEMM_BIAS_RELU_MAX], ids=["ternary", "max"]
)
def test_gemm_bias_relu(src):
    r = rng(20)
    a, b, bias = randn(r, 13, 17), randn(r, 17, 11), randn(r, 11)
    out = tilec.compile(src)(a, b, bias)
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    assert_matches(out, ref, dtype=np.float32)
    assert np.all(out >= 0)


def test_gemm_bias_relu_float64():
    r = rng(21)
    a, b, bias = (randn(r, *s, dtype=np.float64) for s in [(4, 6), (6, 3), (3,)])
    out = tilec.compile(GEMM_BIAS_RELU_TERNARY)(a, b, bias)
    assert_matches(out, np.maximum(a @ b + bias, 0))


def test_two_layer_mlp():
    src = """
    function (X[NB, DI], W1[DI, DH], B1[DH], W2[DH, DO]) -> (Y) {
        H1[n, h: NB, DH] = +(X[n, d] * W1[d, h]);
        H = tanh(H1 + B1);
        Y[n, o: NB, DO] = +(H[n, h] * W2[h, o]);
    }
    """
    r = rng(22)
    x, w1, b1, w2 = randn(r, 5, 7), randn(r, 7, 6), randn(r, 6), randn(r, 6, 3)
    out = tilec.compile(src)(x, w1, b1, w2)
    ref = np.tanh(x.astype(np.float64) @ w1 + b1) @ w2
    assert_matches(out, ref, dtype=np.float32)


def test_normalise_by_scalar_intermediate():
    src = "function (A[N]) -> (O) { T[] = +(A[i]); O = A / T; }"
    r = rng(23)
    a = uniform(r, 0.5, 1.5, 10)
    assert_matches(tilec.compile(src)(a), a / a.astype(np.float64).sum(), dtype=np.float32)


def test_int32_program():
    src = """
    function (A[N, M], B[M]) -> (O) {
        C[i: N] = +(A[i, j] * B[j]);
        O = C * 2 - 1;
    }
    """
    r = rng(24)
    a = r.integers(-9, 10, size=(4, 5)).astype(np.int32)
    b = r.integers(-9, 10, size=5).astype(np.int32)
    assert_matches(tilec.compile(src)(a, b), (a @ b) * 2 - 1)


def test_multiple_outputs_mixed_statement_kinds():
    src = """
    function (A[N, M]) -> (Sq, Total) {
        Sq = A * A;
        Total[] = +(Sq[i, j]);
    }
    """
    r = rng(25)
    a = randn(r, 3, 4)
    sq, total = tilec.compile(src)(a)
    assert_matches(sq, a * a)
    assert_matches(total, np.sum(a.astype(np.float64) ** 2), dtype=np.float32)


def test_copy_statement():
    r = rng(26)
    a = randn(r, 2, 3)
    out = tilec.compile("function (A) -> (B) { B = A; }")(a)
    assert_matches(out, a)


# --------------------------------------------------------------------------- comments & syntax

def test_comments_both_styles():
    src = """
    # a leading hash comment
    function (A[N, M], B[M]) -> (O) {  // trailing slash comment
        // whole-line comment: O = A - B;
        O = A + B;  # hash comment after a statement
        # O = A * B;
    }
    // trailing comment after the function
    """
    r = rng(30)
    a, b = randn(r, 3, 4), randn(r, 4)
    assert_matches(tilec.compile(src)(a, b), a + b)


def test_statements_spanning_lines():
    src = """function (A[N, M],
                      B[M])
             -> (O)
    {
        O
          =
          A *
          B;
    }"""
    r = rng(31)
    a, b = randn(r, 2, 3), randn(r, 3)
    assert_matches(tilec.compile(src)(a, b), a * b)


# --------------------------------------------------------------------------- elementwise

def _inputs(seed):
    r = rng(seed)
    return {
        "A": randn(r, 4, 5),
        "B": randn(r, 5),
        "P": uniform(r, 0.5, 2.0, 4, 5),
        "Q": uniform(r, 0.5, 2.0, 4, 1),
    }


ELEMENTWISE = [
    ("A + B", lambda A, B, P, Q: A + B),
    ("A - B", lambda A, B, P, Q: A - B),
    ("A * B", lambda A, B, P, Q: A * B),
    ("A / P", lambda A, B, P, Q: A / P),
    ("-A", lambda A, B, P, Q: -A),
    ("A - -B", lambda A, B, P, Q: A + B),
    ("exp(A)", lambda A, B, P, Q: np.exp(A)),
    ("log(P)", lambda A, B, P, Q: np.log(P)),
    ("sqrt(P)", lambda A, B, P, Q: np.sqrt(P)),
    ("tanh(A)", lambda A, B, P, Q: np.tanh(A)),
    ("sigmoid(A)", lambda A, B, P, Q: sigmoid(A)),
    ("sin(A)", lambda A, B, P, Q: np.sin(A)),
    ("cos(A)", lambda A, B, P, Q: np.cos(A)),
    ("abs(A)", lambda A, B, P, Q: np.abs(A)),
    ("pow(P, A)", lambda A, B, P, Q: np.power(P, A)),
    ("pow(A, 2)", lambda A, B, P, Q: np.power(A, 2)),
    ("max(A, B)", lambda A, B, P, Q: np.maximum(A, B)),
    ("min(A, B)", lambda A, B, P, Q: np.minimum(A, B)),
    ("max(A, 0)", lambda A, B, P, Q: np.maximum(A, 0)),
    ("min(A, 0.5)", lambda A, B, P, Q: np.minimum(A, 0.5)),
    ("A * 2.0", lambda A, B, P, Q: A * 2.0),
    ("A / 2", lambda A, B, P, Q: A / 2),
    ("1 / P", lambda A, B, P, Q: 1 / P),
    ("2 - A", lambda A, B, P, Q: 2 - A),
    ("A + B * P - Q / P", lambda A, B, P, Q: A + B * P - Q / P),
    ("(A + B) * P", lambda A, B, P, Q: (A + B) * P),
    ("A - B - P", lambda A, B, P, Q: (A - B) - P),
    ("A / P / Q", lambda A, B, P, Q: (A / P) / Q),
    ("exp(-abs(A)) * log(P + Q)", lambda A, B, P, Q: np.exp(-np.abs(A)) * np.log(P + Q)),
    ("sqrt(pow(A, 2) + pow(B, 2))", lambda A, B, P, Q: np.sqrt(A**2 + B**2)),
    ("A > B ? A : B", lambda A, B, P, Q: np.where(A > B, A, B)),
    ("A < 0 ? 0 : A", lambda A, B, P, Q: np.where(A < 0, 0, A)),
    ("A > 0 ? A : 0.1 * A", lambda A, B, P, Q: np.where(A > 0, A, 0.1 * A)),
    ("A + 1 < B * 2 ? P : Q", lambda A, B, P, Q: np.where(A + 1 < B * 2, P, Q)),
    ("A < B ? (A < 0 ? -A : A) : B", lambda A, B, P, Q: np.where(A < B, np.abs(A), B)),
    ("A < 0 ? P : A > 1 ? Q : B", lambda A, B, P, Q: np.where(A < 0, P, np.where(A > 1, Q, B))),
    ("B * Q", lambda A, B, P, Q: B * Q),  # (5,) * (4, 1) -> (4, 5)
]


@pytest.mark.parametrize("expr,ref", ELEMENTWISE, ids=[e for e, _ in ELEMENTWISE])
def test_elementwise_single_statement(expr, ref):
    arrays = _inputs(40)
    f = tilec.compile(f"O = {expr}")
    used = {name: arrays[name] for name in f.inputs}
    assert tuple(f.outputs) == ("O",)
    out = f(**used)
    expected = np.asarray(ref(**arrays))
    assert_matches(out, expected, rtol=2e-6, atol=1e-6)


def test_single_statement_inputs_in_order_of_first_appearance():
    f = tilec.compile("O = Q * P + P - A")
    assert tuple(f.inputs) == ("Q", "P", "A")


COMPARISONS = [
    ("<", np.less),
    (">", np.greater),
    ("<=", np.less_equal),
    (">=", np.greater_equal),
    ("==", np.equal),
    ("!=", np.not_equal),
]


@pytest.mark.parametrize("op,fn", COMPARISONS, ids=[o for o, _ in COMPARISONS])
def test_comparisons_give_bool(op, fn):
    r = rng(41)
    a = r.integers(0, 3, size=(4, 6)).astype(np.float32)
    b = r.integers(0, 3, size=6).astype(np.float32)  # many ties, so == / <= matter
    out = tilec.compile(f"function (A, B) -> (O) {{ O = A {op} B; }}")(a, b)
    assert_matches(out, fn(a, b))
    assert out.dtype == np.bool_


@pytest.mark.parametrize("op,fn", COMPARISONS, ids=[o for o, _ in COMPARISONS])
def test_comparisons_int32_with_literal(op, fn):
    a = np.array([-2, -1, 0, 1, 2], np.int32)
    out = tilec.compile(f"O = A {op} 0")(a)
    assert_matches(out, fn(a, 0))


def test_comparison_result_feeds_ternary():
    r = rng(42)
    a, b = randn(r, 3, 4), randn(r, 3, 4)
    src = "function (A, B) -> (O) { Mask = A < B; O = Mask ? A * 2 : B; }"
    assert_matches(tilec.compile(src)(a, b), np.where(a < b, a * 2, b))


def test_ternary_mixed_dtypes_promote():
    a = np.array([1, -2, 3], np.int32)
    b = np.array([0.5, 0.25, 0.125], np.float32)
    out = tilec.compile("function (A, B) -> (O) { O = A > 0 ? A : B; }")(a, b)
    assert_matches(out, np.where(a > 0, a, b).astype(np.float32))  # PlaidML: int32/float32 -> float32


# --------------------------------------------------------------------------- broadcasting

BROADCAST_SHAPES = [
    ((3, 4), (4,)),
    ((3, 1), (4,)),
    ((3, 1), (1, 4)),
    ((2, 1, 5), (3, 1)),
    ((1,), (2, 3)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((1, 1), (1,)),
]


@pytest.mark.parametrize("sa,sb", BROADCAST_SHAPES, ids=[f"{a}x{b}" for a, b in BROADCAST_SHAPES])
def test_broadcasting_inputs_without_dims(sa, sb):
    r = rng(50)
    a, b = randn(r, *sa), randn(r, *sb)
    f = tilec.compile("function (A, B) -> (C) { C = A + B; }")
    assert_matches(f(a, b), a + b)


def test_broadcasting_three_way_with_ternary():
    r = rng(51)
    c = randn(r, 3, 1)
    a = randn(r, 1, 4)
    b = randn(r, 4)
    out = tilec.compile("function (Cond, A, B) -> (O) { O = Cond > 0 ? A : B; }")(c, a, b)
    assert_matches(out, np.where(c > 0, a, b))


def test_broadcasting_declared_dims():
    r = rng(52)
    a, b = randn(r, 3, 4), randn(r, 4)
    f = tilec.compile("function (A[N, M], B[M]) -> (O) { O = A * B - B; }")
    assert_matches(f(a, b), a * b - b)


def test_broadcasting_repeated_calls_change_shapes():
    f = tilec.compile("function (A, B) -> (C) { C = A - B; }")
    cases = [((2, 3), (3,)), ((4, 1), (1, 5)), ((5,), (5,)), ((2, 3), (3,))]
    for seed, (sa, sb) in enumerate(cases):
        r = rng(60 + seed)
        a, b = randn(r, *sa), randn(r, *sb)
        assert_matches(f(a, b), a - b)


# --------------------------------------------------------------------------- scalars

def test_scalar_input_elementwise():
    r = rng(70)
    x = randn(r, 6)
    s = np.array(2.5, np.float32)
    f = tilec.compile("function (X[N], S[]) -> (O) { O = X * S; }")
    assert tuple(f.inputs) == ("X", "S")
    assert_matches(f(x, s), x * s)
    assert_matches(f(X=x, S=s), x * s)


def test_scalar_input_in_contraction():
    r = rng(71)
    x = randn(r, 6)
    s = np.array(-1.5, np.float32)
    out = tilec.compile("function (X[N], S[]) -> (O) { O[i: N] = +(X[i] * S[]); }")(x, s)
    assert_matches(out, x * s)


def test_scalar_in_scalar_out():
    s = np.array(0.75, np.float64)
    out = tilec.compile("function (S[]) -> (O) { O = S * S + 1; }")(s)
    assert_matches(out, s * s + 1)


# --------------------------------------------------------------------------- dtypes

def test_literals_are_weak_float32():
    a = randn(rng(80), 5)
    assert_matches(tilec.compile("O = A * 2.0 + 1")(a), a * 2.0 + 1)


def test_int32_literal_stays_int32():
    a = np.arange(-3, 4, dtype=np.int32)
    assert_matches(tilec.compile("O = A * 2 + 1")(a), a * 2 + 1)


def test_int32_with_float_literal_gives_float32():
    a = np.arange(-3, 4, dtype=np.int32)
    assert_matches(tilec.compile("O = A + 2.5")(a), (a + 2.5).astype(np.float32))  # PlaidML's float constants


def test_int32_division_truncates_and_zero_divisor_gives_zero():
    # PlaidML's elementwise integer division is C's '/' (tile/lang/ops.cc in plaidml/plaidml): toward zero
    a = np.array([7, -7, 7, -7, 0, 5, -5, 9], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, 0, 1], np.int32)
    out = tilec.compile("function (A, B) -> (O) { O = A / B; }")(a, b)
    assert_matches(out, int_trunc_div(a, b))
    np.testing.assert_array_equal(out, [3, -3, -3, 3, 0, 0, 0, 9])


def test_int32_division_by_literal():
    a = np.array([7, -7, 6, -1], np.int32)
    assert_matches(tilec.compile("O = A / 2")(a), np.array([3, -3, 3, 0], np.int32))


@pytest.mark.parametrize("fn,ref", [("exp", np.exp), ("sqrt", np.sqrt), ("tanh", np.tanh),
                                    ("sin", np.sin), ("log", np.log), ("sigmoid", sigmoid)])
def test_float_builtin_on_int32_gives_float32(fn, ref):
    a = np.array([1, 2, 3, 4], np.int32)
    assert_matches(tilec.compile(f"O = {fn}(A)")(a), ref(a.astype(np.float64)).astype(np.float32))


def test_int32_abs_max_min_stay_int32():
    a = np.array([-3, 4, -5, 0], np.int32)
    b = np.array([1, -1, 2, 2], np.int32)
    f = tilec.compile("function (A, B) -> (X, Y, Z) { X = abs(A); Y = max(A, B); Z = min(A, B); }")
    x, y, z = f(a, b)
    assert_matches(x, np.abs(a))
    assert_matches(y, np.maximum(a, b))
    assert_matches(z, np.minimum(a, b))


@pytest.mark.parametrize(
    "da,db",
    [(np.float32, np.float64), (np.int32, np.float32), (np.int32, np.float64), (np.int32, np.int32)],
)
def test_mixed_dtype_elementwise_promotes(da, db):
    r = rng(81)
    a, b = randn(r, 3, 4, dtype=da), randn(r, 4, dtype=db)
    out = tilec.compile("function (A, B) -> (O) { O = A * B + A; }")(a, b)
    t = np.float32 if np.dtype(da) == np.int32 and np.dtype(db) == np.float32 else np.result_type(da, db)
    assert_matches(out, a * b + a, dtype=t)  # PlaidML: int32 * float32 -> float32


def test_float64_elementwise_precision():
    # A float64 program must not round through float32 anywhere.
    a = np.array([1.0 + 1e-12, 1.0 / 3.0], np.float64)
    out = tilec.compile("O = A * 3 - 1")(a)
    assert_matches(out, a * 3 - 1, rtol=1e-14, atol=1e-15)


def test_same_function_called_with_different_dtypes():
    f = tilec.compile("C[i,j:M,N] = +(A[i,k]*B[k,j])")
    r = rng(82)
    for dt in (np.float32, np.float64, np.int32, np.float32):
        a, b = randn(r, 3, 4, dtype=dt), randn(r, 4, 2, dtype=dt)
        out = f(a, b)
        assert_matches(out, a.astype(np.float64) @ b, dtype=dt)


# --------------------------------------------------------------------------- repeated calls / cache

def test_repeated_calls_with_different_shapes_matmul():
    f = tilec.compile(
        "function (A[M, L], B[L, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"
    )
    for seed, (m, l, n) in enumerate([(2, 3, 4), (5, 1, 7), (8, 8, 8), (2, 3, 4)]):
        r = rng(90 + seed)
        a, b = randn(r, m, l), randn(r, l, n)
        assert_matches(f(a, b), a.astype(np.float64) @ b, dtype=np.float32)


def test_compiling_same_source_twice():
    src = "O[i: N] = +(A[i, j])"
    r = rng(95)
    a1, a2 = randn(r, 3, 4), randn(r, 6, 2)
    f1, f2 = tilec.compile(src), tilec.compile(src)
    assert_matches(f1(a1), a1.astype(np.float64).sum(1), dtype=np.float32)
    assert_matches(f2(a2), a2.astype(np.float64).sum(1), dtype=np.float32)
    assert_matches(f1(a2), a2.astype(np.float64).sum(1), dtype=np.float32)


def test_outputs_are_fresh_arrays():
    r = rng(96)
    a = randn(r, 4)
    f = tilec.compile("O = A * 2")
    o1 = f(a)
    o2 = f(a)
    assert o1 is not o2
    o1[:] = 0
    assert_matches(o2, a * 2)
    assert_matches(f(a), a * 2)


# --------------------------------------------------------------------------- larger shapes

def test_large_softmax():
    r = rng(120)
    x = randn(r, 67, 1029) * 4
    out = tilec.compile(SOFTMAX)(x)
    assert_matches(out, softmax_rows(x), dtype=np.float32, rtol=1e-4, atol=1e-7)


def test_large_attention():
    r = rng(121)
    q, k, v = randn(r, 97, 64), randn(r, 131, 64), randn(r, 131, 40)
    out = tilec.compile(ATTENTION)(q, k, v)
    assert_matches(out, attention_ref(q, k, v, 0.25), dtype=np.float32, rtol=1e-4, atol=1e-4)


def test_large_gemm_bias_relu():
    r = rng(122)
    a, b, bias = randn(r, 150, 77), randn(r, 77, 211), randn(r, 211)
    out = tilec.compile(GEMM_BIAS_RELU_TERNARY)(a, b, bias)
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    assert_matches(out, ref, dtype=np.float32, rtol=1e-4, atol=1e-3)


def test_large_elementwise_broadcast_odd_sizes():
    r = rng(123)
    a, b, c = randn(r, 7, 1, 1031), randn(r, 13, 1), uniform(r, 0.5, 2.0, 1031)
    src = "function (A, B, C) -> (O) { O = A > B ? exp(-abs(A)) * log(C) : sigmoid(B) / C; }"
    out = tilec.compile(src)(a, b, c)
    ref = np.where(a > b, np.exp(-np.abs(a)) * np.log(c), sigmoid(b) / c)
    assert_matches(out, ref, rtol=1e-5, atol=1e-6)
