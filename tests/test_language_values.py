"""Sizes are values (issue 15, items 1, 4 and 8): integer statements computed from sizes, scalar integer
inputs read as sizes, literals in a contraction's combination and as `default`, statement
attributes -- each against numpy on random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec
from tilec.frontend import parse

RNG = np.random.default_rng(15)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow/PlaidML 'same': output ceil(size / stride), the smaller pad first."""
    out = (size + stride - 1) // stride
    total = max(0, (out - 1) * stride + kernel - size)
    return out, total // 2


def conv2d_reference(x: np.ndarray, k: np.ndarray, stride: int) -> np.ndarray:
    n, h, w, _ = x.shape
    kh, kw, _, co = k.shape
    oh, ph = same_padding(h, kh, stride)
    ow, pw = same_padding(w, kw, stride)
    padded = np.zeros((n, h + kh + stride * oh, w + kw + stride * ow, x.shape[3]), np.float64)
    padded[:, ph:ph + h, pw:pw + w] = x
    out = np.zeros((n, oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += window @ k[i, j]
    return out


# PlaidML's op library computes 'same' padding as integer statements over sizes
# (plaidml/plaidml: plaidml/keras/backend.py, conv and pool: `PH = max(0, (OH - 1) * SH + KH - H) / 2`)
CONV_SAME = """
function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    OX = (X + S - 1) / S;
    OY = (Y + S - 1) / S;
    PX = max(0, (OX - 1) * S + KX - X) / 2;
    PY = max(0, (OY - 1) * S + KY - Y) / 2;
    O[n, x, y, co: N, OX, OY, CO] = +(I[n, S*x + i - PX, S*y + j - PY, ci] * K[i, j, ci, co]);
}
"""


@pytest.mark.parametrize("stride,h,w,kh,kw", [(1, 7, 6, 3, 3), (2, 7, 8, 3, 2), (3, 10, 5, 4, 1), (2, 5, 5, 5, 5)])
def test_conv2d_with_computed_same_padding_and_stride(stride: int, h: int, w: int, kh: int, kw: int):
    x, k = rand(2, h, w, 3), rand(kh, kw, 3, 4)
    out = tilec.compile(CONV_SAME, S=stride)(x, k)
    np.testing.assert_allclose(out, conv2d_reference(x, k, stride), rtol=1e-4, atol=1e-4)


POOL = """
function (I[N, X, Y, C], Ones[X, Y, 1]) -> (Max, Avg) {
    OX = (X + 1) / 2;
    OY = (Y + 1) / 2;
    PX = max(0, (OX - 1) * 2 + 3 - X) / 2;
    PY = max(0, (OY - 1) * 2 + 3 - Y) / 2;
    Max[n, x, y, c: N, OX, OY, C] = >(I[n, 2*x + i - PX, 2*y + j - PY, c]), i < 3, j < 3 default -1e30;
    Sum[n, x, y, c: N, OX, OY, C] = +(I[n, 2*x + i - PX, 2*y + j - PY, c]), i < 3, j < 3;
    Count[x, y, c: OX, OY, 1] = +(Ones[2*x + i - PX, 2*y + j - PY, c]), i < 3, j < 3;
    Avg = Sum / Count;
}
"""


@pytest.mark.parametrize("h,w", [(5, 5), (6, 7), (1, 4)])
def test_max_and_avg_pooling_with_computed_padding(h: int, w: int):
    x = rand(2, h, w, 3)
    mx, avg = tilec.compile(POOL)(x, np.ones((h, w, 1), np.float32))
    oh, ph = same_padding(h, 3, 2)
    ow, pw = same_padding(w, 3, 2)
    want_max = np.full((2, oh, ow, 3), -np.inf)
    want_sum = np.zeros((2, oh, ow, 3))
    count = np.zeros((oh, ow, 1))
    for a in range(oh):
        for b in range(ow):
            rows = [r for r in range(2 * a - ph, 2 * a - ph + 3) if 0 <= r < h]
            cols = [c for c in range(2 * b - pw, 2 * b - pw + 3) if 0 <= c < w]
            window = x[:, rows][:, :, cols]
            want_max[:, a, b] = window.max(axis=(1, 2))
            want_sum[:, a, b] = window.sum(axis=(1, 2))
            count[a, b] = len(rows) * len(cols)
    np.testing.assert_allclose(mx, want_max, rtol=1e-6)
    np.testing.assert_allclose(avg, want_sum / count, rtol=1e-5, atol=1e-6)


def test_size_symbols_are_integer_values():
    f = tilec.compile("function (X[N, M]) -> (Mean, Scaled, Count) { S[] = +(X[i, j]); Mean = S / (N * M); "
                      "Scaled = X / N; Count = N * M; }")
    x = rand(3, 5)
    mean, scaled, count = f(x)
    np.testing.assert_allclose(mean, x.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scaled, x / 3, rtol=1e-6)
    assert count == 15 and count.dtype.kind == "i" and count.shape == ()


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 7])
def test_integer_statements_truncate_toward_zero_like_plaidml(k: int):
    # PlaidML folds `(K - 1) / 2` in double precision and casts to int64 (tile/lang/type.cc)
    f = tilec.compile("function (A[K]) -> (P, Q, R) { P = (K - 1) / 2; Q = (1 - K) / 2; R = min(K, 3) - max(K, 3); }")
    p, q, r = f(np.zeros(k, np.float32)) if k else f(np.zeros(0, np.float32))
    assert int(p) == int((k - 1) / 2) and int(q) == int((1 - k) / 2) and int(r) == min(k, 3) - max(k, 3)


def test_combination_with_a_size_gives_the_mean():
    # the issue's `M[i: X] = +(I[i, j] / Y)`
    x = rand(4, 6)
    out = tilec.compile("function (I[X, Y]) -> (M) { M[i: X] = +(I[i, j] / Y); }")(x)
    np.testing.assert_allclose(out, x.mean(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("combination,reference", [
    ("+(A[i, k] * 0.125)", lambda a: (a * 0.125).sum(1)),
    ("+(A[i, k] + 1)", lambda a: (a + 1).sum(1)),
    ("+(2 - A[i, k])", lambda a: (2 - a).sum(1)),
    ("+(1.5 * A[i, k])", lambda a: (1.5 * a).sum(1)),
    ("<(A[i, k] - -3)", lambda a: (a + 3).min(1)),
])
def test_literals_in_a_combination(combination: str, reference):
    a = rand(5, 7)
    out = tilec.compile(f"O[i: M] = {combination}", M=5)(a)
    np.testing.assert_allclose(out, reference(a), rtol=1e-5, atol=1e-5)


def test_integer_literal_combination_keeps_integer_type():
    a = RNG.integers(-9, 9, (4, 3)).astype(np.int32)
    out = tilec.compile("function (A[M, K]) -> (O) { O[i: M] = +(A[i, k] / 2); }")(a)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.trunc(a / 2).astype(np.int32).sum(1))  # integer '/' truncates


@pytest.mark.parametrize("default,fill", [("-1e30", -1e30), ("0", 0.0), ("2.5", 2.5), ("-7", -7.0)])
def test_scalar_default(default: str, fill: float):
    a = rand(4, 3)
    # rows 1.. only: O[0] keeps the default
    out = tilec.compile(f"function (A[M, K]) -> (O) {{ O[i: M] = >(A[i, k]), i - 1 < M - 1 default {default}; }}")(a)
    assert out.dtype == np.float32
    want = np.maximum(a.max(1), np.float32(fill))
    want[0] = np.float32(fill)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_scalar_integer_input_is_a_size(stride: int):
    f = tilec.compile("function (I[N], S[]) -> (O) { OX = (N - 1) / S + 1; O[x: OX] = =(I[S * x]); }")
    x = rand(10)
    np.testing.assert_array_equal(f(x, np.int64(stride)), x[::stride])


def test_scalar_size_input_must_be_an_integer_scalar():
    f = tilec.compile("function (I[N], S[]) -> (O) { O[x: N] = +(I[S * x]); }")
    with pytest.raises(tilec.BindError, match="'S' is used as a size"):
        f(rand(4), np.float32(2))


def test_attributes_parse_and_show_in_explain():
    src = "function (A[N]) -> (O) { [[pid(sum_rows)]] [[hint]] O[i: N] = +(A[i]); }"
    program = parse(src)
    assert str(program.statements[0]).startswith("[[pid(sum_rows)]] [[hint]] O[i: N]")
    f = tilec.compile(src)
    np.testing.assert_allclose(f(np.arange(3, dtype=np.float32)), [0, 1, 2])
    assert "[[pid(sum_rows)]]" in f.explain({"A": (3,)}, stage="tensor")


def test_max_min_of_index_variables_is_refused():
    with pytest.raises(tilec.SemanticError, match=r"'max' of index variables.*line 1"):
        tilec.compile("O[i: N] = +(A[max(i, 1)])", N=3)


@pytest.mark.parametrize("src,wrt", [
    ("function (A[M, K]) -> (O) { O[i: M] = +(A[i, k] * 0.5); }", ["A"]),
    ("function (I[X, Y]) -> (M) { M[i: X] = +(I[i, j] / Y); }", ["I"]),
    ("function (A[M, K]) -> (O) { O[i: M] = >(A[i, k]) default -1e30; }", ["A"]),
    ("function (X[N]) -> (O) { P = (N - 1) / 2; O[i: N] = +(X[i + j - P]), j < 3; }", ["X"]),
])
def test_gradients_of_the_new_forms(src: str, wrt: list[str]):
    x = rand(4, 5) if "[M, K]" in src or "[X, Y]" in src else rand(6)
    g = tilec.grad(src, wrt=wrt)
    forward = tilec.compile(src)
    out = forward(x)
    dout = rand(*out.shape).astype(np.float32)
    (dx,) = g(x, dout) if not isinstance(g(x, dout), np.ndarray) else (g(x, dout),)
    eps, numeric = 1e-2, np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = ((forward(plus) - forward(minus)) * dout).sum() / (2 * eps)
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-2)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([
    "function (A[N]) -> (O) { [[pid(a, b)]] O[i: N] = +(A[i] * 0.125) default -1e+30; }",
    "function (I[N, X], S[]) -> (O) { P = max(0, (X - 1) / 2); O[n, x: N, min(X, P + 1)] = +(I[n, x * S + k - P]), k < 3; }",
    "function (A[M, K]) -> (O) { O[i: M] = +(2 - A[i, k]); }",
    "function (X[N]) -> (O) { O = X / N + (N > 2 ? 1 : 0); }",
]))
def test_printed_programs_parse_back_equal(src: str):
    program = parse(src)
    assert parse(str(program)) == program


# ---------------------------------------------------------------- PlaidML's assert_* over sizes


def test_assertions_over_sizes_hold_or_name_the_failed_condition():
    src = "function (I[N, X], K[KX]) -> (O) { Ok = assert_fits(KX <= X); O[n, x: N, X - KX + 1] = +(I[n, x + k] * K[k]); }"
    i, k = np.ones((2, 5), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(tilec.compile(src)(i, k), np.full((2, 3), 3.0))
    for target in ("llvm", "interp"):
        with pytest.raises(tilec.BindError, match=r"assert_fits failed .*KX <= X does not hold"):
            tilec.compile(src, target=target)(np.ones((2, 2), np.float32), k)
    with pytest.raises(tilec.SemanticError, match="condition on sizes"):
        tilec.compile("function (A) -> (O) { O = assert_positive(A > 0); }")


@pytest.mark.parametrize("combination,reference", [
    ("+(A[i, k] * N)", lambda a: (a * a.shape[1]).sum(1)),
    ("+(A[i, k] + N)", lambda a: (a + a.shape[1]).sum(1)),
    ("+(A[i, k] - N)", lambda a: (a - a.shape[1]).sum(1)),
    ("+(A[i, k] / N)", lambda a: a.mean(1)),
    ("+(N * A[i, k])", lambda a: (a * a.shape[1]).sum(1)),
    ("+(A[i, k] * 3)", lambda a: (a * 3).sum(1)),
    ("+(A[i, k] + 2.5)", lambda a: (a + 2.5).sum(1)),
    ("+(A[i, k] * B[i, k])", lambda a: (a * a).sum(1)),
    ("+(A[i, k] + B[i, k])", lambda a: (a + a).sum(1)),
])
def test_a_size_or_literal_on_either_side_of_the_access(combination: str, reference):
    # `+(A[i] * N)` used to stop with "expected '['": the operator was one rule shared with `A * B`
    a = rand(4, 6)
    args = (a, a) if "B[" in combination else (a,)
    params = "A[M, N], B[M, N]" if "B[" in combination else "A[M, N]"
    out = tilec.compile(f"function ({params}) -> (O) {{ O[i: M] = {combination}; }}")(*args)
    np.testing.assert_allclose(out, reference(a), rtol=1e-5, atol=1e-5)


def test_names_as_plaidml_prints_them():
    # PlaidML's EDSL prints tensors `_X0` and index variables `x0` (plaidml/plaidml: plaidml/edsl tests);
    # the case is that of the first letter after the underscores, so `_x1` is an index variable
    src = """function (_X0[_X0_0, _X0_1], _X1[_X1_0, _X1_1]) -> (_X3) {
      _X2[x0, _x1 : _X0_0, _X1_1] = +(_X0[x0, __k] * _X1[__k, _x1]);
      _X3 = _X2 * _X0_1;
    }"""
    a, b = rand(3, 4), rand(4, 5)
    np.testing.assert_allclose(tilec.compile(src)(a, b), (a @ b) * 4, rtol=1e-5, atol=1e-6)


def test_temporaries_never_collide_with_source_names_or_each_other():
    # desugaring (`O_Operand`) and builtin_softmax (`S_max`, `S_exp`, `S_sum`) take fresh names: the
    # source's own `O_Operand`, `S_max` and `S_exp2` stay what they are
    src = """function (A[M, N]) -> (O, S, O_Operand, S_max, S_exp2) {
      S = builtin_softmax(A, M, N);
      S_max = A + 1;
      S_exp2 = A * 2;
      O_Operand = A - 1;
      O[i: M] = +(A[i, j] * 3);
    }"""
    a = rand(3, 4)
    o, s, operand, smax, sexp = tilec.compile(src)(a)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(s, e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(o, (a * 3).sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(operand, a - 1)
    np.testing.assert_allclose(smax, a + 1)
    np.testing.assert_allclose(sexp, a * 2)


@given(n=st.integers(1, 12), stride=st.integers(1, 4))
@settings(max_examples=15, deadline=None)
def test_statements_computed_from_a_scalar_size_input_are_sizes(n: int, stride: int):
    # S is read as a size in the index, so `PX = ... / S` (before that use) is an integer size statement
    f = tilec.compile("function (I[N], S[]) -> (O) { PX = max(0, (N - 1) / S); O[x: N] = +(I[S*x - PX]); }")
    x = rand(n)
    px = max(0, (n - 1) // stride)
    want = np.array([x[stride * o - px] if 0 <= stride * o - px < n else 0 for o in range(n)], np.float32)
    np.testing.assert_array_equal(f(x, np.int32(stride)), want)


def test_a_scalar_input_used_only_through_a_statement_is_a_size():
    f = tilec.compile("function (I[N], S) -> (O) { P = S / 2; O[x: N - P] = +(I[x + P]); }")
    x = rand(10)
    for s in (0, 3, 5):
        np.testing.assert_array_equal(f(x, np.int64(s)), x[s // 2:])


def test_reshape_to_a_scalar_input_size():
    # PlaidML's op library passes reshape's sizes as scalar inputs (plaidml/plaidml: plaidml/op.py, reshape)
    f = tilec.compile("function (I, D0) -> (O) { O = reshape(I, D0, 12); }")
    x = rand(4, 6)
    for d0 in (2, 1):
        np.testing.assert_array_equal(f(x[:d0 * 2], np.int32(d0)), x[:d0 * 2].reshape(d0, 12))


def test_kernel_for_binds_scalar_size_inputs():
    from tilec.runtime.function import pointer_runner

    f = tilec.compile("function (I[N], S[]) -> (O) { OX = (N - 1) / S + 1; O[x: OX] = =(I[S * x]); }")
    x = rand(10)
    for stride in (2, 3):
        kernel = f.kernel_for(((10,), ()), ("float32", "int32"), {"S": stride})
        s = np.array(stride, np.int32)
        out = np.empty(kernel.params[2].shape, np.float32)
        pointer_runner(kernel, 3)([x.ctypes.data, s.ctypes.data, out.ctypes.data])
        np.testing.assert_array_equal(out, x[::stride])
    with pytest.raises(tilec.BindError, match="reads the input.* S as sizes; pass exactly their values"):
        f.kernel_for(((10,), ()), ("float32", "int32"))
    with pytest.raises(tilec.BindError, match="must be an integer"):
        f.kernel_for(((10,), ()), ("float32", "int32"), {"S": 2.0})


def test_torch_size_value_reads_an_integer_scalar_tensor():
    import torch
    from tilec.runtime.torch_cuda import size_value

    assert size_value("S", torch.tensor(3, dtype=torch.int64)) == 3
    for bad in (torch.tensor(3.0), torch.tensor([3]), torch.tensor(True)):
        with pytest.raises(tilec.BindError, match="'S' is used as a size"):
            size_value("S", bad)


@given(a=st.integers(-50, 50), b=st.integers(-9, 9).filter(bool), n=st.integers(0, 30))
@settings(max_examples=25, deadline=None)
def test_every_integer_division_rounds_toward_zero(a: int, b: int, n: int):
    # PlaidML folds size statements, output sizes and constraint bounds with a double quotient cast to
    # int64 (tile/lang/type.cc, ConstantPropagate), and divides integer tensors with C's '/'
    def trunc(x: int, y: int) -> int:
        return abs(x) // abs(y) * (1 if (x >= 0) == (y > 0) else -1)

    f = tilec.compile(f"""function (X[N], A, B) -> (P, Q, O, C) {{
      P = (N - {-a}) / {b};
      Q = A / B;
      O[i: max(0, (N - {-a}) / {b}) + 1] = +(X[i]);
      C[i: N] = +(X[i]), i < max(0, (N - {-a}) / {b});
    }}""")
    x = rand(n)
    p, q, o, c = f(x, np.int32(a), np.int32(b))
    want = trunc(n + a, b)
    assert int(p) == want and int(q) == trunc(a, b)
    assert o.shape == (max(0, want) + 1,)
    np.testing.assert_array_equal(c, np.where(np.arange(n) < max(0, want), x, 0))


def test_index_dimension_given_by_a_constant_statement():
    # PlaidML's EDSL prints `_X4 = 0; _X5 = index(_X3, _X4);` (plaidml/plaidml: plaidml2/edsl/edsl_test.py, arg_max)
    src = """function (_X0[_X0_0, _X0_1]) -> (_X5, _X6) {
      _X4 = 1;
      _X5 = index(_X0, _X4);
      _X6 = index(_X0, _X4 - 1);
    }"""
    with pytest.raises(tilec.SemanticError, match="integer literal"):
        tilec.parse(src)  # an expression is not a constant statement
    f = tilec.compile(src.replace("_X6 = index(_X0, _X4 - 1);", "_X6 = _X4 * 2;"))
    cols, two = f(rand(3, 4))
    np.testing.assert_array_equal(cols, np.broadcast_to(np.arange(4), (3, 4)))
    assert int(two) == 2


def test_cast_width_given_by_a_constant_statement():
    # PlaidML's EDSL prints `_X7 = 32; _X8 = as_uint(_X6, _X7);` (plaidml/plaidml: plaidml2/edsl/edsl_test.py, arg_max)
    f = tilec.compile("function (_X0) -> (_X8) { _X7 = 32; _X8 = as_int(_X0, _X7); }")
    x = rand(5) * 10
    out = f(x)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.trunc(x).astype(np.int32))


def test_a_tensor_that_also_names_an_output_size_stays_a_tensor():
    # `B` sizes the output (bound from b's range) and is the batched right operand: a tensor, not a scalar size input
    f = tilec.compile("C[b, i, j: B, M, N] = +(A[b, i, k] * B[b, k, j])")
    a, b = rand(3, 4, 5), rand(3, 5, 2)
    assert f.size_inputs == ()
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_tuples_name_tensors_together_and_element_reads_one():
    # PlaidML's tile/lang tests ("Tupleism"): T = tuple(A, B); C = element(T, 0)
    src = """function (A[I, K], B[K, J]) -> (O) {
      T = tuple(A, B);
      C = element(T, 0);
      D = element(T, 1);
      O[i, j : I, J] = +(C[i, k] * D[k, j]);
    }"""
    a, b = rand(4, 5), rand(5, 3)
    for target in ("llvm", "interp"):
        np.testing.assert_allclose(tilec.compile(src, target=target)(a, b), a @ b, rtol=1e-5, atol=1e-6)
    for bad, words in [("function (A) -> (O) { O = element(A, 0); }", "'A' is not a tuple"),
                       ("function (A, B) -> (O) { T = tuple(A, B); O = element(T, 2); }", "no element 2"),
                       ("function (A, B) -> (T) { T = tuple(A, B); }", "output 'T' is a tuple"),
                       ("function (A, B) -> (O) { T = tuple(A, B); O = T + 1; }", "'T' is a tuple")]:
        with pytest.raises(tilec.SemanticError, match=words) as err:
            tilec.compile(bad)
        assert "line 1, column" in str(err.value)
