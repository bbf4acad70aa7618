"""Shared test set-up: the suite never reads or writes the developer's tuning records."""

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
