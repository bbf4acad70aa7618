"""Kernel caches: in memory per signature, and object code on disk across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import tilec
from tilec.pipeline import driver

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"

_CHILD = """
import json, numpy as np, tilec
from tilec.pipeline import driver
a = np.arange(12, dtype=np.float32).reshape(3, 4)
out = tilec.compile({src!r})(a, a.T.copy())
print(json.dumps({{"compiled": driver.stats.compiled, "disk_hits": driver.stats.disk_hits,
                   "ok": bool(np.allclose(out, a @ a.T))}}))
"""


def _run_child(cache_dir: str, src: str) -> dict:
    env = dict(os.environ, TILEC_CACHE_DIR=cache_dir)
    result = subprocess.run([sys.executable, "-c", _CHILD.format(src=src)], env=env, capture_output=True,
                            text=True, timeout=120, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_loads_object_code_instead_of_compiling(tmp_path):
    first = _run_child(str(tmp_path), GEMM)
    second = _run_child(str(tmp_path), GEMM)
    assert first == {"compiled": 1, "disk_hits": 0, "ok": True}
    assert second == {"compiled": 0, "disk_hits": 1, "ok": True}
    assert list(tmp_path.rglob("*.o")), "no object file was written"


def test_empty_cache_dir_disables_disk_cache(tmp_path):
    first = _run_child("", GEMM)
    second = _run_child("", GEMM)
    assert first["compiled"] == 1 and second["compiled"] == 1


def test_corrupt_cache_entry_is_a_miss_not_a_crash(tmp_path):
    _run_child(str(tmp_path), GEMM)
    for obj in tmp_path.rglob("*.o"):
        obj.write_bytes(b"garbage")
    result = subprocess.run(
        [sys.executable, "-c", _CHILD.format(src=GEMM)], env=dict(os.environ, TILEC_CACHE_DIR=str(tmp_path)),
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"compiled": 1, "disk_hits": 0, "ok": True}


def test_cache_key_depends_on_shapes_dtypes_and_program():
    program = tilec.parse(GEMM)
    target = tilec.target.host_target()
    sig = driver.Signature((("A", (2, 3)), ("B", (3, 4))), (("A", "float32"), ("B", "float32")), ())
    key = driver.cache_key(program, sig, target, "default")
    assert key == driver.cache_key(program, sig, target, "default")
    other_shape = driver.Signature((("A", (2, 3)), ("B", (3, 5))), sig.dtypes, ())
    other_dtype = driver.Signature(sig.shapes, (("A", "float64"), ("B", "float32")), ())
    other_program = tilec.parse("C[i, j: M, N] = +(A[i, k] * B[j, k])")
    assert len({key, driver.cache_key(program, other_shape, target, "default"),
                driver.cache_key(program, other_dtype, target, "default"),
                driver.cache_key(other_program, sig, target, "default"),
                driver.cache_key(program, sig, target, "tuned")}) == 5
    assert driver.compiler_fingerprint().startswith(tilec.__version__)


def test_in_memory_cache_reuses_kernels_across_functions_and_shapes():
    rng = np.random.default_rng(1)
    f, g = tilec.compile(GEMM), tilec.compile(GEMM)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5)
    before = driver.stats.compiled + driver.stats.disk_hits
    np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-5)  # same program and signature: no build
    assert driver.stats.compiled + driver.stats.disk_hits == before
    c = rng.standard_normal((3, 7)).astype(np.float32)  # a new shape compiles a new kernel
    np.testing.assert_allclose(f(a, c), a @ c, rtol=1e-5)
    assert driver.stats.compiled + driver.stats.disk_hits == before + 1


def test_freeing_a_kernel_leaves_the_compiler_usable():
    """Regression: MCJIT owned the cached target machine, so the next compile crashed."""
    code = """
import gc, numpy as np
from tilec.codegen.llvm.module import emit_module
from tilec.codegen.llvm.jit import emit_object, load_object, optimise
from tilec.ir.bounds import bind
from tilec.ir.lower import lower
from tilec.target import host_target
import tilec
target = host_target()
bp = bind(tilec.parse("C[i, j: M, N] = +(A[i, k] * B[k, j])"), {"A": (8, 8), "B": (8, 8)},
          {"A": "float32", "B": "float32"})
def build():
    return load_object(emit_object(optimise(emit_module(lower(bp), target), target), target), "tilec_kernel", target)
kernel = build()
del kernel
gc.collect()
build()
print("survived")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr


def test_fingerprint_covers_kernel_code_only():
    from pathlib import Path
    root = Path(driver.__file__).parent
    assert (root / "cli.py").exists() and "cli.py" not in driver.KERNEL_CODE
    assert all((root / part).exists() for part in driver.KERNEL_CODE)
