"""The corpus of Tile programs (tests/test_programs.py, tests/test_contractions.py) on target cuda-sim.

Their test functions are imported here (the same programs, parameters and numpy references,
not copies) and run with `tilec.compile` defaulting to target="cuda-sim": GPU lowering, the
GPU emulator and LLVM, compared against numpy exactly as on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tilec
from tilec.runtime.function import Function

from test_contractions import *  # noqa: F401,F403  (the corpus: collected again under this module)
from test_programs import *  # noqa: F401,F403


@pytest.fixture(autouse=True)
def cuda_sim_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def compile_for_gpu(source: str, target: Any = "cuda-sim", **sizes: int) -> Function:
        return Function(source, target=target, **sizes)

    monkeypatch.setattr(tilec, "compile", compile_for_gpu)
    yield
