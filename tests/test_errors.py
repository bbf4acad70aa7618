"""Every bad input is refused with a tilec.TilecError subclass that says what is wrong."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tilec
from reference import randn, rng


def names(message: str, word: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", message) is not None


def compile_and_call(src, *arrays, **sizes):
    """Errors may surface at compile time or at the first call; both paths are covered."""
    return tilec.compile(src, **sizes)(*arrays)


# --------------------------------------------------------------------------- hierarchy

@pytest.mark.parametrize("name", ["TileSyntaxError", "SemanticError", "BindError"])
def test_error_classes_are_tilec_errors(name):
    cls = getattr(tilec, name)
    assert issubclass(cls, tilec.TilecError)
    assert issubclass(tilec.TilecError, Exception)


# --------------------------------------------------------------------------- syntax errors

def assert_caret_points_at(err, source: str, expected_char: str) -> None:
    """The message shows the offending source line with a caret under `expected_char`,
    and err.line / err.column (1-based) point at that same character."""
    src_line = source.splitlines()[err.line - 1]
    assert 1 <= err.column <= len(src_line), (err.line, err.column, src_line)
    assert src_line[err.column - 1] == expected_char, (err.column, src_line)
    lines = str(err).splitlines()
    caret_rows = [k for k, ln in enumerate(lines) if ln.strip() == "^"]
    assert caret_rows, f"no caret line in message:\n{err}"
    k = caret_rows[-1]
    assert k > 0
    shown, caret_col = lines[k - 1], lines[k].index("^")
    assert src_line.strip() in shown, f"source line not shown above the caret:\n{err}"
    assert caret_col < len(shown) and shown[caret_col] == expected_char, f"caret misplaced:\n{err}"


def test_syntax_error_unexpected_token_position():
    src = "C[i, j: M, N] = +(A[i, k] * * B[k, j])"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    err = info.value
    assert err.line == 1
    assert err.column == src.index("* *") + 3  # the second '*', 1-based
    assert_caret_points_at(err, src, "*")


def test_syntax_error_bad_character_on_third_line():
    src = "function (A[N]) -> (O) {\n    T = A + 1;\n    O = T $ 2;\n}\n"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    err = info.value
    assert err.line == 3
    assert err.column == 11
    assert_caret_points_at(err, src, "$")


def test_syntax_error_missing_semicolon_points_at_next_statement():
    src = "function (A[N]) -> (O) {\n    T = A + 1\n    O = T * 2;\n}"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    err = info.value
    assert (err.line, err.column) == (3, 5)
    assert_caret_points_at(err, src, "O")


def test_syntax_error_bad_aggregation():
    src = "O[i: N] = %(A[i])"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    assert info.value.line == 1
    assert_caret_points_at(info.value, src, "%")


def test_syntax_error_unclosed_paren_at_end():
    src = "C[i,j:M,N] = +(A[i,k]*B[k,j]"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    assert info.value.line == 1
    assert "^" in str(info.value)


def test_syntax_error_unterminated_function():
    src = "function (A) -> (O) {\n  O = A;\n"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.parse(src)
    assert info.value.line >= 2
    assert "^" in str(info.value)


def test_syntax_error_from_compile_too():
    src = "O = A @ B"
    with pytest.raises(tilec.TileSyntaxError) as info:
        tilec.compile(src)
    assert (info.value.line, info.value.column) == (1, src.index("@") + 1)
    assert_caret_points_at(info.value, src, "@")


@pytest.mark.parametrize(
    "src",
    [
        "",
        "   ",
        "// only a comment",
        "O[i: N] = +(A[i]",
        "O[i: N] +(A[i])",
        "O[i: N] = +(A[i]) extra",
        "function (A) -> (O) { O = A; } trailing",
        "function (A) (O) { O = A; }",
        "O = A +",
        "O = ? A : B",
        "O[i: N] = +(A[i]),",
        "O = exp(A",
        "function (A[N] -> (O) { O = A; }",
    ],
)
def test_malformed_sources_raise_tilec_error(src):
    with pytest.raises(tilec.TilecError):
        tilec.parse(src)
    with pytest.raises(tilec.TilecError):
        compile_and_call(src, np.ones(3, np.float32))


# --------------------------------------------------------------------------- semantic errors

def assert_semantic(src, culprit):
    with pytest.raises(tilec.SemanticError) as info:
        tilec.parse(src)
    assert names(str(info.value), culprit), f"{culprit!r} not named in: {info.value}"
    with pytest.raises(tilec.SemanticError):
        tilec.compile(src)


def test_valid_programs_parse_without_shapes():
    for src in [
        "C[i,j:M,N] = +(A[i,k]*B[k,j])",
        "function (X[N, C]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); E = exp(X - M);"
        " S[i, 0: N, 1] = +(E[i, j]); O = E / S; }",
        "function (A, B) -> (C) { C = A + B; }",
        "function (I[N], K[KN]) -> (O) { O[x: N] = +(I[x + i - 2] * K[i]); }",
    ]:
        assert tilec.parse(src) is not None


def test_undefined_tensor_in_contraction():
    assert_semantic("function (A[N]) -> (O) { O[i: N] = +(Bogus[i]); }", "Bogus")


def test_undefined_tensor_in_elementwise():
    assert_semantic("function (A) -> (O) { O = A + Missing; }", "Missing")


def test_tensor_used_before_definition():
    assert_semantic("function (A) -> (O) { O = Later + A; Later = A * 2; }", "Later")


def test_rank_mismatch_with_declared_input():
    assert_semantic("function (Amat[N, M]) -> (O) { O[i: N] = +(Amat[i]); }", "Amat")


def test_rank_mismatch_with_intermediate():
    assert_semantic(
        "function (A[N, M]) -> (O) { Tmp[i: N] = +(A[i, j]); O[i: N] = +(Tmp[i, 0]); }", "Tmp"
    )


def test_rank_mismatch_between_two_reads():
    assert_semantic("O[i: N] = +(Amat[i, j] * Amat[j])", "Amat")


def test_output_index_and_size_counts_differ():
    assert_semantic("function (A[N, M]) -> (Out) { Out[i, j: N] = +(A[i, j]); }", "Out")


def test_tensor_assigned_twice():
    assert_semantic(
        "function (A[N]) -> (Twice) { Twice[i: N] = +(A[i]); Twice[i: N] = >(A[i]); }", "Twice"
    )


def test_tensor_assigned_twice_elementwise():
    assert_semantic("function (A) -> (Twice) { Twice = A; Twice = A + 1; }", "Twice")


def test_input_assigned():
    assert_semantic("function (Inp[N]) -> (O) { Inp = Inp + 1; O = Inp; }", "Inp")


def test_output_never_assigned():
    assert_semantic("function (A) -> (O, Never) { O = A; }", "Never")


def test_duplicate_input():
    assert_semantic("function (Dup, Dup) -> (O) { O = Dup; }", "Dup")


def test_unknown_builtin():
    with pytest.raises(tilec.TilecError) as info:
        tilec.parse("function (A) -> (O) { O = frobnicate(A); }")
    assert names(str(info.value), "frobnicate")


def test_builtin_wrong_arity():
    with pytest.raises(tilec.TilecError) as info:
        tilec.parse("function (A) -> (O) { O = exp(A, A); }")
    assert names(str(info.value), "exp")


def test_unbound_size_symbol_in_index():
    src = "function (A[N]) -> (O) { O[i: N] = +(A[i + Qoff]); }"
    with pytest.raises(tilec.SemanticError) as info:
        compile_and_call(src, np.ones(4, np.float32))
    assert names(str(info.value), "Qoff"), str(info.value)


def test_unbound_size_symbol_in_output_size():
    src = "function (A[N]) -> (O) { O[i: N + Extra] = +(A[i]); }"
    with pytest.raises(tilec.SemanticError) as info:
        compile_and_call(src, np.ones(4, np.float32))
    assert names(str(info.value), "Extra"), str(info.value)


def test_unbound_size_symbol_is_fine_when_given_as_keyword():
    src = "function (A[N]) -> (O) { O[i: N + Extra] = +(A[i]); }"
    out = tilec.compile(src, Extra=2)(np.ones(4, np.float32))
    np.testing.assert_array_equal(out, [1, 1, 1, 1, 0, 0])


def test_upper_case_index_variable():
    # `Ix` is capitalised, hence a size symbol, not an index variable; nothing binds it.
    src = "function (A[N, M]) -> (O) { O[Ix: N] = +(A[Ix, j]); }"
    with pytest.raises(tilec.SemanticError) as info:
        compile_and_call(src, np.ones((3, 2), np.float32))
    assert names(str(info.value), "Ix"), str(info.value)


def test_assign_aggregation_with_visible_conflict():
    # j is not in the output and runs over 3 values: three tuples write each cell under `=`.
    with pytest.raises(tilec.TilecError):
        compile_and_call("O[i: N] = =(A[i, j])", np.ones((4, 3), np.float32))


# --------------------------------------------------------------------------- call-time errors

MATMUL = "function (Lhs[M, Kd], Rhs[Kd, N]) -> (C) { C[i, j: M, N] = +(Lhs[i, k] * Rhs[k, j]); }"


def test_shape_disagreeing_with_size_symbol():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    msg = str(info.value)
    assert names(msg, "Rhs") and names(msg, "Kd"), msg
    assert "5" in msg and "4" in msg, msg


def test_shape_disagreeing_keyword_call():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(Rhs=np.ones((5, 2), np.float32), Lhs=np.ones((3, 4), np.float32))
    assert names(str(info.value), "Kd"), str(info.value)


def test_shape_disagreeing_with_keyword_size():
    f = tilec.compile("function (Vec[N]) -> (O) { O = Vec * 2; }", N=5)
    with pytest.raises(tilec.BindError) as info:
        f(np.ones(4, np.float32))
    msg = str(info.value)
    assert names(msg, "N") and names(msg, "Vec"), msg


def test_wrong_rank_argument():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(np.ones(4, np.float32), np.ones((4, 2), np.float32))
    assert names(str(info.value), "Lhs"), str(info.value)


def test_scalar_input_given_array():
    f = tilec.compile("function (X[N], Sc[]) -> (O) { O = X * Sc; }")
    with pytest.raises(tilec.BindError) as info:
        f(np.ones(3, np.float32), np.ones(2, np.float32))
    assert names(str(info.value), "Sc"), str(info.value)


@pytest.mark.parametrize("nargs", [0, 1, 3])
def test_wrong_number_of_arguments(nargs):
    f = tilec.compile(MATMUL)
    args = [np.ones((2, 2), np.float32)] * nargs
    with pytest.raises(tilec.BindError):
        f(*args)


def test_unknown_keyword_argument():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(np.ones((2, 2), np.float32), Bogus=np.ones((2, 2), np.float32))
    assert names(str(info.value), "Bogus"), str(info.value)


def test_missing_keyword_argument():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(Lhs=np.ones((2, 2), np.float32))
    assert names(str(info.value), "Rhs"), str(info.value)


def test_argument_given_twice():
    f = tilec.compile(MATMUL)
    a = np.ones((2, 2), np.float32)
    with pytest.raises(tilec.BindError) as info:
        f(a, a, Lhs=a)
    assert names(str(info.value), "Lhs"), str(info.value)


def test_unsupported_dtype():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError) as info:
        f(np.ones((2, 2), np.complex128), np.ones((2, 2), np.float32))
    assert names(str(info.value), "Lhs"), str(info.value)


def test_elementwise_shapes_do_not_broadcast():
    f = tilec.compile("function (A, B) -> (C) { C = A + B; }")
    with pytest.raises(tilec.BindError):
        f(np.ones(3, np.float32), np.ones(4, np.float32))


def test_function_still_works_after_bind_error():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.BindError):
        f(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    r = rng(1)
    a, b = randn(r, 3, 4), randn(r, 4, 2)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_keyword_size_agreeing_with_input_is_fine():
    f = tilec.compile("function (Vec[N]) -> (O) { O = Vec * 2; }", N=4)
    np.testing.assert_array_equal(f(np.ones(4, np.float32)), np.full(4, 2, np.float32))


# --------------------------------------------------------------------------- a combination's scalar


@pytest.mark.parametrize("combination", ["+(A[i] / N)", "+(N * A[i])", "<(A[i] - N)"])
def test_combination_scalar_bound_only_by_its_own_statement(combination):
    # N is bound from i's range by this very statement; the scalar is applied before: refused, saying how
    src = f"function (A[M]) -> (O) {{\n  O[i: N] = {combination};\n}}"
    with pytest.raises(tilec.SemanticError, match=r"size 'N' is bound by this statement's own output range.*"
                                                  r"input's dimension.*\(line 2, column \d+\)"):
        tilec.parse(src)
    # declared as the input's dimension, the same statement runs
    a = randn(rng(3), 5)
    out = tilec.compile(f"function (A[N]) -> (O) {{ O[i: N] = {combination}; }}")(a)
    n = 5
    want = {"+(A[i] / N)": a / n, "+(N * A[i])": n * a, "<(A[i] - N)": a - n}[combination]
    np.testing.assert_allclose(out, want, rtol=1e-6)


# --------------------------------------------------------------------------- deep nesting (front end)


@pytest.mark.parametrize("body", [
    "O = " + "-" * 250 + "A",                      # 250 nested unary minus (the limit is 256 levels)
    "O = " + "(" * 500 + "A" + ")" * 500,          # 500 parentheses (they add no level)
    "O = A" + " + A" * 250,                         # a 250-term chain
    "O[i: N] = +(A[" + "-" * 250 + "i])",           # a 250-deep index expression
], ids=["minus", "parentheses", "chain", "index"])
def test_front_end_takes_deep_nesting_up_to_the_limit(body):
    # parse, check and print without RecursionError, and the printed program parses back
    program = tilec.parse(f"function (A[N]) -> (O) {{ {body}; }}")
    assert str(tilec.parse(str(program))) == str(program)


def test_front_end_takes_500_chained_statements():
    stmts = "".join(f"T{i} = T{i - 1} + 1; " for i in range(1, 500))
    src = f"function (T0[N]) -> (T499) {{ {stmts}}}"
    program = tilec.parse(src)
    assert len(program.statements) == 499 and str(tilec.parse(str(program))) == str(program)
    a = randn(rng(4), 3)
    np.testing.assert_allclose(tilec.compile(src)(a), a + 499, rtol=1e-5)


@pytest.mark.parametrize("body", ["O = " + "-" * 500 + "A", "O = A" + " + A" * 5000, "O[i: N] = +(A[" + "-" * 500 + "i])"],
                         ids=["minus", "chain", "index"])
def test_deeper_nesting_is_a_tilec_error_with_its_position(body):
    with pytest.raises(tilec.TilecError, match=r"nested.*line 1, column \d+"):
        tilec.parse(f"function (A[N]) -> (O) {{ {body}; }}")


# --------------------------------------------------------------------------- call-time errors carry the position


def call_error(src, *arrays):
    with pytest.raises(tilec.TilecError) as info:
        tilec.compile(src)(*arrays)
    return str(info.value)


@pytest.mark.parametrize("src,arrays,culprit,line,column", [
    # mismatched sizes: L is 4 from B but M is 2 from A ... the input whose shape disagrees
    ("function (A[M, L],\n          B[L, N]) -> (O) {\n  O[i, k: M, N] = +(A[i, j] * B[j, k]);\n}",
     lambda: (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)), "L", 2, 11),
    # an argument's rank against its declaration
    ("function (I[M, N]) -> (O) {\n  O[i: M] = +(I[i, j]);\n}", lambda: (np.ones((2, 3, 4), np.float32),), "I", 1, 11),
    # '=' writing a cell twice
    ("function (A[L, M], B[M, N]) -> (O) {\n  O[i, k: L, N] = =(A[i, j] * B[j, k]);\n}",
     lambda: (np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)), "=", 2, 3),
    # shapes that do not broadcast in an elementwise statement
    ("function (A, B) -> (C) {\n  T = A * 2;\n  C = T + B;\n}",
     lambda: (np.ones((3, 4), np.float32), np.ones(5, np.float32)), "T", 3, 3),
    # gather with float indices
    ("function (V, I) -> (O) {\n  O = gather(V, I);\n}",
     lambda: (np.ones(4, np.float32), np.zeros(2, np.float32)), "I", 2, 3),
    # a float scalar used as a size
    ("function (I[N], S[]) -> (O) {\n  O[x: N] = +(I[S * x]);\n}",
     lambda: (np.ones(4, np.float32), np.float32(2)), "S", 1, 17),
], ids=["sizes", "rank", "assign-twice", "broadcast", "gather-float", "float-size"])
def test_call_time_errors_give_line_column_and_caret(src, arrays, culprit, line, column):
    message = call_error(src, *arrays())
    assert names(message, culprit), message
    assert f"(line {line}, column {column})" in message, message
    caret_line = message.splitlines()[-1]
    assert caret_line.index("^") - 4 == column - 1, message  # the caret under the column (4-space indent)


def test_call_time_errors_without_positions_still_raise():
    # a program built by hand (no source, no positions): the error has no position, and nothing breaks
    from tilec.ir import tensor as T

    program = tilec.parse("function (A, B) -> (C) { C = A + B; }")
    bare = T.Program(tuple(T.TensorParam(p.name, p.dims) for p in program.params), program.outputs,
                     tuple(T.Elementwise(s.output, s.expr) for s in program.statements))  # type: ignore[union-attr]
    assert bare == program and str(bare) == str(program)  # positions take no part in equality or printing
    from tilec.ir.bounds import bind

    with pytest.raises(tilec.BindError) as info:
        bind(bare, {"A": (3, 4), "B": (5,)}, {"A": "float32", "B": "float32"})
    assert "line" not in str(info.value)


# --------------------------------------------------------------------------- PlaidML's own negative tests
# Each program is transcribed from a PlaidML source that expects it to fail (cited per case; the
# tests/plaidml_corpus.py NEGATIVES hold more of them). tilec must refuse it with a TilecError that
# names the culprit and gives the line and column where it is written.

F32 = np.float32
PLAIDML_NEGATIVES = [
    ("tile/lang/lang_test.cc @ 0.7.0 (NoRedeclare)",
     "function (X[N]) -> (X) { X = 2*X; }", lambda: [np.ones(4, F32)], "X", 1, 26),
    ("tile/lang/lang_test.cc @ 0.7.0 (Basic Infeasible Constraints)",
     "function (I[N]) -> (O) {O[2*i] = +(I[4*i]), i - 100 < 50; }", lambda: [np.ones(50, F32)], "O", 1, 25),
    ("plaidml/keras/backend_test.py @ 0.7.0 (testAssignmentExceptions: 'Multiple assignment')",
     "function (A[L, M], B[M, N]) -> (O) {\n    O[i, k: L, N] = =(A[i, j] * B[j, k]);\n}",
     lambda: [np.ones((1, 5), F32), np.ones((5, 1), F32)], "O", 2, 5),
    ("plaidml2/edsl/edsl_test.py @ 0.7.0 (test_assignment_exceptions, the program as the EDSL prints it)",
     "function (\n  A[A_0, A_1],\n  B[B_0, B_1]\n) -> (\n  _X0\n) {\n  _X0[x0, x2 : 5, 5] = =(A[x0, x1] * B[x1, x2]);\n}",
     lambda: [np.ones((1, 5), F32), np.ones((5, 1), F32)], "_X0", 7, 3),
    ("plaidml2/edsl/edsl_test.py @ 0.7.0 (test_invalid_shape_error: 'Cannot compute shape')",
     "function (I[N]) -> (O) {\n  O[x0, x1, x2 : X, Y, Z] = +(I[x0]);\n}", lambda: [np.ones(3, F32)], "O", 2, 3),
    ("plaidml/keras/backend_test.py @ 0.7.0 (testConvParameterRankExceptions: a rank-4 kernel to a 1-D conv)",
     "function (I[N, X, CI], K[KX, CI, CO]) -> (O) {\n  O[n, x, co: N, X - KX + 1, CO] = +(I[n, x + k, ci] * K[k, ci, co]);\n}",
     lambda: [np.ones((2, 3, 1), F32), np.ones((2, 2, 2, 1), F32)], "K", 1, 24),
    ("tile/lang/type.cc @ 0.7.0 ('Reassignment to %s')",
     "function (I[N]) -> (O) {\n  O[i: N] = +(I[i]);\n  O = I;\n}", lambda: [np.ones(3, F32)], "O", 3, 3),
    ("tile/lang/type.cc @ 0.7.0 ('Non tensor binding passed to tensor input %s')",
     "function (I[N]) -> (O) {\n  O[i: N] = +(I[i]);\n}", lambda: [F32(3)], "I", 1, 11),
    ("tile/lang/type.cc @ 0.7.0 ('Variable %s used in a context which requires it to be a constant integer')",
     "function (I[N], S) -> (O) {\n  O[i: N] = +(I[S * i]);\n}", lambda: [np.ones(4, F32), F32(1)], "S", 1, 17),
    ("tile/lang/type.cc @ 0.7.0 ('Datatype for index input to scatter must be INT32')",
     "function (U, I, T) -> (O) {\n  O = scatter(U, I, T);\n}",
     lambda: [np.ones((4, 3), F32), np.ones(4, F32), np.ones((5, 3), F32)], "I", 2, 3),
    ("tile/lang/type.cc @ 0.7.0 ('Data input to gather must have at least 1 dimension')",
     "function (V[], I) -> (O) {\n  O = gather(V, I);\n}", lambda: [F32(1), np.zeros(2, np.int32)], "V", 2, 14),
    ("tile/lang/type.cc @ 0.7.0 ('Additional parameters to reshape call must be constant integers')",
     "function (I, X[]) -> (O) {\n  O = reshape(I, X, 3);\n}", lambda: [np.ones(6, F32), F32(2)], "X", 1, 14),
    ("tile/lang/type.cc @ 0.7.0 ('Shape requires one input that is a tensor')",
     "function (I) -> (O) {\n  O = shape(3);\n}", lambda: [np.ones(3, F32)], "shape", 2, 13),
    ("tile/lang/type.cc @ 0.7.0 (output sizes and output indices disagree in number)",
     "function (I[N]) -> (O) {\n  O[i, j: N] = +(I[i]);\n}", lambda: [np.ones(3, F32)], "O", 2, 3),
    ("tile/lang/type.cc @ 0.7.0 ('Op is using undefined input: %s'): an output nothing computes",
     "function (I) -> (O) {\n  P = I;\n}", lambda: [np.ones(3, F32)], "O", 1, 18),
    ("tile/lang/tile.y @ 0.7.0 (a function lists its outputs)",
     "function (I) -> () {\n  O = I;\n}", lambda: [np.ones(3, F32)], "outputs", 1, 14),
]


@pytest.mark.parametrize("source,program,arrays,culprit,line,column", PLAIDML_NEGATIVES,
                         ids=[f"{i}-{c[0].split(' ')[0].split('/')[-1]}" for i, c in enumerate(PLAIDML_NEGATIVES)])
def test_plaidml_negative_programs_are_refused_where_written(source, program, arrays, culprit, line, column):
    with pytest.raises(tilec.TilecError) as info:
        tilec.compile(program)(*arrays())
    message = str(info.value)
    assert names(message, culprit), f"{culprit!r} not named ({source}): {message}"
    assert f"(line {line}, column {column})" in message, f"{source}: {message}"
