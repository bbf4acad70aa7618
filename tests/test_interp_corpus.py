"""The PlaidML corpus (tests/plaidml_corpus.py) through the reference interpreter: each program's
result equals its numpy reference, and the compiled program equals the interpreter's result (or
both refuse the program with a TilecError)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tilec
from plaidml_corpus import PROGRAMS, arguments, mismatch, run, tolerance


def interpret(program: Any, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Run `program` with the interpreter; one array per output."""
    result = tilec.compile(program.code, target="interp", **program.sizes)(**arrays)
    return tuple(np.asarray(r) for r in (result if isinstance(result, tuple) else (result,)))


TOO_LARGE = ("would enumerate", "too large for the interpreter")  # its documented limit (tilec.interp.tuples)


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_interpreter_matches_numpy_on_plaidml_program(program):
    arrays = arguments(program)
    try:
        result = interpret(program, arrays)
    except tilec.TilecError as err:  # a 224x224 convolution: beyond the enumeration limit, said so
        assert any(words in str(err) for words in TOO_LARGE), err
        result = run(program, arrays)  # the compiled program is then checked against numpy alone
    problem = mismatch(program, arrays, result)
    assert problem is None, f"{program.id} ({program.cite}): {problem}"


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_compiler_equals_interpreter_on_plaidml_program(program):
    arrays = arguments(program)
    try:
        want = interpret(program, arrays)
    except tilec.TilecError as err:
        if any(words in str(err) for words in TOO_LARGE):  # the interpreter's limit: numpy judges alone
            assert mismatch(program, arrays, run(program, arrays)) is None
            return
        with pytest.raises(tilec.TilecError):  # both refuse it; the test above reports the refusal
            run(program, arrays)
        return
    got = run(program, arrays)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {k}: {g.dtype}{g.shape}, interp {w.dtype}{w.shape}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tolerance(program, arrays))
