"""The worker pool behind parallel loops: no lost chunks, no deadlock, many callers.

Runs in a subprocess with a timeout, so a deadlock fails the test instead of hanging CI.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

STRESS = r"""
import random, threading, time
import numpy as np
import tilec

s = tilec.Schedule()
s.parallel("i")
add = tilec.compile("function (A[N, M], B[N, M]) -> (C) { C = A + B; }")
row_sum = tilec.compile("function (A[N, M]) -> (S) { S[i: N] = +(A[i, j]); }").with_schedule(s)
gemm = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 40)).astype(np.float32)
g1, g2 = rng.standard_normal((70, 50)).astype(np.float32), rng.standard_normal((50, 90)).astype(np.float32)
expected_sum, expected_gemm = a.sum(1), g1 @ g2
errors = []

def hammer(seed):
    r = random.Random(seed)
    for k in range(400):
        if not np.allclose(row_sum(a), expected_sum, rtol=1e-4, atol=1e-4):
            errors.append("row_sum")
        if k % 20 == 0 and not np.allclose(gemm(g1, g2), expected_gemm, rtol=1e-4, atol=1e-4):
            errors.append("gemm")
        if r.random() < 0.02:
            time.sleep(r.choice([0.0005, 0.002, 0.02]))  # let workers go to sleep between jobs

threads = [threading.Thread(target=hammer, args=(k,)) for k in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("errors", len(errors))
"""


@pytest.mark.parametrize("pool", ["own", "torch's OpenMP"])
def test_parallel_kernels_from_two_threads_never_lose_a_chunk_or_hang(pool):
    if pool != "own":
        pytest.importorskip("torch")
    prefix = "" if pool == "own" else "import torch\n"
    code = prefix + STRESS + ("\nfrom tilec.codegen.llvm import runtime as llvm_runtime\n"
                              "print('openmp', any(llvm_runtime._ADOPTED))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "errors 0", result.stdout + result.stderr
    assert lines[-1] == f"openmp {pool != 'own'}"  # with torch loaded, kernels run on its OpenMP team


def test_torch_loaded_kernels_share_its_openmp_team_unless_told_not_to():
    pytest.importorskip("torch")
    code = r"""
import numpy as np, torch, tilec
from tilec.codegen.llvm import runtime as llvm_runtime
gemm = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
a = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
assert np.allclose(gemm(a, a.T), a @ a.T, rtol=1e-4, atol=1e-3)
print(bool(llvm_runtime._ADOPTED))
"""
    for env, adopted in (({}, "True"), ({"TILEC_OWN_THREADS": "1"}, "False")):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **env})
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == adopted, result.stdout


def test_workers_restart_after_exiting_when_idle():
    code = r"""
import time, numpy as np, tilec
from tilec.codegen.llvm import runtime as llvm_runtime
gemm = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
a = np.ones((128, 128), np.float32)
assert np.allclose(gemm(a, a), 128)
time.sleep(llvm_runtime.SLEEP_US * llvm_runtime.IDLE_POLLS / 1e6 + 0.5)  # every worker has exited
assert np.allclose(gemm(a, a), 128)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
