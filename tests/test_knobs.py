"""Knob records are checked by their template before anything is built: any value of any type gives
a ScheduleError naming the knob, or a kernel that computes the right result.

Regressions (each used to kill or hang the process, or be applied silently): nr=65536 aborted inside
LLVM; mr=mc=2**31 and nr=10**6 ran for minutes and took 12 GB; mr=None, "6" or [6] raised TypeError;
kc=True made invalid LLVM IR; pack_a="no" was read as true; nr=7 and threads=100000 were applied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from tilec.bench.ops import attention_source
from tilec.errors import ScheduleError
from tilec.records import Record, RecordDB, task_key
from tilec.schedule import registry
from tilec.pipeline import resolve_target

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
CONV = ("function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {\n"
        "    O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]);\n}")

HOSTILE = [{"nr": 65536}, {"mr": 2**31, "mc": 2**31}, {"nr": 10**6}, {"mr": None}, {"mr": "6"}, {"mr": [6]},
           {"kc": True}, {"pack_a": "no"}, {"nr": 7}, {"threads": 100000}, {"mr": -1}, {"mr": 6.0}, {"qq": 1}]

_CHILD = """
import json, numpy as np, tilec
from tilec import TemplateConfig, TemplateSchedule
a = np.ones((64, 32), np.float32)
b = np.ones((32, 48), np.float32)
out = []
for knobs in json.loads({cases!r}):
    try:
        schedule = TemplateSchedule((TemplateConfig(0, "implicit_gemm", tuple(sorted(knobs.items()))),))
        c = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])").with_schedule(schedule)(a, b)
        out.append(["ok", bool(np.allclose(c, a @ b))])
    except tilec.TilecError as err:
        out.append([type(err).__name__, str(err)])
print(json.dumps(out))
"""


def test_hostile_knobs_are_schedule_errors_in_a_fresh_process(tmp_path):
    cases = json.dumps([{k: v for k, v in c.items()} for c in HOSTILE])
    env = dict(os.environ, TILEC_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", _CHILD.format(cases=cases)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"rc {result.returncode}: {result.stderr[-2000:]}"
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    for knobs, (kind, message) in zip(HOSTILE, outcomes):
        assert kind == "ScheduleError", (knobs, kind, message)
        assert any(repr(name) in message or f"{name} (" in message or f"{name}=" in message or f" {name} " in message
                   for name in knobs), (knobs, message)


def test_a_record_with_hostile_knobs_is_skipped_by_bench(tmp_path):
    """`tilec bench --records` with a record whose knobs cannot build: a warning, the default kernel."""
    path = tmp_path / "records.sqlite"
    target = resolve_target("llvm")  # what the bench compiles for (the host, or TILEC_TARGET's CPU)
    program = tilec.parse("function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }")
    shapes = {"A": (64, 32), "B": (32, 48)}
    key = task_key(str(program), shapes, {"A": "float32", "B": "float32"}, 0)
    from tilec.pipeline import compiler_fingerprint

    with RecordDB(path) as db:
        db.add(Record(key, target.key, compiler_fingerprint(),
                      [{"stmt": 0, "template": "implicit_gemm", "knobs": {"nr": 65536}}], 1e-6, "ok"))
    result = subprocess.run([sys.executable, "-m", "tilec.cli", "bench", "gemm", "--quick", "--records", str(path),
                             "--repeats", "1"], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TILEC_CACHE_DIR=str(tmp_path)))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "does not build and is skipped" in result.stderr and "nr" in result.stderr


# ------------------------------------------------------------------ any knob record, any template

VALUES = st.one_of(st.integers(-3, 40), st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16, 32, 48, 64, 128, 256, 1024, 4096,
                                                        65536, 10**6, 2**31, -2**31]),
                   st.booleans(), st.none(), st.sampled_from(["6", "no", "", "true"]), st.just([6]), st.floats(0, 64))


def _knob_records(template: str) -> st.SearchStrategy[dict[str, Any]]:
    """Any values of any type, or (as often) plausible ones: small powers of two, booleans where
    the knob is one, so that many records also build and run."""
    record = fields(registry.get(template).knob_type)  # type: ignore[arg-type]
    names = [f.name for f in record]
    plausible = st.fixed_dictionaries({}, optional={
        f.name: st.booleans() if f.default in (True, False) else st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128])
        for f in record})
    return st.one_of(st.dictionaries(st.sampled_from(names), VALUES, max_size=len(names)), plausible)


rng = np.random.default_rng(11)
GEMM_INPUTS = [rng.standard_normal((19, 24)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)]
CONV_INPUTS = [rng.standard_normal((1, 6, 6, 8)).astype(np.float32), rng.standard_normal((3, 3, 8, 8)).astype(np.float32)]
ATT = attention_source({"D": 8}, True)
ATT_INPUTS = [rng.standard_normal((1, 2, 20, 8)).astype(np.float32) for _ in range(3)]


def _conv_reference(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    y = torch.nn.functional.conv2d(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
                                   torch.from_numpy(k.transpose(3, 2, 0, 1).copy()), padding=1)
    return y.numpy().transpose(0, 2, 3, 1)


def _attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    from test_attention import reference

    return reference(q, k, v, True, 1 / np.sqrt(8))


CASES = {  # template -> (source, target, inputs, reference)
    "implicit_gemm": (GEMM, "llvm", GEMM_INPUTS, lambda a, b: a @ b),
    "winograd": (CONV, "llvm", CONV_INPUTS, _conv_reference),
    "attention": (ATT, "llvm", ATT_INPUTS, _attention_reference),
    "gpu_gemm": (GEMM, "cuda-sim", GEMM_INPUTS, lambda a, b: a @ b),
    "gpu_tensorcore": (GEMM, "cuda-sim", [x.astype(np.float16) for x in GEMM_INPUTS],
                       lambda a, b: a.astype(np.float32) @ b.astype(np.float32)),
    "gpu_attention": (ATT, "cuda-sim", ATT_INPUTS, _attention_reference),
}


@pytest.mark.parametrize("template", sorted(CASES))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_knob_record_is_a_schedule_error_or_computes_the_right_result(template, data):
    knobs = data.draw(_knob_records(template))
    source, target, inputs, reference = CASES[template]
    try:
        schedule = tilec.TemplateSchedule((tilec.TemplateConfig(0, template, tuple(sorted(knobs.items()))),))
        out = tilec.compile(source, target).with_schedule(schedule)(*inputs)
    except ScheduleError as err:
        assert template in str(err) or any(name in str(err) for name in knobs), str(err)
        return
    want = reference(*inputs)
    tol = 2e-2 if template == "gpu_tensorcore" else 2e-3
    np.testing.assert_allclose(np.asarray(out, np.float32), want, rtol=tol, atol=tol)


VALID = {"implicit_gemm": {"mr": 4, "nr": 16, "kc": 8, "mc": 8, "threads": 2},
         "winograd": {"mr": 2, "nr": 16, "pack_a": False},
         "attention": {"bq": 3, "bk": 32},
         "gpu_gemm": {"bm": 16, "bn": 32, "bk": 8, "tm": 2, "tn": 4, "double_buffer": False},
         "gpu_tensorcore": {"block_m": 32, "block_n": 32, "block_k": 16, "warps_m": 1, "warps_n": 2},
         "gpu_attention": {"bq": 32, "bk": 8}}


@pytest.mark.parametrize("template", sorted(VALID))
def test_valid_knob_records_compute_the_right_result(template):
    source, target, inputs, reference = CASES[template]
    schedule = tilec.TemplateSchedule((tilec.TemplateConfig(0, template, tuple(sorted(VALID[template].items()))),))
    fn = tilec.compile(source, target).with_schedule(schedule)
    shapes = dict(zip(fn.inputs, (x.shape for x in inputs)))
    dtypes = dict(zip(fn.inputs, (x.dtype.name for x in inputs)))
    assert f"0: {template}" in fn.explain(shapes, dtypes, stage="templates")
    tol = 2e-2 if template == "gpu_tensorcore" else 2e-3
    np.testing.assert_allclose(np.asarray(fn(*inputs), np.float32), reference(*inputs), rtol=tol, atol=tol)


def test_attention_backward_knobs_any_record():
    src = tilec.grad(ATT, wrt=["Q", "K", "V"]).source
    dout = rng.standard_normal((1, 2, 20, 8)).astype(np.float32)
    plain = tilec.compile(src).with_schedule(tilec.TemplateSchedule((tilec.TemplateConfig(0, "default"),)))
    want = plain(*ATT_INPUTS, dout)
    for knobs in ({"bq": 8, "bk": 16, "mr": 4}, {"bq": 12, "bk": 32, "mr": 3, "panel": False}, {"bk": 24},
                  {"mr": 0}, {"bq": True}, {"panel": 1}, {"bq": 2**31}):
        try:
            schedule = tilec.TemplateSchedule((tilec.TemplateConfig(0, "attention_backward", tuple(knobs.items())),))
            got = tilec.compile(src).with_schedule(schedule)(*ATT_INPUTS, dout)
        except ScheduleError as err:
            assert any(name in str(err) for name in knobs), str(err)
            continue
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
