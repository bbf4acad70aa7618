"""PlaidML's structural intrinsics (index, gather, scatter, reshape, shape) and its builtin_* library
functions against numpy, on the default target and cuda-sim, with gradients by finite differences
and the bad uses refused with a TilecError naming the call, its line and column."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.errors import BindError, SemanticError, TilecError
from test_autodiff import check

RNG = np.random.default_rng(15)
TARGETS = ["llvm", "cuda-sim"]


def _run(source: str, target: str, *args: np.ndarray, **sizes: int) -> tuple[np.ndarray, ...]:
    out = tilec.compile(source, target=target, **sizes)(*args)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _gather_ref(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """PlaidML's gather: rows of `data` at `indices`, clamped to the valid rows."""
    return data[np.clip(indices.astype(np.int64), 0, data.shape[0] - 1)]


def _scatter_ref(values: np.ndarray, indices: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros((rows,) + values.shape[indices.ndim:], values.dtype)
    np.add.at(out, np.clip(indices.astype(np.int64), 0, rows - 1), values)
    return out


# ------------------------------------------------------------------ gather


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("data_shape, index_shape", [((5,), (3,)), ((6, 4), (7,)), ((4, 3, 2), (2, 3)),
                                                     ((5, 3), ()), ((5, 3), (0,)), ((3, 0), (4,))])
def test_gather_matches_numpy(target: str, data_shape: tuple[int, ...], index_shape: tuple[int, ...]) -> None:
    data = RNG.standard_normal(data_shape).astype(np.float32)
    indices = RNG.integers(-2, data_shape[0] + 2, index_shape).astype(np.int32)  # some out of range
    (out,) = _run("function (T, I) -> (O) { O = gather(T, I); }", target, data, indices)
    want = _gather_ref(data, indices)
    assert out.shape == want.shape and out.dtype == np.float32
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "int8", "bool"])
@pytest.mark.parametrize("index_dtype", ["int8", "int32", "int64"])
def test_gather_keeps_the_data_dtype_and_takes_any_integer_indices(dtype: str, index_dtype: str) -> None:
    data = (RNG.standard_normal((6, 3)) * 10).astype(dtype)
    indices = np.array([5, 0, 9, -4, 2], index_dtype)
    (out,) = _run("function (T[N, M], I[K]) -> (O) { O = gather(T, I); }", "llvm", data, indices)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, _gather_ref(data, indices))


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(0, 4), picks=st.lists(st.integers(-10, 10), max_size=8))
def test_gather_property(rows: int, cols: int, picks: list[int]) -> None:
    data = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    indices = np.array(picks, np.int64)
    (out,) = _run("function (T, I) -> (O) { O = gather(T, I); }", "llvm", data, indices)
    np.testing.assert_array_equal(out, _gather_ref(data, indices))


# ------------------------------------------------------------------ scatter


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("values_shape, index_shape, rows", [((4,), (4,), 3), ((5, 3), (5,), 4),
                                                             ((2, 3, 2), (2, 3), 5), ((0, 2), (0,), 3)])
def test_scatter_adds_rows_like_numpy(target: str, values_shape: tuple[int, ...], index_shape: tuple[int, ...],
                                      rows: int) -> None:
    values = RNG.standard_normal(values_shape)
    indices = RNG.integers(-1, rows + 1, index_shape).astype(np.int32)  # repeats and out of range
    like = np.zeros((rows, 7), np.float32)
    (out,) = _run("function (T, I, U) -> (O) { O = scatter(T, I, U); }", target, values, indices, like)
    want = _scatter_ref(values, indices, rows)
    assert out.shape == want.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, want, rtol=1e-12)


# ------------------------------------------------------------------ index, shape, reshape


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (3, 0)])
def test_index_is_the_coordinate_as_int32(target: str, shape: tuple[int, ...]) -> None:
    data = RNG.standard_normal(shape).astype(np.float32)
    for d in range(len(shape)):
        (out,) = _run(f"function (T) -> (O) {{ O = index(T, {d}); }}", target, data)
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, np.indices(shape)[d])


def test_index_feeds_a_contraction_argmax() -> None:
    """PlaidML's op library computes argmax with index (tilec's corpus: plaidml/op.py ArgMax)."""
    source = """function (I[N, M], One[]) -> (O) {
        Max[n: N] = >(I[n, m]);
        IndexT[m: M] = =(One[]);
        Index = index(IndexT, 0);
        O[n: N] = >(I[n, m] == Max[n] ? Index[m]);
    }"""
    data = RNG.standard_normal((4, 6)).astype(np.float32)
    (out,) = _run(source, "llvm", data, np.float32(1.0))
    np.testing.assert_array_equal(out, np.argmax(data, axis=1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(), (4,), (2, 3, 5), (0, 3)])
def test_shape_lists_the_dims(target: str, shape: tuple[int, ...]) -> None:
    (out,) = _run("function (T) -> (O) { O = shape(T); }", target, np.zeros(shape, np.float32))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.array(shape, np.int32))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape, dims, new_shape", [
    ((3, 4), "M, N", (4, 3)), ((2, 3, 4), "N * M * K", (24,)), ((6,), "2, 3", (2, 3)),
    ((2, 3, 4), "K, 1, N * M", (4, 1, 6)), ((1,), "", ()), ((0, 3), "M, N", (3, 0))])
def test_reshape_is_row_major(target: str, shape: tuple[int, ...], dims: str,
                              new_shape: tuple[int, ...]) -> None:
    names = ["N", "M", "K"][:len(shape)]
    source = f"function (T[{', '.join(names)}]) -> (O) {{ O = reshape(T{', ' if dims else ''}{dims}); }}"
    data = RNG.standard_normal(shape).astype(np.float32)
    (out,) = _run(source, target, data)
    np.testing.assert_array_equal(out, data.reshape(new_shape))


def test_reshape_of_a_temporary_then_a_contraction() -> None:
    source = """function (A[N, M]) -> (O) {
        F = reshape(A, N * M);
        O[i: 2] = +(F[2 * j + i]);
    }"""
    data = RNG.standard_normal((3, 4))
    (out,) = _run(source, "llvm", data)
    np.testing.assert_allclose(out, data.reshape(6, 2).sum(axis=0))


def test_single_statement_form_takes_only_the_tensor_arguments_as_inputs() -> None:
    data = RNG.standard_normal((3, 2))
    f = tilec.compile("O = reshape(A, N, 1)", N=6)
    assert list(f.inputs) == ["A"]
    np.testing.assert_array_equal(f(data), data.reshape(6, 1))
    soft = tilec.compile("O = builtin_softmax(A, N, M)", N=3, M=2)(data)
    np.testing.assert_allclose(soft, _softmax(data))


# ------------------------------------------------------------------ builtin_* library


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("target", TARGETS)
def test_builtin_softmax_and_logsoftmax(target: str) -> None:
    source = """function (I[X, Y]) -> (S, L) {
        S = builtin_softmax(I, X, Y);
        L = builtin_logsoftmax(I, X, Y);
    }"""
    data = (RNG.standard_normal((5, 7)) * 30).astype(np.float32)  # large values: the max shift matters
    soft, log = _run(source, target, data)
    np.testing.assert_allclose(soft, _softmax(data.astype(np.float64)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(log, np.log(_softmax(data.astype(np.float64))), rtol=1e-4, atol=1e-4)


def test_builtin_binary_crossentropy() -> None:
    source = "function (O[N, M], T[N, M]) -> (R) { R = builtin_binary_crossentropy(O, T, N * M); }"
    p = RNG.uniform(0.05, 0.95, (3, 4))
    t = RNG.uniform(0, 1, (3, 4))
    (out,) = _run(source, "llvm", p, t)
    np.testing.assert_allclose(out, -t * np.log(p) - (1 - t) * np.log(1 - p), rtol=1e-12)


def test_expansion_prints_tile_that_parses_back_to_the_same_program() -> None:
    source = """function (A[N, M], I[K], S_max[]) -> (S, G, X, R, P, C) {
        S = builtin_softmax(A, N, M);
        G = gather(A, I);
        X = index(A, 1);
        R = reshape(A, M * N);
        P = shape(A);
        C = scatter(G, I, A);
    }"""
    program = tilec.parse(source)
    assert tilec.parse(str(program)) == program
    assert "S_max2" in str(program)  # the fresh name avoids the input S_max


def test_fresh_names_avoid_later_statements() -> None:
    source = """function (A[N, M]) -> (S, S_max) {
        S = builtin_softmax(A, N, M);
        S_max = A * 2;
    }"""
    data = RNG.standard_normal((2, 3))
    soft, doubled = _run(source, "llvm", data)
    np.testing.assert_allclose(soft, _softmax(data))
    np.testing.assert_allclose(doubled, data * 2)


# ------------------------------------------------------------------ gradients


def test_gather_gradient_is_a_scatter() -> None:
    indices = np.array([[2, 0], [2, 7], [-3, 1]], np.int64)  # repeats and clamped indices
    g = check("function (T[N, M], I[K, L]) -> (O) { O = gather(T, I); }", ["T"],
              [RNG.standard_normal((4, 3)), indices])
    assert "scatter(" in g.source


def test_scatter_and_reshape_gradients() -> None:
    indices = np.array([1, 1, 0, 5], np.int32)
    check("function (T[K, M], I[K], U[R, Q]) -> (O) { O = scatter(T, I, U); }", ["T"],
          [RNG.standard_normal((4, 3)), indices, np.zeros((3, 1))])
    check("function (A[N, M]) -> (O) { R = reshape(A, M, N); O = R * R; }", ["A"], [RNG.standard_normal((2, 3))])


def test_builtin_softmax_gradients() -> None:
    data = RNG.standard_normal((3, 4))
    check("function (I[X, Y]) -> (O) { O = builtin_softmax(I, X, Y); }", ["I"], [data])
    check("function (I[X, Y]) -> (O) { O = builtin_logsoftmax(I, X, Y); }", ["I"], [data])


def test_index_and_shape_have_no_gradient() -> None:
    """index and shape depend on shapes only: the gradient flows through the other operand alone."""
    source = """function (A[N, M]) -> (O) {
        X = index(A, 1);
        P = shape(A);
        Q[i, j: N, M] = +(A[i, j] * X[i, j]);
        O[i, j: N, M] = +(Q[i, j] * P[0]);
    }"""
    data = RNG.standard_normal((2, 3))
    grad = tilec.grad(source, ["A"])(data, np.ones((2, 3)))
    np.testing.assert_allclose(grad, np.broadcast_to(np.arange(3.0) * 2, (2, 3)))


# ------------------------------------------------------------------ bad uses


@pytest.mark.parametrize("body, fragment", [
    ("O = gather(T);", "'gather' takes 2 tensor(s)"),
    ("O = scatter(T, I);", "'scatter' takes 3 tensor(s)"),
    ("O = index(T, N);", "'index' takes the dimension as an integer literal"),
    ("O = index(T, 2);", "dimension 2 is out of range for 'T'"),
    ("O = shape(T, I);", "'shape' takes 1 tensor(s)"),
    ("O = reshape();", "'reshape' takes a tensor"),
    ("O = reshape(T, 2.5);", "dimension of 'reshape'"),
    ("O = gather(T * 2, I);", "argument 1 of 'gather' must be a tensor name"),
    ("O = exp(gather(T, I));", "'gather' must be the whole right-hand side of its own statement"),
    ("O = builtin_softmax(I, N, M);", "'builtin_softmax' takes a matrix (rank 2); 'I' has rank 1"),
    ("O = builtin_softmax(T, N);", "'builtin_softmax' takes 3 arguments"),
    ("O = gather(T, J);", "undefined tensor 'J'"),
])
def test_bad_uses_name_the_call_and_its_position(body: str, fragment: str) -> None:
    source = f"function (T[N, M], I[K]) -> (O) {{\n    {body}\n}}"
    with pytest.raises(SemanticError) as info:
        tilec.compile(source)
    assert fragment in str(info.value)
    assert "line 2, column" in str(info.value)


@pytest.mark.parametrize("source, args, fragment", [
    ("function (T, I) -> (O) { O = gather(T, I); }", [np.zeros((3, 2)), np.zeros(2, np.float32)],
     "the indices 'I' are float32; gather takes integer indices"),
    ("function (T, I, U) -> (O) { O = scatter(T, I, U); }", [np.zeros((3, 2)), np.zeros(2, np.int32), np.zeros(3)],
     "must start with the shape of the indices 'I' (2,)"),
    ("function (T, I) -> (O) { O = gather(T, I); }", [np.zeros((0, 2)), np.zeros(2, np.int32)],
     "no rows to gather from"),
    ("function (T) -> (O) { O = gather(T, T); }", [np.zeros((), np.int32)], "gather needs a tensor of rank 1"),
    ("function (T[N, M]) -> (O) { O = reshape(T, N); }", [np.zeros((2, 3))],
     "cannot reshape 'T' of shape (2, 3) (6 elements) to (2,)"),
])
def test_bad_arguments_at_call_time_name_the_statement(source: str, args: list[np.ndarray], fragment: str) -> None:
    with pytest.raises(BindError) as info:
        tilec.compile(source)(*args)
    assert fragment in str(info.value)
    assert isinstance(info.value, TilecError)
