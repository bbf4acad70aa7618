"""Load rendered CUDA C onto the GPU and run it: `load_cuda`, `CudaModule.run`, `device_arch`.

`CudaModule.run(arrays)` takes one array per PrimFunc parameter (a sequence in parameter
order, or a dict by name), all numpy arrays or all torch CUDA tensors:
- numpy: copied to fresh device buffers, the launches run in order, and every parameter a
  kernel writes is copied back into the given array;
- torch CUDA tensors (contiguous): their device pointers are passed as they are and the
  launches are queued on torch's current stream, with no copies and no synchronisation.
Shapes and dtypes must equal the parameters' (BindError otherwise). Without a CUDA binding
(cuda-python or pycuda), driver or GPU every entry point raises `CudaUnavailable`, a
TilecError; importing this module never fails.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilec.codegen.cuda.source import CudaSource
from tilec.codegen.cuda.nvcc import check_arch, compile_cubin
from tilec.errors import BindError
from tilec.codegen.cuda.launchers import BINDINGS, CudaUnavailable, Launcher

__all__ = ["CudaModule", "CudaUnavailable", "default_launcher", "device_arch", "load_cuda"]


@functools.cache
def default_launcher(binding: str | None = None) -> Launcher:
    """The launcher for device 0 through `binding` ('cuda-python', 'pycuda'), or the first that works."""
    if binding is not None:
        if binding not in BINDINGS:
            raise CudaUnavailable(f"unknown CUDA binding '{binding}'; known: {', '.join(BINDINGS)}")
        return BINDINGS[binding]()
    reasons = []
    for name, cls in BINDINGS.items():
        try:
            return cls()
        except CudaUnavailable as e:
            reasons.append(f"{name}: {e}")
    raise CudaUnavailable("no GPU can run CUDA kernels here (" + "; ".join(reasons) + "); "
                          "use target='cuda-sim' to run GPU schedules on the CPU emulator")


def device_arch(binding: str | None = None) -> str:
    """The GPU's architecture ('sm_90'); CudaUnavailable (a TilecError) without a GPU or driver."""
    return default_launcher(binding).arch()


def load_cuda(source: CudaSource, arch: str | None = None, binding: str | None = None) -> CudaModule:
    """Compile `source` for `arch` (default: the device's) and load its kernels onto the GPU."""
    launcher = default_launcher(binding)
    return CudaModule(source, check_arch(arch or launcher.arch()), launcher)


class CudaModule:
    def __init__(self, source: CudaSource, arch: str, launcher: Launcher) -> None:
        self.source = source
        self.arch = arch
        self.launcher = launcher
        cubin = compile_cubin(source.text, arch)
        self.functions = [launcher.load_function(cubin, la.kernel, la.shared_bytes) for la in source.launches]
        self.written = _written_params(source)

    def run(self, arrays: Sequence[Any] | Mapping[str, Any]) -> None:
        values = self._bind(arrays)
        if all(isinstance(v, np.ndarray) for v in values):
            self._run_numpy(values)
        elif all(_is_torch_cuda(v) for v in values):
            self._run_torch(values)
        else:
            kinds = ", ".join(sorted({type(v).__name__ for v in values}))
            raise BindError(f"CudaModule.run takes all numpy arrays or all torch CUDA tensors; got {kinds}")

    __call__ = run

    def _bind(self, arrays: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        params = self.source.params
        if isinstance(arrays, Mapping):
            missing = [p.name for p in params if p.name not in arrays]
            if missing:
                raise BindError(f"missing arrays for parameters {', '.join(missing)}")
            values = [arrays[p.name] for p in params]
        else:
            values = list(arrays)
            if len(values) != len(params):
                raise BindError(f"{len(params)} arrays expected ({', '.join(p.name for p in params)}), "
                                f"got {len(values)}")
        for p, v in zip(params, values):
            shape = tuple(v.shape)
            dtype = str(v.dtype).replace("torch.", "")
            if shape != p.shape or dtype != p.dtype:
                raise BindError(f"parameter {p.name} is {p.dtype}{list(p.shape)}; got {dtype}{list(shape)}")
        return values

    def _launch_all(self, pointers: dict[str, int], stream: int) -> None:
        for fn, la in zip(self.functions, self.source.launches):
            self.launcher.launch(fn, la.grid, la.block, la.shared_bytes, stream, [pointers[a] for a in la.args])

    def _run_numpy(self, values: list[np.ndarray]) -> None:
        hosts = [np.ascontiguousarray(v) for v in values]
        pointers: dict[str, int] = {}
        try:
            for p, h in zip(self.source.params, hosts):
                pointers[p.name] = self.launcher.alloc(h.nbytes)
                self.launcher.to_device(pointers[p.name], h)
            self._launch_all(pointers, 0)
            self.launcher.synchronize()
            for p, v, h in zip(self.source.params, values, hosts):
                if p.name in self.written:
                    self.launcher.to_host(h, pointers[p.name])
                    if h is not v:
                        v[...] = h
        finally:
            for ptr in pointers.values():
                self.launcher.free(ptr)

    def _run_torch(self, values: list[Any]) -> None:
        import torch

        devices = {v.device for v in values}
        if len(devices) != 1:
            raise BindError(f"all tensors must be on one CUDA device; got {sorted(map(str, devices))}")
        pointers = {}
        for p, v in zip(self.source.params, values):
            if not v.is_contiguous():
                raise BindError(f"tensor for parameter {p.name} is not contiguous; pass tensor.contiguous()")
            pointers[p.name] = int(v.data_ptr())
            need = 32 if p.name in self.source.wmma_params else 16 if p.name in self.source.aligned_params else 1
            if pointers[p.name] % need:
                raise BindError(f"tensor for parameter {p.name} is not {need}-byte aligned, which the kernel's "
                                "vector or tensor-core accesses need; pass tensor.clone()")
        with torch.cuda.device(values[0].device):
            self._launch_all(pointers, int(torch.cuda.current_stream().cuda_stream))


def _is_torch_cuda(v: Any) -> bool:
    return type(v).__module__.startswith("torch") and getattr(v, "is_cuda", False)


def _written_params(source: CudaSource) -> set[str]:
    return {name for la in source.launches for name in la.writes}
