"""tilec.grad: every rule against central finite differences (float64) and torch autograd (float32)."""

from __future__ import annotations

import numpy as np
import pytest

import tilec
from reference import SOFTMAX

RNG = np.random.default_rng(0)


def _tuple(x: object) -> tuple[np.ndarray, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)  # type: ignore[arg-type]


def check(source: str, wrt: list[str], inputs: list[np.ndarray], sizes: dict[str, int] | None = None,
          tol: float = 1e-6) -> tilec.Function:
    """Gradients of sum(outputs * random weights) against central differences."""
    sizes = sizes or {}
    forward = tilec.compile(source, **sizes)
    g = tilec.grad(source, wrt, **sizes)
    assert tilec.parse(g.source, sizes) is not None
    outs = _tuple(forward(*inputs))
    weights = [RNG.standard_normal(np.shape(o)) for o in outs]
    grads = _tuple(g(*inputs, *weights))
    assert len(grads) == len(wrt)
    names = list(forward.inputs)

    def loss(args: list[np.ndarray]) -> float:
        return float(sum(np.sum(o * w) for o, w in zip(_tuple(forward(*args)), weights)))

    eps = 1e-6
    for name, got in zip(wrt, grads):
        k = names.index(name)
        x = inputs[k]
        assert got.shape == x.shape, (name, got.shape, x.shape)
        want = np.zeros_like(x)
        for pos in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[pos] += eps
            minus[pos] -= eps
            args_p, args_m = list(inputs), list(inputs)
            args_p[k], args_m[k] = plus, minus
            want[pos] = (loss(args_p) - loss(args_m)) / (2 * eps)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"d{name}\n{g.source}")
    return g


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def test_matmul_both_operands() -> None:
    g = check("C[i, j: M, N] = +(A[i, k] * B[k, j])", ["A", "B"], [r(3, 4), r(4, 5)])
    assert g.outputs == ("DA", "DB")
    assert g.inputs == ("A", "B", "DC")


def test_conv2d_padding_and_stride() -> None:
    src = """function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {
        O[n, x, y, co: N, (H + 1) / 2, (W + 1) / 2, CO] = +(I[n, 2*x + i - 1, 2*y + j - 1, c] * K[i, j, c, co]);
    }"""
    check(src, ["I", "K"], [r(1, 5, 4, 2), r(3, 3, 2, 2)])


def test_max_pool() -> None:
    src = "function (I[X, Y]) -> (O) { O[x, y: X / 2, Y / 2] = >(I[2*x + i, 2*y + j]), i < 2, j < 2; }"
    check(src, ["I"], [r(4, 6)])


def test_min_reduction_and_sums() -> None:
    check("function (I[N, M]) -> (O) { O[i: N] = <(I[i, j]); }", ["I"], [r(3, 4)])
    check("O[] = +(A[i, j])", ["A"], [r(3, 4)])
    check("O[] = +(A[i, i])", ["A"], [r(3, 3)])
    check("O[i: N] = +(I[k]), i - k < N", ["I"], [r(5)], {"N": 5})


def test_full_convolution_complex_lhs() -> None:
    check("function (I[X], K[KX]) -> (O) { O[x + i: X + KX - 1] = +(I[x] * K[i]); }", ["I", "K"], [r(5), r(3)])


def test_add_combination_and_cond() -> None:
    check("O[i, j: N, M] = +(A[i] + B[j])", ["A", "B"], [r(3), r(4)])
    src = "O[n: N] = +(L[n] == R[c] ? V[c])"
    lab = np.array([0.0, 2.0, 1.0, 2.0])
    check(src, ["V"], [lab, np.array([2.0, 0.0, 2.0]), r(3)])


@pytest.mark.parametrize("expr", ["exp(A) * B", "log(A * A + 1) - B", "sqrt(A * A + 1) / B", "tanh(A) + B",
                                  "sigmoid(A) * B", "abs(A) * B", "pow(A * A + 1, B)", "max(A, B)", "min(A, B)",
                                  "relu(A) - B", "-A / (B * B + 1)", "A < B ? A * B : A + B",
                                  "sin(A) * cos(B) + erf(A)", "floor(A) + B"])
def test_elementwise_builtins_with_broadcasting(expr: str) -> None:
    src = f"function (A[N, M], B[M]) -> (O) {{ O = {expr}; }}"
    check(src, ["A", "B"], [r(3, 4), r(4)])


def test_broadcast_size_one_dimension() -> None:
    check("function (A[N, M], B[N, 1]) -> (O) { O = A * B; }", ["A", "B"], [r(3, 4), r(3, 1)])


def test_softmax() -> None:
    src = SOFTMAX
    check(src, ["X"], [r(3, 5)])


def test_gemm_bias_relu() -> None:
    src = """function (A[M, K], B[K, N], Bias[N]) -> (O) {
        C[i, j: M, N] = +(A[i, k] * B[k, j]);
        O = relu(C + Bias);
    }"""
    check(src, ["A", "B", "Bias"], [r(3, 4), r(4, 5), r(5)])


def test_tensor_used_twice_and_two_outputs() -> None:
    src = """function (A[N, N]) -> (O, P) {
        S[i, j: N, N] = +(A[i, k] * A[k, j]);
        O = S * A + A;
        P[i: N] = +(S[i, j]);
    }"""
    check(src, ["A"], [r(3, 3)])


def test_constant_indices_and_scalar_output() -> None:
    check("function (A[N, M]) -> (O) { O[i: N] = =(A[i, 0]); }", ["A"], [r(3, 4)])
    check("function (A[N, M]) -> (O) { O[] = =(A[1, 2]); }", ["A"], [r(3, 4)])
    check("function (A[N]) -> (O) { O[0, i: 2, N] = =(A[i]); }", ["A"], [r(4)])


def test_default_tensors() -> None:
    check("function (A[N], T[N, 2]) -> (O) { O[i, 0: N, 2] = +(A[i]) default T; }", ["A", "T"], [r(3), r(3, 2)])
    check("function (A[N], T[N, 2]) -> (O) { O[i, 1: N, 2] = =(A[i]) default T; }", ["A", "T"], [r(3), r(3, 2)])
    check("function (A[N, M], T[N]) -> (O) { O[i: N] = >(A[i, j]) default T; }", ["A", "T"], [r(3, 4), r(3)])


def test_only_requested_gradients_and_unused_input() -> None:
    check("function (A[N], B[N]) -> (O) { O = A * 2; }", ["B", "A"], [r(3), r(3)])


def test_errors() -> None:
    with pytest.raises(tilec.TilecError, match="not differentiable: product"):
        tilec.grad("O[i: N] = *(A[i, j])", ["A"])
    with pytest.raises(tilec.TilecError, match="not differentiable: max/min"):
        tilec.grad("O[i: N] = >(A[i, j] * B[j])", ["A"])
    with pytest.raises(tilec.TilecError, match="not an input"):
        tilec.grad("function (A[N]) -> (O) { T = A * 2; O = T + 1; }", ["T"])
    with pytest.raises(tilec.TilecError, match="rank"):
        tilec.grad("function (A) -> (O) { O = exp(A); }", ["A"])


def test_eq_combination_has_zero_gradient() -> None:
    g = tilec.grad("O[i, j: N, M] = +(A[i] == B[j])", ["A"])
    np.testing.assert_array_equal(g(r(3), r(2), r(3, 2)), np.zeros(3))


torch = pytest.importorskip("torch")


def test_conv2d_against_torch() -> None:
    src = """function (I[N, C, H, W], K[CO, C, KH, KW]) -> (O) {
        O[n, co, x, y: N, CO, H, W] = +(I[n, c, x + i - 1, y + j - 1] * K[co, c, i, j]);
    }"""
    x, k = r(2, 3, 6, 5).astype(np.float32), r(4, 3, 3, 3).astype(np.float32)
    dout = r(2, 4, 6, 5).astype(np.float32)
    dx, dk = tilec.grad(src, ["I", "K"])(x, k, dout)
    tx, tk = torch.tensor(x, requires_grad=True), torch.tensor(k, requires_grad=True)
    torch.nn.functional.conv2d(tx, tk, padding=1).backward(torch.tensor(dout))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dk, tk.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_softmax_against_torch() -> None:
    src = SOFTMAX
    x, dout = r(4, 7).astype(np.float32), r(4, 7).astype(np.float32)
    dx = tilec.grad(src, ["X"])(x, dout)
    tx = torch.tensor(x, requires_grad=True)
    torch.softmax(tx, dim=1).backward(torch.tensor(dout))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_undeclared_inputs_broadcast_bias() -> None:
    g = check("function (A, B, Bias[N]) -> (O) { C[i, j: M, N] = +(A[i, k] * B[k, j]); O = tanh(C + Bias); }",
              ["A", "B"], [r(2, 3), r(3, 4), r(4)])
    assert "A_D0" in g.source


def test_max_tie_gets_gradient_twice() -> None:
    """Documented behaviour (as in PlaidML): every tied maximum receives the gradient."""
    g = tilec.grad("function (I[N]) -> (O) { O[] = >(I[i]); }", ["I"])
    np.testing.assert_array_equal(g(np.array([1.0, 3.0, 3.0]), np.array(2.0)), [0.0, 2.0, 2.0])


# ------------------------------------------------------------ gather form of complex left-hand sides


def test_conv_input_gradient_is_gathered() -> None:
    src = """function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {
        O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]);
    }"""
    g = check(src, ["I", "K"], [r(2, 4, 5, 2), r(3, 3, 2, 3)])
    assert "DI[n, x, y, c: N, H, W, C] = +(DO[n, x - i + 1, y - j + 1, co] * K[i, j, c, co])" in g.source
    assert "\n    O[" not in g.source  # the forward conv is not recomputed: nothing reads it


@pytest.mark.parametrize("stride, dilation, pad", [(2, 1, 0), (2, 1, 1), (1, 2, 2), (2, 2, 1), (1, 1, 2)])
def test_conv_gradients_stride_dilation_padding(stride: int, dilation: int, pad: int) -> None:
    src = f"""function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {{
        O[n, x, y, co: N, (H + {2 * pad} - {dilation} * (KH - 1) - 1) / {stride} + 1,
                         (W + {2 * pad} - {dilation} * (KW - 1) - 1) / {stride} + 1, CO] =
            +(I[n, {stride}*x + {dilation}*i - {pad}, {stride}*y + {dilation}*j - {pad}, c] * K[i, j, c, co]);
    }}"""
    check(src, ["I", "K"], [r(1, 7, 6, 2), r(3, 2, 2, 2)])


def test_gather_form_rewrites() -> None:
    from tilec.autodiff import gather_form
    from tilec.frontend import parse

    def rewrite(text: str, grad: str | None = None, fractional: bool = False) -> str:
        st = parse(text, {"S": 2}).statements[0]
        assert isinstance(st, tilec.ir.tensor.Contraction)
        return str(gather_form(st, grad, fractional))

    assert rewrite("O[x + i - 2] = +(G[x] * K[i])", "G") == "O[x] = +(G[x - i + 2] * K[i])"
    assert rewrite("O[1 - x] = +(G[x])", "G") == "O[x] = +(G[-x + 1])"
    assert rewrite("O[2*x + i] = +(G[x] * K[i])", "G") == "O[2 * x + i] = +(G[x] * K[i])"  # scatter kept
    assert rewrite("O[2*x + i] = +(G[x] * K[i])", "G", True) == "O[x] = +(G[(x - i) / 2] * K[i])"
    assert rewrite("O[S*x + i] = +(G[x] * K[i])", "G", True) == "O[S * x + i] = +(G[x] * K[i])"  # symbolic stride
    assert rewrite("O[i, i] = +(G[i])", "G") == "O[i, i] = +(G[i])"  # a diagonal: no lone variable
    assert rewrite("O[x + y, x - y] = +(G[x, y])", "G") == "O[x + y, x - y] = +(G[x, y])"
    assert rewrite("O[x + i, k] = +(G[x, k] * K[i]), x - i < 4", "G") == \
        "O[x, k] = +(G[x - i, k] * K[i]), x - 2 * i < 4"
    assert rewrite("O[x + i] = >(G[x] * K[i])", "G") == "O[x + i] = >(G[x] * K[i])"  # only sums


def test_fractional_gather_is_exact() -> None:
    """The fractional gather (not used by grad for speed) keeps the scatter's semantics."""
    import tilec.autodiff as ad
    from tilec.frontend import parse

    text = "function (G[X], K[KX]) -> (O) { O[2*x + i - 1: 2 * X + 1] = +(G[x] * K[i]); }"
    program = parse(text, {})
    st = program.statements[0]
    assert isinstance(st, tilec.ir.tensor.Contraction)
    gathered = tilec.ir.tensor.Program(program.params, program.outputs,
                                       (ad.gather_form(st, "G", fractional=True),))
    assert "(x - i + 1) / 2" in str(gathered)
    g, k = r(5), r(3)
    np.testing.assert_allclose(tilec.compile(str(gathered))(g, k), tilec.compile(text)(g, k), rtol=1e-12)


def test_polyphase_form_rewrites() -> None:
    from tilec.autodiff import polyphase_form
    from tilec.frontend import parse

    def split(text: str) -> tuple[str, str] | None:
        st = parse(text, {"H": 9, "N": 2, "S": 2}).statements[0]
        assert isinstance(st, tilec.ir.tensor.Contraction)
        out = polyphase_form(st, "G", "P")
        return None if out is None else (str(out[0]), str(out[1]))

    assert split("O[2*x + i - 1: H] = +(G[x] * K[i])") == (
        "P[z0, u0: 2, H / 2 + 1] = +(G[u0 - t0] * K[2 * t0 + z0])",
        "O[2 * u0 + z0 - 1: H] = +(P[z0, u0])")
    assert split("O[n, 3*x + i + 2: N, H] = +(G[n, x] * K[i])") == (  # u0 = u - m with m = -1
        "P[z0, n, u0: 3, N, H / 3 + 1] = +(G[n, u0 - t0 - 1] * K[3 * t0 + z0])",
        "O[n, 3 * u0 + z0 - 1: N, H] = +(P[z0, n, u0])")
    assert split("O[2*x + i - 4: H] = +(G[x] * K[i])") == (  # m = 2: no tuple has u < 2
        "P[z0, u0: 2, (H - 1) / 2 + 1] = +(G[u0 - t0 + 2] * K[2 * t0 + z0])",
        "O[2 * u0 + z0: H] = +(P[z0, u0])")
    assert split("O[n, 2*x: N, H] = +(G[n, x] * K[n])") == (  # no tap: one phase, x kept as u0
        "P[n, u0: N, (H - 1) / 2 + 1] = +(G[n, u0] * K[n])",
        "O[n, 2 * u0: N, H] = +(P[n, u0])")
    assert split("O[3*x - 2: H] = +(G[x] * K[x])") == (  # m = 1: x = 0 lands before the start
        "P[u0: (H - 2) / 3 + 1] = +(G[u0 + 1] * K[u0 + 1])",
        "O[3 * u0 + 1: H] = +(P[u0])")
    assert split("O[x + i: H] = +(G[x] * K[i])") is None  # stride 1: gather_form's business
    assert split("O[S*x + i: H] = +(G[x] * K[i])") is None  # a symbolic stride
    assert split("O[2*x + 2*i: H] = +(G[x] * K[i])") is None  # a strided tap
    assert split("O[2*x + i: H] = >(G[x] * K[i])") is None  # only sums


def test_strided_conv_input_gradient_is_polyphase() -> None:
    src = """function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {
        O[n, x, y, co: N, (H + 2 - KH) / 2 + 1, (W + 2 - KW) / 2 + 1, CO] =
            +(I[n, 2*x + i - 1, 2*y + j - 1, c] * K[i, j, c, co]);
    }"""
    g = check(src, ["I", "K"], [r(1, 7, 6, 2), r(3, 3, 2, 2)])
    assert "DI_0_phases[z0, z1, n, u0, u1, c: 2, 2, N, H / 2 + 1, W / 2 + 1, C] = " \
           "+(DO[n, u0 - t0, u1 - t1, co] * K[2 * t0 + z0, 2 * t1 + z1, c, co])" in g.source
    assert "DI[n, 2 * u0 + z0 - 1, 2 * u1 + z1 - 1, c: N, H, W, C] = +(DI_0_phases[z0, z1, n, u0, u1, c])" in g.source


@pytest.mark.parametrize("stride, pad, k, hw", [(2, 1, 3, (9, 10)), (2, 0, 2, (8, 8)), (3, 1, 3, (13, 11)),
                                                (2, 2, 5, (11, 12)), (3, 0, 4, (14, 9)), (2, 3, 3, (7, 7)),
                                                (2, 0, 1, (9, 8)), (3, 1, 1, (10, 11))])  # 1x1: no tap
def test_polyphase_conv_gradients_match_torch(stride: int, pad: int, k: int, hw: tuple[int, int]) -> None:
    torch = pytest.importorskip("torch")
    from tilec.ops import sources

    src = sources.conv2d_source((stride, stride), (pad, pad), (1, 1), True)
    x = RNG.standard_normal((2, 3) + hw).astype(np.float32)
    w = RNG.standard_normal((4, 3, k, k)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=pad)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    y.backward(dy)
    g = tilec.grad(src, ["X", "F", "Bias"])
    assert "_phases" in g.source
    for got, want in zip(g(x, w, b, dy.numpy()), (xt.grad, wt.grad, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
