"""The PlaidML corpus: Tile programs taken from PlaidML's public sources (plaidml/plaidml, read at
tag 0.7.0), each with its citation, its arguments and a numpy reference; and PlaidML's negative
programs, which must be refused with a TilecError naming the culprit.

The programs live in plaidml_corpus_lang.py (tutorial, tile/lang tests, builtins, C++/Python API
tests), plaidml_corpus_ops.py (op library, value operators), plaidml_corpus_keras.py (Keras
backend), plaidml_corpus_edsl*.py (EDSL tests' printed Tile) and plaidml_corpus_early.py (the 0.1.3 Keras backend, Winograd). This module gathers them and says how one is run and judged;
tests/test_plaidml_corpus.py and tests/plaidml_corpus_report.py both use it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np

from plaidml_corpus_base import Arg, Negative, Program, f32, ints
from plaidml_corpus_early import PROGRAMS as EARLY_PROGRAMS
from plaidml_corpus_edsl import PROGRAMS as EDSL_PROGRAMS
from plaidml_corpus_edsl_py import PROGRAMS as EDSL_PY_PROGRAMS
from plaidml_corpus_keras import PROGRAMS as KERAS_PROGRAMS
from plaidml_corpus_lang import PROGRAMS as LANG_PROGRAMS
from plaidml_corpus_ops import PROGRAMS as OP_PROGRAMS

def _variant(program_id: str, new_id: str, note: str, dtype: str | None = None, **args: Arg) -> Program:
    """A corpus program called with other argument dtypes (PlaidML runs every program on every type)."""
    base = next(p for p in [*LANG_PROGRAMS, *OP_PROGRAMS, *KERAS_PROGRAMS] if p.id == program_id)
    return replace(base, id=new_id, args={**base.args, **args}, note=note, dtype=dtype)


DTYPE_VARIANTS: list[Program] = [
    _variant("ctest_add", "ctest_add_float32_float64", "float32 + float64 of 64x55 promotes to float64", "float64",
             A=f32(64, 55), B=Arg((64, 55), "float64")),
    _variant("ctest_add", "ctest_add_float32_int32", "float32 + int32 promotes to float32 (the float side wins)", "float32",
             A=f32(64, 55), B=ints(64, 55)),
    _variant("ctest_add", "ctest_add_uint32_uint32", "uint32 + uint32", "uint32",
             A=ints(8, 9, dtype="uint32", lo=0, hi=10**9), B=ints(8, 9, dtype="uint32", lo=0, hi=10**9)),
    _variant("ctest_add", "ctest_add_int16_int64", "int16 + int64 promotes to int64", "int64",
             A=ints(8, 9, dtype="int16", lo=-3000, hi=3000), B=ints(9, dtype="int64", lo=-10**12, hi=10**12)),
    _variant("tut_matmul", "tut_matmul_float64_float32", "float64 x float32 matmul of 64x55 by 55x9", "float64",
             A=Arg((64, 55), "float64"), B=f32(55, 9)),
    _variant("tut_matmul", "tut_matmul_float16", "float16 matmul", "float16",
             A=Arg((5, 7), "float16", -1.0, 1.0), B=Arg((7, 3), "float16", -1.0, 1.0)),
    _variant("op_summation", "op_summation_int8", "int8 sum with small values (no overflow)", "int8",
             I=ints(4, 5, dtype="int8", lo=-3, hi=3)),
    _variant("tut_max_over_axis", "tut_max_over_axis_uint16", "uint16 max", "uint16",
             I=ints(6, 5, dtype="uint16", lo=0, hi=60000)),
    _variant("lang_type_checking", "lang_type_checking_int64_biases", "int64 biases with float32 weights: PlaidML's CommonSupertype "
             "(tile/base/shape.cc @ 0.7.0) picks the float type whenever one side is float", "float32",
             Biases=ints(5, dtype="int64")),
    _variant("tut_cumsum", "tut_cumsum_float64", "float64 cumulative sum", "float64", I=Arg((9,), "float64")),
]

PROGRAMS: list[Program] = [*LANG_PROGRAMS, *OP_PROGRAMS, *KERAS_PROGRAMS, *EDSL_PROGRAMS, *EDSL_PY_PROGRAMS, *EARLY_PROGRAMS, *DTYPE_VARIANTS]

TYPE_CC = "plaidml/plaidml: tile/lang/type.cc @ 0.7.0"

NEGATIVES: list[Negative] = [
    Negative("neg_no_redeclare", "plaidml/plaidml: tile/lang/lang_test.cc @ 0.7.0 (NoRedeclare)",
             "function (X[N]) -> (X) { X = 2*X; }", {"X": f32(4)}, (r"\bX\b",),
             note="an output may not redeclare an input"),
    Negative("neg_infeasible_constraints", "plaidml/plaidml: tile/lang/lang_test.cc @ 0.7.0 (Basic Infeasible Constraints)",
             "function (I[N]) -> (O) {O[2*i] = +(I[4*i]), i - 100 < 50; }", {"I": f32(50)}, (r"\bi\b|\bO\b",),
             note="no value of i satisfies both i - 100 in [0, 50) and 4*i < 50, so O has no size"),
    Negative("neg_multiple_assignment", "plaidml/plaidml: plaidml/keras/backend_test.py @ 0.7.0 (testAssignmentExceptions)",
             """function (A[L, M], B[M, N]) -> (O) {
    O[i, k: L, N] = =(A[i, j] * B[j, k]);
}""", {"A": f32(1, 5), "B": f32(5, 1)}, (r"\bO\b",),
             note="with A 1x5 and B 5x1 five tuples assign the one cell of O ('Multiple assignment')"),
    Negative("neg_mismatched_sizes", f"{TYPE_CC} ('Mismatched sizes for %s'); program: plaidml/keras/tutorial_test.py",
             """function (A[M, L], B[L, N]) -> (C) {
    C[i, j: M, N] = +(A[i, k] * B[k, j]);
}""", {"A": f32(2, 3), "B": f32(4, 2)}, (r"\bL\b",),
             note="the tutorial's MatMul called with inner sizes 3 and 4"),
    Negative("neg_mismatched_rank", f"{TYPE_CC} ('Mismatch number of dimensions'); program: plaidml/keras/tutorial_test.py",
             """function (I[M, N]) -> (O) {
    O[n: N] = +(I[m, n]);
}""", {"I": f32(2, 3, 4)}, (r"\bI\b",),
             note="the tutorial's SumOverAxis called with a 3-D tensor"),
    Negative("neg_undefined_name", f"{TYPE_CC} ('Unknown variable %s in expression'); program: plaidml/keras/tutorial_test.py",
             """function (I[X, Y]) -> (O) {
    Sum[] = +(I[x, y]);
    O = Sum / (X * Z);
}""", {"I": f32(2, 3)}, (r"\bZ\b",),
             note="the tutorial's GlobalMean with Y mistyped as Z"),
    Negative("neg_undefined_tensor_in_contraction", f"{TYPE_CC} ('Op is using undefined input'); program: plaidml/keras/tutorial_test.py",
             """function (A[M, L], B[L, N]) -> (C) {
    C[i, j: M, N] = +(A[i, k] * D[k, j]);
}""", {"A": f32(2, 3), "B": f32(3, 2)}, (r"\bD\b",),
             note="the tutorial's MatMul with B mistyped as D in the contraction"),
    Negative("neg_elementwise_shapes", f"{TYPE_CC} ('Mismatched tensor shapes in elementwise operation'); "
             "program: plaidml/plaidml_test.cc", "function (A, B) -> (C) { C = A + B; }",
             {"A": f32(3, 4), "B": f32(5)}, (r"\bA\b|\bB\b",),
             note="the C API test's add called with shapes that do not broadcast"),
    Negative("neg_gather_float_index", f"{TYPE_CC} ('Datatype for index input to gather must be INT32'); program: plaidml/op.py",
             "function (V, I) -> (O) { O = gather(V, I); }", {"V": f32(6, 3), "I": f32(4)}, (r"\bI\b|gather",),
             note="op.py's Gather called with float indices"),
    Negative("neg_element_out_of_range", f"{TYPE_CC} ('Element requires it's tuple position to be in bound'); "
             "program: tile/lang/lang_test.cc", """function (A[I, K], B[K, J]) -> (O) {
  T = tuple(A, B);
  C = element(T, 0);
  D = element(T, 2);
  O[i, j : I, J] = +(C[i, k] * D[k, j]);
}""", {"A": f32(2, 3), "B": f32(3, 2)}, (r"\bT\b|element",),
             note="lang_test's Tupleism reading position 2 of a pair"),
    Negative("neg_float_size", f"{TYPE_CC} ('used as tensor size and is not an integer')",
             """function (I[N], S) -> (O) {
    O[i : S] = +(I[i]);
}""", {"I": f32(4), "S": Arg((), "float32", value=2.5)}, (r"\bS\b",),
             note="a float scalar input used as an output size"),
]

_INT_KINDS = "iub"


def tolerance(program: Program, arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """rtol/atol for the least precise float among the inputs and the documented result dtype."""
    dtypes = [a.dtype for a in arrays.values()] + ([np.dtype(program.dtype)] if program.dtype else [])
    floats = [d for d in dtypes if d.kind == "f"]
    if not floats:
        return {"rtol": 0.0, "atol": 0.0}
    least = min(floats, key=lambda d: d.itemsize)
    return {2: {"rtol": 2e-3, "atol": 2e-3}, 4: {"rtol": 1e-4, "atol": 1e-4}}.get(least.itemsize, {"rtol": 1e-9, "atol": 1e-9})


def arguments(program: Program | Negative, seed: int = 0) -> dict[str, np.ndarray]:
    """The program's arguments, drawn from a generator seeded by `seed` and the program id."""
    rng = np.random.default_rng([seed, *program.id.encode()])
    return {name: arg.draw(rng) for name, arg in program.args.items()}


def expected(program: Program, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    ref = program.reference(*arrays.values())
    return tuple(np.asarray(r) for r in (ref if isinstance(ref, tuple) else (ref,)))


def run(program: Program, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Compile with tilec and call it; one array per output."""
    import tilec

    function = tilec.compile(program.code, **program.sizes)
    result: Any = function(**arrays)
    return tuple(np.asarray(r) for r in (result if isinstance(result, tuple) else (result,)))


def mismatch(program: Program, arrays: dict[str, np.ndarray], got: tuple[np.ndarray, ...]) -> str | None:
    """None when `got` equals the reference (shape, documented dtype, values), else what differs."""
    want = expected(program, arrays)
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    tol = tolerance(program, arrays)
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {k}: shape {g.shape}, expected {w.shape}"
        if program.dtype is not None and g.dtype != np.dtype(program.dtype):
            return f"output {k}: dtype {g.dtype}, expected {program.dtype}"
        try:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tol)
        except AssertionError as e:
            return f"output {k}: " + " ".join(str(e).split())[:300]
    return None


def names_culprit(negative: Negative, message: str) -> str | None:
    """None when the message names every culprit and gives a line and column, else what is missing."""
    missing = [p for p in negative.culprit if not re.search(p, message)]
    if missing:
        return f"message does not name {missing}"
    if not re.search(r"line \d+", message) or not re.search(r"column \d+", message):
        return "message gives no line and column"
    return None
