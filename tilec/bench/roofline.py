"""How close a benchmark case comes to the machine's limits, and whether its figures can be trusted.

The roofline of a case: the machine can do at most `peak` flops per second (the measured FMA
throughput of the case's dtype on all cores, tilec.runtime.peaks) and can feed at most
`bandwidth` bytes per second from memory; a kernel that must move `bytes` (its inputs read once,
its outputs written once) to do `flops` runs at best at

    attainable = min(peak, flops / bytes * bandwidth)      (arithmetic intensity x bandwidth)

and `fraction` is what a side reaches of that. Above 1 means the data stayed in the caches (the
bandwidth is memory's, not the caches'). Small, cache-resident cases sit there.

A ratio of medians means little when the samples scatter or other processes compete for the
cores: `spread` is (max - min) / median of one side's timed samples, and the warnings say when it
exceeds SPREAD_LIMIT or the 1-minute load average exceeds the cores less BUSY_MARGIN.

Requires: nothing (the peaks come as an argument). Guarantees: `roofline` returns None for a
case without flops or bytes, or a dtype the peaks lack; the warnings are whole sentences that
say how to get a reliable ratio.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilec.runtime.peaks import MachinePeaks

ABOVE_PEAK = 1.1  # a compute-bound side faster than this x the FMA peak says the peak was measured low
SPREAD_LIMIT = 0.25  # a side whose samples scatter more than this makes its ratio unreliable
BUSY_MARGIN = 0.5  # load above cores - this: other processes compete for the cores


@dataclass(frozen=True)
class Roofline:
    peak_gflops: float  # the dtype's FMA peak, all cores
    bandwidth_gbs: float  # memory bandwidth, all cores
    intensity: float  # flops per byte moved at least
    attainable_gflops: float

    def fraction(self, gflops: float | None) -> float | None:
        """The share of the attainable rate that `gflops` reaches."""
        return gflops / self.attainable_gflops if gflops is not None and self.attainable_gflops > 0 else None


def roofline(peaks: "MachinePeaks | None", dtype: str, flops: float, nbytes: float) -> Roofline | None:
    if peaks is None or flops <= 0 or nbytes <= 0:
        return None
    peak = peaks.gflops(dtype)
    if peak is None:
        return None
    intensity = flops / nbytes
    bandwidth = peaks.bandwidth_gbs()
    return Roofline(peak, bandwidth, intensity, min(peak, intensity * bandwidth))


def spread(samples: Sequence[float]) -> float:
    """(max - min) / median: 0 for fewer than two samples."""
    if len(samples) < 2:
        return 0.0
    median = statistics.median(samples)
    return (max(samples) - min(samples)) / median if median > 0 else 0.0


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def busy(load: float | None, ncores: int) -> bool:
    return load is not None and load > ncores - BUSY_MARGIN


ADVICE = "for a reliable ratio, run on a quiet machine and with more --repeats"


def load_warning(load: float | None, ncores: int, when: str) -> str | None:
    """A warning when `load` says other processes compete for the `ncores` cores, else None."""
    if not busy(load, ncores):
        return None
    return (f"the load average was {load:.2f} {when} on {ncores} cores: other processes compete for them, "
            f"so timings and ratios are unreliable; {ADVICE}")


def spread_warning(what: str, tilec_spread: float, baseline_spread: float) -> str | None:
    """A warning when either side's samples scatter more than SPREAD_LIMIT, else None."""
    worst = max(tilec_spread, baseline_spread)
    if worst <= SPREAD_LIMIT:
        return None
    side = "tilec's" if tilec_spread >= baseline_spread else "the baseline's"
    return (f"{what}: {side} samples spread over {worst:.0%} of their median (more than {SPREAD_LIMIT:.0%}), "
            f"so its ratio is unreliable; {ADVICE}")


def above_peak_warning(what: str, line: Roofline | None, rates: Sequence[tuple[str, float | None]]) -> str | None:
    """A warning when a compute-bound case (its attainable rate the FMA peak) ran faster than
    ABOVE_PEAK x that peak on some side of `rates` ((side, GFLOP/s) pairs): no kernel outruns the
    FMA units, so the measured peak is low and every %peak figure with it."""
    if line is None or line.attainable_gflops < line.peak_gflops:
        return None
    over = [(side, gflops) for side, gflops in rates if gflops is not None and gflops > ABOVE_PEAK * line.peak_gflops]
    if not over:
        return None
    side, gflops = max(over, key=lambda r: r[1])
    return (f"{what}: {side} ran at {gflops:.0f} GFLOP/s, {gflops / line.peak_gflops:.0%} of the measured FMA peak "
            f"({line.peak_gflops:.0f} GFLOP/s), which no kernel exceeds: the peak was measured low (another process "
            f"held a core then?), so the %peak columns are too high; `tilec info --refresh` on a quiet machine "
            f"measures it again")


def describe(peaks: "MachinePeaks", dtype: str) -> str:
    """One line: the peaks a bench table's %peak columns use."""
    peak = peaks.gflops(dtype)
    figure = f"{peak:.0f} GFLOP/s" if peak is not None else "not measured"
    line = (f"roofline: {dtype} peak {figure}, memory {peaks.bandwidth_gbs():.1f} GB/s ({peaks.cores} cores, "
            f"measured {peaks.measured_at}; `tilec info` shows more)")
    from tilec.runtime.peaks import QUIET_LOAD  # (the peaks module measures again above it)

    if peaks.load_average > QUIET_LOAD:
        line += (f"; measured at load {peaks.load_average:.2f} (other processes held a core), so the all-core "
                 f"figures may be low: tilec measures them again once the machine is quieter, or run "
                 f"`tilec info --refresh` on a quiet machine")
    return line


__all__ = ["ABOVE_PEAK", "ADVICE", "above_peak_warning", "BUSY_MARGIN", "SPREAD_LIMIT", "Roofline", "busy", "cores", "describe", "load_average",
           "load_warning", "roofline", "spread", "spread_warning"]
