"""Property-based checks (hypothesis): random contractions against numpy.einsum, random
elementwise expression trees against numpy, and fuzzed sources that may only ever raise
tilec.TilecError.

Every example compiles a kernel (~50-100 ms of LLVM), so example counts are kept small.
"""

from __future__ import annotations

import itertools

import llvmlite.binding as llvm
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from reference import assert_matches, sigmoid

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
LETTERS = "ijkl"


def make_array(r: np.random.Generator, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        return r.integers(-3, 4, size=shape).astype(dtype)
    return r.uniform(-2.0, 2.0, size=shape).astype(dtype)


# --------------------------------------------------------------------------- einsum-like

@st.composite
def contractions(draw, max_size=5):
    sizes = {c: draw(st.integers(1, max_size), label=f"size_{c}") for c in LETTERS}
    n_inputs = draw(st.integers(1, 2))
    accesses = [
        draw(st.lists(st.sampled_from(LETTERS), min_size=0, max_size=3), label=f"access_{t}")
        for t in range(n_inputs)
    ]
    used = list(dict.fromkeys(c for acc in accesses for c in acc))
    perm = draw(st.permutations(used)) if used else []
    out = list(perm[: draw(st.integers(0, len(used)))])
    agg = draw(st.sampled_from(["+", ">", "<"]))
    comb = draw(st.sampled_from(["*", "+"])) if n_inputs == 2 else None
    dtypes = [draw(st.sampled_from(["float32", "float64", "int32"])) for _ in range(n_inputs)]
    seed = draw(st.integers(0, 2**32 - 1))
    return sizes, accesses, out, agg, comb, dtypes, seed


def contraction_source(accesses, out, agg, comb):
    names = ["A", "B"]
    reads = [f"{names[t]}[{', '.join(acc)}]" for t, acc in enumerate(accesses)]
    body = f" {comb} ".join(reads)
    if out:
        lhs = f"O[{', '.join(out)}: {', '.join('N' + c.upper() for c in out)}]"
    else:
        lhs = "O[]"
    return f"{lhs} = {agg}({body})"


def contraction_reference(sizes, accesses, arrays, out, agg, comb):
    """Evaluate over the full index space in float64 by broadcasting."""
    letters = list(dict.fromkeys(c for acc in accesses for c in acc))
    full = []
    for acc, arr in zip(accesses, arrays):
        v = np.asarray(arr, np.float64)
        uniq = list(dict.fromkeys(acc))
        if acc:
            v = np.einsum(f"{''.join(acc)}->{''.join(uniq)}", v)  # diagonals for repeats
            v = np.transpose(v, [uniq.index(c) for c in letters if c in uniq])
        v = v.reshape([sizes[c] if c in uniq else 1 for c in letters])
        full.append(v)
    if comb == "*":
        t = full[0] * full[1]
    elif comb == "+":
        t = full[0] + full[1]
    else:
        t = full[0]
    t = np.broadcast_to(t, [sizes[c] for c in letters])
    reduce_axes = tuple(k for k, c in enumerate(letters) if c not in out)
    red = {"+": np.sum, ">": np.max, "<": np.min}[agg](t, axis=reduce_axes)
    kept = [c for c in letters if c in out]
    return np.transpose(red, [kept.index(c) for c in out]) if out else red


@settings(max_examples=60, **SETTINGS)
@given(contractions())
def test_random_contractions_match_numpy(case):
    check_contraction(case)


@settings(max_examples=20, **SETTINGS)
@given(contractions(max_size=37))
def test_random_contractions_larger_sizes_match_numpy(case):
    # sizes past vector widths and tile sizes: remainders, peeled loops, partial tiles
    check_contraction(case)


def check_contraction(case):
    sizes, accesses, out, agg, comb, dtypes, seed = case
    r = np.random.default_rng(seed)
    arrays = [make_array(r, [sizes[c] for c in acc], dt) for acc, dt in zip(accesses, dtypes)]
    src = contraction_source(accesses, out, agg, comb)
    result = tilec.compile(src)(*arrays)

    ref = contraction_reference(sizes, accesses, arrays, out, agg, comb)
    if agg == "+" and comb in ("*", None):
        spec = ",".join("".join(a) for a in accesses) + "->" + "".join(out)
        np.testing.assert_allclose(
            ref, np.einsum(spec, *[a.astype(np.float64) for a in arrays]), rtol=1e-12, atol=1e-12
        )
    floats = [a.dtype for a in arrays if a.dtype.kind == "f"]  # PlaidML: the widest float, else the widest int
    expected_dtype = max(floats or [a.dtype for a in arrays], key=lambda d: d.itemsize)
    scale = 1.0 + float(np.max(np.abs(ref), initial=0.0))
    assert_matches(result, ref, dtype=expected_dtype, rtol=1e-4, atol=1e-4 * scale)


# --------------------------------------------------------------------------- affine accesses
#
# Random index polynomials (coefficients -2..2, offsets -2..2, juxtaposed `2i` or `2*i`) on
# both sides, random constraints, literal output sizes that may be smaller or larger than
# what is written; checked against a brute-force loop over every index tuple. Each index
# variable appears alone in some input dimension, so the tuple space is finite.

VARS = "ijk"


def _poly_src(coeffs, const, juxtapose):
    parts = []
    for v, c in coeffs.items():
        if c == 0:
            continue
        mag = abs(c)
        term = v if mag == 1 else (f"{mag}{v}" if juxtapose else f"{mag}*{v}")
        parts.append(("- " if c < 0 else "+ ") + term)
    if const or not parts:
        parts.append(("- " if const < 0 else "+ ") + str(abs(const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


@st.composite
def affine_polys(draw, names):
    coeffs = {v: draw(st.integers(-2, 2)) for v in names}
    return coeffs, draw(st.integers(-2, 2)), draw(st.booleans())


@st.composite
def affine_contractions(draw):
    names = VARS[: draw(st.integers(1, 3))]
    extents = {v: draw(st.integers(1, 5)) for v in names}
    n_inputs = draw(st.integers(1, 2))
    home = {v: draw(st.integers(0, n_inputs - 1)) for v in names}  # where v appears alone
    inputs = []
    for t in range(n_inputs):
        dims = [({v: 1}, 0, False, extents[v]) for v in names if home[v] == t]
        for _ in range(draw(st.integers(0, max(0, 3 - len(dims))))):
            coeffs, const, jux = draw(affine_polys(names))
            size = draw(st.integers(1, 6))
            lone = [v for v, c in coeffs.items() if c != 0]
            if const == 0 and len(lone) == 1 and coeffs[lone[0]] == 1:
                # a second lone occurrence of v: give it v's extent. Disagreeing extents are
                # covered by explicit tests in test_contractions.py (intersection semantics).
                size = extents[lone[0]]
            dims.append((coeffs, const, jux, size))
        inputs.append(draw(st.permutations(dims)))
    out = []
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            v = draw(st.sampled_from(names))
            out.append(({v: 1}, 0, False, draw(st.integers(1, 6))))
        else:
            coeffs, const, jux = draw(affine_polys(names))
            out.append((coeffs, const, jux, draw(st.integers(1, 8))))
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        coeffs, const, jux = draw(affine_polys(names))
        constraints.append((coeffs, const, jux, draw(st.integers(1, 6))))
    agg = draw(st.sampled_from(["+", ">"]))
    dtype = draw(st.sampled_from(["float32", "int32", "float64"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return names, extents, inputs, out, constraints, agg, dtype, seed


def _eval(coeffs, const, env):
    return const + sum(c * env[v] for v, c in coeffs.items())


@settings(max_examples=60, **SETTINGS)
@given(affine_contractions())
def test_random_affine_contractions_match_brute_force(case):
    names, extents, inputs, out, constraints, agg, dtype, seed = case
    r = np.random.default_rng(seed)
    arrays = [make_array(r, [d[3] for d in dims], dtype) for dims in inputs]
    tnames = ["A", "B"]
    reads = [
        f"{tnames[t]}[{', '.join(_poly_src(c, k, j) for c, k, j, _ in dims)}]"
        for t, dims in enumerate(inputs)
    ]
    lhs = "O[" + ", ".join(_poly_src(c, k, j) for c, k, j, _ in out)
    lhs += (": " + ", ".join(str(d[3]) for d in out) + "]") if out else "]"
    src = f"{lhs} = {agg}({' * '.join(reads)})"
    for c, k, j, bound in constraints:
        src += f", {_poly_src(c, k, j)} < {bound}"

    ref = np.zeros([d[3] for d in out], np.float64)
    written = np.zeros(ref.shape, bool)
    for values in itertools.product(*(range(extents[v]) for v in names)):
        env = dict(zip(names, values))
        idx = [[_eval(c, k, env) for c, k, _, _ in dims] for dims in inputs]
        oidx = tuple(_eval(c, k, env) for c, k, _, _ in out)
        if not all(0 <= x < d[3] for dims, ix in zip(inputs, idx) for x, d in zip(ix, dims)):
            continue
        if not all(0 <= x < d[3] for x, d in zip(oidx, out)):
            continue
        if not all(0 <= _eval(c, k, env) < b for c, k, _, b in constraints):
            continue
        val = float(np.prod([float(a[tuple(ix)]) for a, ix in zip(arrays, idx)]))
        if agg == "+":
            ref[oidx] += val
        else:
            ref[oidx] = val if not written[oidx] else max(ref[oidx], val)
        written[oidx] = True

    result = tilec.compile(src)(*arrays)
    assert_matches(result, ref, dtype=np.dtype(dtype), rtol=1e-4, atol=1e-4)

    # every stage stays inspectable for whatever the bounds/guards turned out to be
    shapes = {tnames[t]: a.shape for t, a in enumerate(arrays)}
    dtypes = {tnames[t]: dtype for t in range(len(arrays))}
    text = tilec.explain(src, shapes=shapes, dtypes=dtypes)
    assert isinstance(text, str) and text.strip()
    llvm.parse_assembly(tilec.explain(src, shapes=shapes, dtypes=dtypes, stage="llvm")).verify()


# --------------------------------------------------------------------------- elementwise trees
#
# Inputs are multiples of 1/4 in [-2, 2]. Comparisons only look at "exact" operands (a leaf,
# or leaf +-* leaf, all exactly representable) against thresholds that are odd multiples of
# 1/64, or at two leaves; so no comparison can flip between two correct implementations that
# round differently. Divisions, logs and square roots are guarded to stay finite.

THRESHOLDS = ["0.109375", "-0.390625", "0.859375", "-1.140625"]


class Tree:
    def __init__(self, src, fn, uses):
        self.src, self.fn, self.uses = src, fn, uses


def _leaf(draw, names):
    if draw(st.integers(0, 4)) == 0:
        c = draw(st.sampled_from(["0.5", "2", "1.5", "3", "0.25"]))
        return Tree(c, lambda env, c=c: float(c), set())
    n = draw(st.sampled_from(names))
    return Tree(n, lambda env, n=n: env[n], {n})


def _exact(draw, names):
    a = _leaf(draw, names)
    if draw(st.booleans()):
        return a
    b = _leaf(draw, names)
    op = draw(st.sampled_from(["+", "-", "*"]))
    f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
    return Tree(f"({a.src} {op} {b.src})", lambda env: f(a.fn(env), b.fn(env)), a.uses | b.uses)


UNARY = {
    "tanh": lambda x: np.tanh(x),
    "sigmoid": lambda x: sigmoid(x),
    "abs": lambda x: np.abs(x),
    "sin": lambda x: np.sin(x),
    "cos": lambda x: np.cos(x),
    "neg": lambda x: -x,
    "exp_tanh": lambda x: np.exp(np.tanh(x)),
    "log1abs": lambda x: np.log(np.abs(x) + 1),
    "sqrtabs": lambda x: np.sqrt(np.abs(x)),
}
UNARY_SRC = {
    "tanh": "tanh({})",
    "sigmoid": "sigmoid({})",
    "abs": "abs({})",
    "sin": "sin({})",
    "cos": "cos({})",
    "neg": "(-{})",
    "exp_tanh": "exp(tanh({}))",
    "log1abs": "log(abs({}) + 1)",
    "sqrtabs": "sqrt(abs({}))",
}


def _input_leaf(draw, names):
    n = draw(st.sampled_from(names))
    return Tree(n, lambda env, n=n: env[n], {n})


def _tree(draw, names, depth):
    """A random expression. Literals only ever appear as leaves next to something that reads
    an input, so whether a folded constant sub-expression is "weak" never matters: the
    result dtype is always the inputs' dtype, exactly as in numpy with Python scalars."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, names)
    node = _node(draw, names, depth)
    return node if node.uses else _input_leaf(draw, names)


def _node(draw, names, depth):
    kind = draw(st.sampled_from(["bin", "bin", "div", "unary", "minmax", "ternary"]))
    if kind == "bin":
        a, b = _tree(draw, names, depth - 1), _tree(draw, names, depth - 1)
        op = draw(st.sampled_from(["+", "-", "*"]))
        f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        return Tree(f"({a.src} {op} {b.src})", lambda env: f(a.fn(env), b.fn(env)), a.uses | b.uses)
    if kind == "div":
        a, b = _tree(draw, names, depth - 1), _tree(draw, names, depth - 1)
        if not b.uses:
            b = _input_leaf(draw, names)
        return Tree(
            f"({a.src} / (abs({b.src}) + 1))",
            lambda env: a.fn(env) / (np.abs(b.fn(env)) + 1),
            a.uses | b.uses,
        )
    if kind == "unary":
        a = _tree(draw, names, depth - 1)
        u = draw(st.sampled_from(sorted(UNARY)))
        return Tree(UNARY_SRC[u].format(a.src), lambda env: UNARY[u](a.fn(env)), a.uses)
    if kind == "minmax":
        a, b = _tree(draw, names, depth - 1), _tree(draw, names, depth - 1)
        m = draw(st.sampled_from(["max", "min"]))
        f = {"max": np.maximum, "min": np.minimum}[m]
        return Tree(f"{m}({a.src}, {b.src})", lambda env: f(a.fn(env), b.fn(env)), a.uses | b.uses)
    # ternary on a comparison that cannot be a near-tie
    cmp = draw(st.sampled_from(["<", ">", "<=", ">=", "==", "!="]))
    cf = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal,
          "==": np.equal, "!=": np.not_equal}[cmp]
    if draw(st.booleans()):
        lhs = _exact(draw, names)
        t = draw(st.sampled_from(THRESHOLDS))
        rhs = Tree(t, lambda env, t=t: float(t), set())
    else:
        lhs, rhs = _leaf(draw, names), _leaf(draw, names)
    a, b = _tree(draw, names, depth - 1), _tree(draw, names, depth - 1)
    if not (a.uses or b.uses):
        a = _input_leaf(draw, names)
    return Tree(
        f"({lhs.src} {cmp} {rhs.src} ? {a.src} : {b.src})",
        lambda env: np.where(cf(lhs.fn(env), rhs.fn(env)), a.fn(env), b.fn(env)),
        lhs.uses | rhs.uses | a.uses | b.uses,
    )


@st.composite
def elementwise_cases(draw):
    names = ["A", "B", "C"]
    base_rank = draw(st.integers(0, 3))
    base = [draw(st.integers(1, 4)) for _ in range(base_rank)]
    shapes = {}
    for n in names:
        rank = draw(st.integers(0, base_rank))
        dims = base[base_rank - rank:]
        shapes[n] = tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in dims)
    tree = _tree(draw, names, draw(st.integers(1, 3)))
    if not tree.uses:
        tree = Tree(f"({tree.src} + A)", lambda env, t=tree: t.fn(env) + env["A"], {"A"})
    dtype = draw(st.sampled_from(["float32", "float64"]))
    seed = draw(st.integers(0, 2**32 - 1))
    return tree, shapes, dtype, seed


@settings(max_examples=60, **SETTINGS)
@given(elementwise_cases())
def test_random_elementwise_trees_match_numpy(case):
    tree, shapes, dtype, seed = case
    r = np.random.default_rng(seed)
    env = {
        n: (r.integers(-8, 9, size=s) / 4).astype(dtype)  # multiples of 1/4 in [-2, 2]
        for n, s in shapes.items()
    }
    used = [n for n in ["A", "B", "C"] if n in tree.uses]
    src = f"function ({', '.join(used)}) -> (O) {{ O = {tree.src}; }}"
    with np.errstate(all="ignore"):
        ref = np.asarray(tree.fn(env))
    assert ref.dtype == np.dtype(dtype), f"generator bug: numpy gave {ref.dtype} for {tree.src}"
    out = tilec.compile(src)(*[env[n] for n in used])
    if np.dtype(dtype) == np.float32:
        scale = 1.0 + float(np.max(np.abs(ref), initial=0.0))
        assert_matches(out, ref, rtol=1e-4, atol=1e-4 * scale)
    else:
        assert_matches(out, ref, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- robustness fuzz

VALID_PROGRAMS = [
    ("C[i,j:M,N] = +(A[i,k]*B[k,j])", [(3, 4), (4, 2)]),
    (
        "function (X[N, C]) -> (O) {\n  M[i, 0: N, 1] = >(X[i, j]);\n  E = exp(X - M);\n"
        "  S[i, 0: N, 1] = +(E[i, j]);\n  O = E / S;\n}",
        [(3, 5)],
    ),
    (
        "function (I[N, X, Y, C]) -> (O) {\n"
        "  O[n, x, y, c: N, X/2, Y/2, C] = >(I[n, 2x + i, 2y + j, c]), i < 2, j < 2;\n}",
        [(1, 4, 5, 2)],
    ),
    ("function (I[X], K[KX]) -> (O) { O[x + i: X + KX - 1] = +(I[x] * K[i]); }", [(6,), (3,)]),
    (
        "function (A[M, K], B[K, N], Bias[N]) -> (O) {\n  C[i, j: M, N] = +(A[i, k] * B[k, j]);\n"
        "  R = C + Bias; // bias\n  O = R < 0 ? 0 : R; # relu\n}",
        [(2, 3), (3, 4), (4,)],
    ),
    (
        "function (A, B) -> (C) { C = max(A, B) * sigmoid(A - 1.5) + pow(abs(B), 2); }",
        [(2, 3), (3,)],
    ),
    ("function (I[N]) -> (O) { O[i: N] = +(I[k]), i - k < N; }", [(5,)]),
    ("function (A[N], T[N]) -> (O) { O[i: (N + 1)/2] = =(A[2i]) default T; }", [(4,), (4,)]),
    ("function (L[N], Cl[K], V[K]) -> (O) { O[i, c: N, K] = =(L[i] == Cl[c] ? V[c]); }",
     [(3,), (4,), (4,)]),
    ("O[] = +(A[i, i])", [(3, 3)]),
]

FUZZ_CHARS = "ABCIKMNOXijkxy0123456789+-*/<>=?:;,.()[]{} #\n_!&"
FUZZ_TOKENS = [
    "function", "->", "default", "no_defract", "exp", "max", "==", "//", "(", ")", "[", "]",
    "{", "}", ";", ",", ":", "?", "A", "B", "O", "N", "i", "j", "2", "0", "1.5", "=", "+", "*",
    ">", "<", "-", "/", "sqrt", "x", "K",
]


@st.composite
def mutated_programs(draw):
    k = draw(st.integers(0, len(VALID_PROGRAMS) - 1))
    src, shapes = VALID_PROGRAMS[k]
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(src)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "token"]))
        if op == "delete" and src:
            pos = min(pos, len(src) - 1)
            src = src[:pos] + src[pos + 1:]
        elif op == "insert":
            src = src[:pos] + draw(st.sampled_from(FUZZ_CHARS)) + src[pos:]
        elif op == "replace" and src:
            pos = min(pos, len(src) - 1)
            src = src[:pos] + draw(st.sampled_from(FUZZ_CHARS)) + src[pos + 1:]
        else:
            src = src[:pos] + " " + draw(st.sampled_from(FUZZ_TOKENS)) + " " + src[pos:]
    return k, src, shapes, draw(st.integers(0, 2**32 - 1))


def only_tilec_errors(thunk):
    try:
        return thunk()
    except tilec.TilecError as e:
        assert str(e), "TilecError with an empty message"
        return None


@settings(max_examples=80, **SETTINGS)
@given(mutated_programs())
def test_mutated_programs_raise_only_tilec_errors(case):
    k, src, shapes, seed = case
    r = np.random.default_rng(seed)
    arrays = [make_array(r, s, "float32") for s in shapes]
    only_tilec_errors(lambda: tilec.parse(src))
    only_tilec_errors(lambda: tilec.compile(src)(*arrays))
    original_names = tilec.compile(VALID_PROGRAMS[k][0]).inputs
    shape_map = dict(zip(original_names, shapes))
    only_tilec_errors(lambda: tilec.explain(src, shapes=shape_map))


ODD_CHARS = "abcdefz$@\\\"'`~|^%\t\r\x00é→"


@settings(max_examples=200, **SETTINGS)
@given(st.text(alphabet=st.sampled_from(FUZZ_CHARS + ODD_CHARS), max_size=60))
def test_random_text_raises_only_tilec_errors(src):
    only_tilec_errors(lambda: tilec.parse(src))
    only_tilec_errors(lambda: tilec.compile(src))


@settings(max_examples=200, **SETTINGS)
@given(st.lists(st.sampled_from(FUZZ_TOKENS), max_size=25))
def test_token_soup_raises_only_tilec_errors(tokens):
    src = " ".join(tokens)
    only_tilec_errors(lambda: tilec.parse(src))
    only_tilec_errors(lambda: tilec.compile(src))


def test_deeply_nested_parentheses_raise_only_tilec_errors():
    for depth in (50, 2000):
        only_tilec_errors(lambda: tilec.parse("O = " + "(" * depth + "A" + ")" * depth))
        only_tilec_errors(lambda: tilec.parse("O = " + "(" * depth + "A"))
