"""`tilec bench`: shape parsing, the interleaved harness (with a fake clock), reports, and one tiny
real run of every op against its numpy/PyTorch baseline."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import tilec.cli
from tilec.bench import harness, ops
from tilec.bench.ops import BenchError, Case, Prepared, get_op, parse_shape, select_cases

QUICK = ["--repeats", "1", "--warmup-time", "0"]
JSON_KEYS = {"op", "shape", "dtype", "target", "tilec_ms", "baseline", "baseline_ms", "ratio", "tilec_spread",
             "baseline_spread", "bytes", "intensity", "attainable_gflops", "tilec_peak_fraction",
             "baseline_peak_fraction", "load_average", "warnings"}


def run_cli(capsys, *argv):
    try:
        rc = tilec.cli.main(list(argv))
    except SystemExit as e:  # argparse usage errors
        rc = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ------------------------------------------------------------------ --shape


def test_parse_shape_in_the_ops_order():
    assert list(parse_shape(get_op("gemm"), "K=3, N=2,M=1").items()) == [("M", 1), ("N", 2), ("K", 3)]
    assert parse_shape(get_op("attention"), "B=4,H=8,S=512,D=64") == dict(B=4, H=8, S=512, D=64)


def test_parse_shape_conv2d_stride_and_pad_default():
    conv = get_op("conv2d")
    shape = parse_shape(conv, "N=8,C=64,H=56,W=56,CO=64,KH=3,KW=3")
    assert (shape["stride"], shape["pad"]) == (1, 0)
    assert parse_shape(conv, "N=8,C=64,H=56,W=56,CO=64,KH=3,KW=3,stride=2,pad=1")["pad"] == 1


@pytest.mark.parametrize("text, message", [
    ("M=4,N=4,K=4,X=1", "unknown size 'X'"),
    ("M=4,N=4", "missing K"),
    ("M=4,N=four,K=4", "N must be an integer"),
    ("M=4,N=4.5,K=4", "N must be an integer"),
    ("M=4,N=4,K=4,M=5", "'M' given twice"),
    ("M=0,N=4,K=4", "M must be at least 1"),
    ("M=4,N=4,K", "expected NAME=VALUE"),
    ("", "expected NAME=VALUE"),
])
def test_parse_shape_refuses_bad_input(text, message):
    with pytest.raises(BenchError, match=message):
        parse_shape(get_op("gemm"), text)


def test_parse_shape_refuses_a_kernel_larger_than_the_image():
    with pytest.raises(BenchError, match="does not fit"):
        parse_shape(get_op("conv2d"), "N=1,C=1,H=2,W=2,CO=1,KH=3,KW=3")


@pytest.mark.parametrize("argv, message", [
    (["gemm", "--shape", "M=4,N=4,K=4,Q=2"], "unknown size 'Q' for gemm; its sizes are M, N, K"),
    (["gemm", "--shape", "M=4,K=4"], "missing N"),
    (["conv2d", "--shape", "N=1,C=1,H=8,W=8,CO=1,KH=3,KW=x"], "KW must be an integer"),
    (["nosuchop"], "unknown op 'nosuchop'"),
    (["gemm", "--causal"], "--causal applies to attention only"),
    (["all", "--shape", "M=4,N=4,K=4"], "--shape needs one op"),
    (["gemm", "--quick", "--shape", "M=4,N=4,K=4"], "not both"),
    (["gemm", "--dtype", "int8"], "float32, float64, bfloat16, float16"),
    (["gemm", "--quick", "--repeats", "0"], "--repeats must be at least 1"),
    (["gemm", "--quick", "--target", "tpu"], "unknown target 'tpu'"),
])
def test_cli_bad_input_is_one_clear_error(capsys, argv, message):
    rc, out, err = run_cli(capsys, "bench", *argv)
    assert rc == 1
    assert err.startswith("tilec: error: ") and message in err
    assert "Traceback" not in err and out == ""


def test_cli_bad_shape_in_a_real_process_prints_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "tilec.cli", "bench", "gemm", "--shape", "M=1,N=x,K=1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("tilec: error: --shape 'M=1,N=x,K=1': N must be an integer")
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ which cases run


def test_default_cases_are_the_acceptance_cases():
    def shapes(name, causal=False):
        return [dict(c.shape) for c in select_cases(name, causal=causal)]

    assert shapes("gemm") == [dict(M=1024, N=1024, K=1024), dict(M=2048, N=2048, K=2048)]
    assert shapes("gemm_bias_relu") == [dict(M=1024, N=1024, K=1024)]
    resnet = dict(N=8, KH=3, KW=3, stride=1, pad=1)
    assert shapes("conv2d") == [dict(resnet, C=64, H=56, W=56, CO=64), dict(resnet, C=256, H=14, W=14, CO=256),
                                dict(N=8, C=256, H=56, W=56, CO=512, KH=1, KW=1, stride=2, pad=0)]
    assert shapes("attention") == shapes("attention", causal=True) == [dict(B=4, H=8, S=512, D=64)]
    labels = [c.op.label for c in select_cases("all")]
    assert labels == ["gemm", "gemm", "gemm_bias_relu", "conv2d", "conv2d", "conv2d", "attention", "attention-causal"]


def test_tile_sources_take_the_static_parameters():
    conv = ops.conv2d_source(dict(stride=2, pad=1))
    assert "2*x + i - 1" in conv and "(H + 2 - KH) / 2 + 1" in conv
    assert "0.125" in ops.attention_source(dict(D=64))
    causal = ops.attention_source(dict(D=64), causal=True)
    assert "s - t < S default Neg" in causal


# ------------------------------------------------------------------ the harness, with a fake clock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.naps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += seconds


@dataclasses.dataclass
class FakeCase:
    """Each call advances the fake clock by the next of its durations and logs which side ran."""

    clock: FakeClock
    tilec_s: list[float]
    baseline_s: list[float]
    log: list[str] = dataclasses.field(default_factory=list)
    checked: list[tuple] = dataclasses.field(default_factory=list)

    def _call(self, side: str, durations: list[float]):
        self.log.append(side)
        self.clock.now += durations[min(self.log.count(side), len(durations)) - 1]
        return (side, len(self.log))

    def prepare(self) -> Prepared:
        return Prepared(lambda: self._call("tilec", self.tilec_s), lambda: self._call("baseline", self.baseline_s),
                        lambda got, expected: self.checked.append((got, expected)))


def test_harness_interleaves_and_checks_the_first_pair_only():
    clock = FakeClock()
    case = FakeCase(clock, [0.002], [0.005])
    samples = harness.measure(case, harness.Settings(warmup=2, repeats=4, warmup_s=0, budget_s=100), clock)
    assert case.log == ["tilec", "baseline"] * 6
    assert case.checked == [(("tilec", 1), ("baseline", 2))]
    assert samples.warmup == 2 and len(samples.tilec) == len(samples.baseline) == 4
    assert samples.tilec_ms == pytest.approx(2.0) and samples.baseline_ms == pytest.approx(5.0)
    assert samples.ratio == pytest.approx(2.5)  # baseline / tilec: > 1 means tilec is faster


def test_harness_reports_medians_of_the_timed_calls_only():
    clock = FakeClock()
    # one warm-up pair (9 s each side), then timed tilec 3, 1, 2 ms and baseline 1, 7, 4 ms
    case = FakeCase(clock, [9, 0.003, 0.001, 0.002], [9, 0.001, 0.007, 0.004])
    samples = harness.measure(case, harness.Settings(warmup=1, repeats=3, warmup_s=0, budget_s=100), clock)
    assert samples.tilec == pytest.approx((0.003, 0.001, 0.002))
    assert samples.tilec_ms == pytest.approx(2.0) and samples.baseline_ms == pytest.approx(4.0)
    assert samples.ratio == pytest.approx(2.0)


def test_harness_warms_up_for_at_least_warmup_s():
    clock = FakeClock()
    case = FakeCase(clock, [0.001], [0.001])
    samples = harness.measure(case, harness.Settings(warmup=1, repeats=2, warmup_s=0.1, budget_s=100), clock)
    assert samples.warmup == pytest.approx(50, abs=1)


def test_harness_budget_cuts_a_slow_case_to_one_checked_and_one_timed_pair():
    clock = FakeClock()
    case = FakeCase(clock, [10.0], [0.1])
    samples = harness.measure(case, harness.Settings(warmup=3, repeats=5, budget_s=15), clock)
    assert case.log == ["tilec", "baseline"] * 2
    assert samples.warmup == 1 and len(samples.tilec) == 1


def test_settings_refuse_nonsense():
    with pytest.raises(tilec.TilecError, match="--warmup must be at least 1"):
        harness.Settings(warmup=0)
    with pytest.raises(tilec.TilecError, match="--budget"):
        harness.Settings(budget_s=0)


def _result(tilec_s: list[float], baseline_s: list[float]) -> harness.Result:
    case = Case(get_op("gemm"), dict(M=100, N=100, K=100))
    return harness.Result(case, harness.Samples(tuple(tilec_s), tuple(baseline_s), warmup=1))


def test_result_dict_and_table_row():
    result = _result([0.0031, 0.0029, 0.003], [0.0015, 0.0015, 0.0015])
    d = result.to_dict()
    assert JSON_KEYS <= set(d)
    assert d["op"] == "gemm" and d["shape"] == dict(M=100, N=100, K=100) and d["baseline"] == "numpy.matmul"
    assert (d["tilec_ms"], d["baseline_ms"], d["ratio"]) == (3.0, 1.5, 0.5)
    assert d["tilec_gflops"] == pytest.approx(2e6 / 3e-3 / 1e9, rel=1e-3)
    assert d["tilec_spread"] == pytest.approx(0.2 / 3, rel=1e-3) and d["baseline_spread"] == 0
    assert d["bytes"] == 3 * 100 * 100 * 4  # A, B and C in float32, once each
    assert d["tilec_peak_fraction"] is None and d["warnings"] == []  # no peaks given: no roofline
    table = harness.format_table([result])
    header, row = table.splitlines()
    assert header.split()[:4] == ["op", "shape", "dtype", "target"]
    assert row.split() == ["gemm", "M=100,N=100,K=100", "float32", "llvm", "3.000", "0.7", "-", "numpy.matmul",
                           "1.500", "1.3", "-", "0.5", "7%/0%", "3"]


def _peaks(gflops: float, gbs: float):
    from tilec.runtime.peaks import FmaPeak, MachinePeaks

    fma = (FmaPeak("float32", 256, gflops / 2, gflops), FmaPeak("float64", 256, gflops / 4, gflops / 2))
    return MachinePeaks("test", "test-cpu", 2, fma, gbs / 2, gbs, 1 << 26, None, 1.0, "now", 0.0)


@pytest.mark.parametrize("gflops, gbs", [(100.0, 10.0), (100.0, 1.0), (10.0, 0.5)])
def test_roofline_is_the_lower_of_the_peak_and_intensity_times_bandwidth(gflops, gbs):
    case = Case(get_op("gemm"), dict(M=100, N=120, K=80))
    samples = harness.Samples((0.002,), (0.004,), warmup=1)
    line = harness.roofline.roofline(_peaks(gflops, gbs), case.dtype, case.flops, case.bytes)
    d = harness.Result(case, samples, roofline=line).to_dict()
    nbytes = 4 * (100 * 80 + 80 * 120 + 100 * 120)
    attainable = min(gflops, case.flops / nbytes * gbs)
    assert d["bytes"] == nbytes and d["intensity"] == pytest.approx(case.flops / nbytes, rel=1e-3)
    assert d["attainable_gflops"] == pytest.approx(attainable, rel=1e-3)
    assert d["tilec_peak_fraction"] == pytest.approx(case.flops / 0.002 / 1e9 / attainable, rel=1e-3)
    assert d["baseline_peak_fraction"] == pytest.approx(d["tilec_peak_fraction"] / 2, rel=1e-3)
    row = harness.format_table([harness.Result(case, samples, roofline=line)]).splitlines()[1].split()
    assert row[6] == f"{d['tilec_peak_fraction']:.0%}" and row[10] == f"{d['baseline_peak_fraction']:.0%}"


def test_roofline_uses_the_cases_dtype_and_needs_flops_and_bytes():
    peaks = _peaks(100.0, 1000.0)
    big = Case(get_op("gemm"), dict(M=1000, N=1000, K=1000), dtype="float64")
    assert harness.roofline.roofline(peaks, "float64", big.flops, big.bytes).attainable_gflops == 50.0
    assert harness.roofline.roofline(peaks, "float32", 0.0, 8.0) is None
    assert harness.roofline.roofline(peaks, "bfloat16", 1.0, 8.0) is None
    conv = Case(get_op("conv2d"), dict(N=1, C=2, H=5, W=5, CO=3, KH=3, KW=3, stride=1, pad=0))
    assert conv.bytes == 4 * (1 * 2 * 5 * 5 + 3 * 2 * 3 * 3 + 1 * 3 * 3 * 3)
    backward = select_cases("conv2d", ["N=1,C=2,H=5,W=5,CO=3,KH=3,KW=3"], backward=True)[0]
    assert backward.bytes == 4 * (2 * (1 * 2 * 5 * 5 + 3 * 2 * 3 * 3) + 1 * 3 * 3 * 3)  # x, w, dy in; dx, dw out


def test_scattered_samples_warn_that_the_ratio_is_unreliable():
    calm = _result([0.0030, 0.0031, 0.0029], [0.0015, 0.0016, 0.0015])
    assert calm.warnings == ()
    scattered = _result([0.0030, 0.0031, 0.0029], [0.0010, 0.0015, 0.0030])
    (warning,) = scattered.warnings
    assert "the baseline's samples spread over 133%" in warning and "unreliable" in warning
    assert "--repeats" in warning and "quiet machine" in warning
    assert scattered.to_dict()["warnings"] == [warning]
    row = harness.format_table([scattered]).splitlines()[1].split()
    assert row[11] == "0.5?"  # the ratio, marked


def test_a_compute_bound_side_above_the_fma_peak_says_the_peak_was_measured_low():
    case = Case(get_op("gemm"), dict(M=100, N=100, K=100))  # 2e6 flops
    samples = harness.Samples((0.002,), (0.001,), warmup=1)  # tilec 1, the baseline 2 GFLOP/s
    def warnings(gflops: float, gbs: float = 1e6) -> list[str]:
        line = harness.roofline.roofline(_peaks(gflops, gbs), case.dtype, case.flops, case.bytes)
        return [w for w in harness.Result(case, samples, roofline=line).warnings if "FMA peak" in w]
    assert warnings(1.9) == []  # 2 GFLOP/s is within 10% of a 1.9 GFLOP/s peak
    (warning,) = warnings(1.0)
    assert "the baseline ran at 2 GFLOP/s, 200% of the measured FMA peak (1 GFLOP/s)" in warning
    assert "tilec info --refresh" in warning
    assert warnings(1.0, gbs=1e-3) == []  # memory-bound: above the roofline is the caches' doing
    conv = Case(get_op("conv2d"), dict(N=1, C=64, H=9, W=9, CO=64, KH=3, KW=3, stride=1, pad=1))
    line = harness.roofline.roofline(_peaks(1e-3, 1e6), conv.dtype, conv.flops, conv.bytes)
    assert harness.Result(conv, samples, roofline=line).warnings == ()  # Winograd does fewer flops than counted


def test_the_roofline_line_says_when_the_peaks_were_measured_under_load():
    from dataclasses import replace

    quiet = _peaks(100.0, 10.0)
    assert "load" not in harness.roofline.describe(quiet, "float32")
    line = harness.roofline.describe(replace(quiet, load_average=1.14), "float32")
    assert "measured at load 1.14" in line and "may be low" in line and "tilec info --refresh" in line


def test_a_busy_machine_warns_at_the_cases_start_or_end(capsys):
    case = Case(get_op("gemm"), dict(M=4, N=3, K=2))
    settings = harness.Settings(warmup_s=0, repeats=1)
    loads = iter([0.2, 7.5])
    result = harness.run_case(case, settings, load=lambda: next(loads), cores=2)
    assert result.loads == (0.2, 7.5) and result.to_dict()["load_average"] == [0.2, 7.5]
    (warning,) = [w for w in result.warnings if "load average" in w]
    assert "7.50 at its end on 2 cores" in warning and "unreliable" in warning
    quiet = harness.run_case(case, settings, load=lambda: 1.4, cores=2)  # up to cores - 0.5 is quiet
    assert not [w for w in quiet.warnings if "load average" in w]
    unknown = harness.run_case(case, settings, load=lambda: None, cores=2)
    assert not [w for w in unknown.warnings if "load average" in w]


def test_cli_warns_on_a_busy_machine(capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness.roofline, "load_average", lambda: 64.0)
    rc, out, err = run_cli(capsys, "bench", "gemm", "--shape", "M=8,N=16,K=4", "--json", *QUICK)
    assert rc == 0, err
    assert "at the start of the run" in err and "at the end of the run" in err and "Traceback" not in err


# ------------------------------------------------------------------ real runs (tiny shapes)


def test_wrong_result_is_reported_as_an_error():
    wrong = dataclasses.replace(get_op("gemm"), source=lambda s: (
        "function (A[M, K], B[K, N]) -> (O) { C[i, j: M, N] = +(A[i, k] * B[k, j]); O = C + 1; }"))
    result = harness.run_case(Case(wrong, dict(M=4, N=4, K=4)), harness.Settings(warmup_s=0))
    assert result.samples is None
    assert "tilec's result differs from numpy.matmul" in result.error
    assert result.to_dict()["error"] == result.error and result.to_dict()["ratio"] is None
    assert "error" in harness.format_table([result])


def test_cli_gemm_json(capsys):
    rc, out, err = run_cli(capsys, "bench", "gemm", "--shape", "M=8,N=16,K=4", "--shape", "M=3,N=5,K=7",
                           "--json", *QUICK)
    assert rc == 0, err
    first, second = json_lines(out)
    assert JSON_KEYS <= set(first)
    assert first["shape"] == dict(M=8, N=16, K=4) and second["shape"] == dict(M=3, N=5, K=7)
    assert first["dtype"] == "float32" and first["target"] == "llvm" and first["error"] is None
    assert first["ratio"] == pytest.approx(first["baseline_ms"] / first["tilec_ms"], rel=2e-3)
    assert 0 < first["tilec_peak_fraction"] and 0 < first["attainable_gflops"] and isinstance(first["warnings"], list)
    assert first["bytes"] == 4 * (8 * 4 + 4 * 16 + 8 * 16)


def test_cli_table_and_float64(capsys):
    rc, out, err = run_cli(capsys, "bench", "gemm_bias_relu", "--shape", "M=5,N=6,K=7", "--dtype", "float64", *QUICK)
    assert rc == 0, err
    roof, header, row = out.splitlines()
    assert roof.startswith("roofline: float64 peak") and "GB/s" in roof
    assert "ratio" in header and "%peak" in header and "spread" in header
    assert row.split()[:4] == ["gemm_bias_relu", "M=5,N=6,K=7", "float64", "llvm"]


def test_every_op_runs_and_matches_its_baseline(capsys):
    pytest.importorskip("torch")
    rc, out, err = run_cli(capsys, "bench", "--quick", "--json", *QUICK)
    assert rc == 0, err
    results = json_lines(out)
    assert [(r["op"], r.get("causal")) for r in results] == [
        ("gemm", None), ("gemm_bias_relu", None), ("conv2d", None), ("attention", False), ("attention", True)]
    for r in results:
        assert r["error"] is None and r["tilec_ms"] > 0 and r["baseline_ms"] > 0, r


@pytest.mark.parametrize("shape", [
    "N=2,C=3,H=7,W=6,CO=4,KH=3,KW=2",  # stride 1, pad 0, a non-square kernel
    "N=1,C=8,H=8,W=8,CO=4,KH=1,KW=1,stride=2",  # the ResNet downsampling shape
    "N=1,C=2,H=5,W=5,CO=3,KH=3,KW=3,stride=3,pad=2",
])
def test_conv2d_strides_and_padding_match_torch(capsys, shape):
    pytest.importorskip("torch")
    rc, out, err = run_cli(capsys, "bench", "conv2d", "--shape", shape, "--json", *QUICK)
    assert rc == 0, err
    assert json_lines(out)[0]["error"] is None


def test_causal_attention_with_more_keys_than_fit_one_row(capsys):
    pytest.importorskip("torch")
    rc, out, err = run_cli(capsys, "bench", "attention", "--causal", "--shape", "B=2,H=1,S=9,D=4", "--json", *QUICK)
    assert rc == 0, err
    result = json_lines(out)[0]
    assert result["causal"] is True and result["error"] is None
    assert result["baseline"].endswith("(is_causal=True)")


def test_inputs_are_in_the_baselines_layout():
    x, f = get_op("conv2d").make_inputs(dict(N=2, C=3, H=5, W=6, CO=4, KH=3, KW=1), "float32", np.random.default_rng(0))
    assert x.shape == (2, 3, 5, 6) and f.shape == (4, 3, 3, 1) and x.dtype == np.float32


def test_cooldown_idles_after_each_call_outside_the_timed_spans():
    clock = FakeClock()
    case = FakeCase(clock, [0.002], [0.004])
    samples = harness.measure(case, harness.Settings(warmup=1, repeats=3, warmup_s=0, budget_s=100, cooldown_s=0.5),
                              clock, clock.sleep)
    assert clock.naps == [0.5] * (2 * (1 + 3))  # after both calls of every pair
    assert all(abs(t - 0.002) < 1e-12 for t in samples.tilec) and all(abs(b - 0.004) < 1e-12 for b in samples.baseline)


def test_consecutive_calls_time_all_but_the_first_of_each_turn():
    clock = FakeClock()
    # each side's first call of a turn is slow (cold), the next ones fast
    case = FakeCase(clock, [9.0, 0.003, 0.002] * 4, [9.0, 0.005, 0.004] * 4)
    samples = harness.measure(case, harness.Settings(warmup=1, repeats=3, warmup_s=0, budget_s=1000, cooldown_s=0.5,
                                                     consecutive=3), clock, clock.sleep)
    assert case.log == (["tilec"] * 3 + ["baseline"] * 3) * 4
    assert clock.naps == [0.5] * (2 * 4)  # after each side's turn, not between its calls
    assert samples.tilec == pytest.approx((0.003, 0.002) * 3) and samples.baseline == pytest.approx((0.005, 0.004) * 3)
    assert case.checked == [(("tilec", 3), ("baseline", 6))]  # the last call of each side in the first pair
    with pytest.raises(tilec.TilecError, match="--consecutive"):
        harness.Settings(consecutive=0)


def test_bench_records_flag_refuses_a_missing_file(tmp_path, capsys):
    from tilec.cli import main

    code = main(["bench", "gemm", "--quick", "--records", str(tmp_path / "nope.sqlite")])
    assert code == 1 and "no such file" in capsys.readouterr().err


# ------------------------------------------------------------------ --backward


def test_backward_cases_are_the_forward_acceptance_shapes():
    for name, causal in (("conv2d", False), ("attention", False), ("attention", True)):
        fwd = select_cases(name, causal=causal)
        bwd = select_cases(name, causal=causal, backward=True)
        assert [dict(c.shape) for c in bwd] == [dict(c.shape) for c in fwd]
        assert all(c.op.backward and c.op.label.endswith("-backward") for c in bwd)
    assert [c.op.label for c in select_cases("all", quick=True, backward=True)] == [
        "conv2d-backward", "attention-backward", "attention-causal-backward"]
    with pytest.raises(BenchError, match="--backward applies to conv2d and attention"):
        select_cases("gemm", backward=True)


@pytest.mark.parametrize("argv", [
    ["conv2d", "--quick"],
    ["conv2d", "--shape", "N=2,C=3,H=7,W=6,CO=4,KH=3,KW=2,pad=1"],
    ["conv2d", "--shape", "N=1,C=8,H=8,W=8,CO=4,KH=1,KW=1,stride=2"],
    ["attention", "--quick"],
    ["attention", "--quick", "--causal"],
    ["conv2d", "--quick", "--dtype", "bfloat16"],  # torch reads ml_dtypes' bfloat16 arrays through their bits
    ["attention", "--quick", "--dtype", "bfloat16"],
])
def test_backward_matches_torch_autograd(capsys, argv):
    pytest.importorskip("torch")
    rc, out, err = run_cli(capsys, "bench", *argv, "--backward", "--json", *QUICK)
    assert rc == 0, err
    (r,) = json_lines(out)
    assert JSON_KEYS <= set(r) and r["backward"] is True and r["error"] is None, r
    assert r["baseline"].startswith("torch.autograd.grad(")
    if r["op"] == "attention":
        assert r["causal"] == ("--causal" in argv)


def test_backward_check_compares_every_gradient():
    case = select_cases("conv2d", quick=True, backward=True)[0]
    a, b = np.ones((2, 3), np.float32), np.ones((4,), np.float32)
    case.check((a, b), (a, b))
    with pytest.raises(BenchError, match=r"\(dF\)"):
        case.check((a, b), (a, b + 1))
    with pytest.raises(BenchError, match="2 gradients"):
        case.check((a, b), (a, b, b))


def test_train_step_cases_run_and_check_the_losses(capsys):
    from tilec.cli import main

    code = main(["bench", "train_step", "--quick", "--json", "--repeats", "1", "--warmup-time", "0", "--cooldown", "0"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert code == 0 and [d["op"] for d in lines] == ["train_step", "train_step"]
    assert all(d["tilec_ms"] > 0 and d["baseline_ms"] > 0 and d["error"] is None for d in lines)


def test_the_bench_restarts_with_quiet_baselines_and_fixed_malloc_thresholds(monkeypatch):
    """`tilec bench` re-executes itself with OpenBLAS's threads quiet and glibc's malloc thresholds
    fixed (freed blocks under 32 MiB stay in the process); settings the user made are kept."""
    from tilec.bench.harness import QUIET_BASELINE_ENV
    from tilec.cli import bench as cli_bench

    tunables = QUIET_BASELINE_ENV["GLIBC_TUNABLES"].split(":")
    assert "glibc.malloc.mmap_threshold=33554432" in tunables
    assert any(t.startswith("glibc.malloc.trim_threshold=") and int(t.split("=")[1]) >= 1 << 27 for t in tunables)
    calls = []
    monkeypatch.setattr(cli_bench.os, "execve", lambda path, argv, env: calls.append((argv, env)))
    for key in QUIET_BASELINE_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    cli_bench.reexec_with_quiet_baselines(["bench", "gemm"])
    (argv, env), = calls
    assert argv[-2:] == ["bench", "gemm"] and env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=1"
    assert env["OPENBLAS_THREAD_TIMEOUT"] == QUIET_BASELINE_ENV["OPENBLAS_THREAD_TIMEOUT"]
    for key, value in QUIET_BASELINE_ENV.items():
        monkeypatch.setenv(key, value)
    cli_bench.reexec_with_quiet_baselines(["bench", "gemm"])
    assert len(calls) == 1  # all set: no restart
