"""tilec.runtime.peaks: the measured peaks are positive and consistent with each other and with the
host's features, and they are measured once per machine (then read from the cache file) or, with
the disk cache off, once per process."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tilec.codegen.llvm import probes
from tilec.config import options
from tilec.runtime import peaks
from tilec.target import has_tiles, host_cpu, host_target

SHORT = 0.01  # seconds per timed run (all cores: twice that, a few scheduler slices)
REPEATS = 10  # runs per figure: about three seconds in all
QUICK = 0.002  # for the tests of the cache, which do not look at the figures


@pytest.fixture(scope="module")
def measured() -> peaks.MachinePeaks:
    # The bandwidth buffer is the default one, four L3 caches at least: with less, each core's slice
    # of it can stay in its cache and all cores together stream more than `cores` times one core.
    # Best of REPEATS runs a figure: on a shared host a neighbour can hold a core back for a tenth
    # of a second, which the default 3 runs of 10 ms could not outlast (a 128-bit FMA figure of
    # 40 GFLOP/s on one core against 54 per core with both, in one CI run).
    return peaks.measure(duration=SHORT, repeats=REPEATS)


def _features() -> set[str]:
    return {f[1:] for f in host_cpu().features.split(",") if f.startswith("+")}


def test_every_figure_is_positive(measured: peaks.MachinePeaks):
    assert measured.key == host_target().key and measured.cores == host_cpu().cores
    assert measured.fma and all(p.single_gflops > 0 and p.all_gflops > 0 for p in measured.fma)
    assert measured.single_gbs > 0 and measured.all_gbs > 0 and measured.stream_bytes >= 64 << 20
    assert measured.seconds > 0


def test_the_widths_and_dtypes_are_the_hosts(measured: peaks.MachinePeaks):
    widths = [b for b in (128, 256, 512) if b <= host_cpu().vector_bits]
    assert sorted(p.bits for p in measured.fma if p.dtype == "float32") == widths
    assert sorted(p.bits for p in measured.fma if p.dtype == "float64") == widths
    assert (measured.peak("bfloat16", 512) is not None) == ("avx512bf16" in _features())


def test_all_cores_do_at_least_what_one_does(measured: peaks.MachinePeaks):
    for p in measured.fma:
        assert 0.8 * p.single_gflops <= p.all_gflops <= 1.25 * measured.cores * p.single_gflops, p
    assert measured.all_gbs <= 1.25 * measured.cores * measured.single_gbs  # memory does not scale past the cores
    assert measured.bandwidth_gbs() >= measured.single_gbs  # the roofline's: all cores, at least one core's


def test_float64_runs_at_about_half_the_float32_rate(measured: peaks.MachinePeaks):
    for bits in {p.bits for p in measured.fma if p.dtype == "float32"}:
        f32, f64 = measured.peak("float32", bits), measured.peak("float64", bits)
        assert f32 is not None and f64 is not None
        assert 0.3 < f64.single_gflops / f32.single_gflops < 0.8, (f32, f64)


def test_wider_vectors_never_lose_and_256_bits_doubles_128(measured: peaks.MachinePeaks):
    if measured.peak("float32", 256) is None:
        pytest.skip("this CPU has no 256-bit vectors")
    # A neighbour on a shared host can hold one figure back for all of its runs (256 bits at 23 of
    # 32 flops per cycle against 128 bits at 16 of 16, in one CI run). Noise only lowers a figure,
    # so where the ratio is out of range the figures are measured again and the best of each kept.
    narrow, wide, ratio = 0.0, 0.0, 0.0
    for attempt in range(3):
        again = measured if attempt == 0 else peaks.measure(duration=SHORT, repeats=REPEATS)
        narrow = max(narrow, again.peak("float32", 128).single_gflops)  # type: ignore[union-attr]
        wide = max(wide, again.peak("float32", 256).single_gflops)  # type: ignore[union-attr]
        ratio = wide / narrow
        if 1.5 < ratio < 2.6:
            break
    assert 1.5 < ratio < 2.6, (narrow, wide)
    gain = measured.width_gain("float32")
    assert gain is not None and 0.7 < gain < 2.6


def test_bf16_dot_products_against_float32_fmas(measured: peaks.MachinePeaks):
    """The pair dot product does at least 0.4x float32's flops (Zen 4 and 5 run it at 1.5-2x, Xeons
    with AMX at 0.5x: 113 against 222 GFLOP/s on one core); AMX's tiles many times float32's (14.8x
    on that Xeon)."""
    f32 = measured.peak("float32", 512)
    bf16 = measured.peak("bfloat16", 512)
    if bf16 is None or f32 is None:
        pytest.skip("this CPU has no avx512bf16")
    assert bf16.single_gflops > 0.4 * f32.single_gflops
    tiles = measured.peak("bfloat16", probes.TILE_BITS)
    assert (tiles is not None) == has_tiles(host_cpu())
    assert tiles is None or tiles.single_gflops > 4 * f32.single_gflops


def test_clock_and_fma_units(measured: peaks.MachinePeaks):
    if measured.clock_ghz is None:
        pytest.skip("the clock estimate needs an x86-64 host")
    assert 0.5 < measured.clock_ghz < 7.0
    narrow = measured.peak("float32", 128)
    assert narrow is not None and narrow.flops_per_cycle is not None
    assert 3 < narrow.flops_per_cycle < 40  # 4 lanes x 2 flops x 1 to 4 FMA pipes
    assert measured.fma_per_cycle is not None and 0.6 < measured.fma_per_cycle < 4.5
    assert measured.fma_units in (1, 2, 3, 4)


def test_kernel_text_is_what_the_docstrings_say():
    ir = probes.fma_kernel_ir("k", "float64", 256)
    assert ir.count("@llvm.fma.v4f64(") == probes.ACCUMULATORS * probes.UNROLL + 1  # the calls and the declaration
    unfused = probes.fma_kernel_ir("k", "float32", 128, fused=False)
    assert "llvm.fma" not in unfused and unfused.count("fmul <4 x float>") == probes.ACCUMULATORS * probes.UNROLL
    assert probes.stream_kernel_ir("s", 256).count("load <4 x double>") == probes.STREAM_VECTORS


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(options, "cache_dir", tmp_path)
    monkeypatch.setattr(options, "disk_cache", True)
    peaks.forget()
    yield tmp_path
    peaks.forget()


def test_measured_once_per_machine_then_read_from_the_cache(fresh_cache):
    before = peaks.measurements()
    first = peaks.machine_peaks(duration=QUICK)
    assert peaks.measurements() == before + 1
    path = peaks.cache_path()
    assert path is not None and path.is_file() and path.parent == fresh_cache / "peaks"
    assert json.loads(path.read_text())["key"] == host_target().key
    assert peaks.machine_peaks() is first  # this process's copy
    peaks.forget()
    again = peaks.machine_peaks(load=lambda: 1e9)  # a new process would do this: read the file
    assert peaks.measurements() == before + 1 and again == first
    peaks.machine_peaks(refresh=True, duration=QUICK)
    assert peaks.measurements() == before + 2


def test_a_measurement_under_load_is_measured_again_when_quieter_and_only_rises(fresh_cache):
    first = peaks.machine_peaks(duration=QUICK)
    path = peaks.cache_path()
    assert path is not None
    widest = first.peak("float32", first.widest_bits)
    assert widest is not None
    halved = replace(widest, all_gflops=widest.all_gflops / 2)  # what a core held by another process gave
    busy = replace(first, fma=tuple(halved if p is widest else p for p in first.fma), all_gbs=first.all_gbs / 2,
                   load_average=first.cores + 0.5)
    path.write_text(json.dumps(busy.to_dict()))
    before = peaks.measurements()
    peaks.forget()
    assert peaks.machine_peaks(load=lambda: busy.load_average) == busy  # no quieter: the file stands
    assert peaks.measurements() == before
    peaks.forget()
    merged = peaks.machine_peaks(duration=QUICK, load=lambda: 0.0)  # quieter: measured again
    assert peaks.measurements() == before + 1
    for p in busy.fma:
        q = merged.peak(p.dtype, p.bits)
        assert q is not None and q.all_gflops >= p.all_gflops and q.single_gflops >= p.single_gflops
    assert merged.all_gbs >= busy.all_gbs and merged.load_average < busy.load_average
    assert json.loads(path.read_text()) == merged.to_dict()


def test_merge_best_keeps_the_higher_of_each_figure(measured: peaks.MachinePeaks):
    low = replace(measured, fma=tuple(replace(p, single_gflops=p.single_gflops / 3) for p in measured.fma),
                  single_gbs=measured.single_gbs * 2, load_average=3.0)
    merged = peaks.merge_best(low, measured)
    assert [p.single_gflops for p in merged.fma] == [p.single_gflops for p in measured.fma]
    assert merged.single_gbs == low.single_gbs and merged.load_average == min(3.0, measured.load_average)
    assert peaks.merge_best(measured, low).fma == merged.fma


def test_a_damaged_or_foreign_cache_file_is_measured_again(fresh_cache):
    path = peaks.cache_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    before = peaks.measurements()
    peaks.machine_peaks(duration=QUICK)
    assert peaks.measurements() == before + 1
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "key": "llvm:another-cpu:"}))
    peaks.forget()
    peaks.machine_peaks(duration=QUICK)
    assert peaks.measurements() == before + 2


def test_without_the_disk_cache_measured_once_per_process(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(options, "disk_cache", False)
    peaks.forget()
    try:
        before = peaks.measurements()
        assert peaks.cache_path() is None
        first = peaks.machine_peaks(duration=QUICK)
        assert peaks.machine_peaks() is first and peaks.measurements() == before + 1
    finally:
        peaks.forget()
