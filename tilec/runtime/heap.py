"""glibc's malloc, set to keep freed blocks of megabytes instead of handing them back to the OS.

By default glibc serves a block above its mmap threshold (128 KiB at start, raised to the largest
block freed so far, up to 32 MiB) with fresh pages, and gives the memory at the top of its heap back
to the OS once more than twice that lies free there. A training step allocates and drops tensors
of megabytes all the time, so the next tensor of that size lands on fresh pages, and each of them
costs a page fault at its first write: 2.5 us on the Zen 5 VM this was measured on, 5 ms to fill 8
MiB. torch's own bfloat16 CNN step (`tilec bench train_step`'s cnn-large) faulted 2,000-6,000 pages
a step and took 8.9-14.3 ms; with the thresholds below, 0 faults and 6.8-7.6 ms, and tilec's step
with it.

`keep_freed_memory` sets the mmap threshold to 32 MiB (glibc's largest) and the trim threshold to
256 MiB, once per process, as ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
glibc.malloc.trim_threshold=268435456`` would at start-up: blocks under 32 MiB come from the heap,
which keeps up to 256 MiB free for the next ones. The cost is that memory: a process's resident
size stays up to 256 MiB above what it uses. It leaves malloc alone where the user chose: with
``TILEC_MALLOC=system`` (tilec.config), where GLIBC_TUNABLES names a ``glibc.malloc.`` tunable, or
where the C library is not glibc. It returns up to which size freed blocks are reused
(tilec.ops.kernels.empty takes its results from torch below it, from tilec's pool above).

Requires: nothing (any platform; only glibc is changed). Guarantees: at most one change per
process, never an exception.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

MMAP_THRESHOLD = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
# The same setting for a process to start with (`tilec bench` restarts itself with it)
TUNABLES = f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD}:glibc.malloc.trim_threshold={TRIM_THRESHOLD}"

_lock = threading.Lock()
_kept_below: int | None = None  # None: not decided yet


def keep_freed_memory() -> int:
    """Set glibc's thresholds (the module doc says when it does not), once per process. Returns the
    size under which malloc reuses freed blocks rather than taking fresh pages (0: not known to):
    MMAP_THRESHOLD where this set it, the user's GLIBC_TUNABLES mmap threshold where they set it
    and a trim threshold at least as large, else 0."""
    global _kept_below
    if _kept_below is None:
        with _lock:
            if _kept_below is None:
                _kept_below = _decide()
    return _kept_below


def _decide() -> int:
    from tilec.config import options

    tunables = _user_tunables()
    if tunables is not None:
        mmap, trim = tunables.get("mmap_threshold", 0), tunables.get("trim_threshold", 0)
        return mmap if mmap and trim >= mmap else 0
    if options.malloc == "system":
        return 0
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return 0
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return 0
    return MMAP_THRESHOLD


def _user_tunables() -> dict[str, int] | None:
    """The ``glibc.malloc.`` tunables GLIBC_TUNABLES sets (their values in bytes), or None where it
    sets none."""
    found: dict[str, int] = {}
    for item in os.environ.get("GLIBC_TUNABLES", "").split(":"):
        name, _, value = item.partition("=")
        if name.startswith("glibc.malloc."):
            try:
                found[name.removeprefix("glibc.malloc.")] = int(value, 0)
            except ValueError:
                found[name.removeprefix("glibc.malloc.")] = 0
    return found or None


def _glibc_mallopt():  # type: ignore[no-untyped-def]
    """glibc's mallopt, or None on another C library."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "TUNABLES", "keep_freed_memory"]
