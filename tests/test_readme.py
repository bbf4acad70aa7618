"""Every snippet of the README and of docs/*.md runs as written: the Python blocks, the `tilec` command
lines and the Tile blocks."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
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


def _doc_python_blocks() -> list[tuple[str, str]]:
    """(id, code) of every ```python block of docs/*.md; the id names the file and the block's first line."""
    blocks = []
    for doc in sorted((README.parent / "docs").glob("*.md")):
        text = doc.read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, re.S):
            line = text.count("\n", 0, match.start()) + 2
            blocks.append((f"{doc.name}:{line}", match.group(1)))
    return blocks


DOC_PYTHON = _doc_python_blocks()


def test_the_language_reference_has_examples():
    assert sum(name.startswith("LANGUAGE.md") for name, _ in DOC_PYTHON) >= 30


@pytest.mark.parametrize("name, code", DOC_PYTHON, ids=[name for name, _ in DOC_PYTHON])
def test_docs_python_snippet_runs(name: str, code: str, capsys: pytest.CaptureFixture[str]):
    """Each block stands alone, its line numbers those of the document (tracebacks point into it)."""
    doc, line = name.split(":")
    exec(compile("\n" * (int(line) - 1) + code, str(README.parent / "docs" / doc), "exec"), {})


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


# ---------------------------------------------------------------- Tile snippets (README.md and docs/*.md)

DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]
TILE_BLOCKS = [code for doc in DOCS for lang, code in re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), re.S)
               if lang == "tile"]


def _tile_programs() -> list[str]:
    """A block that opens with `function` is one program; otherwise each line is one."""
    programs = []
    for block in TILE_BLOCKS:
        if block.lstrip().startswith("function"):
            programs.append(block)
        else:
            programs += [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    return programs


def _brute_force_conv(i, k):  # O[n, x, y, co] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co])
    n, h, w, _ = i.shape
    out = np.zeros((n, h + 1, w + 1, k.shape[3]))
    for x, y, a, b in np.ndindex(h + 1, w + 1, k.shape[0], k.shape[1]):
        if 0 <= x + a - 1 < h and 0 <= y + b - 1 < w:
            out[:, x, y] += i[:, x + a - 1, y + b - 1] @ k[a, b]
    return out


REFERENCES = {  # a word of the snippet -> numpy reference of its output from its inputs
    "C[i, j: M, N]": lambda a, b: a @ b,
    "O[j, i: N, M]": lambda a: a.T,
    "O[] = +(A[i, i])": lambda a: np.trace(a),
    "K[i, j, c, co]": _brute_force_conv,
    "I[2x + i, 2y + j]": lambda a: a.reshape(2, 2, 2, 2).max(axis=(1, 3)),
    "i - k < N": lambda a: np.cumsum(a),
    "O[x + i]": lambda a, b: np.convolve(a, b),
    "L[n] == R[c]": lambda labels, r, v: np.array([v[r == x].sum() for x in labels]),
    "E = exp(X - M)": lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True),
}


def test_there_are_tile_snippets():
    assert len(_tile_programs()) >= 9


@pytest.mark.parametrize("src", _tile_programs())
def test_tile_snippet_runs(src: str):
    import tilec
    from tilec.frontend import parse

    program = parse(src)
    ranks = {p.name: len(p.dims) if p.dims is not None else None for p in program.params}
    for st in program.statements:
        for access in getattr(st, "operands", ()):
            ranks[access.tensor] = ranks.get(access.tensor) or len(access.indices)
    rng = np.random.default_rng(0)
    args = [rng.integers(0, 3, (4,) * ranks[name]).astype(np.float64) for name in program.input_names]
    (key,) = [k for k in REFERENCES if k in src]  # every snippet has its reference
    np.testing.assert_allclose(tilec.compile(src)(*args), REFERENCES[key](*args), rtol=1e-6, atol=1e-9)
