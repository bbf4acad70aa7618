"""Compiled code on disk, keyed by the pipeline's cache key (tilec.pipeline.cache_key).

An entry is ``MAGIC, the key, the SHA-256 of the payload, the payload``. It is loaded only when
it is a regular file (not a link, a FIFO or a device) of at most MAX_ENTRY_BYTES whose magic,
key and digest all match: an entry copied from another kernel, truncated, overwritten or from
another format is a miss, never handed to the loader (LLVM would crash on a damaged object file,
and the code of another kernel would run on the wrong buffers). Writes are atomic (temporary
file + rename), so concurrent processes never read a partial file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from tilec.config import options

MAGIC = b"TILECOBJ2"
KEY_BYTES = 64  # a hex SHA-256
DIGEST_BYTES = 32
MAX_ENTRY_BYTES = 256 << 20  # no kernel's object code comes near; a larger file is not an entry


def _path(key: str) -> Path | None:
    if not options.disk_cache or options.cache_dir is None:
        return None
    return options.cache_dir / "kernels" / key[:2] / f"{key}.o"


def _read_regular(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file of at most MAX_ENTRY_BYTES, else None (without
    following a link, or blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def load(key: str) -> bytes | None:
    """The payload stored under `key`, or None (no entry, or not a valid entry for this key)."""
    path = _path(key)
    if path is None:
        return None
    data = _read_regular(path)
    header = len(MAGIC) + KEY_BYTES + DIGEST_BYTES
    if data is None or len(data) <= header or len(data) > MAX_ENTRY_BYTES or not data.startswith(MAGIC):
        return None
    stored_key = data[len(MAGIC):len(MAGIC) + KEY_BYTES]
    digest, payload = data[len(MAGIC) + KEY_BYTES:header], data[header:]
    if stored_key != key.encode("ascii", "replace") or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def store(key: str, payload: bytes) -> None:
    path = _path(key)
    if path is None or len(key) != KEY_BYTES:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + key.encode("ascii") + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache directory only costs recompilation


__all__ = ["MAX_ENTRY_BYTES", "load", "store"]
