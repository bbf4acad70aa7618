"""float32 sums in the default loop nest and in the column_reduce template stay within an ulp or two
of the exact sum (tilec.ir.lower's sum_accumulator_dtype): a scatter sums into a float64
workspace, a direct nest adds its innermost loop's float32 chunks in float64, a column sum (a bias
gradient) adds chunks of rows in float64. Without it a sum over thousands of terms, added one by one in
float32, drifted several ulp (group_norm's statistics and weight gradient on PyTorch's own samples
were further from float64 than torch's).

The kernels run with the "default" template named in a TemplateSchedule, so the default nest
computes them whatever other template the host would choose; inputs sit on an offset (every term
about the same size), where a float32 chain's error grows fastest. A user's Schedule keeps the
plain float32 nest (its loops are the ones the user names).
"""

from __future__ import annotations

import numpy as np
import ml_dtypes
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tilec
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule

EPS32 = float(np.finfo(np.float32).eps)

# the sum over n and t: a scatter (the output's constant index) and a direct nest (lone indices)
SCATTER = "function (X[N, C, T]) -> (O) { O[0, c: 1, C] = +(X[n, c, t]); }"
DIRECT = "function (X[N, C, T]) -> (O) { O[c: C] = +(X[n, c, t]); }"


def _default_nest(src: str) -> tilec.Function:
    return tilec.compile(src).with_schedule(TemplateSchedule((TemplateConfig(0, "default", ()),)))


def _error_in_ulps(got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of `got` (one sum per c) against the float64 sum, in units of float32
    epsilon times the sum of magnitudes (what a correctly rounded float32 result stays below 1 of)."""
    wide = x.astype(np.float64)
    exact = wide.sum(axis=(0, 2))
    scale = np.abs(wide).sum(axis=(0, 2))
    return float(np.max(np.abs(got.reshape(-1).astype(np.float64) - exact) / (EPS32 * scale)))


@settings(max_examples=12, deadline=None)
@given(n=st.integers(200, 600), c=st.integers(1, 3), t=st.integers(1, 48), offset=st.sampled_from([1.0, 100.0, -3e3]),
       seed=st.integers(0, 2**16))
def test_a_long_float32_sum_is_within_an_ulp_or_two_of_the_exact_sum(n, c, t, offset, seed):
    x = (offset + np.random.default_rng(seed).standard_normal((n, c, t))).astype(np.float32)
    for src in (SCATTER, DIRECT):
        got = _default_nest(src)(x)
        assert got.dtype == np.float32
        assert _error_in_ulps(got, x) <= 1.5, src


def test_a_float64_sum_and_a_float32_max_are_unchanged_by_the_wider_sums():
    rng = np.random.default_rng(0)
    x64 = rng.standard_normal((300, 2, 16))
    for src in (SCATTER, DIRECT):
        got = _default_nest(src)(x64)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got.reshape(-1), x64.sum(axis=(0, 2)), rtol=1e-12)
    x32 = x64.astype(np.float32)
    peak = _default_nest("function (X[N, C, T]) -> (O) { O[c: C] = >(X[n, c, t]); }")(x32)
    np.testing.assert_array_equal(peak, x32.max(axis=(0, 2)))


def test_a_user_schedule_keeps_the_plain_float32_nest():
    """The loops a user's Schedule names are the plain nest's: no float64 workspace, no chunk loop."""
    shapes = {"X": (300, 2, 16)}
    for src in (SCATTER, DIRECT):
        text = tilec.compile(src).with_schedule(tilec.Schedule()).explain(shapes, stage="loop")
        assert "float64" not in text and ".total" not in text
        wide = _default_nest(src).explain(shapes, stage="loop")
        assert "float64" in wide


@settings(max_examples=8, deadline=None)
@example(rows=21, columns=22, batch=None, offset=-50.0, seed=0)  # float32 chunks of 64 rows: 1.59
@given(rows=st.integers(1, 5000), columns=st.integers(2, 40), batch=st.sampled_from([None, 3]),
       offset=st.sampled_from([1.0, -50.0]), seed=st.integers(0, 2**16))
def test_a_column_sum_over_many_rows_is_within_an_ulp_or_two(rows, columns, batch, offset, seed):
    """A bias gradient's sum over rows (and over a batch axis before them): one float32 chain down
    4096 rows ended 19 x eps x sum|A| from the exact sum (torch's cascade sum 0.9 x)."""
    shape = (rows, columns) if batch is None else (batch, rows, columns)
    src = ("function (A[R, K]) -> (O) { O[x: K] = +(A[j, x]); }" if batch is None
           else "function (A[B, R, K]) -> (O) { O[x: K] = +(A[b, j, x]); }")
    fn = tilec.compile(src).with_schedule(TemplateSchedule((TemplateConfig(0, "column_reduce", ()),)))
    assert "column_reduce" in fn.explain({"A": shape}, stage="templates")
    a = (offset + np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)
    got = fn(a)
    wide = a.astype(np.float64).reshape(-1, columns)
    exact, scale = wide.sum(axis=0), np.abs(wide).sum(axis=0)
    assert float(np.max(np.abs(got.astype(np.float64) - exact) / (EPS32 * scale))) <= 1.5


def _column_reduce(src: str) -> tilec.Function:
    return tilec.compile(src).with_schedule(TemplateSchedule((TemplateConfig(0, "column_reduce", ()),)))


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 80), columns=st.integers(2, 90), outer=st.sampled_from([None, 1, 3]),
       agg=st.sampled_from(["+", ">", "<"]), dtype=st.sampled_from(["float32", "float64", "int32", "float16", "bfloat16"]),
       seed=st.integers(0, 2**16))
def test_column_reduce_agrees_with_numpy_across_strips_blocks_and_tails(rows, columns, outer, agg, dtype, seed):
    """Rows on both sides of a block of rows and its tail; columns in strips, single vectors and a
    scalar tail; with and without an output variable before the column (each thread its own row)."""
    shape = (rows, columns) if outer is None else (outer, rows, columns)
    src = ("function (A[R, K]) -> (O) { O[x: K] = %s(A[j, x]); }" % agg if outer is None
           else "function (A[B, R, K]) -> (O) { O[b, x: B, K] = %s(A[b, j, x]); }" % agg)
    fn = _column_reduce(src)
    assert "column_reduce" in fn.explain({"A": shape}, stage="templates")
    rng = np.random.default_rng(seed)
    wide = rng.integers(-1000, 1000, shape) if dtype == "int32" else rng.standard_normal(shape) + 3.0
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a = wide.astype(np_dtype)
    got = fn(a)
    assert got.dtype == np_dtype and got.shape == shape[:-2] + shape[-1:]
    exact = a.astype(np.float64)
    if agg != "+":
        want = exact.max(axis=-2) if agg == ">" else exact.min(axis=-2)
        np.testing.assert_array_equal(got.astype(np.float64), want)
        return
    want, scale = exact.sum(axis=-2), np.abs(exact).sum(axis=-2)
    if dtype in ("int32", "float64"):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-13)
        return
    # accumulated wide and rounded once: within half an ulp of the type, plus the float32 accumulator's drift
    ulp = {"float32": EPS32, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    assert float(np.max(np.abs(got.astype(np.float64) - want) / scale)) <= ulp
