"""Absurd sizes and literals get a TilecError, never a MemoryError, a crash or wrapped arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import tilec

ONES = np.ones(3, np.float32)


@pytest.mark.parametrize("src, sizes, match", [
    ("O[i: 99999999999] = +(A[i])", {}, "GiB"),
    ("O[i, j, k, l: 5000, 5000, 5000, 5000] = +(A[i])", {}, "GiB"),
    ("O[i: 99999999999999999999999] = +(A[i])", {}, "64 bits"),
    ("O[i: N] = +(A[i])", {"N": -5}, "negative shape"),
    ("O[i: N] = +(A[i / 0])", {"N": 3}, "division by zero"),
    ("O[i: 3 / 0] = +(A[i])", {}, "division by zero"),
])
def test_absurd_sizes_are_bind_errors(src, sizes, match):
    with pytest.raises(tilec.BindError, match=match):
        tilec.compile(src, **sizes)(ONES)


def test_an_offset_beyond_64_bits_reads_nothing():
    """Exact bounds: i + 10**23 is outside A for every i, so no tuple contributes."""
    out = tilec.compile("O[i: N] = +(A[i + 99999999999999999999999])", N=3)(ONES)
    np.testing.assert_array_equal(out, np.zeros(3, np.float32))


def test_a_coefficient_beyond_64_bits_times_a_fixed_variable():
    """Only i = 0 keeps 10**23 * i inside A: i is fixed at 0 and the product never computed."""
    out = tilec.compile("O[i: N] = +(A[99999999999999999999999 * i])", N=3)(ONES)
    np.testing.assert_array_equal(out, [1, 0, 0])


def test_integer_literal_that_does_not_fit_is_refused_like_numpy():
    with pytest.raises(tilec.BindError, match="does not fit in int32"):
        tilec.compile("O = A * 99999999999999999999999")(np.ones(3, np.int32))


def test_inferred_dimension_of_an_empty_input_is_empty():
    out = tilec.compile("O[i] = +(A[i])")(np.ones(0, np.float32))
    assert out.shape == (0,)
    assert tilec.compile("O[] = +(A[i])")(np.ones(0, np.float32)) == 0
