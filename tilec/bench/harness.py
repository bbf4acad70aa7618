"""Time a tilec kernel and its baseline side by side, interleaved, in this one process.

Per case: warm-up pairs (tilec, baseline), the first of which compiles the kernel and checks
tilec's result against the baseline's; then timed pairs, tilec, baseline, tilec, baseline, ...
so that both sides see the same machine state (clock, caches, other load). The report uses the
median of each side's timed calls; ratio = baseline_ms / tilec_ms, so > 1 means tilec is faster.

With `consecutive` N > 1, each side of a pair is N calls back to back, as a loop calls a kernel,
and only the last N - 1 are timed: the first follows the other side's call (and the cool-down),
so it starts with cold cores, the other side's data in the caches and its threads asleep, which
no loop sees. (`tilec bench model` times training steps the same way.)

Warm-up goes on for at least `warmup` pairs and at least `warmup_s` seconds: the first few
calls of a fast kernel run several times slower (clock ramp, caches, page faults), and a count
alone cannot tell how many. A slow case stops early: after the first warm-up and the first
timed pair, another pair runs only while the case's total time is expected to stay within
`budget_s`.

Beside the ratio, each result carries the case's roofline (tilec.bench.roofline: the fraction of
the attainable rate, from the machine's measured peaks, that each side reaches), the spread of
each side's samples, the load average at the case's start and end, and warnings when the spread
or the load make the ratio unreliable.
"""

from __future__ import annotations

import gc
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tilec.bench import roofline
from tilec.bench.ops import Case, Prepared, format_shape
from tilec.errors import TilecError
from tilec.runtime import heap

if TYPE_CHECKING:
    from tilec.runtime.peaks import MachinePeaks

Clock = Callable[[], float]

# OpenBLAS's idle threads busy-wait for 2^28 cycles (~0.1 s here) after every call unless told
# otherwise, and on a small machine they steal the cores from whatever runs next: in an
# interleaved benchmark, from tilec. With this setting they sleep as soon as they are idle;
# numpy's own speed is unchanged (`python -m tilec.bench.baseline_env` measures it). It must be
# set before OpenBLAS loads, hence the re-exec of `tilec bench` (tilec.cli.bench). torch's OpenMP threads spin only briefly; the
# harness's cool-down lets them settle instead (OMP_WAIT_POLICY=PASSIVE would slow torch itself).
# glibc's malloc hands a freed block of megabytes back to the OS (munmap, or a trimmed heap top) whenever the
# heap's state allows, and the next block of that size pays a page fault per 4 KiB page at its first write: on
# a VM 2.5 us each (Zen 5), and torch's CNN training steps faulted 2,000-12,000 pages each, more or fewer with
# the heap state the other side of the comparison left. Fixed thresholds (blocks under 32 MiB come from the
# heap, which keeps up to 256 MiB free) let neither side pay for the other's frees: torch's cnn-large step
# alone, bfloat16, 8.9-14.3 ms -> 5.9, float32 13.3-14.2 -> 9.4. tilec's torch integration sets the same
# thresholds in-process (tilec.runtime.heap), but only once its first op runs; the restart puts them in
# force before either side allocates anything.
QUIET_BASELINE_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4", "GLIBC_TUNABLES": heap.TUNABLES}
# `tilec bench`'s calls per side per pair: one untimed call that wakes the cores and brings the side's data
# back after the other side's call and the cool-down, then one timed call (Settings.consecutive).
CONSECUTIVE = 2
MAX_WARMUP = 10_000  # pairs: a bound for a clock that does not move


@dataclass(frozen=True)
class Settings:
    warmup: int = 1  # untimed pairs at least; the first is also the correctness check
    repeats: int = 3  # timed pairs
    warmup_s: float = 0.5  # and warm up for at least this long (the first pair, compilation included, counts)
    budget_s: float = 30.0  # per case: no more pairs beyond the first of each kind past this
    cooldown_s: float = 0.0  # idle time after every call, on both sides: the other side's idle
    # threads (torch's OpenMP spins for a while after each call) go quiet before the next one starts
    consecutive: int = 1  # calls per side per pair, back to back; all but the first are timed

    def __post_init__(self) -> None:
        if self.warmup < 1:
            raise TilecError(f"--warmup must be at least 1 (the first warm-up pair also checks the result), "
                             f"got {self.warmup}")
        if self.repeats < 1:
            raise TilecError(f"--repeats must be at least 1, got {self.repeats}")
        if not self.warmup_s >= 0:
            raise TilecError(f"--warmup-time must be a number of seconds >= 0, got {self.warmup_s}")
        if not self.budget_s > 0:
            raise TilecError(f"--budget must be a positive number of seconds, got {self.budget_s}")
        if not self.cooldown_s >= 0:
            raise TilecError(f"--cooldown must be a number of seconds >= 0, got {self.cooldown_s}")
        if self.consecutive < 1:
            raise TilecError(f"--consecutive must be at least 1, got {self.consecutive}")


@dataclass(frozen=True)
class Samples:
    """Seconds per call of each side, in the order they ran."""

    tilec: tuple[float, ...]
    baseline: tuple[float, ...]
    warmup: int  # warm-up pairs run

    @property
    def tilec_ms(self) -> float:
        return statistics.median(self.tilec) * 1e3

    @property
    def baseline_ms(self) -> float:
        return statistics.median(self.baseline) * 1e3

    @property
    def ratio(self) -> float:
        return self.baseline_ms / self.tilec_ms if self.tilec_ms > 0 else float("inf")

    @property
    def tilec_spread(self) -> float:
        return roofline.spread(self.tilec)

    @property
    def baseline_spread(self) -> float:
        return roofline.spread(self.baseline)


class Benchable(Protocol):
    """What `measure` needs of a case (ops.Case, or a fake one in the tests)."""

    def prepare(self) -> Prepared: ...


def measure(case: Benchable, settings: Settings, clock: Clock = time.perf_counter,
            sleep: Callable[[float], None] = time.sleep) -> Samples:
    """Run the warm-up and timed pairs of one case; raises whatever the check raises."""
    prepared = case.prepare()
    start = clock()

    def side(call: Callable[[], Any]) -> tuple[Any, list[float], float]:
        """`settings.consecutive` calls back to back, then the cool-down: the last result, the times
        of the calls after the first (of the one call when there is one), and the time of them all."""
        times, got = [], None
        t_start = clock()
        for _ in range(settings.consecutive):
            t0 = clock()
            got = call()
            times.append(clock() - t0)
        spent = clock() - t_start
        if settings.cooldown_s:
            sleep(settings.cooldown_s)
        return got, times[1:] or times, spent

    def pair(check: bool = False) -> tuple[list[float], list[float], float]:
        got, tilec_times, tilec_spent = side(prepared.tilec)
        expected, baseline_times, baseline_spent = side(prepared.baseline)
        if check:
            prepared.check(got, expected)
        return tilec_times, baseline_times, tilec_spent + baseline_spent

    def affordable(last: tuple[list[float], list[float], float], pairs: int) -> bool:
        """Whether `pairs` more pairs, each as long as `last`, still fit in the case's budget."""
        return clock() - start + pairs * last[2] <= settings.budget_s

    def warming() -> bool:
        return warmups < settings.warmup or clock() - start < settings.warmup_s

    last = pair(check=True)
    warmups = 1
    gc.collect()
    gc.disable()  # no collector pauses inside timed calls (a collection right before them would cool the caches)
    try:
        while warming() and warmups < MAX_WARMUP and affordable(last, 2):  # keep room for one timed pair
            last = pair()
            warmups += 1
        timed = [pair()]
        while len(timed) < settings.repeats and affordable(timed[-1], 1):
            timed.append(pair())
    finally:
        gc.enable()
    return Samples(tuple(t for ts, _, _ in timed for t in ts), tuple(b for _, bs, _ in timed for b in bs), warmups)


# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class Result:
    case: Case
    samples: Samples | None = None
    error: str | None = None
    roofline: roofline.Roofline | None = None
    loads: tuple[float | None, float | None] = (None, None)  # the 1-minute load average at the start and end
    cores: int = 1  # the cores the load is compared with

    def _gflops(self, ms: float) -> float | None:
        return self.case.flops / ms / 1e6 if ms > 0 and self.case.flops > 0 else None

    @property
    def warnings(self) -> tuple[str, ...]:
        """Why the ratio may mean little: a busy machine at the case's start or end, scattered samples, a
        rate above the FMA peak (which was measured low then)."""
        found = [roofline.load_warning(load, self.cores, when) for load, when in zip(self.loads, ("at the case's start",
                                                                                                   "at its end"))]
        if self.samples is not None:
            what = f"{self.case.op.label} {format_shape(self.case.shape)}"
            found.append(roofline.spread_warning(what, self.samples.tilec_spread, self.samples.baseline_spread))
            if not self.case.op.fast_algorithms:
                found.append(roofline.above_peak_warning(what, self.roofline, (
                    ("tilec", self._gflops(self.samples.tilec_ms)),
                    ("the baseline", self._gflops(self.samples.baseline_ms)))))
        return tuple(w for w in found if w is not None)

    def to_dict(self) -> dict[str, Any]:
        case, s, line = self.case, self.samples, self.roofline
        flops = case.flops
        d: dict[str, Any] = {
            "op": case.op.name,
            "shape": dict(case.shape),
            "dtype": case.dtype,
            "target": case.target,
            "tilec_ms": _round(s.tilec_ms) if s else None,
            "baseline": case.op.baseline,
            "baseline_ms": _round(s.baseline_ms) if s else None,
            "ratio": _round(s.ratio) if s else None,
        }
        if case.op.name == "attention":
            d["causal"] = case.op.causal
        if case.op.backward:
            d["backward"] = True
        d.update({
            "tilec_gflops": _round(flops / s.tilec_ms / 1e6) if s else None,
            "baseline_gflops": _round(flops / s.baseline_ms / 1e6) if s and s.baseline_ms > 0 else None,
            "warmup": s.warmup if s else 0,
            "repeats": len(s.tilec) if s else 0,
            "tilec_samples_ms": [_round(t * 1e3) for t in s.tilec] if s else [],
            "baseline_samples_ms": [_round(t * 1e3) for t in s.baseline] if s else [],
            "tilec_spread": _round(s.tilec_spread) if s else None,
            "baseline_spread": _round(s.baseline_spread) if s else None,
            "bytes": case.bytes,
            "intensity": _round(line.intensity) if line else None,
            "attainable_gflops": _round(line.attainable_gflops) if line else None,
            "tilec_peak_fraction": _fraction(line, self._gflops(s.tilec_ms)) if line and s else None,
            "baseline_peak_fraction": _fraction(line, self._gflops(s.baseline_ms)) if line and s else None,
            "load_average": [None if x is None else round(x, 2) for x in self.loads],
            "warnings": list(self.warnings),
            "error": self.error,
        })
        return d


def _fraction(line: roofline.Roofline, gflops: float | None) -> float | None:
    fraction = line.fraction(gflops)
    return _round(fraction) if fraction is not None else None


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def run_case(case: Case, settings: Settings, clock: Clock = time.perf_counter, *, peaks: "MachinePeaks | None" = None,
             load: Callable[[], float | None] = roofline.load_average, cores: int | None = None) -> Result:
    """measure(), with tilec's errors and wrong results turned into a Result that carries the message;
    the roofline from `peaks` (None: none), the load average read by `load` before and after."""
    line = roofline.roofline(peaks, case.dtype, case.flops, case.bytes)
    ncores = cores if cores is not None else roofline.cores()
    before = load()
    try:
        samples = measure(case, settings, clock)
    except TilecError as err:
        return Result(case, error=str(err), roofline=line, loads=(before, load()), cores=ncores)
    return Result(case, samples, roofline=line, loads=(before, load()), cores=ncores)


def to_json(result: Result) -> str:
    return json.dumps(result.to_dict())


# ------------------------------------------------------------------ the table


_COLUMNS = (("op", "<"), ("shape", "<"), ("dtype", "<"), ("target", "<"), ("tilec ms", ">"),
            ("GFLOP/s", ">"), ("%peak", ">"), ("baseline", "<"), ("baseline ms", ">"), ("GFLOP/s", ">"),
            ("%peak", ">"), ("ratio", ">"), ("spread", ">"), ("reps", ">"))
_BASELINE_COLUMN = 7


def _cells(result: Result) -> list[str]:
    d = result.to_dict()
    head = [result.case.op.label, format_shape(result.case.shape), d["dtype"], d["target"]]
    baseline = result.case.op.baseline_short
    if result.samples is None:
        return head + ["error", "", "", baseline, "", "", "", "", "", ""]
    spread = f"{_percent(d['tilec_spread'])}/{_percent(d['baseline_spread'])}"
    return head + [_ms(d["tilec_ms"]), _number(d["tilec_gflops"]), _percent(d["tilec_peak_fraction"]), baseline,
                   _ms(d["baseline_ms"]), _number(d["baseline_gflops"]), _percent(d["baseline_peak_fraction"]),
                   f"{d['ratio']:.3g}" + ("?" if result.warnings else ""), spread, str(d["repeats"])]


def _number(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else "-"


def _percent(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def _ms(x: float) -> str:
    """About four significant digits, never in exponent form: 0.02339, 11.45, 3801."""
    digits = 3 - math.floor(math.log10(x)) if x > 0 else 0
    return f"{x:.{min(max(digits, 0), 5)}f}"


class Table:
    """A fixed-width table whose rows can be printed as each case finishes (widths come from the cases)."""

    def __init__(self, cases: Sequence[Case]) -> None:
        widths = [len(name) for name, _ in _COLUMNS]
        for case in cases:
            known = [case.op.label, format_shape(case.shape), case.dtype, case.target, "", "", "",
                     case.op.baseline_short]
            widths[:len(known)] = [max(w, len(k)) for w, k in zip(widths, known)]
        widths[4:6] = [max(w, 9) for w in widths[4:6]]
        widths[_BASELINE_COLUMN + 1:] = [max(w, 7) for w in widths[_BASELINE_COLUMN + 1:]]
        widths[-2] = max(widths[-2], 9)  # spread: "12%/130%"
        self.widths = widths

    def _line(self, cells: Iterable[str]) -> str:
        return "  ".join(f"{c:{align}{w}}" for c, (_, align), w in zip(cells, _COLUMNS, self.widths)).rstrip()

    def header(self) -> str:
        return self._line(name for name, _ in _COLUMNS)

    def row(self, result: Result) -> str:
        return self._line(_cells(result))


def format_table(results: Sequence[Result]) -> str:
    table = Table([r.case for r in results])
    return "\n".join([table.header()] + [table.row(r) for r in results]) + "\n"
