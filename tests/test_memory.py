"""The output pool: memory is reused only when no array can see it any more."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import tilec
from tilec.runtime.memory import MIN_POOLED_BYTES, BufferPool

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"


def test_small_arrays_are_plain_numpy_arrays():
    pool = BufferPool()
    a = pool.empty((4, 4), "float32")
    assert a.shape == (4, 4) and a.dtype == np.float32 and a.flags.owndata


def test_a_dropped_result_gives_its_memory_to_the_next_one():
    pool = BufferPool()
    shape = (MIN_POOLED_BYTES // 4 + 100,)
    a = pool.empty(shape, "float32")
    address = a.ctypes.data
    del a
    gc.collect()
    assert pool.idle_bytes > 0
    b = pool.empty(shape, "float32")
    assert b.ctypes.data == address and pool.idle_bytes == 0


def test_a_live_view_keeps_the_memory_out_of_the_pool():
    pool = BufferPool()
    a = pool.empty((1024, 512), "float32")
    a[...] = 7
    view = a[10:20, ::3]
    del a
    gc.collect()
    assert pool.idle_bytes == 0  # the view still uses the block
    b = pool.empty((1024, 512), "float32")
    b[...] = -1
    assert np.all(view == 7)
    del view, b
    gc.collect()
    assert pool.idle_bytes == 2 * 1024 * 512 * 4


def test_pool_respects_its_byte_limit():
    pool = BufferPool(max_bytes=MIN_POOLED_BYTES)
    arrays = [pool.empty((MIN_POOLED_BYTES // 4,), "float32") for _ in range(3)]
    del arrays
    gc.collect()
    assert pool.idle_bytes == MIN_POOLED_BYTES


def test_results_in_a_loop_are_correct_and_independent_across_threads():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((600, 300)).astype(np.float32), rng.standard_normal((300, 500)).astype(np.float32)
    fn = tilec.compile(GEMM)
    expected = a @ b
    kept = []
    failures = []

    def work():
        for k in range(6):
            out = fn(a, b)
            if not np.allclose(out, expected, rtol=1e-4, atol=1e-3):
                failures.append(k)
            if k % 2:
                kept.append(out)  # some results stay alive while others are recycled

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert all(np.allclose(x, expected, rtol=1e-4, atol=1e-3) for x in kept)


def test_torch_results_of_the_ops_reuse_dropped_memory(monkeypatch):
    """Where malloc is not known to keep freed blocks (tilec.runtime.heap), tilec's torch ops take
    their large results from the same pool as numpy results (tilec.ops.kernels.empty): a dropped
    result's memory, whose pages were touched already, serves the next; a live one is never handed
    out again, and every result is right."""
    import torch

    import tilec.nn as tnn
    from tilec.ops.kernels import empty
    from tilec.runtime import heap

    monkeypatch.setattr(heap, "_kept_below", 0)
    small = empty((4, 4), torch.bfloat16)
    assert small.dtype == torch.bfloat16 and small.shape == (4, 4)
    relu = tnn.ReLU()
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(8, 64, 32, 32).to(dtype)  # 1 MiB or more in either dtype
        first = relu(x)
        address = first.data_ptr()
        assert torch.equal(first, torch.relu(x))
        del first
        gc.collect()
        second = relu(x)
        assert second.data_ptr() == address and torch.equal(second, torch.relu(x))
        third = relu(-x)  # `second` is alive: other memory
        assert third.data_ptr() != address and torch.equal(third, torch.relu(-x))
        assert torch.equal(second, torch.relu(x))
        grad_in = x.clone().requires_grad_()
        out = relu(grad_in)
        out.backward(torch.ones_like(out))
        assert grad_in.grad is not None and torch.equal(grad_in.grad, (x > 0).to(dtype))


_FAULTS_IN_A_LOOP = """
import ctypes, resource
from tilec.runtime import heap
kept = heap.keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes, libc.memset.argtypes = (ctypes.c_void_p,), (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
faults = []
for _ in range(6):  # a step: 32 MiB of 4 MiB tensors made, written and dropped, as torch's CPU allocator does
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(4 << 20) for _ in range(8)]
    for b in blocks:
        libc.memset(b, 1, 4 << 20)
    for b in blocks:
        libc.free(b)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, *faults)
"""


def test_the_heap_keeps_freed_blocks_so_a_training_loop_stops_faulting():
    """tilec sets glibc to keep freed blocks under 32 MiB (tilec.runtime.heap): a loop that makes,
    writes and drops 32 MiB of 4 MiB blocks a step faults on no fresh page after its first step. With
    TILEC_MALLOC=system glibc hands the freed top of its heap back to the OS at every step, and every
    step faults all 8,192 pages again."""
    import os
    import subprocess
    import sys

    from tilec.runtime import heap

    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "TILEC_MALLOC")}
    for malloc in ("keep", "system"):
        out = subprocess.run([sys.executable, "-c", _FAULTS_IN_A_LOOP], env={**env, "TILEC_MALLOC": malloc},
                             capture_output=True, text=True, check=True).stdout.split()
        kept, first, later = int(out[0]), int(out[1]), [int(f) for f in out[2:]]
        assert first > 8000  # (fresh pages: 32 MiB / 4 KiB)
        if malloc == "keep":
            assert kept == heap.MMAP_THRESHOLD and max(later) < 50, out
        else:
            assert kept == 0 and min(later) > 8000, out


def test_with_the_heap_keeping_blocks_torch_results_come_from_torch(monkeypatch):
    """Where malloc keeps freed blocks of a result's size, the ops' results are torch's own tensors
    (one set of blocks for both sides), not the pool's; above that size, the pool's."""
    import torch

    from tilec.ops.kernels import empty
    from tilec.runtime import heap, memory

    monkeypatch.setattr(heap, "_kept_below", 32 << 20)
    taken = []
    monkeypatch.setattr(memory.outputs, "empty", lambda shape, dtype: taken.append(shape) or np.empty(shape, dtype))
    small, big = empty((4 << 20,), torch.bfloat16), empty((10 << 20,), torch.float32)
    assert small.shape == (4 << 20,) and small.dtype == torch.bfloat16 and big.shape == (10 << 20,)
    assert taken == [(40 << 20,)]  # only the 40 MiB one


def test_the_heap_is_left_alone_where_the_user_chose(monkeypatch):
    """TILEC_MALLOC=system, or a glibc.malloc tunable in GLIBC_TUNABLES, leaves malloc as it is; the
    user's thresholds say which sizes are reused (only where the trim threshold is no lower), and a
    bad TILEC_MALLOC is an error naming the choices."""
    import pytest

    from tilec.config import Options
    from tilec.errors import TilecError
    from tilec.runtime import heap

    calls = []
    monkeypatch.setattr(heap, "_glibc_mallopt", lambda: lambda *a: calls.append(a) or 1)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr("tilec.config.options.malloc", "system")
    assert heap._decide() == 0 and not calls
    monkeypatch.setattr("tilec.config.options.malloc", "keep")
    assert heap._decide() == heap.MMAP_THRESHOLD and len(calls) == 2
    calls.clear()
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456")
    assert heap._decide() == 33554432 and not calls
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=0x800000")
    assert heap._decide() == 0 and not calls  # (no trim threshold: freed blocks may go back to the OS)
    monkeypatch.setenv("TILEC_MALLOC", "never")
    with pytest.raises(TilecError, match="TILEC_MALLOC='never': expected one of keep, system"):
        Options()


@pytest.mark.parametrize("shape, dtype", [((3, 5), "float32"), ((1000,), "bfloat16"), ((7, 9, 11), "float64"), ((0,), "int8")])
def test_workspaces_start_on_a_cache_line(shape, dtype):
    """Kernels' temporaries and workspaces (memory.aligned_empty) start on a 64-byte line, whatever
    numpy's allocator returns, with the shape and dtype asked for."""
    import ml_dtypes  # noqa: F401  (numpy's "bfloat16")

    from tilec.runtime import memory

    for _ in range(8):
        a = memory.aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.ctypes.data % memory.LINE == 0
        a[...] = 1  # writable, and as long as asked
        assert a.size == np.prod(shape)
