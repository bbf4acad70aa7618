"""The torch.compile backend's machinery (tilec.torch_backend): ops without a rule run in torch
between tilec kernels and are counted, dynamic shapes compile one kernel set per size, the
TILEC_LOG=backend summary, the disk cache across processes, and the backend's registration.
(Each lowering rule's values are checked on PyTorch's OpInfo samples: tests/test_backend_opinfo.py.)
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo

import tilec
import tilec.torch_backend as backend
from tilec import pipeline

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    backend.reset_coverage()
    yield
    torch._dynamo.reset()


def _grads(fn, *inputs):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    out.backward(torch.ones_like(out))
    return out.detach(), [x.grad for x in leaves]


def _model(x, w):
    h = torch.exp(x) @ w
    return torch.tanh(torch.cumsum(h, dim=1)) * 2.0 + 1.0


def test_an_op_without_a_rule_between_lowered_ops_runs_in_torch_and_is_counted():
    x, w = torch.randn(5, 4, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    compiled = torch.compile(_model, backend="tilec", dynamic=False)
    got, got_grads = _grads(compiled, x, w)
    want, want_grads = _grads(_model, x, w)
    torch.testing.assert_close(got, want)
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g, e)
    cov = backend.coverage()
    assert cov["fallback"].get("cumsum", 0) >= 1  # the forward's cumsum ran in torch
    assert cov["lowered"] >= 4 and cov["kernels"] >= 2  # exp, mm before it; tanh, mul, add after it


@pytest.mark.parametrize("include_pad", [True, False])
def test_group_norm_and_average_pooling_run_in_tilec_kernels(include_pad):
    """Group norm (its decomposition's var_mean and as_strided reshapes) and avg_pool2d with and
    without count_include_pad, forward and backward: eager's values and gradients, no ATen call left
    to torch (PoolFormer's blocks, 87.7% coverage before these rules)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(2, 8),
                                torch.nn.AvgPool2d(3, 2, 1, count_include_pad=include_pad)).double()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64)
    torch._dynamo.reset()
    backend.reset_coverage()
    got = torch.compile(model, backend="tilec")(x)
    got.square().sum().backward()
    want = eager(x)
    want.square().sum().backward()
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    cov = backend.coverage()
    assert cov["fallback"] == {} and cov["kernels"] > 0, cov


@pytest.mark.parametrize("a, b", [(-8, 6), (7, 2), (1, 3)])
def test_true_division_of_integer_constants_is_a_float_division(a, b):
    # torch.div(-8, 6) is -1.3333 in float32; Tile divides two int literals as ints (PyTorch's OpInfo
    # sample for div.no_rounding_mode found the kernel returning -1)
    compiled = torch.compile(lambda x, y: torch.div(x, y), backend="tilec", dynamic=False)
    torch.testing.assert_close(compiled(a, b), torch.div(a, b))
    assert backend.coverage()["lowered"] >= 1


def test_sort_has_no_rule_and_runs_in_torch_inside_a_compiled_graph():
    def f(x):
        values, _ = torch.sort(torch.sigmoid(x), dim=-1)
        return values * x

    x = torch.randn(3, 7)
    compiled = torch.compile(f, backend="tilec", dynamic=False)
    torch.testing.assert_close(compiled(x), f(x))
    cov = backend.coverage()
    assert cov["fallback"].get("sort", 0) == 1 and cov["lowered"] >= 2


def _new_kernels():
    return pipeline.stats.compiled + pipeline.stats.disk_hits


def _check_sizes(compiled, sizes):
    """Right values and gradients at each size; returns the kernels built for each new size."""
    built = []
    for n in sizes:
        x, w = torch.randn(n, 8), torch.randn(8, 3)
        before = _new_kernels()
        got, got_grads = _grads(compiled, x, w)
        built.append(_new_kernels() - before)
        want, want_grads = _grads(_mlp, x, w)
        torch.testing.assert_close(got, want)
        for g, e in zip(got_grads, want_grads):
            torch.testing.assert_close(g, e)
    return built


def _mlp(x, w):
    return torch.softmax(torch.relu(x @ w) + 0.5, dim=-1)


def test_dynamic_true_gives_right_answers_at_two_sizes_with_a_kernel_set_each():
    compiled = torch.compile(_mlp, backend="tilec", dynamic=True)
    built = _check_sizes(compiled, [5, 9, 5])
    assert built[0] > 0 and built[1] > 0  # a new size: new kernels (compiled or from the disk cache)
    assert built[2] == 0  # the first size again: its kernels are reused
    assert backend.coverage()["lowered"] > 0 and not backend.coverage()["fallback"]


def test_mark_dynamic_gives_right_answers_at_two_sizes():
    compiled = torch.compile(_mlp, backend="tilec")
    x = torch.randn(6, 8)
    torch._dynamo.mark_dynamic(x, 0)
    w = torch.randn(8, 3)
    got = compiled(x, w)
    torch.testing.assert_close(got, _mlp(x, w))
    built = _check_sizes(compiled, [11])  # a second size through the same (symbolic) graph
    assert built[0] > 0
    assert backend.coverage()["lowered"] > 0


def test_tilec_log_backend_prints_each_graphs_summary(monkeypatch, capfd):
    monkeypatch.setenv("TILEC_LOG", "backend")
    compiled = torch.compile(_model, backend="tilec", dynamic=False)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    compiled(x, w).sum().backward()
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("tilec backend:")]
    assert len(lines) == 2, err  # the forward and the backward graph
    assert "ATen calls in" in lines[0] and "tilec kernels" in lines[0]
    assert "torch runs cumsum x1" in lines[0]
    assert "cumsum: no tilec lowering" in err


_CHILD = """
import json, torch, tilec.torch_backend
from tilec import pipeline
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 2))
compiled = torch.compile(model, backend="tilec")
x = torch.randn(4, 6)
out = compiled(x)
out.sum().backward()
print(json.dumps({"compiled": pipeline.stats.compiled, "disk_hits": pipeline.stats.disk_hits,
                  "ok": bool(torch.allclose(out, model(x), rtol=1e-4, atol=1e-5))}))
"""


def _run_child(cache_dir: Path, code: str = _CHILD) -> dict:
    env = dict(os.environ, TILEC_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"rc {result.returncode}: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_kernels_from_the_disk_cache(tmp_path):
    first = _run_child(tmp_path)
    assert first["ok"] and first["compiled"] > 0 and first["disk_hits"] == 0
    second = _run_child(tmp_path)
    assert second["ok"] and second["compiled"] == 0  # no LLVM compilation at all
    assert second["disk_hits"] == first["compiled"]


def test_the_backend_is_registered_after_import():
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    backend.register()  # idempotent
    assert "tilec" in list_backends(exclude_tags=())
    assert lookup_backend("tilec") is backend.tilec_backend


def test_the_entry_point_finds_the_backend_without_importing_tilec(tmp_path):
    code = """
import json, sys, torch
assert "tilec" not in sys.modules
f = torch.compile(lambda x: torch.sigmoid(x) * 3.0, backend="tilec")
x = torch.randn(4, 3)
ok = bool(torch.allclose(f(x), torch.sigmoid(x) * 3.0))
import tilec.torch_backend as b
print(json.dumps({"ok": ok, "lowered": b.coverage()["lowered"], "compiled": 0, "disk_hits": 0}))
"""
    out = _run_child(tmp_path, code)
    assert out["ok"] and out["lowered"] >= 2


def test_the_backend_refuses_options():
    with pytest.raises(TypeError, match="takes no options"):
        backend.tilec_backend(None, [], mode="fast")


def _attention(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_gradients_are_torchs_and_inference_attention_is_lowered():
    """Regression: torch's core-ATen decomposition of the CPU flash attention returns the attention
    weights where the op returns the logsumexp its backward reads (garbage gradients when the
    backward ran in torch). tilec lowers the op and its backward itself, with torch's logsumexp;
    training and inference both run it in tilec kernels."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen, dtype=torch.float64) for n in (3, 6, 6))
    compiled = torch.compile(_attention, backend="tilec", dynamic=False)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    got = torch.autograd.grad(compiled(*leaves).sum(), leaves)
    want = torch.autograd.grad(_attention(*leaves).sum(), leaves)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    torch._dynamo.reset()
    backend.reset_coverage()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(_attention, backend="tilec", dynamic=False)(q, k, v),
                                   _attention(q, k, v))
    cov = backend.coverage()
    assert cov["lowered"] >= 1 and cov["kernels"] >= 1 and not any("attention" in op for op in cov["fallback"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_forwards_take_the_fused_template(dtype):
    """Training and inference alike: the program of the flash op's forward (its logsumexp an output in
    training, a statement no output reads in inference) is one fused attention kernel, not a chain of
    GEMMs around a score matrix."""
    from tilec.torch_backend import tasks

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=gen, dtype=dtype) for _ in range(3))
    for training in (True, False):
        torch._dynamo.reset()
        known = set(tasks.PROGRAMS)
        compiled = torch.compile(_attention, backend="tilec", dynamic=False)
        with torch.set_grad_enabled(training):
            leaves = [t.clone().requires_grad_(training) for t in (q, k, v)]
            got = compiled(*leaves)
        torch.testing.assert_close(got, _attention(q, k, v), **({} if dtype == torch.float32 else
                                                               dict(atol=2e-2, rtol=2e-2)))
        forward = next((src, sig) for src, sig in tasks.PROGRAMS if (src, sig) not in known
                       and ("log(" in src or not training))
        templates = tilec.explain(forward[0], {n: shape for n, shape, _ in forward[1]},
                                  {n: dt for n, _, dt in forward[1]}, stage="templates")
        assert templates.splitlines()[0].startswith("0: attention"), (training, templates)


def test_a_model_under_bf16_autocast_is_lowered_and_trains_as_eager():
    """torch.autocast(bfloat16) around a compiled MLP: the casts and bfloat16 ops run in tilec kernels,
    and ten SGD steps follow eager's autocast run (bfloat16's tolerance)."""
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                                   torch.nn.Linear(64, 10))

    x, y = torch.randn(32, 48), torch.randint(0, 10, (32,))
    curves = []
    for compiled in (False, True):
        model = make()
        step_model = torch.compile(model, backend="tilec") if compiled else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(10):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = step_model(x)
                loss = torch.nn.functional.cross_entropy(out, y)
            assert out.dtype == torch.bfloat16
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(losses)
    eager, ours = curves
    assert all(abs(a - b) <= 1e-2 * abs(a) for a, b in zip(eager, ours)), (eager, ours)
    cov = backend.coverage()
    assert cov["kernels"] >= 2 and cov["lowered"] >= 0.9 * (cov["lowered"] + sum(cov["fallback"].values()))
