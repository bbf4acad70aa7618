"""Differential fuzzing: every random valid program compiled for the default target computes what
the reference interpreter (target "interp") computes.

Each generated program holds several independent statements (each one a random program: this is
how the CI run reaches its count within budget; see tests/fuzz_programs.py). Both sides either
return equal results (same shapes and dtypes; integers and booleans exact; floats within a
dtype-appropriate tolerance, NaN where NaN) or both raise a TilecError. Three differences are
explained: an '=' that writes a cell twice, which the interpreter always sees and the compiler only
where its analysis can; the compiler's refusal (a TilecError) of index arithmetic beyond 64 bits, a
limit of compiled code the interpreter does not have; and a float output computed from a sum or
product that leaves its type's range in some order of aggregation (the interpreter's
``order_dependent``), whose values the language does not determine (compiled kernels reassociate):
such an output must still have the interpreter's shape and dtype. Any other exception is a failure.

The default run executes FUZZ_PROGRAMS programs (about 8,000 statements) from a fixed seed
(TILEC_FUZZ_SEED, default 2026), so that CI is reproducible; the `slow` run (``-m slow``) executes
TILEC_FUZZ_EXAMPLES programs (default 50,000) from TILEC_FUZZ_SEED (default 15): the nightly run.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from fuzz_programs import Case, cases

import tilec
from tilec.errors import SemanticError, TilecError
from tilec.ir.dtypes import is_float
from tilec.ir.builtins import BUILTINS

STATEMENTS_PER_PROGRAM = 5  # at most
FUZZ_PROGRAMS = 2000  # ~8,000 statements (4.0 per program on average, size statements included; measured)
COMPILER_LIMITS = ("exceeds 64 bits", "too large to index")  # refusals where the interpreter has no limit
TOLERANCE = {"float16": 2e-2, "bfloat16": 2e-2, "float32": 2e-4, "float64": 1e-9}


def _run(function: tilec.Function, arrays: tuple[np.ndarray, ...]) -> tuple[Any, ...] | TilecError:
    """The outputs as a tuple, or the TilecError raised (any other exception propagates)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = function(*arrays)
        except TilecError as err:
            return err
    return result if isinstance(result, tuple) else (result,)


def _compile(source: str, target: str) -> tilec.Function | TilecError:
    try:
        return tilec.compile(source, target=target)
    except TilecError as err:
        return err


def outcome(source: str, arrays: tuple[np.ndarray, ...], target: str) -> tuple[Any, ...] | TilecError:
    function = _compile(source, target)
    return function if isinstance(function, TilecError) else _run(function, arrays)


def _computed_in(case: Case) -> str:
    """The narrowest float type the program may compute in: its float inputs' types, and float32
    wherever a float function meets integers (PlaidML's rule). A float64 result can carry that
    type's rounding (libm and numpy differ by an ulp there), so it is compared at its tolerance."""
    types = [a.dtype.name for a in case.arrays if is_float(a.dtype.name)]
    if any(f"{name}(" in case.source for name, b in BUILTINS.items() if b.kind == "float"):
        types.append("float32")
    return max(types, key=lambda t: TOLERANCE[t], default="float64")


def _mismatch(want: np.ndarray, got: np.ndarray, computed_in: str = "float64") -> str | None:
    """Why `got` differs from the interpreter's `want`, or None."""
    if want.shape != got.shape or want.dtype != got.dtype:
        return f"expected {want.dtype}{list(want.shape)}, got {got.dtype}{list(got.shape)}"
    if not is_float(want.dtype.name):
        return None if np.array_equal(want, got) else f"expected {want!r}, got {got!r}"
    rtol = max(TOLERANCE[want.dtype.name], TOLERANCE[computed_in])
    want, got = want.astype(np.float64), got.astype(np.float64)  # (exact; numpy knows bfloat16 only through ml_dtypes)
    if not np.array_equal(np.isnan(want), np.isnan(got)):
        return f"NaN at different cells: expected {want!r}, got {got!r}"
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isinf(want), 0, want)), initial=0)))
    w, g = want, got
    same_inf = np.array_equal(np.isinf(w), np.isinf(g)) and np.array_equal(w[np.isinf(w)], g[np.isinf(g)])
    finite = ~np.isnan(w) & ~np.isinf(w)
    if same_inf and np.allclose(w[finite], g[finite], rtol=rtol, atol=rtol * scale):
        return None
    return f"expected {want!r}, got {got!r}"


def check(case: Case) -> None:
    """Assert that the compiled program and the interpreter agree on `case` (see the module docstring)."""
    want = outcome(case.source, case.arrays, "interp")
    got = outcome(case.source, case.arrays, "llvm")
    where = f"\n{case.describe()}"
    if isinstance(want, TilecError) or isinstance(got, TilecError):
        if isinstance(want, TilecError) and isinstance(got, TilecError):
            return
        if isinstance(want, SemanticError) and "more than once" in str(want):
            return  # '=' writing a cell twice: the compiler refuses it only where it can see it
        if isinstance(got, TilecError) and any(limit in str(got) for limit in COMPILER_LIMITS):
            return  # a documented limit of the compiled code, refused with a TilecError: no wrong answer
        raise AssertionError(f"only one side raised: interp {want!r}, compiled {got!r}{where}")
    assert len(want) == len(got)
    problems = {k: _mismatch(np.asarray(w), np.asarray(g), _computed_in(case)) for k, (w, g) in enumerate(zip(want, got))}
    problems = {k: p for k, p in problems.items() if p is not None}
    if problems:
        interp = tilec.compile(case.source, target="interp")
        undetermined = interp.order_dependent(*case.arrays)
        for k, problem in problems.items():
            w, g = np.asarray(want[k]), np.asarray(got[k])
            if interp.outputs[k] in undetermined and (w.shape, w.dtype) == (g.shape, g.dtype):
                continue  # the order of aggregation decides these values: the language leaves it open
            raise AssertionError(f"output {k} differs: {problem}{where}")


@seed(int(os.environ.get("TILEC_FUZZ_SEED", "2026")))
@settings(max_examples=FUZZ_PROGRAMS, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(STATEMENTS_PER_PROGRAM))
def test_compiled_programs_equal_the_interpreter(case: Case):
    check(case)


@pytest.mark.slow
def test_compiled_programs_equal_the_interpreter_nightly():
    examples = int(os.environ.get("TILEC_FUZZ_EXAMPLES", "50000"))
    run = settings(max_examples=max(1, examples), deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))(given(cases(STATEMENTS_PER_PROGRAM))(check))
    seed(int(os.environ.get("TILEC_FUZZ_SEED", "15")))(run)()
