"""Shared test set-up: the suite never reads or writes the developer's tuning records, and every
compilation verifies its loop IR between the pipeline's stages (debug mode). `--cpu NAME` compiles
the default target for that CPU instead of the host's (TILEC_TARGET='llvm -mcpu=NAME', here and in
subprocesses): `pytest --cpu haswell` runs the suite on the AVX2 code path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tilec.config import options


@pytest.fixture(autouse=True, scope="session")
def isolated_tuning_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point the records database (in this process and in subprocesses) at an empty temp dir."""
    path = tmp_path_factory.mktemp("records") / "records.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(options, "records_path", path)
        mp.setattr(options, "use_records", True)
        mp.setenv("TILEC_RECORDS", str(path))
        yield


@pytest.fixture(autouse=True, scope="session")
def verified_stages() -> Iterator[None]:
    """Debug mode: tilec.ir.verify runs after every loop-IR stage, here and in subprocesses."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(options, "debug", True)
        mp.setenv("TILEC_DEBUG", "1")
        yield


# Test files that time things (peaks, thread pools, benchmarks, the tuner's measurements and budgets)
# or start process pools or clusters of their own: they run alone, after the rest of the suite has
# run on all cores (scripts/test.sh), so that no other test's work competes with what they measure.
SERIAL_FILES = frozenset({
    "test_backend_tuning.py", "test_bench.py", "test_bench_model.py", "test_cli.py", "test_distributed.py",
    "test_info.py", "test_parallel_runtime.py", "test_parallel_serial.py", "test_peaks.py", "test_readme.py",
    "test_records.py", "test_task_scheduler.py", "test_timing.py", "test_tuner.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of SERIAL_FILES `serial` (a name that is no file here stops the run: a renamed
    file would otherwise run among the others unnoticed)."""
    missing = sorted(name for name in SERIAL_FILES if not (Path(__file__).parent / name).is_file())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py's SERIAL_FILES names files that do not exist: {missing}")
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


def pytest_configure(config: pytest.Config) -> None:
    """`--cpu NAME`: before any test module compiles at import time, the target 'llvm' becomes that CPU."""
    cpu = config.getoption("--cpu")
    if cpu:
        from tilec.pipeline import resolve_target

        target = f"llvm -mcpu={cpu}"
        resolve_target(target)  # an unknown CPU stops the run here, listing those LLVM knows
        os.environ["TILEC_TARGET"] = options.cpu_target = target


def pytest_report_header(config: pytest.Config) -> str:
    from tilec.pipeline import resolve_target

    host = resolve_target("llvm").host
    assert host is not None
    return f"tilec target llvm: CPU {host.name}, {host.vector_bits}-bit vectors, {host.vector_registers} vector registers"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu", default=None, metavar="NAME",
                     help="compile the default target 'llvm' for this CPU as LLVM names it (e.g. haswell: the AVX2 "
                          "code path) instead of the host's; TILEC_TARGET='llvm -mcpu=NAME' does the same")
    parser.addoption("--compile-backend", default="tilec", metavar="NAME",
                     help="the torch.compile backend whose training tests/test_backend_models.py compares with "
                          "eager (default tilec; aot_eager stands in for it; the coverage tests use tilec always)")


@pytest.fixture
def pairs_target(without_tiles: str) -> str:
    """The target whose choices a test of the AVX512-BF16 paths (pair dot products, 32 vector
    registers, no AMX) explains: `without_tiles` where the default CPU has the pair dot product,
    else an explicit Zen 4 (`llvm -mcpu=znver4`), whose code compiles anywhere: explaining runs
    nothing, so such a test checks those choices on an AVX2-only CPU too, and runs its kernels on
    the default target."""
    from tilec.pipeline import resolve_target
    from tilec.target import has_pair_dot

    host = resolve_target(without_tiles).host
    return without_tiles if host is not None and has_pair_dot(host) else "llvm -mcpu=znver4"


@pytest.fixture
def without_tiles(monkeypatch: pytest.MonkeyPatch) -> str:
    """Target 'llvm' without AMX's tiles for the test (the CPU of `--cpu`, or the host, less amx-tile
    and amx-bf16): tests of the paths a CPU without AMX takes (bfloat16 pairs, the direct variant)
    hold on a CPU with AMX too. Returns the target string."""
    base = options.cpu_target or "llvm"
    target = f"{base},-amx-tile,-amx-bf16" if "-mattr=" in base else f"{base} -mattr=-amx-tile,-amx-bf16"
    monkeypatch.setattr(options, "cpu_target", target)
    return target

