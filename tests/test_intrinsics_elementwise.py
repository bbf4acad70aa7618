"""PlaidML's elementwise intrinsics against numpy: every function on random inputs and edge values
(NaN, inf, negative zero, integer extremes), on shapes that vectorise (64x55) and that do not (3x5);
the operators spelled by name; bit operations on every integer type; constant folding; errors;
and the gradients of the differentiable ones by central differences."""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec
from tilec.errors import BindError, SemanticError, TilecError
from tilec.ir.builtins import BUILTINS

SHAPES = [(64, 55), (3, 5)]
EDGES = [np.nan, np.inf, -np.inf, -0.0, 0.0]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]

# function -> (numpy reference, the interval random inputs come from)
FLOAT_FUNCS = {
    "exp": (np.exp, (-5, 5)), "log": (np.log, (0.01, 10)), "sqrt": (np.sqrt, (0, 10)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-8, 8)), "erf": (np.vectorize(math.erf, otypes=[float]), (-3, 3)),
    "recip": (lambda x: 1 / x, (0.5, 4)), "sin": (np.sin, (-6, 6)), "cos": (np.cos, (-6, 6)), "tan": (np.tan, (-1.4, 1.4)),
    "asin": (np.arcsin, (-1, 1)), "acos": (np.arccos, (-1, 1)), "atan": (np.arctan, (-9, 9)), "sinh": (np.sinh, (-5, 5)),
    "cosh": (np.cosh, (-5, 5)), "tanh": (np.tanh, (-5, 5)), "asinh": (np.arcsinh, (-9, 9)),
    "acosh": (np.arccosh, (1, 9)), "atanh": (np.arctanh, (-0.99, 0.99)),
    "floor": (np.floor, (-5, 5)), "ceil": (np.ceil, (-5, 5)), "round": (np.round, (-5, 5)), "abs": (np.abs, (-5, 5)),
    "sign": (np.sign, (-5, 5)), "relu": (lambda x: np.maximum(x, 0), (-5, 5)), "neg": (np.negative, (-5, 5)),
    "ident": (lambda x: x, (-5, 5)),
}
TOL = {"float16": 2e-3, "float32": 3e-6, "float64": 1e-13}


def _close(out: np.ndarray, ref: np.ndarray, dtype: str, what: str) -> None:
    assert out.dtype == np.dtype(dtype), f"{what}: {out.dtype} != {dtype}"
    tol = TOL[dtype]
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol, equal_nan=True,
                               err_msg=what)


def test_every_builtin_is_tested_here() -> None:
    tested = set(FLOAT_FUNCS) | {"pow", "max", "min", "bit_and", "bit_or", "bit_xor", "bit_not", "bit_left",
                                  "bit_right", "as_float", "as_int", "as_uint", "as_bool", "cmp_eq", "cmp_ne",
                                  "cmp_lt", "cmp_le", "cmp_gt", "cmp_ge", "add", "sub", "mul", "div", "cond", "select",
                                  "reverse_grad",
                                  "as_bfloat16"}  # (bit-exact against ml_dtypes in tests/test_low_precision.py)
    assert set(BUILTINS) == tested


@pytest.mark.parametrize("func", sorted(FLOAT_FUNCS))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_float_functions_match_numpy(func: str, dtype: str, shape: tuple[int, int]) -> None:
    ref, (lo, hi) = FLOAT_FUNCS[func]
    x = np.random.default_rng(7).uniform(lo, hi, shape).astype(dtype)
    x.flat[: len(EDGES)] = EDGES
    x.flat[5:9] = [lo, hi, 0.5, -0.5] if lo < 0 else [lo, hi, lo, hi]
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64)).astype(dtype)
    _close(tilec.compile(f"O = {func}(A)")(x), expected, dtype, f"{func} on {dtype} {shape}")


@pytest.mark.parametrize("func", ["exp", "sin", "atan", "asinh", "sigmoid", "recip", "sqrt"])
def test_float_functions_on_integers_give_float32(func: str) -> None:
    x = np.arange(1, 8, dtype=np.int16)
    out = tilec.compile(f"O = {func}(A)")(x)
    _close(out, FLOAT_FUNCS[func][0](x.astype(np.float64)).astype(np.float32), "float32", func)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_integer_functions_at_the_extremes(dtype: str, shape: tuple[int, int]) -> None:
    info = np.iinfo(dtype)
    r = np.random.default_rng(8)
    x = r.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    y = r.integers(0, 4, shape).astype(dtype)
    x.flat[:4] = [info.min, info.max, 0, 1]
    src = ("function (A, B) -> (Ab, Sg, Re, Fl, Ce, Ro, Mx, Mn, Pw, Ng) { Ab = abs(A); Sg = sign(A); Re = relu(A); "
           "Fl = floor(A); Ce = ceil(A); Ro = round(A); Mx = max(A, B); Mn = min(A, B); Pw = pow(B, B); Ng = neg(A); }")
    outs = tilec.compile(src)(x, y)
    with np.errstate(all="ignore"):
        refs = [np.abs(x), np.sign(x), np.maximum(x, 0).astype(dtype), x, x, x, np.maximum(x, y), np.minimum(x, y),
                np.power(y, y), (np.zeros_like(x) - x)]
    for name, out, ref in zip(["abs", "sign", "relu", "floor", "ceil", "round", "max", "min", "pow", "neg"], outs, refs):
        assert out.dtype == np.dtype(dtype), name
        np.testing.assert_array_equal(out, ref, err_msg=f"{name} on {dtype}")


@pytest.mark.parametrize("dtype", INTS + ["bool"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bit_operations_by_operator_and_by_name(dtype: str, shape: tuple[int, int]) -> None:
    r = np.random.default_rng(9)
    if dtype == "bool":
        x, y = r.integers(0, 2, shape).astype(bool), r.integers(0, 2, shape).astype(bool)
        src = "function (A, B) -> (N, O, X, Y, Z) { N = A & B; O = A | B; X = A ^ B; Y = ~A; Z = bit_xor(A, bit_not(B)); }"
        outs = tilec.compile(src)(x, y)
        for out, ref in zip(outs, [x & y, x | y, x ^ y, ~x, x ^ ~y]):
            np.testing.assert_array_equal(out, ref)
        return
    info = np.iinfo(dtype)
    width = info.bits
    x = r.integers(info.min, info.max, shape, endpoint=True, dtype=np.int64 if info.min < 0 else np.uint64).astype(dtype)
    y = r.integers(info.min, info.max, shape, endpoint=True, dtype=np.int64 if info.min < 0 else np.uint64).astype(dtype)
    counts = r.integers(0, width + 3, shape).astype(dtype)  # counts at and past the width shift everything out
    if info.min < 0:
        counts.flat[:3] = [-1, -width, width]
    src = ("function (A, B, C) -> (N, O, X, Y, L, R, L2, R2) { N = A & B; O = bit_or(A, B); X = A ^ B; Y = ~A; "
           "L = A << C; R = A >> C; L2 = bit_left(A, C); R2 = bit_right(A, C); }")
    n, o, xo, nt, left, right, left2, right2 = tilec.compile(src)(x, y, counts)
    np.testing.assert_array_equal(n, x & y)
    np.testing.assert_array_equal(o, x | y)
    np.testing.assert_array_equal(xo, x ^ y)
    np.testing.assert_array_equal(nt, ~x)
    np.testing.assert_array_equal(left, np.left_shift(x, counts))
    np.testing.assert_array_equal(right, np.right_shift(x, counts))
    np.testing.assert_array_equal(left2, left)
    np.testing.assert_array_equal(right2, right)


def test_operator_precedence_is_plaidmls() -> None:
    a, b, c = (np.array(v, np.int32) for v in ([12, 5, 7], [10, 3, 1], [6, 6, 2]))
    f = tilec.compile("function (A, B, C) -> (P, Q, S, T) { P = A | B & C; Q = A ^ B | C; S = A << 1 + 1; T = ~A + 1; }")
    p, q, s, t = f(a, b, c)
    np.testing.assert_array_equal(p, a | (b & c))
    np.testing.assert_array_equal(q, a ^ (b | c))  # PlaidML binds | tighter than ^ (C does the opposite)
    np.testing.assert_array_equal(s, a << 2)
    np.testing.assert_array_equal(t, -a)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_operators_by_name(shape: tuple[int, int]) -> None:
    r = np.random.default_rng(10)
    x, y = r.integers(-3, 4, shape).astype(np.float32), r.integers(-3, 4, shape).astype(np.float64)
    x.flat[0], y.flat[0] = np.nan, 1.0
    names = ["cmp_eq", "cmp_ne", "cmp_lt", "cmp_le", "cmp_gt", "cmp_ge"]
    body = "; ".join(f"C{k} = {n}(A, B)" for k, n in enumerate(names))
    src = (f"function (A, B) -> (C0, C1, C2, C3, C4, C5, S, W, Ad, Sb, Mu, Dv) {{ {body}; S = cond(A < B, A, B); "
           f"W = select(A > 0, 1, B); Ad = add(A, B); Sb = sub(A, B); Mu = mul(A, B); Dv = div(A, B + 10); }}")
    outs = tilec.compile(src)(x, y)
    xd = x.astype(np.float64)
    refs = [xd == y, xd != y, xd < y, xd <= y, xd > y, xd >= y]
    for out, ref, name in zip(outs, refs, names):
        np.testing.assert_array_equal(out, ref, err_msg=name)
    s, w, ad, sb, mu, dv = outs[6:]
    _close(s, np.where(xd < y, xd, y), "float64", "cond")
    _close(w, np.where(x > 0, 1.0, y), "float64", "select")
    _close(ad, xd + y, "float64", "add")
    _close(sb, xd - y, "float64", "sub")
    _close(mu, xd * y, "float64", "mul")
    _close(dv, xd / (y + 10), "float64", "div")


@given(a=st.integers(-50, 50), b=st.integers(0, 9), x=st.floats(-0.95, 0.95))
@settings(max_examples=20, deadline=None)
def test_literal_only_calls_fold_like_numpy(a: int, b: int, x: float) -> None:
    src = (f"function (A) -> (F, I) {{ F = A * 0.0 + tan({x}) + atanh({x}) + round({x} * 10) + sign({x}); "
           f"I = A * 0 + (bit_and({a}, {b}) | ({a} ^ {b})) + ({a} << {b}) + ({a} >> {b}) + ~{a} + max({a}, {b}); }}")
    f, i = tilec.compile(src)(np.zeros(3, np.float64))
    expected_f = math.tan(x) + math.atanh(x) + float(np.round(x * 10)) + float(np.sign(x))
    np.testing.assert_allclose(f, expected_f, rtol=1e-12, atol=1e-12)
    expected_i = ((a & b) | (a ^ b)) + (a << b) + (a >> b) + ~a + max(a, b)
    np.testing.assert_array_equal(i, np.full(3, expected_i, np.float64))


@pytest.mark.parametrize("base,exponent", [(-0.5, 0.5), (0.0, -1), (-2.0, 3), (0.5, -1.5), (-8, 0.5)])
def test_literal_float_powers_fold_like_numpy_and_the_interpreter(base: float, exponent: float) -> None:
    # found by the nightly fuzz run: pow(log(0.5), 0.5) folded to a Python complex number
    src = f"O = A * pow({base}, {exponent})"
    a = np.array([1.0, 2.0])
    with np.errstate(all="ignore"):
        want = a * np.power(np.float64(base), np.float64(exponent))
    np.testing.assert_array_equal(tilec.compile(src)(a), want)
    np.testing.assert_array_equal(tilec.compile(src, target="interp")(a), want)


@pytest.mark.parametrize("src,match", [
    ("O = bit_and(A, 1)", "'bit_and' works on integers"),
    ("O = A << 1", "'bit_left' works on integers"),
    ("O = ~A", "'bit_not' works on integers"),
])
def test_bit_operations_on_floats_are_bind_errors(src: str, match: str) -> None:
    with pytest.raises(BindError, match=match):
        tilec.compile(src)(np.ones(3, np.float32))


@pytest.mark.parametrize("src,match", [
    ("O = as_float(A, 8)", "bit width of 'as_float' must be an integer literal, one of 16, 32, 64"),
    ("O = as_int(A, B)", "bit width of 'as_int'"),
    ("O = as_uint(A, 7)", "one of 8, 16, 32, 64"),
    ("O = as_int(A)", "'as_int' takes 2 argument"),
    ("O = frobnicate(A)", "unknown function 'frobnicate'"),
])
def test_bad_calls_are_semantic_errors_with_positions(src: str, match: str) -> None:
    with pytest.raises(SemanticError, match=match) as err:
        tilec.compile(src)
    assert "line 1, column" in str(err.value)


def test_unknown_function_lists_the_known_ones_grouped() -> None:
    with pytest.raises(SemanticError) as err:
        tilec.compile("function (A) -> (O) {\n  O = atan2(A, A);\n}")
    text = str(err.value)
    assert "line 2, column 7" in text
    for line in ("trigonometric and hyperbolic: sin, cos, tan, asin", "bit operations: bit_and", "conversions: as_float"):
        assert line in text


@pytest.mark.parametrize("func", ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "recip"])
def test_gradients_by_central_differences(func: str) -> None:
    lo, hi = FLOAT_FUNCS[func][1]
    r = np.random.default_rng(11)
    a = r.uniform(lo + 0.05 * (hi - lo), hi - 0.05 * (hi - lo), (4, 5))
    w = r.standard_normal((4, 5))
    src = f"function (A[N, M]) -> (O) {{ O = {func}(A) * 2; }}"
    forward = tilec.compile(src)
    da = tilec.grad(src, ["A"])(a, w)
    eps = 1e-6
    want = (forward(a + eps) - forward(a - eps)) / (2 * eps) * w  # elementwise: one perturbation for all cells
    np.testing.assert_allclose(da, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("expr,want", [
    ("round(A) + sign(A) + floor(A)", lambda a: np.zeros_like(a)),
    ("as_float(as_int(A, 32), 64) + cmp_lt(A, 0)", lambda a: np.zeros_like(a)),
    ("as_float(A, 64) * 3", lambda a: np.full_like(a, 3.0)),
])
def test_piecewise_constant_functions_have_zero_gradient(expr: str, want) -> None:  # type: ignore[no-untyped-def]
    a = np.random.default_rng(12).uniform(0.1, 0.4, (3, 4)) + np.arange(4)
    da = tilec.grad(f"function (A[N, M]) -> (O) {{ O = {expr}; }}", ["A"])(a, np.ones((3, 4)))
    np.testing.assert_allclose(da, want(a), atol=1e-12)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_source_with_every_type_and_intrinsic_compiles(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = ("function (A, B, U) -> (F, I, V) { F = tan(A) + asinh(A) + round(A) + sign(A) + as_float(U, 32); "
           "I = (B << 3) ^ (B >> 2) & ~B | bit_left(B, 1); V = U / (U + 1) + max(U, as_uint(A, 16)) + (U >> 1); }")
    f = tilec.compile(src, target="cuda-sim")
    a, b, u = np.linspace(-1, 1, 12, dtype=np.float32), np.arange(12, dtype=np.int64) - 6, np.arange(12, dtype=np.uint16)
    fo, io, vo = f(a, b, u)
    _close(fo, np.tan(a) + np.arcsinh(a) + np.round(a) + np.sign(a) + u, "float32", "cuda-sim F")
    np.testing.assert_array_equal(io, (b << 3) ^ (((b >> 2) & ~b) | (b << 1)))  # PlaidML's precedence
    np.testing.assert_array_equal(vo, (u // (u + 1) + np.maximum(u, a.astype(np.uint16)) + (u >> 1)).astype(np.uint16))
    text = tilec.compile(src, target="cuda").explain({"A": (12,), "B": (12,), "U": (12,)}, {"A": "float32", "B": "int64", "U": "uint16"}, stage="cuda")
    source = text[text.index("#include"):] if "#include" in text else text
    (tmp_path / "k.cu").write_text(source)
    proc = subprocess.run(["nvcc", "-cubin", "-arch=sm_80", "-std=c++17", "-o", str(tmp_path / "k.cubin"),
                           str(tmp_path / "k.cu")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + source


def test_errors_are_tilec_errors() -> None:
    with pytest.raises(TilecError):
        tilec.compile("O = as_bool(A, 1)")


def test_reverse_grad_is_the_identity_whose_gradient_is_reversed_and_scaled():
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((3, 4)).astype(np.float32), np.float32(0.5)
    src = "function (L[M, N], R[]) -> (O) { O = reverse_grad(L, R); }"
    np.testing.assert_array_equal(tilec.compile(src)(x, r), x)
    np.testing.assert_array_equal(tilec.compile(src, target="interp")(x, r), x)
    g = tilec.grad("function (L[M, N], R[]) -> (O) { T = reverse_grad(L, R); O = T * T; }", wrt=["L"])
    np.testing.assert_allclose(g(x, r, np.ones_like(x)), -r * 2 * x, rtol=1e-6)
