"""The process-wide cache of loaded kernels: bounded, least recently used first out.

Every Function of a process shares it, keyed by the pipeline's cache key (so two Functions of
one program, signature, target, schedule and lowering parameters share one kernel). A Function
also keeps the kernels it used itself, for as long as it lives; this cache keeps at most
`options.kernel_cache_size` kernels (64 by default; ``TILEC_KERNEL_CACHE`` sets it) for the
Functions still to come, so a process that compiles many programs and drops them does not keep
all their machine code and scratch arrays alive.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from tilec.config import options
from tilec.pipeline import Kernel


class KernelCache:
    def __init__(self) -> None:
        self._kernels: OrderedDict[str, Kernel] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], Kernel]) -> Kernel:
        """The kernel under `key`, built (outside the lock) when it is not cached."""
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self._kernels.move_to_end(key)
                return kernel
        kernel = build()
        with self._lock:
            kernel = self._kernels.setdefault(key, kernel)
            self._kernels.move_to_end(key)
            while len(self._kernels) > max(0, options.kernel_cache_size):
                self._kernels.popitem(last=False)
        return kernel

    def __len__(self) -> int:
        return len(self._kernels)

    def __contains__(self, key: str) -> bool:
        return key in self._kernels

    def clear(self) -> None:
        with self._lock:
            self._kernels.clear()


kernels = KernelCache()

__all__ = ["KernelCache", "kernels"]
