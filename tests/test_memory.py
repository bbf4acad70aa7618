"""The output pool: memory is reused only when no array can see it any more."""

from __future__ import annotations

import gc
import threading

import numpy as np

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


def test_torch_results_of_the_ops_reuse_dropped_memory():
    """tilec's torch ops take their large results from the same pool (tilec.ops.kernels.empty): a
    dropped result's memory, whose pages were touched already, serves the next; a live one is never
    handed out again, and every result is right."""
    import torch

    import tilec.nn as tnn
    from tilec.ops.kernels import empty

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
