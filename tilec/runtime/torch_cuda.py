"""Calling a Function compiled for target "cuda" on torch CUDA tensors.

Requires: the tensors' device pointers stay valid for the launches (torch keeps them alive:
the caller holds the inputs, and the outputs are returned). Guarantees: inputs are passed as
device pointers (a non-contiguous tensor is first made contiguous by torch), the outputs
and the kernel's temporaries are allocated with torch on the inputs' device, and the
launches are queued on torch's current stream with no copy and no synchronisation, as any
torch op on that stream. numpy arguments keep going through Function's host path (copied
to the device and back by tilec.codegen.cuda.loader). torch is imported only when a torch
tensor is passed, so `tilec` never needs torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilec.errors import BindError
from tilec.ir.dtypes import SUPPORTED

if TYPE_CHECKING:
    from tilec.pipeline import Kernel

__all__ = ["is_torch_cuda", "any_torch_cuda", "check_devices", "run"]


def is_torch_cuda(value: Any) -> bool:
    """Whether `value` is a torch tensor on a CUDA device (without importing torch)."""
    return type(value).__module__.startswith("torch") and bool(getattr(value, "is_cuda", False))


def any_torch_cuda(values: Any) -> bool:
    """Whether any of `values` is a torch CUDA tensor (numpy arrays, the common case, cost one type test:
    this runs on every call of a Function)."""
    return any(type(v) is not np.ndarray and is_torch_cuda(v) for v in values)


def check_devices(target: str, named: dict[str, Any]) -> Any:
    """The one CUDA device of the tensors in `named`; BindError for CPU targets or a mix of devices."""
    cuda = {name: v for name, v in named.items() if is_torch_cuda(v)}
    if target != "cuda":
        name = next(iter(cuda))
        raise BindError(f"argument '{name}' is a torch tensor on {cuda[name].device}, but this function runs on "
                        f"target '{target}' (the host CPU): compile with target='cuda', or pass tensor.cpu()")
    others = [name for name in named if name not in cuda]
    if others:
        listing = ", ".join(f"'{n}' ({type(named[n]).__name__}{_where(named[n])})" for n in others)
        raise BindError(f"argument(s) {listing} not on the GPU while {', '.join(repr(n) for n in cuda)} on it (torch CUDA "
                        f"tensors): pass all inputs as CUDA tensors on one device (tensor.cuda()) or "
                        f"all as numpy arrays (copied to the GPU and back)")
    devices = sorted({str(v.device) for v in cuda.values()})
    if len(devices) != 1:
        raise BindError(f"the torch CUDA tensors are on {', '.join(devices)}; pass all inputs on one device")
    return next(iter(cuda.values())).device


def _where(value: Any) -> str:
    device = getattr(value, "device", None)
    return f" on {device}" if device is not None else ""


def dtype_name(name: str, tensor: Any) -> str:
    text = str(tensor.dtype).replace("torch.", "")
    supported = [d for d in SUPPORTED if d != "bfloat16"]  # the CUDA backend has no bfloat16 yet
    if text not in supported:
        raise BindError(f"argument '{name}' has dtype {tensor.dtype}; tilec's CUDA target supports {', '.join(supported)}")
    return text


def size_value(name: str, tensor: Any) -> int:
    """The value of a scalar input the program reads as a size (copied to the host: the kernel is
    specialised per value)."""
    if tuple(tensor.shape) != () or tensor.dtype.is_floating_point or tensor.dtype.is_complex \
            or str(tensor.dtype) == "torch.bool":
        raise BindError(f"argument '{name}' is used as a size, so it must be an integer scalar; got "
                        f"{tensor.dtype} of shape {tuple(tensor.shape)}")
    return int(tensor.item())


def run(kernel: "Kernel", tensors: list[Any], n_outputs: int, device: Any) -> Any:
    """Allocate outputs and temporaries on `device`, launch on torch's current stream, return the outputs."""
    import torch

    params = kernel.params
    try:
        rest = [torch.empty(b.shape, dtype=getattr(torch, b.dtype), device=device) for b in params[len(tensors):]]
    except torch.cuda.OutOfMemoryError:
        sizes = ", ".join(f"{b.name} {b.dtype}{list(b.shape)}" for b in params[len(tensors):])
        raise BindError(f"cannot allocate the program's outputs and temporaries on {device} ({sizes}): "
                        f"out of GPU memory; check the output sizes") from None
    kernel.run([t.contiguous() for t in tensors] + rest)
    outputs = rest[:n_outputs]
    return outputs[0] if n_outputs == 1 else tuple(outputs)
