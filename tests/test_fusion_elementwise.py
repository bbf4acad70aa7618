"""Row-wise elementwise fusion (tilec/schedule/cpu/rowwise.py): values against numpy and torch,
and that the fused nest is the one chosen."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.ops import sources
from tilec.frontend import parse
from tilec.ir import loop as L
from tilec.ir.bounds import bind
from tilec.ir.visitor import walk
from tilec.schedule.cpu import rowwise as elementwise_fusion
from tilec.schedule import params
from tilec.schedule.lowering import lower_bound
from tilec.pipeline import resolve_target

RNG = np.random.default_rng(0)


def _lowered(source: str, shapes: dict[str, tuple[int, ...]]) -> tuple[object, L.PrimFunc]:
    bp = bind(parse(source), shapes, {n: "float32" for n in shapes})
    return bp, lower_bound(bp, resolve_target("llvm"))


def _top_nests(func: L.PrimFunc) -> tuple[L.Stmt, ...]:
    return func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)


# ------------------------------------------------------------------ random chains


_UNARY = {"exp({})": np.exp, "-{}": np.negative, "relu({})": lambda x: np.maximum(x, 0),
          "tanh({})": np.tanh, "({} * {})": lambda x: x * x}
_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "max": np.maximum}


@st.composite
def chains(draw: st.DrawFn) -> tuple[str, dict[str, tuple[int, ...]], list]:
    """A random program over X[N, K] with a row operand B[N, 1], a column operand C[K], keep-dim
    row reductions and elementwise statements, and its numpy evaluation as a list of steps."""
    n, k = draw(st.integers(1, 9)), draw(st.integers(2, 37))
    steps: list[tuple[str, str, object]] = []
    full, row = ["X"], ["B"]
    lines = []
    for t in range(draw(st.integers(2, 7))):
        name = f"T{t}"
        choice = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "rowop"]))
        if choice == "unary":
            a = draw(st.sampled_from(full))
            form = draw(st.sampled_from(sorted(_UNARY)))
            lines.append(f"{name} = {form.format(a, a)};")
            steps.append((name, "unary", (form, a)))
            full.append(name)
        elif choice == "binary":
            a = draw(st.sampled_from(full))
            b = draw(st.sampled_from(full + row + ["C"]))
            op = draw(st.sampled_from(sorted(_BINARY)))
            lines.append(f"{name} = max({a}, {b});" if op == "max" else f"{name} = {a} {op} {b};")
            steps.append((name, "binary", (op, a, b)))
            full.append(name)
        elif choice == "reduce":
            a = draw(st.sampled_from(full))
            agg = draw(st.sampled_from(["+", ">", "<"]))
            lines.append(f"{name}[i, 0: N, 1] = {agg}({a}[i, j]);")
            steps.append((name, "reduce", (agg, a)))
            row.append(name)
        else:
            a = draw(st.sampled_from(row))
            lines.append(f"{name} = {a} * 0.5 + 1.0;")
            steps.append((name, "rowop", a))
            row.append(name)
    outs = sorted({steps[-1][0], draw(st.sampled_from([s[0] for s in steps]))})
    source = "function (X[N, K], B[N, 1], C[K]) -> (" + ", ".join(outs) + ") {\n    " + "\n    ".join(lines) + "\n}"
    return source, {"X": (n, k), "B": (n, 1), "C": (k,)}, [steps, outs]


def _evaluate(steps: list, env: dict[str, np.ndarray]) -> None:
    for name, kind, arg in steps:
        if kind == "unary":
            form, a = arg
            env[name] = _UNARY[form](env[a])
        elif kind == "binary":
            op, a, b = arg
            env[name] = _BINARY[op](env[a], env[b])
        elif kind == "reduce":
            agg, a = arg
            env[name] = {"+": np.sum, ">": np.max, "<": np.min}[agg](env[a], axis=1, keepdims=True)
        else:
            env[name] = env[arg] * np.float32(0.5) + np.float32(1.0)
        env[name] = env[name].astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(chains(), st.integers(0, 2**31 - 1))
def test_random_chains_match_numpy(chain: tuple, seed: int) -> None:
    source, shapes, (steps, outs) = chain
    r = np.random.default_rng(seed)
    env = {n: (r.standard_normal(s) * 0.5).astype(np.float32) for n, s in shapes.items()}
    got = tilec.compile(source)(env["X"], env["B"], env["C"])
    got = got if isinstance(got, tuple) else (got,)
    _evaluate(steps, env)
    for name, value in zip(outs, got):
        np.testing.assert_allclose(value, env[name], rtol=2e-5, atol=2e-5, err_msg=f"{name} in\n{source}")


# ------------------------------------------------------------------ the ops' programs


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("shape", [(7, 5), (33, 64), (256, 100)])
def test_softmax_forward_and_gradient(shape: tuple[int, int]) -> None:
    torch = _torch()
    x = RNG.standard_normal(shape).astype(np.float32)
    dout = RNG.standard_normal(shape).astype(np.float32)
    src = sources.softmax_source()
    out = tilec.compile(src)(x)
    dx = tilec.grad(src, "X")(x, dout)
    xt = torch.tensor(x, requires_grad=True)
    ref = torch.softmax(xt, dim=1)
    ref.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 3), (40, 64), (128, 96)])
def test_layer_norm_forward_and_gradient(shape: tuple[int, int]) -> None:
    torch = _torch()
    n, k = shape
    x, g, b = (RNG.standard_normal(s).astype(np.float32) for s in (shape, (k,), (k,)))
    dout = RNG.standard_normal(shape).astype(np.float32)
    src = sources.layer_norm_source(k, 1e-5, True, True)
    out = tilec.compile(src)(x, g, b)
    dx, dg, db = tilec.grad(src, ["X", "G", "Bt"])(x, g, b, dout)
    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, g, b))
    ref = torch.nn.functional.layer_norm(xt, (k,), gt, bt, 1e-5)
    ref.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    for got, want in ((dx, xt.grad), (dg, gt.grad), (db, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_gelu_chain_forward_and_gradient() -> None:
    torch = _torch()
    src = ("function (X[N, K], B[K]) -> (O) {\n    Y = X + B;\n    O = " + sources.GELU_EXPR.format(x="Y") + ";\n}")
    x, b = RNG.standard_normal((48, 80)).astype(np.float32), RNG.standard_normal(80).astype(np.float32)
    dout = RNG.standard_normal((48, 80)).astype(np.float32)
    out = tilec.compile(src)(x, b)
    dx, db = tilec.grad(src, ["X", "B"])(x, b, dout)
    xt, bt = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
    ref = torch.nn.functional.gelu(xt + bt)
    ref.backward(torch.tensor(dout))
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_float64_and_pointwise_contractions() -> None:
    src = ("function (X[N, K], M[N, 1]) -> (O) {\n"
           "    A[i, j: N, K] = +(M[i, 0] * X[i, j]);\n"
           "    Z[i, j: N, K] = +(X[i, j] == M[i, 0] ? A[i, j]);\n"
           "    O = Z - A;\n}")
    x = RNG.integers(0, 3, (20, 50)).astype(np.float64)
    m = RNG.integers(0, 3, (20, 1)).astype(np.float64)
    a = m * x
    np.testing.assert_array_equal(tilec.compile(src)(x, m), np.where(x == m, a, 0.0) - a)
    _, func = _lowered(src, {"X": (20, 50), "M": (20, 1)})
    assert len(_top_nests(func)) == 1


# ------------------------------------------------------------------ the fused form is chosen


def test_layer_norm_gradient_is_one_nest_without_temporaries() -> None:
    src = str(tilec.grad(sources.layer_norm_source(64, 1e-5, True, True), ["X"]).source)
    bp, func = _lowered(src, {"X": (512, 64), "G": (64,), "Bt": (64,), "DO": (512, 64)})
    nests = _top_nests(func)
    assert len(nests) == 1 and isinstance(nests[0], L.For) and nests[0].var == "fuse.r0"
    assert nests[0].kind == "parallel" or resolve_target("llvm").cores < 2
    params = {p.name for p in func.params}
    assert params == {"X", "G", "Bt", "DO", "DX"} | (params - {"X", "G", "Bt", "DO", "DX"})
    assert len(params) < 5 + len(bp.temporaries)  # most temporaries live in registers
    assert any(isinstance(s, L.For) and s.kind == "vectorized" for s in walk(func.body))


def test_softmax_plan_segments() -> None:
    bp, _ = _lowered(sources.softmax_source(), {"X": (64, 100)})
    plan = elementwise_fusion.match(0, bp)
    assert plan is not None and len(plan.members) == 4
    assert plan.segments == ((0,), (1, 2), (3,))  # max | exp and sum | divide
    assert plan.elided == ("M", "S", "E") and plan.row_local == ("E",)  # E, read two segments later: a row buffer
    x = RNG.standard_normal((64, 100)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(tilec.compile(sources.softmax_source())(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_no_fusion_for_non_row_local_reads() -> None:
    src = "function (X[N, K]) -> (O) {\n    T = exp(X);\n    O[i, j: N, K] = +(T[j, i]);\n}"
    bp, _ = _lowered(src, {"X": (8, 8)})
    plan = elementwise_fusion.match(0, bp)
    assert plan is not None and len(plan.members) == 1  # a transposed read of a group temporary ends it
    assert plan.stored == ("T",)
    assert elementwise_fusion.match(1, bp) is None  # a lone contraction is left to the default
    x = RNG.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(tilec.compile(src)(x), np.exp(x).T, rtol=1e-6)


@pytest.mark.parametrize("func, reference, special", [
    ("exp", "exp", [0.0, -0.0, 1e-30, -1e-8, 1.0, -1.0, 0.34657359, -0.34657359, 88.0, 88.37, 88.5, 88.72283, -87.0,
                    -87.3365, -87.33, 1e-3, -1e-3]),
    ("erf", "erf", [0.0, 1e-30, 1e-8, np.inf, -np.inf, 1.0, -1.0, 0.99999994, 1.0000001, 3.9, 4.1, 10.0, -0.5, 0.5,
                    2.0, -2.0]),
    ("tanh", "tanh", [0.0, -0.0, 1e-30, 1e-8, -1e-8, np.inf, -np.inf, 0.625, 0.62499994, 0.6250001, -0.625, 9.0,
                      44.0, 45.0, 88.0, 1e30, -1e30, 3.4e38]),
    ("sigmoid", "sigmoid", [0.0, -0.0, 1e-30, 1e-8, -1e-8, np.inf, -np.inf, 17.0, 20.0, 1e30, -20.0, -80.0, -87.0,
                            -88.0, 88.0]),
])
def test_vector_math_float32_within_3_ulp(func: str, reference: str, special: list[float]) -> None:
    """The fused nest's vectorized loop computes exp, erf, tanh and sigmoid without libm
    (tilec/codegen/llvm/vector_math.py)."""
    src = f"function (X[N, K]) -> (O) {{ T = X * 1.0; O = {func}(T); }}"
    wide = np.linspace(-87.3, 88.7, 40000) if func == "exp" else np.linspace(-6, 6, 40000)  # exp: 0 / inf beyond
    x = np.concatenate([wide, np.geomspace(1e-6, 20, 4000), special]).astype(np.float32)
    x = np.concatenate([x, np.zeros(-len(x) % 16, np.float32)]).reshape(-1, 16)
    _, func_ir = _lowered(src, {"X": x.shape})
    assert any(isinstance(s, L.For) and s.kind == "vectorized" for s in walk(func_ir.body))
    llvm = tilec.explain(src, {"X": x.shape}, stage="llvm")  # no libm call per lane (sigmoid's was llvm.exp)
    assert not re.search(r"@(expf|erff|tanhf|llvm\.exp\.)", llvm), re.findall(r"@[\w.]*exp[\w.]*|@\w+f\b", llvm)
    got = tilec.compile(src)(x).ravel().astype(np.float64)
    exact = {"sigmoid": lambda v: 1 / (1 + math.exp(-v)) if v > -700 else 0.0}.get(reference) or getattr(math, reference)
    want = np.array([exact(float(v)) for v in x.ravel()])
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 3, (ulps.max(), x.ravel()[ulps.argmax()])
    assert (np.signbit(got) == np.signbit(want)).all()  # -0.0 stays -0.0
    nan = tilec.compile(src)(np.full((1, 16), np.nan, np.float32))
    assert np.isnan(nan).all()
    if func == "exp":  # beyond float32's range: 0 below (e^-87.34 is the least normal), inf above
        edges = np.array([[-87.34, -88.0, -100.0, -1e30, -np.inf, 88.73, 89.0, 100.0, 1e30, np.inf] + [0.0] * 6],
                         np.float32)
        assert tilec.compile(src)(edges)[0, :10].tolist() == [0.0] * 5 + [np.inf] * 5


# ------------------------------------------------------------------ column reductions


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(2, 50), st.integers(0, 3), st.sampled_from(["+", ">", "<"]),
       st.sampled_from(["float32", "float64"]), st.booleans(), st.integers(0, 2**31 - 1))
def test_column_reductions_match_numpy(rows: int, k: int, outer: int, agg: str, dtype: str, keepdim: bool,
                                       seed: int) -> None:
    # outer == 0: no outer axis, the threads split the columns (the pool starts at any size here);
    # keepdim: torch's sum(0, keepdim=True), a 0 on a unit axis before the cells
    from tilec.schedule.cpu import column_reduce

    cell = ["0"] * keepdim + ["p"] * (outer > 0) + ["x"]
    dims = ["1"] * keepdim + ["P"] * (outer > 0) + ["K"]
    src = (f"function (A[R, {'P, ' * (outer > 0)}K]) -> (O) {{ O[{', '.join(cell)}: {', '.join(dims)}] = "
           f"{agg}(A[r, {'p, ' * (outer > 0)}x]); }}")
    a = np.random.default_rng(seed).standard_normal((rows,) + (outer,) * (outer > 0) + (k,)).astype(dtype)
    want = {"+": np.sum, ">": np.max, "<": np.min}[agg](a.astype(np.float64), axis=0, keepdims=keepdim)
    with params.overridden(parallel_min_cells=1):
        got = tilec.compile(src)(a)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)
    bp = bind(parse(src), {"A": a.shape}, {"A": dtype})
    assert column_reduce.match(bp.statements[0]) is not None


def test_bias_gradient_is_a_column_sweep() -> None:
    from tilec.schedule.cpu import column_reduce

    src = "function (G[M, N]) -> (DB) { DB[x: N] = +(G[m, x]); }"
    bp, func = _lowered(src, {"G": (300, 40)})
    assert column_reduce.match(bp.statements[0]) is not None
    sweeps = [s for s in walk(func.body) if isinstance(s, L.For) and s.kind == "vectorized"]
    assert sweeps and all("m" != s.var for s in sweeps)
    not_column = "function (G[M, N]) -> (DB) { DB[x: M] = +(G[x, n]); }"  # a row sum: not this template
    assert column_reduce.match(bind(parse(not_column), {"G": (3, 4)}, {"G": "float32"}).statements[0]) is None
    total = "function (G[M, N]) -> (S) { S[] = +(G[m, n]); }"  # a scalar output: not this template either
    assert column_reduce.match(bind(parse(total), {"G": (3, 4)}, {"G": "float32"}).statements[0]) is None


@pytest.mark.parametrize("n", [5, 16, 17, 1000, 40_003])
@pytest.mark.parametrize("expr, reference", [
    ("X * 0.5 * (1 + erf(X * 0.7071067811865476))", lambda x: x * 0.5 * (1 + np.vectorize(math.erf)(x * 0.7071067811865476))),
    ("X * sigmoid(X)", lambda x: x / (1 + np.exp(-x))),
    ("relu(X) + 2.0 * X", lambda x: np.maximum(x, 0) + 2 * x),
])
def test_an_elementwise_line_runs_in_vectors_and_a_scalar_tail(n: int, expr: str, reference) -> None:
    """A one-axis elementwise statement (the ops' activations on non-contiguous tensors run flattened)
    is cut into vectors (`parallel_outer`; in parallel where it is big enough) and a scalar tail,
    rather than left a scalar loop of libm calls (GELU of 1.5M floats on Zen 3: 12.2 ms -> 2.0);
    fewer than two vectors keep the plain loop. Every length matches numpy."""
    src = f"function (X[N]) -> (O) {{ O = {expr}; }}"
    _, func_ir = _lowered(src, {"X": (n,)})
    vectorized = any(isinstance(s, L.For) and s.kind == "vectorized" for s in walk(func_ir.body))
    lanes = resolve_target("llvm").host.vector_bits // 32
    assert vectorized == (n >= 2 * lanes), tilec.explain(src, {"X": (n,)}, stage="loop")
    x = RNG.standard_normal(n).astype(np.float32) * 3
    np.testing.assert_allclose(tilec.compile(src)(x), reference(x.astype(np.float64)), rtol=2e-6, atol=1e-6)
