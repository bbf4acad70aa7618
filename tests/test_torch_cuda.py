"""torch CUDA tensors through tilec.compile(..., target="cuda") and the torch ops.

Without a GPU: the dispatch, the device checks (a fake CUDA tensor type stands in: torch cannot
make one here) and the allocation of outputs by tilec.runtime.torch_cuda (on the CPU device, a
fake kernel). The `gpu` tests run the real thing and skip without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import tilec
from tilec.errors import BindError
from tilec.ir import loop as L
from tilec.runtime import torch_cuda

from reference import MATMUL


@dataclass
class FakeCudaTensor:
    """Looks like a torch CUDA tensor to tilec.runtime.torch_cuda (whose test is type module + is_cuda)."""

    shape: tuple[int, ...]
    device: str = "cuda:0"
    dtype: Any = torch.float32
    is_cuda: bool = True


FakeCudaTensor.__module__ = "torch.fake"


def test_cuda_tensors_on_a_cpu_target_say_how_to_fix() -> None:
    with pytest.raises(BindError, match="argument 'A' is a torch tensor on cuda:0.*target='cuda'"):
        tilec.compile(MATMUL)(FakeCudaTensor((2, 3)), np.ones((3, 2), np.float32))


def test_a_mix_of_cuda_tensors_and_host_arrays_is_refused() -> None:
    fn = tilec.compile(MATMUL, target="cuda")
    with pytest.raises(BindError, match=r"'B' \(ndarray on cpu\) not on the GPU.*all inputs as CUDA tensors"):
        fn(FakeCudaTensor((2, 3)), np.ones((3, 2), np.float32))
    with pytest.raises(BindError, match="cuda:0, cuda:1; pass all inputs on one device"):
        fn(A=FakeCudaTensor((2, 3)), B=FakeCudaTensor((3, 2), device="cuda:1"))
    with pytest.raises(BindError, match="dtype torch.bfloat16"):
        fn(FakeCudaTensor((2, 3), dtype=torch.bfloat16), FakeCudaTensor((3, 2)))


@dataclass
class FakeKernel:
    params: tuple[L.Buffer, ...]
    calls: list[list[Any]] = field(default_factory=list)

    def run(self, arrays: list[Any]) -> None:
        self.calls.append(arrays)
        arrays[2].fill_(7.0)


def test_outputs_and_temporaries_are_allocated_by_torch_on_the_device() -> None:
    params = (L.Buffer("A", "float32", (2, 3)), L.Buffer("B", "float32", (3, 2)), L.Buffer("C", "float16", (2, 2)),
              L.Buffer("tmp", "int32", (5,)))
    kernel = FakeKernel(params)
    a, b = torch.ones(3, 2).t(), torch.ones(3, 2)  # a is a transposed view: made contiguous for the kernel
    out = torch_cuda.run(kernel, [a, b], 1, torch.device("cpu"))  # type: ignore[arg-type]
    (call,) = kernel.calls
    assert [tuple(t.shape) for t in call] == [(2, 3), (3, 2), (2, 2), (5,)]
    assert [t.dtype for t in call] == [torch.float32, torch.float32, torch.float16, torch.int32]
    assert all(t.is_contiguous() for t in call)
    assert out is call[2] and torch.equal(out, torch.full((2, 2), 7.0, dtype=torch.float16))


# ------------------------------------------------------------------ on a real GPU


def _need_gpu() -> None:
    from tilec.codegen.cuda.loader import CudaUnavailable, device_arch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    try:
        device_arch()
    except CudaUnavailable as e:
        pytest.skip(f"no GPU: {e}")


@pytest.mark.gpu
def test_matmul_on_torch_cuda_tensors_on_a_side_stream() -> None:
    _need_gpu()
    fn = tilec.compile(MATMUL, target="cuda")
    a, b = torch.randn(70, 33, device="cuda"), torch.randn(33, 45, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = fn(a, b)
    stream.synchronize()
    assert out.is_cuda and out.dtype == torch.float32 and out.device == a.device
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    host = fn(a.cpu().numpy(), b.cpu().numpy())  # numpy arrays: copied to the GPU and back
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, (a @ b).cpu().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_fp16_attention_on_torch_cuda_tensors_matches_sdpa() -> None:
    _need_gpu()
    from tilec.bench.ops import attention_source

    q, k, v = (torch.randn(2, 3, 70, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = tilec.compile(attention_source({"D": 64}), target="cuda")(q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_torch_ops_on_cuda_tensors_forward_and_backward() -> None:
    _need_gpu()
    import tilec.ops.torch_ops as T

    x = torch.randn(2, 3, 9, 9, device="cuda", dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float64, requires_grad=True)
    out = T.conv2d(x, w, None, 1, 1)
    assert out.is_cuda
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, padding=1))
    out.sum().backward()
    assert x.grad is not None and x.grad.is_cuda
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.conv2d(x2, w2, padding=1).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(T.softmax(x, 1), torch.softmax(x, 1))
    with pytest.raises(T.OpError, match="one device"):
        T.conv2d(x, w.detach().cpu(), None, 1, 1)


def test_pointer_runner_refuses_device_kernels() -> None:
    """Host addresses never reach a kernel of target cuda (it takes device pointers)."""
    from tilec.pipeline import Kernel
    from tilec.errors import TilecError
    from tilec.runtime.function import pointer_runner

    device_kernel = Kernel(bound=None, params=(), loaded=None, key="k", invoke=lambda arrays: None)  # type: ignore[arg-type]
    with pytest.raises(TilecError, match="host targets"):
        pointer_runner(device_kernel, 0)
