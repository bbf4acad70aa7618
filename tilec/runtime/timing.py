"""`do_bench`: the time of one call of a Python callable, as quantiles of many timed calls.

The same contract as `triton.testing.do_bench`, for CPU code: one first call (which may compile),
then a warm-up by time (the first calls of a kernel fault its pages in and ramp the clock; a count
alone cannot tell how many), one call's time estimated from the warm-up, then about `rep`
milliseconds of calls timed one by one and summarised. Every figure is in milliseconds.

    >>> import tilec
    >>> median, p20, p80 = tilec.do_bench(lambda: sum(range(1000)))

Requires: a callable taking no arguments. Guarantees: a first untimed call, `warmup` ms of
untimed calls (at least one), then between 1 and MAX_CALLS timed calls (about `rep` ms of them) with the garbage
collector paused; the quantiles in the order asked, or with `quantiles=None` the statistic
`return_mode` names (every sample for "all"); bad arguments raise a TilecError that says which
one and what it takes.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tilec.errors import TilecError

RETURN_MODES = ("min", "max", "mean", "median", "all")
MAX_CALLS = 100_000  # timed calls at most, however fast the callable


def do_bench(fn: Callable[[], Any], *, warmup: float = 25.0, rep: float = 100.0,
             quantiles: Sequence[float] | None = (0.5, 0.2, 0.8), return_mode: str = "median",
             clock: Callable[[], float] = time.perf_counter) -> Any:
    """Milliseconds per call of `fn()`.

    warmup: milliseconds of untimed calls after a first one (at least one call);
    rep: milliseconds of timed calls (at least one call, at most MAX_CALLS);
    quantiles: return these quantiles of the timed calls, in this order (default: the median,
        the 20th and the 80th percentile, a list of three floats); None to return `return_mode`;
    return_mode: "min", "max", "mean" or "median" (a float) or "all" (every timed call, a list).
    """
    _check(fn, warmup, rep, quantiles, return_mode)
    fn()  # compiles, loads, allocates: slower than any later call and no guide to them
    warm = _warm_up(fn, warmup / 1e3, clock)
    estimate = statistics.median(warm)
    calls = int(min(MAX_CALLS, max(1, rep / 1e3 / estimate if estimate > 0 else MAX_CALLS)))
    samples = _timed_calls(fn, calls, clock)
    return summarise(samples, quantiles, return_mode)


def summarise(samples_ms: Sequence[float], quantiles: Sequence[float] | None = (0.5, 0.2, 0.8),
              return_mode: str = "median") -> Any:
    """do_bench's answer for these samples (milliseconds): quantiles by linear interpolation."""
    if quantiles is not None:
        return [float(q) for q in np.quantile(np.asarray(samples_ms, dtype=np.float64), list(quantiles))]
    if return_mode == "all":
        return list(samples_ms)
    stats: dict[str, Callable[[Sequence[float]], float]] = {"min": min, "max": max, "mean": statistics.fmean,
                                                            "median": statistics.median}
    return float(stats[return_mode](samples_ms))


def _check(fn: Any, warmup: float, rep: float, quantiles: Sequence[float] | None, return_mode: str) -> None:
    if not callable(fn):
        raise TilecError(f"do_bench times a callable taking no arguments, got {type(fn).__name__}; "
                         f"wrap a call in a lambda: do_bench(lambda: f(x))")
    if not warmup >= 0:
        raise TilecError(f"do_bench: warmup is milliseconds of untimed calls, at least 0; got {warmup}")
    if not rep > 0:
        raise TilecError(f"do_bench: rep is milliseconds of timed calls, more than 0; got {rep}")
    if quantiles is not None and not all(0 <= q <= 1 for q in quantiles):
        raise TilecError(f"do_bench: quantiles are numbers from 0 to 1 (0.5: the median), got {list(quantiles)}")
    if return_mode not in RETURN_MODES:
        raise TilecError(f"do_bench: return_mode is one of {', '.join(RETURN_MODES)}, got {return_mode!r}")


def _warm_up(fn: Callable[[], Any], seconds: float, clock: Callable[[], float]) -> list[float]:
    """Call `fn` until `seconds` have passed (at least once); each call's seconds."""
    times: list[float] = []
    start = clock()
    while not times or (clock() - start < seconds and len(times) < MAX_CALLS):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return times


def _timed_calls(fn: Callable[[], Any], calls: int, clock: Callable[[], float]) -> list[float]:
    """Milliseconds of each of `calls` calls, the collector paused (no pauses inside the timed calls)."""
    samples = []
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(calls):
            t0 = clock()
            fn()
            samples.append((clock() - t0) * 1e3)
    finally:
        if enabled:
            gc.enable()
    return samples


__all__ = ["MAX_CALLS", "RETURN_MODES", "do_bench", "summarise"]
