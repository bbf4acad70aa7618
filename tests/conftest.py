"""Shared test set-up: the suite never reads or writes the developer's tuning records, and every
compilation verifies its loop IR between the pipeline's stages (debug mode)."""

from __future__ import annotations

from collections.abc import Iterator

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compile-backend", default="tilec", metavar="NAME",
                     help="the torch.compile backend whose training tests/test_backend_models.py compares with "
                          "eager (default tilec; aot_eager stands in for it; the coverage tests use tilec always)")
