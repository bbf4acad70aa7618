"""Every snippet of the README runs as written: the Python blocks, and the `tilec` command lines."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README.read_text(), re.S)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
COMMANDS = [line.split("#")[0].strip() for lang, code in BLOCKS if lang == "bash" for line in code.splitlines()
            if line.startswith("tilec ")]


def test_the_readme_has_snippets():
    assert len(PYTHON) >= 5 and len(COMMANDS) >= 6


@pytest.mark.parametrize("code", PYTHON, ids=[f"python{k}" for k in range(len(PYTHON))])
def test_python_snippet_runs(code: str, capsys: pytest.CaptureFixture[str]):
    exec(compile(code, str(README), "exec"), {})  # each block stands alone


@pytest.mark.parametrize("command", COMMANDS)
def test_command_runs(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tilec.cli import main

    argv = shlex.split(command)[1:]
    records = tmp_path / "records.sqlite"
    argv = [str(records) if a.endswith("records.sqlite") else a for a in argv]  # this test's records
    monkeypatch.setenv("TILEC_RECORDS", str(records))
    if argv[:2] == ["bench", "gemm"] and "--records" in argv:  # benchmark what a quick tuning recorded
        assert main(["tune", "gemm", "--shape", "M=64,N=64,K=64", "--trials", "2", "--records", str(records)]) == 0
    assert main(argv) == 0, command
