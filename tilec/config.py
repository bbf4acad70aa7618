"""Process-wide options. The one place tilec reads the environment.

- ``TILEC_CACHE_DIR``: where compiled kernels are cached on disk
  (default ``$XDG_CACHE_HOME/tilec`` or ``~/.cache/tilec``); set it to an empty
  string, or set ``tilec.config.options.disk_cache = False``, to disable the disk cache.
- ``TILEC_DEBUG=1``: run the loop-IR verifier after every pass.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _default_cache_dir() -> Path | None:
    env = os.environ.get("TILEC_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilec"


@dataclass
class Options:
    cache_dir: Path | None = field(default_factory=_default_cache_dir)
    disk_cache: bool = True
    debug: bool = field(default_factory=lambda: os.environ.get("TILEC_DEBUG", "") not in ("", "0"))


options = Options()
