"""Kernel caches: in memory (bounded) and object code on disk across processes, under one key
that covers everything that shapes a kernel; a disk entry is loaded only for its own key."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tilec
from tilec import pipeline
from tilec.config import options
from tilec.ir import loop as L
from tilec.pipeline import resolve_target
from tilec.runtime.kernels import kernels
from tilec.schedule import params

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
CONV = ("function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) {\n"
        "    O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]);\n}")

_CHILD = """
import json, numpy as np, tilec
from tilec import pipeline
from tilec.schedule import params
rng = np.random.default_rng(0)
a, b = rng.standard_normal({a_shape}).astype(np.float32), rng.standard_normal({b_shape}).astype(np.float32)
fn = tilec.compile({src!r})
{schedule}
with params.overridden(**{params!r}):
    out = fn(a, b)
print(json.dumps({{"compiled": pipeline.stats.compiled, "disk_hits": pipeline.stats.disk_hits,
                   "ok": bool(np.allclose(out, {reference}, rtol=1e-3, atol=1e-3))}}))
"""
GEMM_REF = "a @ b"
CONV_REF = ("__import__('torch').nn.functional.conv2d(__import__('torch').from_numpy(a).permute(0, 3, 1, 2), "
            "__import__('torch').from_numpy(b).permute(3, 2, 0, 1), padding=1).permute(0, 2, 3, 1).numpy()")


def _run_child(cache_dir: str, src: str = GEMM, a_shape: tuple = (3, 4), b_shape: tuple = (4, 3),
               schedule: str = "", overrides: dict | None = None, reference: str = GEMM_REF) -> dict:
    env = dict(os.environ, TILEC_CACHE_DIR=cache_dir)
    code = _CHILD.format(src=src, a_shape=a_shape, b_shape=b_shape, schedule=schedule, params=overrides or {},
                         reference=reference)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"rc {result.returncode}: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_loads_object_code_instead_of_compiling(tmp_path):
    first = _run_child(str(tmp_path))
    second = _run_child(str(tmp_path))
    assert first == {"compiled": 1, "disk_hits": 0, "ok": True}
    assert second == {"compiled": 0, "disk_hits": 1, "ok": True}
    assert list(tmp_path.rglob("*.o")), "no object file was written"


def test_empty_cache_dir_disables_disk_cache(tmp_path):
    first = _run_child("")
    second = _run_child("")
    assert first["compiled"] == 1 and second["compiled"] == 1


def test_corrupt_cache_entry_is_a_miss_not_a_crash(tmp_path):
    _run_child(str(tmp_path))
    for obj in tmp_path.rglob("*.o"):
        obj.write_bytes(b"garbage")
    assert _run_child(str(tmp_path)) == {"compiled": 1, "disk_hits": 0, "ok": True}


def test_an_empty_schedule_is_not_the_default_across_processes(tmp_path):
    """Regression: the README's matmul compiled with the default schedule, then in a fresh process
    with an empty tilec.Schedule() (the plain nest, no templates), loaded the default's object code
    for other parameters and segfaulted."""
    shapes = dict(a_shape=(64, 32), b_shape=(32, 48))
    assert _run_child(str(tmp_path), **shapes) == {"compiled": 1, "disk_hits": 0, "ok": True}
    plain = _run_child(str(tmp_path), schedule="fn = fn.with_schedule(tilec.Schedule())", **shapes)
    assert plain == {"compiled": 1, "disk_hits": 0, "ok": True}
    assert _run_child(str(tmp_path), schedule="fn = fn.with_schedule(tilec.Schedule())", **shapes)["disk_hits"] == 1


def test_lowering_parameters_are_part_of_the_key_across_processes(tmp_path):
    """Regression: a threshold changed at run time (Winograd's channel minimum) got the object code
    lowered under the other threshold from the disk cache (other workspaces: a segfault)."""
    conv = dict(src=CONV, a_shape=(1, 16, 16, 16), b_shape=(3, 3, 16, 16), reference=CONV_REF)
    assert _run_child(str(tmp_path), **conv) == {"compiled": 1, "disk_hits": 0, "ok": True}
    winograd = dict(winograd_min_channels=1, winograd_min_tiles=1)
    assert _run_child(str(tmp_path), overrides=winograd, **conv) == {"compiled": 1, "disk_hits": 0, "ok": True}
    assert _run_child(str(tmp_path), overrides=winograd, **conv)["disk_hits"] == 1


def _entry_path(cache_dir: Path, src: str, a_shape: tuple, b_shape: tuple) -> Path:
    """Where the disk cache keeps the default kernel of `src` for these float32 shapes."""
    target = resolve_target("llvm")
    sig = pipeline.Signature((("A", a_shape), ("B", b_shape)), (("A", "float32"), ("B", "float32")), ())
    c = pipeline.compilation(tilec.parse(src), sig, target, None, params.current())
    backend = pipeline.backend_for(target)
    key = pipeline.disk_key(pipeline.kernel_key(c, backend), pipeline.run_stages(c, backend, backend.ir_stage))
    return cache_dir / "kernels" / key[:2] / f"{key}.o"


def test_the_disk_key_holds_the_buffers_the_runtime_allocates():
    """Regression (a throwaway heuristic experiment reading the environment): two processes lowered one
    cache key to kernels with different workspaces, and the second ran the first's code on buffers too
    small for it (heap corruption). The disk key holds the kernel's buffers, so that is a miss now."""
    target = resolve_target("llvm")
    sig = pipeline.Signature((("A", (30, 40)), ("B", (40, 30))), (("A", "float32"), ("B", "float32")), ())
    c = pipeline.compilation(tilec.parse(GEMM), sig, target, None, params.current())
    backend = pipeline.backend_for(target)
    key, func = pipeline.kernel_key(c, backend), pipeline.run_stages(c, backend, backend.ir_stage)
    wider = L.Buffer("scratch", "float32", (1 << 20,))
    other = L.PrimFunc(func.name, func.params + (wider,), func.body)
    assert pipeline.disk_key(key, func) == pipeline.disk_key(key, func)
    assert pipeline.disk_key(key, func) != pipeline.disk_key(key, other)
    assert len(pipeline.disk_key(key, func)) == len(key)


def test_an_entry_copied_from_another_kernel_is_rejected(tmp_path):
    """Regression: an entry of another kernel with a valid header was loaded and run (max error 61, or
    SIGSEGV); an entry carries its key now."""
    _run_child(str(tmp_path), a_shape=(3, 4), b_shape=(4, 3))
    _run_child(str(tmp_path), a_shape=(30, 40), b_shape=(40, 30))
    small = _entry_path(tmp_path, GEMM, (3, 4), (4, 3))
    large = _entry_path(tmp_path, GEMM, (30, 40), (40, 30))
    assert small.is_file() and large.is_file()
    small.write_bytes(large.read_bytes())
    assert _run_child(str(tmp_path), a_shape=(3, 4), b_shape=(4, 3)) == {"compiled": 1, "disk_hits": 0, "ok": True}


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory", "huge sparse file"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss(tmp_path, kind):
    """Regression: a FIFO in place of an entry hung the compiler, a link to /dev/zero raised MemoryError."""
    path = _entry_path(tmp_path, GEMM, (3, 4), (4, 3))
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge sparse file":
        with open(path, "wb") as f:
            f.truncate((256 << 20) + 1)
    else:
        path.symlink_to("/dev/zero")
    assert _run_child(str(tmp_path)) == {"compiled": 1, "disk_hits": 0, "ok": True}


def test_cache_key_covers_what_shapes_a_kernel():
    program = tilec.parse(GEMM)
    target = resolve_target("llvm")
    backend = pipeline.backend_for(target)
    sig = pipeline.Signature((("A", (2, 3)), ("B", (3, 4))), (("A", "float32"), ("B", "float32")), ())
    lowering = params.current()

    def key(program=program, sig=sig, target=target, schedule=None, lowering=lowering, backend=backend):
        return pipeline.cache_key(program, sig, target, schedule, lowering, backend)

    assert key() == key(schedule=tilec.TemplateSchedule())
    variants = [key(),
                key(sig=pipeline.Signature((("A", (2, 3)), ("B", (3, 5))), sig.dtypes, ())),
                key(sig=pipeline.Signature(sig.shapes, (("A", "float64"), ("B", "float32")), ())),
                key(program=tilec.parse("C[i, j: M, N] = +(A[i, k] * B[j, k])")),
                key(schedule=tilec.Schedule()),
                key(schedule=tilec.TemplateSchedule((tilec.TemplateConfig(0, "default"),))),
                key(target=target.with_cores(target.cores + 1)),
                key(target=pipeline.resolve_target("cuda-sim"), backend=pipeline.backend_for(pipeline.resolve_target("cuda-sim"))),
                key(lowering=replace(lowering, winograd_min_channels=1))]
    assert len(set(variants)) == len(variants)
    assert pipeline.compiler_fingerprint().startswith(tilec.__version__)


def test_in_memory_cache_reuses_kernels_across_functions_and_shapes():
    rng = np.random.default_rng(1)
    f, g = tilec.compile(GEMM), tilec.compile(GEMM)
    a, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5)
    before = pipeline.stats.compiled + pipeline.stats.disk_hits
    np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-5)  # same program and signature: no build
    assert pipeline.stats.compiled + pipeline.stats.disk_hits == before
    c = rng.standard_normal((3, 7)).astype(np.float32)  # a new shape compiles a new kernel
    np.testing.assert_allclose(f(a, c), a @ c, rtol=1e-5)
    assert pipeline.stats.compiled + pipeline.stats.disk_hits == before + 1


def test_a_function_recompiles_when_the_lowering_parameters_change():
    f = tilec.compile(CONV)
    rng = np.random.default_rng(2)
    x, k = rng.standard_normal((1, 16, 16, 16)).astype(np.float32), rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    plain = f(x, k)
    with params.overridden(winograd_min_channels=1, winograd_min_tiles=1):
        assert ".wM" in f.explain({"I": x.shape, "K": k.shape}, stage="loop").splitlines()[0]
        np.testing.assert_allclose(f(x, k), plain, rtol=1e-3, atol=1e-3)
    assert ".wM" not in f.explain({"I": x.shape, "K": k.shape}, stage="loop").splitlines()[0]


def test_memory_cache_is_bounded_and_lets_dropped_kernels_go(monkeypatch):
    """Regression: 200 distinct programs kept 53 MiB alive after every Function was dropped."""
    monkeypatch.setattr(options, "kernel_cache_size", 8)
    kernels.clear()
    a = np.ones((4, 4), np.float32)
    alive = []
    for n in range(24):
        fn = tilec.compile(f"O = A * {n + 2}")
        np.testing.assert_allclose(fn(a), a * (n + 2))
        alive.append(weakref.ref(fn.kernel(fn._signature([a]))))
        del fn
    gc.collect()
    assert len(kernels) == 8
    assert sum(ref() is not None for ref in alive) == 8  # the first 16 kernels were freed


def test_freeing_a_kernel_leaves_the_compiler_usable():
    """Regression: MCJIT owned the cached target machine, so the next compile crashed."""
    code = """
import gc, numpy as np
from tilec.codegen.llvm.module import emit_module
from tilec.codegen.llvm.jit import emit_object, load_object, optimise
from tilec.ir.bounds import bind
from tilec.ir.lower import lower
from tilec.target import host_cpu
import tilec
cpu = host_cpu()
bp = bind(tilec.parse("C[i, j: M, N] = +(A[i, k] * B[k, j])"), {"A": (8, 8), "B": (8, 8)},
          {"A": "float32", "B": "float32"})
def build():
    return load_object(emit_object(optimise(emit_module(lower(bp), cpu), cpu), cpu), "tilec_kernel", cpu)
kernel = build()
del kernel
gc.collect()
build()
print("survived")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr


def test_fingerprint_covers_kernel_code_only():
    root = Path(tilec.__file__).parent
    assert (root / "autotune").exists() and not any(p.startswith(("autotune", "cli", "bench")) for p in pipeline.KERNEL_CODE)
    assert all((root / part).exists() for part in pipeline.KERNEL_CODE)
