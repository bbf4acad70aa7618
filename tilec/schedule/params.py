"""Lowering parameters: the thresholds the heuristics decide by, as one record.

Hardware facts (vector width, cache sizes, cores, GPU limits) live in the Target. What is here
is policy: below how many output cells a parallel loop does not pay, from how many channels
Winograd gains, and so on. They are fields of one frozen record so that the cache key can cover
them (a kernel lowered under other thresholds is another kernel) and so that a test or an
experiment changes them in one visible place:

    with tilec.schedule.params.overridden(winograd_min_channels=1):
        ...  # compile here: the disk and memory caches keep these kernels apart

The pipeline reads `current()` once per compilation and hands the record down; nothing below it
reads module state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace

from tilec.errors import TilecError


@dataclass(frozen=True)
class LoweringParams:
    parallel_min_cells: int = 1 << 15  # output cells below which starting the pool costs more than it saves
    gemm_min_work: int = 32**3  # M x N x K below which a product is faster as plain loops than packed
    gemm_min_columns: int = 8  # and columns below which
    direct_max_panels: int = 4  # column panels up to which reading A in place beats packing it
    winograd_min_channels: int = 128  # channels and columns below which Winograd's GEMMs are too slow to gain
    winograd_min_tiles: int = 16
    permute_max_cells: int = 1 << 20  # larger permutations keep the default nest (tilec.schedule.cpu.permute)
    inplace_sums_bytes: int = 512 * 1024  # partial sums per thread the in-place GEMM may save between blocks
    attention_backward_panel_bytes: int = 4 << 20  # per thread: beyond it, the two-pass attention gradient
    gpu_block_threads: int = 256  # threads per block of the GPU default binding


_current = LoweringParams()


def current() -> LoweringParams:
    return _current


@contextmanager
def overridden(**changes: int) -> Iterator[LoweringParams]:
    """Compile with some thresholds changed, for the extent of a `with` block."""
    global _current
    known = {f.name for f in fields(LoweringParams)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise TilecError(f"no lowering parameter(s) {', '.join(unknown)}; they are {', '.join(sorted(known))}")
    saved = _current
    _current = replace(saved, **changes)
    try:
        yield _current
    finally:
        _current = saved


__all__ = ["LoweringParams", "current", "overridden"]
