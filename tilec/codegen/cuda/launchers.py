"""The `Launcher` interface: what tilec needs from a CUDA driver binding, and one class per binding.

- `CudaPythonLauncher`: NVIDIA's cuda-python driver API (``cuda.bindings.driver``), which
  the GPU machines have.
- `PyCudaLauncher`: pycuda (written against its documented API; pycuda cannot be built on
  the development machine, so it is untested here).

Both work in the device's primary context, the one PyTorch uses, so device pointers of
torch tensors are valid in them. Importing this module needs neither binding; a missing
binding, driver or GPU raises `CudaUnavailable` (a TilecError) when a launcher is made.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from tilec.errors import TilecError
from tilec.target import CUDA_STATIC_SHARED_BYTES


class CudaUnavailable(TilecError):
    """No usable CUDA binding, driver or GPU on this machine."""


class CudaRuntimeError(TilecError):
    """The CUDA driver refused an operation (launch, copy, module load)."""


class Launcher(abc.ABC):
    """One device, through one driver binding. Pointers are plain ints."""

    name: str

    @abc.abstractmethod
    def arch(self) -> str:
        """The device's architecture, e.g. 'sm_90'."""

    @abc.abstractmethod
    def load_function(self, cubin: bytes, kernel: str, shared_bytes: int) -> Any:
        """Load `cubin` and return a handle to its `kernel`, allowed `shared_bytes` of dynamic shared memory."""

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abc.abstractmethod
    def free(self, ptr: int) -> None: ...

    @abc.abstractmethod
    def to_device(self, ptr: int, host: np.ndarray) -> None:
        """Copy the C-contiguous `host` array to device memory at `ptr`."""

    @abc.abstractmethod
    def to_host(self, host: np.ndarray, ptr: int) -> None:
        """Copy device memory at `ptr` into the C-contiguous `host` array."""

    @abc.abstractmethod
    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               stream: int, pointers: list[int]) -> None:
        """Launch `fn` with one pointer argument per entry of `pointers` on `stream` (0: default)."""

    @abc.abstractmethod
    def synchronize(self) -> None: ...


_STATIC_SHARED_LIMIT = CUDA_STATIC_SHARED_BYTES  # beyond it a kernel must opt in to dynamic shared memory


class CudaPythonLauncher(Launcher):
    name = "cuda-python"

    def __init__(self, ordinal: int = 0) -> None:
        try:
            from cuda.bindings import driver
        except ImportError:
            try:
                from cuda import cuda as driver  # cuda-python < 12.6 spelled it this way
            except ImportError:
                raise CudaUnavailable("cuda-python is not installed (pip install 'tilec[cuda]')") from None
        self.drv = driver
        try:
            self._call("cuInit", 0)
            self.device = self._call("cuDeviceGet", ordinal)
            self.context = self._call("cuDevicePrimaryCtxRetain", self.device)
        except CudaRuntimeError as e:
            raise CudaUnavailable(f"no usable CUDA GPU or driver: {e}") from None
        self.modules: list[Any] = []  # loaded modules live as long as the launcher

    def _call(self, fn: str, *args: Any) -> Any:
        result = getattr(self.drv, fn)(*args)
        err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if err != self.drv.CUresult.CUDA_SUCCESS:
            _, text = self.drv.cuGetErrorString(err)
            detail = text.decode() if isinstance(text, bytes) else str(err)
            raise CudaRuntimeError(f"{fn} failed: {detail} ({err})")
        return rest[0] if len(rest) == 1 else rest

    def _current(self) -> None:
        self._call("cuCtxSetCurrent", self.context)

    def arch(self) -> str:
        attr = self.drv.CUdevice_attribute
        major = self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)
        minor = self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)
        return f"sm_{major}{minor}"

    def load_function(self, cubin: bytes, kernel: str, shared_bytes: int) -> Any:
        self._current()
        image = np.frombuffer(cubin, dtype=np.uint8).copy()
        module = self._call("cuModuleLoadData", image.ctypes.data)
        self.modules.append(module)
        fn = self._call("cuModuleGetFunction", module, kernel.encode())
        if shared_bytes > _STATIC_SHARED_LIMIT:
            attr = self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._call("cuFuncSetAttribute", fn, attr, shared_bytes)
        return fn

    def alloc(self, nbytes: int) -> int:
        self._current()
        return int(self._call("cuMemAlloc", max(1, nbytes)))

    def free(self, ptr: int) -> None:
        self._call("cuMemFree", self.drv.CUdeviceptr(ptr))

    def to_device(self, ptr: int, host: np.ndarray) -> None:
        self._call("cuMemcpyHtoD", self.drv.CUdeviceptr(ptr), host.ctypes.data, host.nbytes)

    def to_host(self, host: np.ndarray, ptr: int) -> None:
        self._call("cuMemcpyDtoH", host.ctypes.data, self.drv.CUdeviceptr(ptr), host.nbytes)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               stream: int, pointers: list[int]) -> None:
        self._current()
        values = np.array(pointers, dtype=np.uint64)  # the arguments themselves
        argv = np.array([values.ctypes.data + 8 * k for k in range(len(pointers))], dtype=np.uint64)
        self._call("cuLaunchKernel", fn, *grid, *block, shared_bytes, self.drv.CUstream(stream),
                   argv.ctypes.data, 0)

    def synchronize(self) -> None:
        self._current()
        self._call("cuCtxSynchronize")


class PyCudaLauncher(Launcher):
    """pycuda in the primary context; launches go to the legacy default stream (see `launch`)."""

    name = "pycuda"

    def __init__(self, ordinal: int = 0) -> None:
        try:
            import pycuda.driver as cuda
        except ImportError:
            raise CudaUnavailable("pycuda is not installed (pip install 'tilec[pycuda]')") from None
        self.cuda = cuda
        try:
            cuda.init()
            self.device = cuda.Device(ordinal)
            self.context = self.device.retain_primary_context()
        except cuda.Error as e:
            raise CudaUnavailable(f"no usable CUDA GPU or driver: {e}") from None
        self.allocations: dict[int, Any] = {}
        self.modules: list[Any] = []

    def _run(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.context.push()
        try:
            return fn(*args, **kwargs)
        except self.cuda.Error as e:
            raise CudaRuntimeError(f"{what} failed: {e}") from None
        finally:
            self.cuda.Context.pop()

    def arch(self) -> str:
        major, minor = self.device.compute_capability()
        return f"sm_{major}{minor}"

    def load_function(self, cubin: bytes, kernel: str, shared_bytes: int) -> Any:
        module = self._run("module load", self.cuda.module_from_buffer, cubin)
        self.modules.append(module)
        fn = self._run("get function", module.get_function, kernel)
        if shared_bytes > _STATIC_SHARED_LIMIT:
            attr = self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._run("set shared size", fn.set_attribute, attr, shared_bytes)
        return fn

    def alloc(self, nbytes: int) -> int:
        allocation = self._run("mem_alloc", self.cuda.mem_alloc, max(1, nbytes))
        self.allocations[int(allocation)] = allocation
        return int(allocation)

    def free(self, ptr: int) -> None:
        allocation = self.allocations.pop(ptr, None)
        if allocation is not None:
            self._run("free", allocation.free)

    def to_device(self, ptr: int, host: np.ndarray) -> None:
        self._run("memcpy_htod", self.cuda.memcpy_htod, ptr, host)

    def to_host(self, host: np.ndarray, ptr: int) -> None:
        self._run("memcpy_dtoh", self.cuda.memcpy_dtoh, host, ptr)

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
               stream: int, pointers: list[int]) -> None:
        """pycuda cannot wrap a foreign stream handle: a launch for a non-default `stream` waits for
        that stream first and for the kernel after (correct, if less concurrent)."""
        if stream:
            self._run("synchronize", self.cuda.Context.synchronize)
        args = [np.uintp(p) for p in pointers]
        self._run("launch", fn, *args, block=block, grid=grid, shared=shared_bytes)
        if stream:
            self._run("synchronize", self.cuda.Context.synchronize)

    def synchronize(self) -> None:
        self._run("synchronize", self.cuda.Context.synchronize)


BINDINGS: dict[str, type[Launcher]] = {"cuda-python": CudaPythonLauncher, "pycuda": PyCudaLauncher}
