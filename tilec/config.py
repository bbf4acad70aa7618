"""Process-wide options. The one place tilec reads the environment.

- ``TILEC_CACHE_DIR``: where compiled kernels are cached on disk
  (default ``$XDG_CACHE_HOME/tilec`` or ``~/.cache/tilec``); set it to an empty
  string, or set ``tilec.config.options.disk_cache = False``, to disable the disk cache.
- ``TILEC_DEBUG=1``: run the loop-IR verifier after every pass.
- ``TILEC_RECORDS``: the tuning-record database (default ``<cache dir>/records.sqlite``);
  set it to an empty string, or set ``tilec.config.options.use_records = False``, to stop
  compiled programs from applying the best tuning record.
- ``TILEC_OWN_THREADS=1``: run parallel loops on tilec's own worker pool even when torch is
  loaded (by default those with about 100 us of estimated work and more run on torch's OpenMP
  team then: tilec.codegen.llvm.runtime).
- ``TILEC_KERNEL_CACHE``: how many loaded kernels the process-wide memory cache keeps for
  Functions to come (default 64; tilec.runtime.kernels).
- ``TILEC_TARGET``: what the CPU target ``llvm`` (and its aliases ``cpu``, ``host``, the default
  of every ``target=``) compiles for: an explicit CPU such as ``llvm -mcpu=haswell`` (default: the
  host CPU; tilec.pipeline.resolve_target).
- ``TILEC_MALLOC=system``: leave glibc's malloc as it is configured. By default tilec's torch
  integration sets it to keep freed blocks under 32 MiB for reuse instead of handing them back to
  the OS, whose fresh pages cost a page fault each (tilec.runtime.heap); a ``glibc.malloc.``
  setting in GLIBC_TUNABLES is always left alone.
- ``TILEC_LOG``: topics to log on stderr, separated by commas (read at each use, `logs`):
  ``backend`` (each torch.compile graph's ATen calls in tilec kernels and torch's share),
  ``schedule`` (where each statement's schedule came from: a tuning record, the heuristic or the
  schedule given, as the first call of each signature compiles it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tilec.errors import TilecError


def _default_cache_dir() -> Path | None:
    env = os.environ.get("TILEC_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilec"


def _default_records_path() -> Path | None:
    env = os.environ.get("TILEC_RECORDS")
    return Path(env) if env else None  # None: <cache_dir>/records.sqlite


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    try:
        return int(text) if text else default
    except ValueError:
        raise TilecError(f"environment variable {name}={text!r}: expected a whole number") from None


def _env_choice(name: str, choices: tuple[str, ...]) -> str:
    text = os.environ.get(name, "")
    if text and text not in choices:
        raise TilecError(f"environment variable {name}={text!r}: expected one of {', '.join(choices)}")
    return text or choices[0]


RECORDS_OPTIONS = frozenset({"use_records", "records_path", "cache_dir"})  # the options records_key reads
_UNSET = object()


@dataclass
class Options:
    cache_dir: Path | None = field(default_factory=_default_cache_dir)
    disk_cache: bool = True
    debug: bool = field(default_factory=lambda: os.environ.get("TILEC_DEBUG", "") not in ("", "0"))
    records_path: Path | None = field(default_factory=_default_records_path)
    use_records: bool = field(default_factory=lambda: os.environ.get("TILEC_RECORDS") != "")
    own_threads: bool = field(default_factory=lambda: os.environ.get("TILEC_OWN_THREADS", "") not in ("", "0"))
    kernel_cache_size: int = field(default_factory=lambda: _env_int("TILEC_KERNEL_CACHE", 64))
    cpu_target: str = field(default_factory=lambda: os.environ.get("TILEC_TARGET", ""))  # "": the host CPU
    malloc: str = field(default_factory=lambda: _env_choice("TILEC_MALLOC", ("keep", "system")))

    def records_key(self) -> str | None:
        """The tuning-record database a kernel looked up now takes its schedule from (None: none):
        part of the key of every cache that keeps a kernel chosen by the records (a Function's
        per-signature kernels, the ops' plans), so that changing the options, or entering
        `tilec.records.using`, applies to the calls after. Computed once per change of the options
        it reads: those caches are looked up at every call of an op."""
        key = self.__dict__.get("_records_key", _UNSET)
        if key is _UNSET:
            path = self.records_file() if self.use_records else None
            key = None if path is None else os.fspath(path)
            object.__setattr__(self, "_records_key", key)
        return key  # type: ignore[return-value]

    def records_file(self) -> Path | None:
        """The tuning-record database: `records_path`, else records.sqlite in the cache directory;
        None with neither (tilec.records.db.default_path says so as an error)."""
        if self.records_path is not None:
            return Path(self.records_path)
        return None if self.cache_dir is None else Path(self.cache_dir) / "records.sqlite"

    def swap_records(self, use: bool, path: Path | None, key: str | None) -> tuple[bool, Path | None, str | None]:
        """Put `use_records` and `records_path` (whose `records_key` is `key`) in force at once; returns the
        three they replace, to swap back (tilec.records.using, entered at every training step)."""
        before = self.use_records, self.records_path, self.records_key()
        object.__setattr__(self, "use_records", use)
        object.__setattr__(self, "records_path", path)
        object.__setattr__(self, "_records_key", key)
        return before

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name in RECORDS_OPTIONS:
            object.__setattr__(self, "_records_key", _UNSET)  # records_key is computed anew


options = Options()


def logs(topic: str) -> bool:
    """Whether TILEC_LOG names `topic` (read now, so that a test or a user may set it at any time)."""
    return topic in os.environ.get("TILEC_LOG", "").split(",")
