"""tilec.do_bench (tilec.runtime.timing): warm-up by time, quantiles of individually timed calls,
triton.testing.do_bench's return modes, clear errors; `import tilec` does not load it."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import tilec
from tilec.runtime import timing


def test_a_sleep_takes_at_least_its_time():
    median, p20, p80 = tilec.do_bench(lambda: time.sleep(0.002), warmup=5, rep=40)
    assert p20 <= median <= p80
    assert 2.0 <= p20 and median < 40  # milliseconds; a loaded machine oversleeps, never undersleeps


class SteppingClock:
    """A clock that each call of the benchmarked function advances by the next of `durations` (s)."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.durations, self.calls = 0.0, durations, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


def test_quantiles_and_return_modes_summarise_the_timed_calls():
    durations = [0.001, 0.003, 0.002, 0.010, 0.004]  # seconds, in a cycle
    clock = SteppingClock(durations)
    samples = timing.do_bench(clock.step, warmup=0, rep=50, quantiles=None, return_mode="all", clock=clock)
    assert len(samples) >= 10 and min(samples) == pytest.approx(1.0) and max(samples) == pytest.approx(10.0)
    expected = np.quantile(samples, [0.5, 0.1, 0.9])
    assert timing.summarise(samples, (0.5, 0.1, 0.9)) == pytest.approx(list(expected))
    assert timing.summarise(samples, None, "mean") == pytest.approx(float(np.mean(samples)))
    assert timing.summarise(samples, None, "median") == pytest.approx(float(np.median(samples)))
    assert timing.summarise(samples, None, "min") == pytest.approx(1.0)


def test_warmup_is_time_and_rep_sets_the_number_of_calls():
    clock = SteppingClock([0.001])  # every call 1 ms
    timing.do_bench(clock.step, warmup=20, rep=30, clock=clock)
    assert 49 <= clock.calls <= 53  # a first call, 20 ms of warm-up calls, 30 ms of timed ones (give or take rounding)
    slow = SteppingClock([1.0])  # a call longer than warmup and rep: one of each
    median, *_ = timing.do_bench(slow.step, warmup=5, rep=5, clock=slow)
    assert slow.calls == 3 and median == pytest.approx(1000.0)


def test_the_first_call_does_not_set_the_number_of_calls():
    clock = SteppingClock([0.5] + [0.001] * 10_000)  # a first call that compiles for half a second
    median, p20, p80 = timing.do_bench(clock.step, warmup=10, rep=20, clock=clock)
    assert 25 <= clock.calls <= 35 and median == p20 == p80 == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(warmup=-1), "warmup"), (dict(rep=0), "rep"), (dict(quantiles=(0.5, 1.5)), "quantiles"),
    (dict(quantiles=None, return_mode="p99"), "return_mode"),
])
def test_bad_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(tilec.TilecError, match=message):
        tilec.do_bench(lambda: None, **kwargs)
    with pytest.raises(tilec.TilecError, match="a callable"):
        tilec.do_bench(42)  # type: ignore[arg-type]


def test_import_tilec_does_not_load_it():
    code = "import sys, tilec; assert 'tilec.runtime.timing' not in sys.modules; tilec.do_bench; " \
           "assert 'tilec.runtime.timing' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tilec.nope  # type: ignore[attr-defined]  # noqa: B018
