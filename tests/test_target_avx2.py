"""Explicit CPU targets (tilec.target.cpu_target, ``llvm -mcpu=NAME -mattr=...``) and the AVX2 code
path: programs compiled for ``haswell`` (8 float32 lanes, 16 vector registers, no AVX-512) run on
this machine and match numpy/torch, their assembly holds no AVX-512 instruction or register, and
their kernels never share a cache entry with the host's. Code for a CPU this machine cannot
execute compiles but refuses to run. `pytest --cpu haswell` runs the rest of the suite's default
target on that CPU (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import tilec
from reference import conv2d_grad_shapes, softmax_rows, torch_conv2d_grads
from tilec.bench.ops import conv2d_source
from tilec.config import options
from tilec.ops.sources import attention_source, layer_norm_source, softmax_source
from tilec.pipeline import resolve_target
from tilec.schedule import params
from tilec.schedule.cpu.attention import AttentionKnobs, register_chunk
from tilec.target import cpu_info, cpu_target, host_cpu, host_target, missing_on_host

HASWELL = "llvm -mcpu=haswell"
GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
# what only AVX-512 has: zmm registers, mask registers, xmm/ymm 16-31, embedded broadcasts, its own instructions
AVX512 = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|\{1to\d+\}|\{%k|vpermt2|vpermi2|vexpand|vcompress"
                    r"|vscalef|vrndscale|vfixupimm|vgetexp|vgetmant|vpternlog|vreduce|vrange|vcvtt?p[sd]2u")

needs_avx2 = pytest.mark.skipif(bool(missing_on_host(cpu_info("haswell"))),
                                reason="this CPU cannot execute haswell's instructions (AVX2, FMA, BMI2)")


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


#: packed float arithmetic on 128-bit registers (vaddps %xmm1, ...): vector code narrower than AVX2's
PACKED_XMM = re.compile(r"\bv(?:fmadd\d*|add|mul)p[sd]\s+[^\n]*%xmm")


def assert_avx2_only(fn: tilec.Function, shapes: dict[str, tuple[int, ...]], vectors: bool = True,
                     narrow: bool = False) -> str:
    """The kernel's assembly: nothing of AVX-512, and (`vectors`) 256-bit vector code, or with
    `narrow` 128-bit packed arithmetic will do (the stencil template's vectors of 4 for rows of 7
    columns). A plain elementwise loop is left to LLVM's vectoriser, whose cost model may keep a
    loop of libm calls scalar."""
    asm = fn.explain(shapes, stage="asm")
    found = AVX512.search(asm)
    assert found is None, f"AVX-512 in code for haswell: {found.group(0)!r}"
    assert not vectors or "%ymm" in asm or (narrow and PACKED_XMM.search(asm)), "no 256-bit vector code at all"
    return asm


# ------------------------------------------------------------------ targets: parsing, facts, errors

def test_explicit_cpu_facts_come_from_llvm():
    t = resolve_target(HASWELL)
    assert t.name == "llvm" and t.host is not None and t.host.name == "haswell"
    assert t.vector_bits == 256 and t.lanes("float32") == 8 and t.lanes("float64") == 4
    assert t.host.vector_registers == 16
    assert t.cores == host_cpu().cores and t.host.l2_bytes == host_cpu().l2_bytes  # the host's, by design
    assert t.key != host_target().key
    assert resolve_target("llvm -mcpu=x86-64").vector_bits == 128  # SSE2 only
    assert resolve_target("llvm -mcpu=skylake-avx512").vector_bits == 512
    assert resolve_target("llvm -mcpu=skylake-avx512 -mattr=-avx512f").vector_bits == 256
    assert resolve_target("llvm -mcpu=native") == resolve_target("llvm -mcpu=host")


@pytest.mark.parametrize("text", ["llvm -mcpu=haswell", "  llvm   -mcpu haswell ", "cpu --mcpu=haswell",
                                  "llvm -mcpu=haswell -mattr=", "host -mattr=+avx2 -mcpu=haswell"])
def test_target_strings_parse_robustly(text):
    t = resolve_target(text)
    assert t.host is not None and t.host.name == "haswell" and t.vector_bits == 256


def test_a_target_object_and_cpu_target_are_accepted():
    t = cpu_target("haswell", "+fma,-avx512f")
    assert t == cpu_target("haswell", ["+fma", "-avx512f"])
    assert t.host is not None and t.host.features.endswith("+fma,-avx512f")
    assert tilec.compile(GEMM, target=t).target is t
    assert tilec.compile(GEMM, target=tilec.cpu_target("haswell")).target == resolve_target(HASWELL)


@pytest.mark.parametrize("text, says", [
    ("llvm -mcpu=hasswell", ["unknown CPU 'hasswell'", "did you mean haswell", "skylake", "znver3"]),
    ("llvm -mtriple=aarch64", ["unknown option", "-mcpu=", "-mattr="]),
    ("llvm -mcpu", ["no value"]),
    ("llvm -mcpu=haswell -mcpu=znver3", ["given twice"]),
    ("llvm -mattr=avx2", ["+NAME to enable"]),
    ("llvm -mattr=+avx3", ["unknown CPU feature 'avx3'", "avx2", "avx512f"]),
    ("llvm -mattr=-sse2", ["cannot be changed"]),
    ("llvm -mattr=+32bit-mode", ["cannot be changed"]),
    ("cuda -mcpu=haswell", ["takes no CPU options"]),
    ("llvmx -mcpu=haswell", ["unknown target 'llvmx'", "llvm", "cuda"]),
])
def test_bad_target_strings_say_what_is_accepted(text, says):
    with pytest.raises(tilec.TilecError) as err:
        resolve_target(text)
    for part in says:
        assert part in str(err.value)


def test_a_cpu_this_machine_cannot_execute_compiles_but_refuses_to_run():
    candidates = ("sapphirerapids", "graniterapids", "diamondrapids", "znver5", "skylake-avx512", "haswell")
    foreign = next((c for c in candidates if missing_on_host(cpu_info(c))), None)
    if foreign is None:
        pytest.skip(f"this CPU executes every extension of {', '.join(candidates)}: nothing foreign to compile for")
    fn = tilec.compile(GEMM, target=f"llvm -mcpu={foreign}")
    a, b = rng(0).standard_normal((8, 4)).astype(np.float32), rng(1).standard_normal((4, 32)).astype(np.float32)
    assert "ret" in fn.explain({"A": a.shape, "B": b.shape}, stage="asm")  # cross-compiling is legal
    with pytest.raises(tilec.TargetError) as err:
        fn(a, b)
    missing = missing_on_host(cpu_info(foreign))
    assert foreign in str(err.value) and all(f in str(err.value) for f in missing)


def test_tilec_target_setting_changes_what_llvm_means(monkeypatch):
    monkeypatch.setattr(options, "cpu_target", HASWELL)
    assert resolve_target("llvm") == resolve_target(HASWELL) == resolve_target("cpu")
    assert tilec.compile(GEMM).target.host.name == "haswell"  # type: ignore[union-attr]
    monkeypatch.setattr(options, "cpu_target", "cuda")
    with pytest.raises(tilec.TilecError, match="TILEC_TARGET"):
        resolve_target("llvm")


def test_templates_block_for_16_registers():
    """The GEMM register block fits 16 registers (4 x 3 vectors, not AVX-512's 6 x 4) and attention's
    score block stays within what its template accepts."""
    shapes = {"A": (256, 256), "B": (256, 256)}
    text = tilec.explain(GEMM, shapes, stage="templates", target=HASWELL)
    mr, nr = (int(re.search(rf"\b{k}=(\d+)", text).group(1)) for k in ("mr", "nr"))  # type: ignore[union-attr]
    vectors = nr // 8
    assert nr % 8 == 0 and mr * vectors + vectors + 1 <= 16, text
    src = attention_source(False, 0.125)
    text = tilec.explain(src, {n: (1, 2, 64, 16) for n in "QKV"}, stage="templates", target=HASWELL)
    assert "attention" in text and "bk=" in text
    target = resolve_target(HASWELL)  # attention's micro-GEMMs: bq rows of register_chunk columns, a row, a broadcast
    chunk = register_chunk(AttentionKnobs().bq, target) // target.lanes("float32")
    assert AttentionKnobs().bq * chunk + chunk + 1 <= 16


# ------------------------------------------------------------------ the AVX2 path runs and matches

@needs_avx2
@pytest.mark.parametrize("m, n, k", [(67, 45, 33), (128, 256, 96), (257, 129, 65), (5, 1000, 7)])
def test_gemm_matches_numpy(m, n, k):
    a, b = rng(m).standard_normal((m, k)).astype(np.float32), rng(n).standard_normal((k, n)).astype(np.float32)
    fn = tilec.compile(GEMM, target=HASWELL)
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-4)
    if m * n * k >= 128 * 256 * 96:
        assert "implicit_gemm" in fn.explain({"A": a.shape, "B": b.shape}, stage="templates")
    assert_avx2_only(fn, {"A": a.shape, "B": b.shape})


@needs_avx2
def test_gemm_bias_relu_epilogue_matches_numpy():
    src = ("function (A[M, K], B[K, N], Bias[N]) -> (C) {\n"
           "    T[i, j: M, N] = +(A[i, k] * B[k, j]);\n    C = relu(T + Bias);\n}")
    r = rng(3)
    a, b, bias = (r.standard_normal(s).astype(np.float32) for s in ((131, 77), (77, 203), (203,)))
    fn = tilec.compile(src, target=HASWELL)
    np.testing.assert_allclose(fn(a, b, bias), np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    assert_avx2_only(fn, {"A": a.shape, "B": b.shape, "Bias": bias.shape})


@needs_avx2
@pytest.mark.parametrize("shape", [dict(N=2, C=5, H=11, W=9, CO=13, KH=3, KW=3, stride=1, pad=1),
                                   dict(N=1, C=8, H=10, W=7, CO=24, KH=3, KW=3, stride=2, pad=1),
                                   dict(N=1, C=16, H=7, W=7, CO=12, KH=1, KW=1, stride=1, pad=0)])
def test_conv2d_and_its_gradients_match_torch(shape):
    r = rng(shape["C"])
    x, f, dy = (r.standard_normal(dims).astype(np.float32) for dims in conv2d_grad_shapes(shape).values())
    y_ref, dx_ref, df_ref = torch_conv2d_grads(x, f, dy, shape["stride"], shape["pad"])
    src = conv2d_source(shape)
    fn = tilec.compile(src, target=HASWELL)
    np.testing.assert_allclose(fn(x, f), y_ref, rtol=1e-4, atol=1e-4)
    assert_avx2_only(fn, {"X": x.shape, "F": f.shape}, narrow=shape["W"] < 8)  # (a row narrower than a ymm)
    dx, df = tilec.grad(src, wrt=["X", "F"], target=HASWELL)(x, f, dy)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(df, df_ref, rtol=1e-4, atol=1e-4)


@needs_avx2
def test_winograd_conv_matches_torch():
    shape = dict(N=1, C=6, H=9, W=7, CO=10, KH=3, KW=3, stride=1, pad=1)
    r = rng(7)
    x, f, dy = (r.standard_normal(dims).astype(np.float32) for dims in conv2d_grad_shapes(shape).values())
    y_ref, _, _ = torch_conv2d_grads(x, f, dy, 1, 1)
    with params.overridden(gemm_min_work=1, gemm_min_columns=1, winograd_min_channels=1, winograd_min_tiles=1):
        fn = tilec.compile(conv2d_source(shape), target=HASWELL)
        assert "winograd" in fn.explain({"X": x.shape, "F": f.shape}, stage="templates")
        np.testing.assert_allclose(fn(x, f), y_ref, rtol=2e-4, atol=2e-3)
        assert_avx2_only(fn, {"X": x.shape, "F": f.shape})


def _attention_reference(q, k, v, causal):
    s = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhst,bhtd->bhsd", p / p.sum(-1, keepdims=True), v)


@needs_avx2
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s, t, d", [(67, 67, 16), (33, 100, 24)])
def test_attention_matches_numpy(causal, s, t, d):
    if causal and s != t:
        return  # the causal program's mask is written for square scores
    r = rng(s + t)
    q = r.standard_normal((2, 3, s, d)).astype(np.float32)
    k, v = (r.standard_normal((2, 3, t, d)).astype(np.float32) for _ in range(2))
    fn = tilec.compile(attention_source(causal, 1.0 / math.sqrt(d)), target=HASWELL)
    shapes = {"Q": q.shape, "K": k.shape, "V": v.shape}
    assert "attention" in fn.explain(shapes, stage="templates")
    np.testing.assert_allclose(fn(q, k, v), _attention_reference(q, k, v, causal), rtol=1e-4, atol=1e-5)
    assert_avx2_only(fn, shapes)


@needs_avx2
@pytest.mark.parametrize("rows, cols", [(37, 101), (5, 1024), (64, 8)])
def test_softmax_and_layer_norm_rows_match_numpy(rows, cols):
    x = rng(rows).standard_normal((rows, cols)).astype(np.float32)
    fn = tilec.compile(softmax_source(), target=HASWELL)
    np.testing.assert_allclose(fn(x), softmax_rows(x), rtol=1e-5, atol=1e-6)
    assert_avx2_only(fn, {"X": x.shape})
    g, b = rng(1).standard_normal(cols).astype(np.float32), rng(2).standard_normal(cols).astype(np.float32)
    ln = tilec.compile(layer_norm_source(cols, 1e-5, True, True), target=HASWELL)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(ln(x, g, b), want, rtol=1e-4, atol=1e-4)


@needs_avx2
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions_match_numpy(dtype):
    x = (rng(5).standard_normal((53, 171)) * 10).astype(dtype)
    cases = {"O[i: N] = +(X[i, j])": x.sum(1), "O[j: K] = +(X[i, j])": x.sum(0),
             "O[i: N] = >(X[i, j])": x.max(1), "O[j: K] = <(X[i, j])": x.min(0), "O[] = +(X[i, j])": x.sum()}
    for body, want in cases.items():
        fn = tilec.compile(f"function (X[N, K]) -> (O) {{ {body}; }}", target=HASWELL)
        tol = dict(rtol=1e-4, atol=1e-3) if dtype == "float32" else dict(rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(fn(x), want, **tol, err_msg=body)


@needs_avx2
def test_elementwise_math_matches_numpy():
    from scipy.special import erf

    x = rng(9).uniform(0.05, 4.0, 1003).astype(np.float32)
    y = rng(10).standard_normal(1003).astype(np.float32)
    cases = {"exp(Y)": np.exp(y), "log(X)": np.log(x), "tanh(Y)": np.tanh(y), "erf(Y)": erf(y), "sqrt(X)": np.sqrt(x),
             "sigmoid(Y)": 1 / (1 + np.exp(-y)), "pow(X, Y)": np.power(x, y), "floor(Y * 3)": np.floor(y * 3),
             "abs(Y) + max(X, Y)": np.abs(y) + np.maximum(x, y), "Y > 0 ? X : -X": np.where(y > 0, x, -x)}
    for expr, want in cases.items():
        fn = tilec.compile(f"function (X[N], Y[N]) -> (O) {{ O = {expr}; }}", target=HASWELL)
        np.testing.assert_allclose(fn(x, y), want, rtol=2e-5, atol=2e-6, err_msg=expr)
        assert_avx2_only(fn, {"X": x.shape, "Y": y.shape}, vectors=False)


@needs_avx2
def test_a_program_with_guards_and_padding_matches_numpy():
    """Padded borders (same-size 1-D and 2-D correlations), a constraint, a strided max-pool with an odd edge."""
    src = ("function (I[H, W], K[KH, KW], V[N]) -> (O, P, C) {\n"
           "    O[x, y: H, W] = +(I[x + i - 1, y + j - 1] * K[i, j]);\n"
           "    P[x, y: (H + 1) / 2, (W + 1) / 2] = >(I[2x + i, 2y + j]), i < 2, j < 2;\n"
           "    C[i: N] = +(V[k]), i - k < N;\n"
           "}")
    r = rng(11)
    img, ker, vec = r.standard_normal((37, 29)).astype(np.float32), r.standard_normal((3, 3)).astype(np.float32), \
        r.standard_normal(45).astype(np.float32)
    o, p, c = tilec.compile(src, target=HASWELL)(img, ker, vec)
    padded = np.pad(img.astype(np.float64), 1)
    want_o = sum(padded[i:i + 37, j:j + 29] * ker[i, j] for i in range(3) for j in range(3))
    edge = np.pad(img, ((0, 1), (0, 1)), constant_values=-np.inf)
    want_p = edge.reshape(19, 2, 15, 2).max(axis=(1, 3))
    np.testing.assert_allclose(o, want_o, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(p, want_p)
    np.testing.assert_allclose(c, np.cumsum(vec), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ caches

@needs_avx2
def test_haswell_and_host_kernels_never_share_a_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(options, "cache_dir", tmp_path)
    a, b = rng(0).standard_normal((40, 24)).astype(np.float32), rng(1).standard_normal((24, 72)).astype(np.float32)
    host, haswell = tilec.compile(GEMM, target=host_target()), tilec.compile(GEMM, target=HASWELL)
    np.testing.assert_allclose(host(a, b), haswell(a, b), rtol=1e-5, atol=1e-5)
    sig = host._signature([a, b])
    assert host.kernel(sig).key != haswell.kernel(sig).key
    assert tilec.compile(GEMM, target=" llvm  -mcpu=haswell").kernel(sig).key == haswell.kernel(sig).key
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".sqlite"]
    assert len(stored) == 2, stored  # one object file per CPU


# ------------------------------------------------------------------ the command line

@needs_avx2
def test_cli_explain_and_bench_take_an_explicit_cpu(capsys):
    from tilec.cli import main

    assert main(["explain", GEMM, "--shape", "A=64x32", "--shape", "B=32x48", "--target", HASWELL, "--stage", "asm"]) == 0
    asm = capsys.readouterr().out
    assert "%ymm" in asm and AVX512.search(asm) is None
    assert main(["bench", "gemm", "--quick", "--json", "--repeats", "1", "--target", HASWELL]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert rows and all(r["target"] == HASWELL and r["tilec_ms"] > 0 for r in rows), rows
    assert main(["bench", "gemm", "--quick", "--target", "llvm -mcpu=hasswell"]) == 1
    assert "did you mean haswell" in capsys.readouterr().err


@needs_avx2
def test_cli_tune_records_under_the_explicit_cpu(tmp_path, capsys):
    from tilec.cli import main
    from tilec.records import RecordDB

    path = tmp_path / "records.sqlite"
    assert main(["tune", "gemm", "--shape", "M=64,N=64,K=64", "--trials", "2", "--records", str(path),
                 "--target", HASWELL]) == 0
    with RecordDB(path) as db:
        targets = {r.target for r in db.records()}
    assert targets == {resolve_target(HASWELL).key}
    assert main(["tune", "gemm", "--target", "llvm -mcpu=haswell -mattr=+nope"]) == 1
    assert "unknown CPU feature 'nope'" in capsys.readouterr().err
