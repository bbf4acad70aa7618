"""`tilec info`: the host Target, the measured peaks, paths and versions, as text and as JSON; a
probe that fails is reported in place, never as a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tilec.cli
from tilec.cli import info as info_cli
from tilec.runtime import peaks
from tilec.target import host_cpu, host_target


def run_cli(capsys, *argv):
    rc = tilec.cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_info_prints_the_target_the_peaks_and_the_versions(capsys):
    rc, out, err = run_cli(capsys, "info")
    assert rc == 0, err
    cpu = host_cpu()
    assert f"LLVM CPU {cpu.name}" in out and f"{cpu.cores} cores" in out
    assert f"{cpu.vector_bits} bits" in out and f"fma_units  {cpu.fma_units}" in out
    assert f"FMA latency {cpu.fma_latency} cycles" in out
    assert "L1d" in out and "L3" in out
    assert "GFLOP/s" in out and "GB/s" in out and "float32" in out and "float64" in out
    assert "records" in out and f"tilec {tilec.__version__}" in out and "llvmlite" in out
    for feature in info_cli.NOTABLE_FEATURES:
        assert feature in out


def test_info_json_parses_and_matches_the_target_and_the_peaks(capsys):
    rc, out, err = run_cli(capsys, "info", "--json")
    assert rc == 0, err
    data = json.loads(out)
    target = data["target"]
    assert target["key"] == host_target().key and target["vector_bits"] == host_cpu().vector_bits
    assert set(target["features"]) | set(target["features_absent"]) == set(info_cli.NOTABLE_FEATURES)
    measured = peaks.machine_peaks()
    assert data["peaks"]["fma"] == measured.to_dict()["fma"] and data["peaks"]["all_gbs"] == measured.all_gbs
    assert data["versions"]["tilec"] == tilec.__version__ and data["versions"]["numpy"]
    assert set(data["paths"]) == {"cache_dir", "disk_cache", "records"}


def test_a_failing_probe_is_reported_in_place(capsys, monkeypatch: pytest.MonkeyPatch):
    def fail(refresh: bool = False, **kwargs):
        raise peaks.PeakProbeError("the probe's kernels do not compile for CPU imaginary")

    monkeypatch.setattr(peaks, "machine_peaks", fail)
    rc, out, err = run_cli(capsys, "info")
    assert rc == 0 and "not measured: PeakProbeError: the probe's kernels do not compile" in out
    assert "could not be measured" in err and "Traceback" not in out + err
    rc, out, _ = run_cli(capsys, "info", "--json")
    assert rc == 0 and "error" in json.loads(out)["peaks"]


def test_info_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "tilec.cli", "info", "--json"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["target"]["llvm_cpu"] == host_cpu().name


def test_cpu_model_reads_proc_cpuinfo(tmp_path):
    text = "processor\t: 0\nvendor_id\t: X\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: Some CPU\n\nprocessor\t: 1\n"
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert info_cli.cpu_model(path) == {"name": "Some CPU", "family": "25", "model": "17"}
    assert info_cli.cpu_model(tmp_path / "missing")["family"] == ""


def test_l1d_ways_reads_sysfs_and_falls_back_to_eight(tmp_path):
    from tilec.target import l1d_ways

    for index, (kind, level, ways) in enumerate((("Instruction", 1, 8), ("Data", 1, 12), ("Unified", 2, 16))):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "type").write_text(kind + "\n")
        (d / "level").write_text(f"{level}\n")
        (d / "ways_of_associativity").write_text(f"{ways}\n")
    assert l1d_ways(tmp_path) == 12
    assert l1d_ways(tmp_path / "missing") == 8
    (tmp_path / "index1" / "ways_of_associativity").write_text("0\n")
    assert l1d_ways(tmp_path) == 8
    assert host_cpu().l1d_ways >= 1
