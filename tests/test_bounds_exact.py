"""Exact bounds inference: Python-int ranges, gcd-normalised conditions, Fourier–Motzkin over the
whole statement, zero-size dimensions, and index arithmetic proven inside int64 (issue 15, items
5 and 6). Results are checked against numpy or a brute-force Python-int oracle of the Tile
contraction semantics: a tuple contributes exactly when every index is inside its tensor."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.ir.affine import IntAffine
from tilec.ir.conditions import Condition, infer_ranges, is_empty, normalise
from tilec.ir.index_width import INT64_MAX, affine_interval
from tilec.ir.loop_nest import affine_expr

F32 = np.float32
BIG = 2**62


def run(src: str, *args: np.ndarray, **sizes: int) -> np.ndarray:
    return np.asarray(tilec.compile(src, **sizes)(*args))


# ------------------------------------------------------------------ the reproducers


def test_float64_bounds_lost_exactness():
    out = run("O[i, j: 2, 2] = +(A[9007199254740993*i - 9007199254740992*j])", np.array([1, 2], F32))
    np.testing.assert_array_equal(out, [[1, 0], [0, 2]])  # O[1, 1] = A[1]


def test_index_arithmetic_does_not_wrap():
    out = run("O[i, j: 9, 9] = +(A[2305843009213693952*i - 2305843009213693952*j])", np.array([1, 2, 3], F32))
    np.testing.assert_array_equal(out, np.eye(9, dtype=F32))  # only i == j reads A (A[0])
    assert out[0, 8] == 0 and out[8, 0] == 0


def test_divisor_beyond_64_bits_in_an_index():
    out = run("O[i / 18446744073709551616] = +(A[i])", np.array([5, 6, 7], F32))
    np.testing.assert_array_equal(out, [5])  # only i = 0 is divisible


def test_divisor_beyond_64_bits_in_a_constraint():
    out = run("O[i: 3] = +(A[i]), i / 18446744073709551616 < 1", np.array([5, 6, 7], F32))
    np.testing.assert_array_equal(out, [5, 0, 0])


def test_reduction_over_an_empty_dimension_keeps_the_other():
    a = np.ones((3, 0), F32)
    out = run("O[i] = +(A[i, j])", a)
    assert out.shape == (3,)
    np.testing.assert_array_equal(out, a.sum(1))


def test_matmul_with_empty_inner_dimension():
    a, b = np.ones((3, 0), F32), np.ones((0, 4), F32)
    out = run("C[i, j] = +(A[i, k] * B[k, j])", a, b)
    assert out.shape == (3, 4)
    np.testing.assert_array_equal(out, a @ b)


def test_an_empty_output_needs_no_ranges():
    out = run("O[i, k: 5, 0] = +(A[2*i - m])", np.ones(3, F32))
    assert out.shape == (5, 0)


def test_coefficients_that_would_overflow_are_refused_not_wrapped():
    with pytest.raises(tilec.BindError, match="index arithmetic exceeds 64 bits in statement"):
        run("O[i, j: 3, 3] = +(A[4611686018427387904*i - 4611686018427387903*j])", np.ones(5, F32))


# ------------------------------------------------------------------ Fourier–Motzkin over the statement


def test_variables_bounded_only_by_a_sum_and_a_difference():
    a, b = np.arange(1, 6, dtype=F32), np.arange(2, 7, dtype=F32)
    out = run("O[x: 1] = +(A[i + j] * B[i - j])", a, b)
    want = sum(a[i + j] * b[i - j] for i in range(-10, 10) for j in range(-10, 10)
               if 0 <= i + j < 5 and 0 <= i - j < 5)
    np.testing.assert_allclose(out, [want])


def test_output_indexed_through_a_coupled_variable():
    a = np.arange(1, 8, dtype=F32)
    out = run("O[i: 4] = +(A[i + j]), i - j < 2", a)
    want = [sum(a[i + j] for j in range(-10, 10) if 0 <= i + j < 7 and 0 <= i - j < 2) for i in range(4)]
    np.testing.assert_allclose(out, want)


def test_projection_is_tight_on_a_diamond():
    conds = [Condition(IntAffine((("i", 1), ("j", 1)), 0), 0, 4), Condition(IntAffine((("i", 1), ("j", -1)), 0), 0, 4)]
    assert infer_ranges(conds, ("i", "j")) == {"i": (0, 4), "j": (-2, 2)}


def test_normalise_divides_by_the_gcd():
    c = normalise(Condition(IntAffine((("i", 2**61), ("j", -(2**61))), 0), 0, 2))
    assert (c.expr.coeffs, c.expr.const, c.lo, c.hi) == ((("i", 1), ("j", -1)), 0, 0, 0)


fm_coeff = st.one_of(st.integers(-3, 3), st.sampled_from([2**61, -(2**61), 2**62 - 1]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(fm_coeff, fm_coeff, fm_coeff, st.integers(-6, 6), st.integers(0, 8)),
                min_size=1, max_size=4))
def test_fourier_motzkin_ranges_are_sound(rows):
    names = ("i", "j", "k")
    conds = [Condition(IntAffine(tuple((v, c) for v, c in zip(names, cs) if c), const), 0, width)
             for *cs, const, width in rows]
    conds += [Condition(IntAffine(((v, 1),), 0), -5, 5) for v in names]  # a box to enumerate
    ranges = infer_ranges([normalise(c) for c in conds], names)
    for point in itertools.product(range(-5, 6), repeat=3):
        env = dict(zip(names, point))
        if all(0 <= sum(c * env[v] for v, c in cond.expr.coeffs) + cond.expr.const <= cond.hi for cond in conds):
            for v in names:
                assert not is_empty(ranges[v])
                lo, hi = ranges[v]
                assert lo <= env[v] <= hi, (conds, ranges, env)


# ------------------------------------------------------------------ random statements against an oracle


coefficient = st.one_of(st.integers(-3, 3), st.integers(-BIG, BIG), st.sampled_from([BIG, -BIG, BIG - 1, 2**53 + 1]))


@st.composite
def statements(draw):
    """O[i, j: I, J] = agg(A[affine(i, j, k)] * B[k]): i, j, k each bounded by a lone use, so the
    oracle can enumerate the box; A's index has large coefficients."""
    sizes = {n: draw(st.integers(0, 4)) for n in "IJK"}
    n_a = draw(st.integers(0, 5))
    coeffs = [draw(coefficient) for _ in range(3)]
    scale = draw(st.sampled_from([1, 1, 2**40, 2**61]))  # a common factor gcd normalisation removes
    coeffs = [c * scale for c in coeffs]
    if draw(st.booleans()):
        const = draw(st.one_of(st.integers(-4, 4), st.integers(-BIG, BIG)))
    else:  # aim one tuple of the box at a cell of A, so that large terms cancel somewhere
        at = [draw(st.integers(0, max(sizes[n] - 1, 0))) for n in "IJK"]
        const = draw(st.integers(0, max(n_a - 1, 0))) - sum(c * x for c, x in zip(coeffs, at))
    agg = draw(st.sampled_from(["+", ">"]))
    return sizes, n_a, coeffs, const, agg


def _oracle(sizes, a, b, coeffs, const, agg):
    out = np.zeros((sizes["I"], sizes["J"]), np.float64)
    written = np.zeros(out.shape, bool)
    for i, j, k in itertools.product(range(sizes["I"]), range(sizes["J"]), range(sizes["K"])):
        idx = coeffs[0] * i + coeffs[1] * j + coeffs[2] * k + const  # exact Python ints
        if 0 <= idx < len(a):
            v = float(a[idx]) * float(b[k])
            out[i, j] = out[i, j] + v if agg == "+" else (v if not written[i, j] else max(out[i, j], v))
            written[i, j] = True
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(statements(), st.integers(0, 2**32 - 1))
def test_random_large_coefficient_statements_match_the_oracle(stmt, seed):
    sizes, n_a, coeffs, const, agg = stmt
    rng = np.random.default_rng(seed)
    a = rng.integers(-9, 10, n_a).astype(F32)
    b = rng.integers(-9, 10, sizes["K"]).astype(F32)
    src = (f"function (A[NA], B[K]) -> (O) {{ O[i, j: I, J] = {agg}(A[{coeffs[0]}*i + {coeffs[1]}*j + "
           f"{coeffs[2]}*k + {const}] * B[k]); }}")
    try:
        out = run(src, a, b, I=sizes["I"], J=sizes["J"])
    except tilec.BindError as err:
        assert "exceeds 64 bits" in str(err)
        # refused only where evaluating the index term by term really overflows int64
        box = [sizes["I"] - 1, sizes["J"] - 1, sizes["K"] - 1]
        assert max(abs(c) * max(n, 0) for c, n in zip(coeffs, box)) + abs(const) >= 2**62, (src, err)
        return
    np.testing.assert_array_equal(out, _oracle(sizes, a, b, coeffs, const, agg).astype(F32), err_msg=src)


# ------------------------------------------------------------------ limits are TilecErrors, not crashes


ONES = np.ones(3, F32)


@pytest.mark.parametrize("src", [
    "O = " + "-" * 500 + "A",
    "O = A" + " + A" * 500,
    "O[i: 3] = +(A[" + "-" * 500 + "i])",
    "O[i: 3] = +(A[i" + " + 1" * 500 + "])",
])
def test_deep_nesting_is_a_syntax_error_with_a_position(src):
    with pytest.raises(tilec.TileSyntaxError, match="nested more than 256 levels") as err:
        run(src, ONES)
    assert err.value.line == 1 and err.value.column > 1


def test_nesting_up_to_the_limit_compiles():
    np.testing.assert_array_equal(run("O = " + "-" * 254 + "A", ONES), ONES)
    np.testing.assert_array_equal(run("O = A" + " + A" * 200, ONES), ONES * 201)


def test_five_hundred_chained_statements():
    body = "".join(f" B{k}[i: N] = +(B{k - 1}[i]);\n" if k % 2 else f" B{k} = B{k - 1} + 1;\n" for k in range(1, 500))
    src = "function (A[N]) -> (B499) {\n B0 = A;\n" + body + "}"
    np.testing.assert_array_equal(run(src, ONES), ONES + 249)


BIG_INT = "1" * 400


@pytest.mark.parametrize("src, error", [
    (f"O = A + {BIG_INT}", tilec.BindError),
    (f"O = A * -{BIG_INT}", tilec.BindError),
    (f"O = A < {BIG_INT} ? A : 0", tilec.BindError),
    (f"O = A + {BIG_INT}.5", tilec.TileSyntaxError),
    ("O = A + 1e400", tilec.TileSyntaxError),
    (f"O[i: {BIG_INT}] = +(A[i])", tilec.BindError),
    ("O[i: 3] = +(A[i + " + "1" * 5000 + "])", tilec.TileSyntaxError),
])
def test_huge_literals_are_tilec_errors(src, error):
    with pytest.raises(error) as err:
        run(src, ONES)
    assert len(getattr(err.value, "reason", str(err.value))) < 600  # the literal is abbreviated


def test_huge_literals_where_they_are_exact():
    np.testing.assert_array_equal(run(f"O[i: 3] = +(A[i + {BIG_INT}])", ONES), np.zeros(3))  # never inside A
    np.testing.assert_array_equal(run(f"O[i: 3] = +(A[i]), i < {BIG_INT}", ONES), ONES)
    np.testing.assert_array_equal(run(f"O[i: 3] = +(A[{BIG_INT} * i])", ONES), [1, 0, 0])  # only i = 0 is inside A


@pytest.mark.parametrize("length", [1000, 5000])
def test_long_identifiers(length):
    u, lo = "X" * length, "x" * length
    a = np.arange(12, dtype=F32).reshape(3, 4)
    for src, want in [
        (f"function ({u}[N, M]) -> ({u}O) {{ {u}O[i: N] = +({u}[i, {lo}]); }}", a.sum(1)),
        (f"function (A[N, M]) -> ({u}) {{ {u}[i: N] = >(A[i, {lo}]); }}", a.max(1)),
        (f"function (A[N, M]) -> (O) {{ {u} = exp(A); O[i: N] = +({u}[i, j]); }}", np.exp(a).sum(1)),
        (f"function (A[N, M]) -> ({u}) {{ {u}[i + j: N + M - 1] = +(A[i, j]); }}",
         np.array([np.trace(a[::-1], offset=k) for k in range(-2, 4)])),
    ]:
        np.testing.assert_allclose(run(src, a), want, rtol=1e-5)


@st.composite
def scatters(draw):
    """O[affine(i, k): S] = agg(A[i] * B[k]): a complex left-hand side with large coefficients."""
    n_i, n_k, s = draw(st.integers(0, 4)), draw(st.integers(0, 4)), draw(st.integers(0, 5))
    scale = draw(st.sampled_from([1, 2**33, 2**60]))
    coeffs = [draw(coefficient) * scale for _ in range(2)]
    at = [draw(st.integers(0, max(n - 1, 0))) for n in (n_i, n_k)]
    const = draw(st.integers(0, max(s - 1, 0))) - sum(c * x for c, x in zip(coeffs, at))
    return n_i, n_k, s, coeffs, const, draw(st.sampled_from(["+", ">", "<"]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scatters(), st.integers(0, 2**32 - 1))
def test_random_scatter_statements_match_the_oracle(stmt, seed):
    n_i, n_k, s, coeffs, const, agg = stmt
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-9, 10, n_i).astype(F32), rng.integers(-9, 10, n_k).astype(F32)
    src = f"function (A[I], B[K]) -> (O) {{ O[{coeffs[0]}*i + {coeffs[1]}*k + {const}: S] = {agg}(A[i] * B[k]); }}"
    want = np.zeros(s, np.float64)
    written = np.zeros(s, bool)
    for i, k in itertools.product(range(n_i), range(n_k)):
        idx = coeffs[0] * i + coeffs[1] * k + const
        if 0 <= idx < s:
            v = float(a[i]) * float(b[k])
            want[idx] = v if not written[idx] else want[idx] + v if agg == "+" else \
                max(want[idx], v) if agg == ">" else min(want[idx], v)
            written[idx] = True
    try:
        out = run(src, a, b, S=s)
    except tilec.BindError as err:
        assert "exceeds 64 bits" in str(err)
        assert max(abs(c) * max(n - 1, 0) for c, n in zip(coeffs, (n_i, n_k))) + abs(const) >= 2**62, (src, err)
        return
    np.testing.assert_array_equal(out, want.astype(F32), err_msg=src)


def test_inferred_dimension_beside_contradictory_constraints():
    """i + j < 0 admits no tuple; i still runs over A's extent, so O keeps A's shape (all zeros)."""
    out = run("O[i] = +(A[i] * B[j]), i + j < 0", np.ones(3, F32), np.ones(2, F32))
    np.testing.assert_array_equal(out, np.zeros(3))
    out = run("O[i] = +(A[i] * B[j]), i + j < 2", np.ones(3, F32), np.ones(2, F32))
    np.testing.assert_array_equal(out, [2, 1])  # with tuples, i's range is the tuples'


def _holds(cond: Condition, env: dict[str, int]) -> bool:
    num = sum(c * env[v] for v, c in cond.expr.coeffs) + cond.expr.const
    return ((cond.lo is None or num >= cond.lo) and (cond.hi is None or num <= cond.hi)
            and num % cond.expr.divisor == 0)


@settings(max_examples=300, deadline=None)
@given(st.integers(-12, 12), st.integers(-12, 12), st.integers(-20, 20), st.integers(1, 12),
       st.one_of(st.none(), st.integers(-30, 30)), st.one_of(st.none(), st.integers(-30, 30)))
def test_normalise_keeps_exactly_the_same_tuples(ci, cj, const, divisor, lo, hi):
    cond = Condition(IntAffine(tuple((v, c) for v, c in (("i", ci), ("j", cj)) if c), const, divisor), lo, hi)
    norm = normalise(cond)
    for i, j in itertools.product(range(-8, 9), repeat=2):
        env = {"i": i, "j": j}
        assert _holds(cond, env) == _holds(norm, env), (cond, norm, env)


def _intermediates(e: L.Expr, env: dict[str, int], out: list[int]) -> int:
    """Value of a lowered integer expression at `env`, appending every sub-expression's value."""
    if isinstance(e, L.Const):
        value = int(e.value)
    elif isinstance(e, L.Var):
        value = env[e.name]
    else:
        assert isinstance(e, L.Bin) and e.op in ("add", "sub", "mul"), e
        a, b = _intermediates(e.a, env, out), _intermediates(e.b, env, out)
        value = a + b if e.op == "add" else a - b if e.op == "sub" else a * b
    out.append(value)
    return value


@settings(max_examples=300, deadline=None)
@given(st.lists(coefficient, min_size=1, max_size=3), st.one_of(st.integers(-4, 4), st.integers(-BIG, BIG)),
       st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3)), min_size=3, max_size=3), st.integers(1, 6))
def test_the_width_proof_matches_what_lowering_emits(coeffs, const, boxes, extent):
    """Where index_width accepts a form, no sub-expression lower.affine_expr emits leaves int64."""
    names = ("i", "j", "k")
    e = IntAffine(tuple((v, c) for v, c in zip(names, coeffs) if c), const)
    box = {v: (lo, lo + w) for v, (lo, w) in zip(names, boxes)}
    for where in (None, (0, extent - 1)):  # anywhere, or only where the index is inside a tensor
        try:
            affine_interval(e, box, where)
        except Exception as err:  # the private _TooWide: refused
            assert not isinstance(err, BindError)
            continue
        for point in itertools.product(*(range(lo, hi + 1) for lo, hi in box.values())):
            values: list[int] = []
            value = _intermediates(affine_expr(e), dict(zip(names, point)), values)
            if where is None or where[0] <= value <= where[1]:
                assert all(abs(v) <= INT64_MAX for v in values), (e, point, where)


def test_convolution_whose_index_coefficients_share_a_factor():
    """Stride 2 and dilation 2: 2x + 2i - 2 normalises to x + i - 1 in its guard; the padded
    implicit-GEMM path must still see that guard as the image's own bound."""
    rng = np.random.default_rng(7)
    img, ker = rng.standard_normal((1, 12, 12, 4)).astype(F32), rng.standard_normal((3, 3, 4, 8)).astype(F32)
    src = ("function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) { O[n, x, y, co: N, X / 2, Y / 2, CO] = "
           "+(I[n, 2*x + 2*i - 2, 2*y + 2*j - 2, ci] * K[i, j, ci, co]); }")
    want = np.zeros((1, 6, 6, 8), np.float64)
    padded = np.pad(img.astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)))
    for i, j in itertools.product(range(3), range(3)):
        want += np.einsum("nxyc,cd->nxyd", padded[:, 2 * i:2 * i + 12:2, 2 * j:2 * j + 12:2, :], ker[i, j])
    np.testing.assert_allclose(run(src, img, ker), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("src", ["function (A[NA], B[K]) -> (O) { O[i, j: I, J] = +(A[0*i + 0*j + 0*k + 0] * B[k]); }",
                                 "function (A[NA], B[K]) -> (O) { O[i, j: I, J] = +(A[i] * B[k]); }"])
def test_rows_that_no_tuple_reaches_are_zero(src):
    """A guard on the row variables alone that never holds (A has no element to read) leaves every
    cell at the sum's 0: the stencil template once skipped such rows and returned uninitialised
    memory (found by the random statements above: A[0] of a 0-element A)."""
    a, b = np.zeros(0, F32), np.ones(3, F32)
    for _ in range(3):
        junk = [np.full((2, 4), 7e30, F32) for _ in range(20)]  # leave garbage where the output may land
        del junk
        np.testing.assert_array_equal(run(src, a, b, I=2, J=4), np.zeros((2, 4), F32))
