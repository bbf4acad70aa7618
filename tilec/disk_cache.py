"""Compiled object code on disk, keyed by a hash that includes the compiler version.

Writes are atomic (temporary file + rename), so concurrent processes never read a
partial file. Each entry starts with a magic tag and the SHA-256 of its payload: LLVM
would crash on a damaged object file, so an entry that fails the check (truncated,
overwritten, from another format) is treated as a miss, never handed to the loader.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from tilec.config import options


def _path(key: str) -> Path | None:
    if not options.disk_cache or options.cache_dir is None:
        return None
    return options.cache_dir / "kernels" / key[:2] / f"{key}.o"


_MAGIC = b"TILECOBJ1"
_DIGEST = 32


def load(key: str) -> bytes | None:
    path = _path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header = len(_MAGIC) + _DIGEST
    if len(data) <= header or not data.startswith(_MAGIC):
        return None
    payload = data[header:]
    if hashlib.sha256(payload).digest() != data[len(_MAGIC):header]:
        return None
    return payload


def store(key: str, obj: bytes) -> None:
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(obj).digest() + obj)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache directory only costs recompilation
