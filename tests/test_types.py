"""Every PlaidML type through + - * / and comparisons, each pair of types, against numpy with
PlaidML's result type; conversions, unsigned semantics and integer contractions.

Shapes 64x55 and 1x1000 run the LLVM backend's explicit vector code, 3x5 its scalar loops.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tilec
from tilec.errors import BindError, TilecError

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
SHAPES = [(64, 55), (1, 1000), (3, 5)]
ARITH = "function (A[M, N], B[M, N]) -> (S, D, P, Q, L, E) { S = A + B; D = A - B; P = A * B; Q = A / B; L = A < B; E = A != B; }"


def plaidml_type(a: str, b: str) -> str:
    """PlaidML's Tile type checker: a float beats an integer; otherwise the wider wins, the first on a tie
    (tilec differs only in letting bool lose a tie)."""
    fa, fb = a.startswith("float"), b.startswith("float")
    if fa != fb:
        return a if fa else b
    if a == "bool":
        return b
    width = {d: np.dtype(d).itemsize for d in DTYPES}
    return b if width[b] > width[a] else a


@pytest.mark.parametrize("a,b,expected", [
    ("int32", "float32", "float32"), ("float32", "int32", "float32"), ("int64", "float16", "float16"),
    ("int8", "uint8", "int8"), ("uint8", "int8", "uint8"), ("uint32", "int32", "uint32"), ("int32", "uint32", "int32"),
    ("uint16", "int32", "int32"), ("bool", "int8", "int8"), ("int8", "bool", "int8"), ("float32", "float64", "float64"),
    ("float16", "float32", "float32"), ("bool", "float16", "float16"), ("uint64", "int64", "uint64"),
])
def test_promotion_table(a: str, b: str, expected: str) -> None:
    assert plaidml_type(a, b) == expected  # the reference itself, checked by hand
    x, y = np.ones(4, a), np.ones(4, b)
    assert tilec.compile("function (A, B) -> (C) { C = A * B; }")(x, y).dtype == np.dtype(expected)


def _values(r: np.random.Generator, dtype: str, shape: tuple[int, ...], nonzero: bool) -> np.ndarray:
    if dtype == "bool":
        return np.ones(shape, bool) if nonzero else r.integers(0, 2, shape).astype(bool)
    lo = 0 if dtype.startswith("uint") else -9
    out = r.integers(lo, 10, shape)
    if nonzero:
        out = np.where(out == 0, 3, out)
    if dtype.startswith("float"):
        return (out + r.random(shape) * (np.sign(out))).astype(dtype)
    return out.astype(dtype)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer '/' rounds toward zero (PlaidML's C division), x / 0 == 0."""
    safe = np.where(b == 0, 1, b)
    q = a // safe
    q = np.where((a % safe != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(a.dtype)


def _check(out: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    assert out.shape == ref.shape, what
    if ref.dtype.kind == "f":
        rtol = {2: 2e-3, 4: 2e-6, 8: 1e-13}[ref.dtype.itemsize]
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=rtol, err_msg=what)
    else:
        np.testing.assert_array_equal(out, ref, err_msg=what)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_pair_of_types(shape: tuple[int, int]) -> None:
    f = tilec.compile(ARITH)
    r = np.random.default_rng(15)
    for a, b in itertools.product(DTYPES, DTYPES):
        x, y = _values(r, a, shape, False), _values(r, b, shape, True)
        t = plaidml_type(a, b)
        xt, yt = x.astype(t), y.astype(t)
        if t == "bool":
            with pytest.raises(BindError, match="on booleans"):
                f(x, y)
            continue
        s, d, p, q, lt, ne = f(x, y)
        what = f"{a} op {b} on {shape}"
        _check(s, xt + yt, "+ " + what)
        _check(d, xt - yt, "- " + what)
        _check(p, xt * yt, "* " + what)
        _check(q, xt / yt if t.startswith("float") else _trunc_div(xt, yt), "/ " + what)
        _check(lt, x < y, "< " + what)
        _check(ne, x != y, "!= " + what)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_issue_examples_mixed_floats_and_ints_vectorised(shape: tuple[int, int]) -> None:
    r = np.random.default_rng(1)
    a32, a64 = r.standard_normal(shape).astype(np.float32), r.standard_normal(shape)
    i32 = r.integers(-50, 50, shape).astype(np.int32)
    f = tilec.compile("function (A, B) -> (C) { C = A * B; }")
    _check(f(a32, a64), a32.astype(np.float64) * a64, "float32 * float64")
    _check(f(a32, i32), a32 * i32.astype(np.float32), "float32 * int32")
    _check(f(i32, a32), i32.astype(np.float32) * a32, "int32 * float32")


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])
def test_literals_stay_weak(dtype: str) -> None:
    x = _values(np.random.default_rng(2), dtype, (5, 7), True)
    out = tilec.compile("O = A * 2 + 1")(x)
    _check(out, x * np.array(2, dtype) + np.array(1, dtype), f"{dtype} with int literals")
    half = tilec.compile("O = A * 0.5")(x)
    expected = dtype if dtype.startswith("float") else "float32"  # a float literal is float32 beside integers
    _check(half, x.astype(expected) * np.array(0.5, expected), f"{dtype} * 0.5")


def test_bool_with_an_int_literal_is_int32() -> None:
    x = np.array([True, False, True])
    _check(tilec.compile("O = A + 1")(x), x.astype(np.int32) + 1, "bool + 1")


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("shape", [(64, 55), (3, 5)], ids=lambda s: "x".join(map(str, s)))
def test_unsigned_semantics_at_the_top_of_the_range(dtype: str, shape: tuple[int, int]) -> None:
    info = np.iinfo(dtype)
    r = np.random.default_rng(3)
    big = np.array([info.max, info.max - 1, info.max // 2 + 1, 0, 1, 7], dtype)
    x = r.choice(big, shape).astype(dtype)
    y = r.choice(big[:-2], shape).astype(dtype)  # nonzero divisors, some above the signed range
    y = np.where(y == 0, 1, y).astype(dtype)
    src = ("function (A, B) -> (Q, R, L, G, X, N, F) { Q = A / B; R = A < B; L = max(A, B); G = min(A, B); "
           "X = A + B; N = A >= B; F = as_float(A, 64); }")
    q, lt, mx, mn, s, ge, fl = tilec.compile(src)(x, y)
    _check(q, x // y, "unsigned division")
    _check(lt, x < y, "unsigned <")
    _check(mx, np.maximum(x, y), "unsigned max")
    _check(mn, np.minimum(x, y), "unsigned min")
    _check(s, x + y, "unsigned wrapping +")
    _check(ge, x >= y, "unsigned >=")
    _check(fl, x.astype(np.float64), "uitofp")


def test_unsigned_division_by_zero_gives_zero() -> None:
    x = np.array([5, 250, 0], np.uint8)
    y = np.array([0, 0, 0], np.uint8)
    _check(tilec.compile("function (A, B) -> (Q) { Q = A / B; }")(x, y), np.zeros(3, np.uint8), "x / 0")


@pytest.mark.parametrize("src_dtype", DTYPES)
@pytest.mark.parametrize("func,bits", [("as_float", 16), ("as_float", 32), ("as_float", 64), ("as_int", 8),
                                       ("as_int", 16), ("as_int", 32), ("as_int", 64), ("as_uint", 8),
                                       ("as_uint", 16), ("as_uint", 32), ("as_uint", 64), ("as_bool", None)])
def test_conversions_between_every_type(src_dtype: str, func: str, bits: int | None) -> None:
    target = "bool" if bits is None else func[3:] + str(bits)
    x = _values(np.random.default_rng(4), src_dtype, (64, 55), False)
    if src_dtype.startswith("float"):
        x[0, :4] = [np.nan, -0.0, np.inf, -np.inf] if target == "bool" or target.startswith("float") else 0
    call = f"{func}(A)" if bits is None else f"{func}(A, {bits})"
    out = tilec.compile(f"O = {call}")(x)
    _check(out, x.astype(target), f"{call} of {src_dtype}")


@pytest.mark.parametrize("dtype,agg,ref", [
    ("int8", "+", lambda a: a.sum(1, dtype=np.int8)), ("uint8", "+", lambda a: a.sum(1, dtype=np.uint8)),
    ("uint8", ">", lambda a: a.max(1)), ("uint16", "<", lambda a: a.min(1)), ("int16", ">", lambda a: a.max(1)),
    ("uint8", "*", lambda a: a.prod(1, dtype=np.uint8)), ("uint64", "+", lambda a: a.sum(1, dtype=np.uint64)),
    ("bool", ">", lambda a: a.max(1)),
])
@pytest.mark.parametrize("n", [1000, 7])
def test_integer_contractions_accumulate_in_their_type(dtype: str, agg: str, ref, n: int) -> None:  # type: ignore[no-untyped-def]
    r = np.random.default_rng(5)
    if dtype == "bool":
        a = r.integers(0, 2, (6, n)).astype(bool)
    else:
        info = np.iinfo(dtype)
        a = r.integers(max(info.min, -200), min(info.max, 250), (6, n), endpoint=True).astype(dtype)
    out = tilec.compile(f"O[i: M] = {agg}(A[i, j])")(a)
    _check(out, ref(a), f"{agg} over {dtype}")


def test_unsupported_dtype_is_a_bind_error() -> None:
    with pytest.raises(TilecError, match="complex64"):
        tilec.compile("O = A + 1")(np.ones(3, np.complex64))


CONTRACTION_DTYPES = ["bool", "int8", "int32", "uint8", "uint32", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("a", CONTRACTION_DTYPES)
def test_mixed_type_contractions(a: str) -> None:
    """A matmul (the GEMM templates) and a max over a sum, for every pair of types."""
    mm = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
    mx = tilec.compile("function (A[M, K], B[K]) -> (C) { C[i: M] = >(A[i, k] + B[k]); }")
    r = np.random.default_rng(6)
    for b in CONTRACTION_DTYPES:
        x, y, v = _values(r, a, (64, 55), False), _values(r, b, (55, 33), False), _values(r, b, (55,), False)
        t = plaidml_type(a, b)
        xt, yt, vt = x.astype(t), y.astype(t), v.astype(t)
        if t.startswith("float"):
            tol = {"float16": 3e-2, "float32": 1e-4, "float64": 1e-12}[t]
            out = mm(x, y)
            assert out.dtype == np.dtype(t)
            np.testing.assert_allclose(out.astype(float), xt.astype(float) @ yt.astype(float), rtol=tol, atol=50 * tol)
        elif t == "bool":
            _check(mm(x, y), (x.astype(int) @ y.astype(int)) > 0, f"bool matmul {a} {b}")
        else:
            _check(mm(x, y), (xt[:, :, None] * yt[None]).sum(1, dtype=t), f"matmul {a} {b}")
        _check(mx(x, v), (xt | vt[None]).max(1) if t == "bool" else (xt + vt[None]).max(1), f"max of sums {a} {b}")


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32"])
def test_integers_compare_exactly_with_float_literals(dtype: str) -> None:
    x = np.array([16777217, 16777216, 3, 0], dtype)
    f = tilec.compile("function (A) -> (L, E) { L = A <= 16777216.5; E = A == 16777217.0; }")
    lt, eq = f(x)
    _check(lt, x <= 16777216.5, "<= float literal")
    _check(eq, x == 16777217.0, "== float literal")
