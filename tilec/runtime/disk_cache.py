"""Compiled object code on disk, keyed by a hash that includes the compiler version.

Writes are atomic (temporary file + rename), so concurrent processes never read a
partial file; an unreadable entry is treated as a miss.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tilec.config import options


def _path(key: str) -> Path | None:
    if not options.disk_cache or options.cache_dir is None:
        return None
    return options.cache_dir / "kernels" / key[:2] / f"{key}.o"


def load(key: str) -> bytes | None:
    path = _path(key)
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def store(key: str, obj: bytes) -> None:
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache directory only costs recompilation
