"""Output arrays whose memory is reused once no array views it any more.

Fresh memory costs a page fault per page the first time the kernel writes it; for a
4 MiB GEMM result that is several milliseconds, as much as the multiplication, and glibc
returns freed blocks of that size to the OS, so a loop that drops its results pays it on
every call. Large outputs therefore come from a pool: each array is a view of a pooled
block through a small owner object, and when the last array (or view of one) that uses
the block dies, the owner's finalizer puts the block back. Small outputs use plain
`numpy.empty`. The pool keeps at most `MAX_POOLED_BYTES` of idle blocks.

Kernels' temporaries and workspaces come from `aligned_empty`: their first byte on a cache line
(numpy's own start 16 bytes into one), so a packed panel's rows are whole lines, which AMX's tile
loads read a row at a time (a row split over two lines costs two).
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref

import numpy as np

LINE = 64  # bytes of a cache line (and of a tile row)


def aligned_empty(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """numpy.empty(shape, dtype) whose data starts on a cache line."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    raw = np.empty(nbytes + LINE, dtype=np.uint8)
    # (not a slice of raw: numpy gives an empty slice raw's own address)
    return np.ndarray(shape, dt, buffer=raw, offset=-raw.ctypes.data % LINE)


MIN_POOLED_BYTES = 1 << 20  # below this, malloc reuses memory well enough
MAX_POOLED_BYTES = 1 << 30  # idle blocks kept for reuse


class BufferPool:
    def __init__(self, max_bytes: int = MAX_POOLED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._idle: dict[int, list[np.ndarray]] = {}
        self._idle_bytes = 0
        self._lock = threading.Lock()

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """Like numpy.empty, with the memory of large arrays reused from earlier results."""
        dt = np.dtype(dtype)
        count = math.prod(shape)
        nbytes = count * dt.itemsize
        if nbytes < MIN_POOLED_BYTES:
            return np.empty(shape, dtype=dt)
        with self._lock:
            blocks = self._idle.get(nbytes)
            block = blocks.pop() if blocks else None
            if block is not None:
                self._idle_bytes -= nbytes
        if block is None:
            block = aligned_empty((nbytes,), "uint8")
        owner = (ctypes.c_char * nbytes).from_buffer(block)  # type: ignore[arg-type]
        array = np.frombuffer(owner, dtype=dt, count=count).reshape(shape)  # type: ignore[call-overload]
        weakref.finalize(owner, self._give_back, block)  # runs when no view of `owner` is left
        return array

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            if self._idle_bytes + block.nbytes <= self.max_bytes:
                self._idle.setdefault(block.nbytes, []).append(block)
                self._idle_bytes += block.nbytes

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()
            self._idle_bytes = 0


outputs = BufferPool()
