"""Random valid Tile programs for the differential fuzzer (tests/test_fuzz_differential.py).

A program has four inputs of random ranks (0 to 3), tiny sizes (0 to 4, zero and odd sizes
included) and any supported dtype, a scalar input S, an integer index tensor G (values out of
range included), a scalar integer input K read as a size, and several statements, each an output:
integer size statements over the sizes (truncating ``/``, ``max``, ``min``) used in indices and
output sizes; contractions with every aggregation and combination, affine indices of several
variables (small, huge and rational coefficients), complex left-hand sides, constraints,
`default` (a tensor or a literal), literal and size operands (``+(A[i] * 0.5)``, ``+(2 * A[i])``),
explicit, omitted and inferred output sizes; elementwise statements with literals, sizes as
values, comparisons, selects, builtins, bit operations and conversions to float and bool (every
dtype, unsigned included); the structural intrinsics (index, gather, scatter,
reshape, shape); statement attributes. Later statements may read earlier results (chaining).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from tilec.ir.builtins import BUILTINS
from tilec.ir.dtypes import SUPPORTED

INPUTS = ("A", "B", "C", "D")
EXTRA_INPUTS = ("S", "G", "K")  # a scalar of any dtype, integer indices, an integer scalar read as a size
INDEX_DTYPES = ("int8", "int32", "int64")
LITERALS = ("0.5", "2", "-3", "1.5", "0")
TWO_ARGUMENTS = ("max", "min", "pow", "bit_and", "bit_or", "bit_xor", "bit_left", "bit_right")
ATTRIBUTES = ("[[pid(fuzz)]] ", "[[hint]] ", "[[pid(a, b)]] ")
VARIABLES = ("i", "j", "k", "l")
# large coefficients: exact-float64 neighbours, powers of two, and ~2**64 / 5 and / 6, whose multiples
# by small differences wrap around 64 bits onto small in-range indices
HUGE = (2305843009213693952, 9007199254740993, 9007199254740992, 3689348814741910324, 3074457345618258603,
        2**62, 2**63, 18446744073709551616)
AGGREGATIONS = ("+", "*", ">", "<", "=")
COMBINATIONS = ("single", "mul", "add", "eq", "cond")


@dataclass(frozen=True)
class Case:
    source: str
    arrays: tuple[np.ndarray, ...]  # one per input, in the program's input order
    statements: int

    def describe(self) -> str:
        shapes = ", ".join(f"{n}: {a.dtype}{list(a.shape)}" for n, a in zip(INPUTS + EXTRA_INPUTS, self.arrays))
        return f"{self.source}\n  inputs {shapes}"


def _term(coeff: int, name: str) -> str:
    return name if coeff == 1 else f"-{name}" if coeff == -1 else f"{coeff}*{name}"


def _join(terms: list[str]) -> str:
    text = " + ".join(terms) if terms else "0"
    return text.replace("+ -", "- ")


@st.composite
def affine(draw: st.DrawFn, variables: tuple[str, ...], sizes: tuple[str, ...]) -> str:
    """An affine index polynomial in `variables` (sometimes rational or with huge coefficients)."""
    kind = draw(st.sampled_from(["lone"] * 5 + ["affine"] * 3 + ["rational", "huge", "const", "size"]))
    if kind == "lone":
        return draw(st.sampled_from(variables))
    if kind == "const":
        return str(draw(st.integers(0, 3)))
    used = draw(st.lists(st.sampled_from(variables), min_size=1, max_size=3, unique=True))
    if kind == "huge":  # often one magnitude with both signs: c*i - c*j is small only near i == j
        same = draw(st.sampled_from(HUGE)) if draw(st.booleans()) else None
        terms = [_term((same or draw(st.sampled_from(HUGE))) * (-1) ** k, v) for k, v in enumerate(used)]
    else:
        terms = [_term(draw(st.sampled_from([1, 1, 2, 3, -1, -2])), v) for v in used]
    const = draw(st.integers(-2, 2))
    if const:
        terms.append(str(const))
    if kind == "size" and sizes:
        terms.insert(0, draw(st.sampled_from(sizes)))
    text = _join(terms)
    if kind == "rational":
        return f"({text}) / {draw(st.sampled_from([2, 2, 3, 18446744073709551616]))}"
    return text


@st.composite
def size_expr(draw: st.DrawFn, sizes: tuple[str, ...]) -> str:
    kind = draw(st.sampled_from(["literal", "literal", "symbol", "sum"]))
    if kind == "literal" or not sizes:
        return str(draw(st.integers(0, 5) | st.integers(6, 8)))
    symbol = draw(st.sampled_from(sizes))
    return symbol if kind == "symbol" else f"{symbol} + {draw(st.integers(1, 2))}"


@st.composite
def contraction(draw: st.DrawFn, out: str, tensors: dict[str, int], sizes: tuple[str, ...]) -> tuple[str, int]:
    """(statement text, output rank)."""
    variables = VARIABLES[:draw(st.integers(1, 4))]
    combo = draw(st.sampled_from(COMBINATIONS))
    count = {"single": 1, "mul": 2, "add": 2, "eq": 2, "cond": 3}[combo]
    names = [draw(st.sampled_from(sorted(tensors))) for _ in range(count)]
    accesses = [f"{n}[{', '.join(draw(affine(variables, sizes)) for _ in range(tensors[n]))}]" for n in names]
    body = {"single": "{0}", "mul": "{0} * {1}", "add": "{0} + {1}", "eq": "{0} == {1}",
            "cond": "{0} == {1} ? {2}"}[combo].format(*accesses)
    if combo == "single" and draw(st.integers(0, 3)) == 0:  # a literal or size operand
        scalar = draw(st.sampled_from(LITERALS + sizes[:2]))
        op = draw(st.sampled_from(["*", "*", "+", "-", "/"]))
        left = draw(st.booleans()) or (scalar in sizes and op in "*+")  # `A[i] * N` does not parse (a grammar bug)
        body = f"{scalar} {op} {body}" if left else f"{body} {op} {scalar}"
    rank = draw(st.integers(0, 2))
    lhs = [draw(st.sampled_from(variables)) if draw(st.booleans()) else draw(affine(variables, sizes))
           for _ in range(rank)]
    mode = draw(st.sampled_from(["explicit", "explicit", "omitted", "inferred"]))
    if rank == 0:
        head = f"{out}[]"
    elif mode == "omitted":
        head = f"{out}[{', '.join(lhs)}]"
    else:
        dims = [f"N{out}{a}" if mode == "inferred" and lhs[a] in VARIABLES else draw(size_expr(sizes))
                for a in range(rank)]
        head = f"{out}[{', '.join(lhs)}: {', '.join(dims)}]"
    constraints = [f"{draw(affine(variables, sizes))} < {draw(size_expr(sizes)) or 1}"
                   for _ in range(draw(st.integers(0, 2)))]
    # a variable no access uses alone is usually bounded by a constraint of its own (not always:
    # bounds found only by combining conditions are part of the language too)
    alone = {e.strip() for a in accesses for e in a[a.index("[") + 1:-1].split(",")}
    constraints += [f"{v} < {draw(st.integers(1, 3))}" for v in variables
                    if v not in alone and draw(st.integers(0, 3)) > 0]
    text = f"{head} = {draw(st.sampled_from(AGGREGATIONS))}({body})"
    text += "".join(f", {c}" for c in constraints)
    default = draw(st.integers(0, 12))
    if default == 0:
        text += " default S"
    elif default == 1:
        # in range of every output type: -1e30 into an integer output is refused by the interpreter, and
        # the compiler's conversion gives an arbitrary value (a compiler bug, reported)
        text += f" default {draw(st.sampled_from(['0', '2.5', '7', '100.5', '0.25']))}"
    return text, rank


@st.composite
def elementwise(draw: st.DrawFn, out: str, tensors: dict[str, int], sizes: tuple[str, ...]) -> tuple[str, int]:
    """(statement text, output rank): one tensor (and S, sizes as values and literals) so that
    shapes always broadcast."""
    name = draw(st.sampled_from(sorted(t for t in tensors if t != "S")))
    leaves = st.sampled_from([name, name, "S", "1", "2", "0.5", "3"] + ([draw(st.sampled_from(sizes))] if sizes else []))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        unary = st.builds(lambda f, a: f"{f}({a})", st.sampled_from([b.name for b in BUILTINS.values() if b.arity == 1]),
                          inner)
        binary = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["+", "-", "*", "/"]), inner)
        compare = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["<", ">", "==", "!=", "<=", ">="]),
                            inner)
        select = st.builds(lambda c, a, b: f"({c} ? {a} : {b})", inner, inner, inner)
        call2 = st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(TWO_ARGUMENTS), inner, inner)
        # conversions to float and bool only: a NaN converted to an integer has no value (the
        # interpreter refuses it; the compiled code gives an arbitrary one, a reported bug)
        cast = st.builds(lambda f, a: f.format(a), st.sampled_from(["as_float({}, 16)", "as_float({}, 32)",
                                                                    "as_float({}, 64)", "as_bool({})"]), inner)
        return st.one_of(binary, unary, compare, select, call2, cast, st.builds(lambda a: f"-{a}", inner))

    expr = draw(st.recursive(leaves, extend, max_leaves=5))
    if not re.search(rf"\b{name}\b", expr):  # (B0, a size read as a value, is not B)
        expr = f"({expr}) + {name}" if draw(st.booleans()) else f"{name} * ({expr})"
    return f"{out} = {expr}", tensors[name]


@st.composite
def size_statement(draw: st.DrawFn, sizes: tuple[str, ...]) -> str:
    """An integer expression over sizes: ``/`` truncates toward zero, ``max``/``min`` (PlaidML's padding)."""
    x, y = draw(st.sampled_from(sizes)), draw(st.sampled_from(sizes))
    c, d = draw(st.integers(0, 3)), draw(st.sampled_from([1, 2, 3, -2]))
    return draw(st.sampled_from([f"({x} - {c}) / {d}", f"max(0, {x} - {y} + {c})", f"min({x}, {c})",
                                 f"{x} * {d} + {y}", f"({x} + {y} - 1) / 2", f"{x} > {y} ? {x} : {c}"]))


@st.composite
def intrinsic(draw: st.DrawFn, out: str, tensors: dict[str, int], gathered: dict[str, int],
              dims: dict[str, tuple[str, ...]]) -> tuple[str, int]:
    """(statement text, output rank): gather by G (clamped), the scatter of G or of a tensor gathered
    by G back by G, index, shape, or a reshape of an input by its own size symbols."""
    ranked = sorted(t for t, r in tensors.items() if r >= 1)
    kind = draw(st.sampled_from(["gather", "gather", "scatter", "scatter", "index", "shape", "reshape", "reshape"]))
    if kind == "scatter":  # values whose shape starts with G's: G itself or what was gathered by G
        values = draw(st.sampled_from(sorted(gathered) + ["G"]))
        like = draw(st.sampled_from(ranked))
        return f"{out} = scatter({values}, G, {like})", 1 + gathered.get(values, tensors["G"]) - tensors["G"]
    if kind == "index":
        name = draw(st.sampled_from(ranked))
        return f"{out} = index({name}, {draw(st.integers(0, max(0, tensors[name] - 1)))})", tensors[name]
    if kind == "shape":
        return f"{out} = shape({draw(st.sampled_from(sorted(tensors)))})", 1
    if kind == "reshape":
        name = draw(st.sampled_from(sorted(dims)))
        shape = list(draw(st.permutations(dims[name])))
        if shape and draw(st.booleans()):
            shape = [" * ".join(shape)]
        shape = shape or ["1"]
        return f"{out} = reshape({name}, {', '.join(shape)})", len(shape)
    data = draw(st.sampled_from(ranked))
    rank = tensors["G"] + tensors[data] - 1
    gathered[out] = rank
    return f"{out} = gather({data}, G)", rank


def _values(draw: st.DrawFn, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == "bool":
        data = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        return np.array(data, dtype=bool).reshape(shape)
    if np.dtype(dtype).kind in "iu":
        data = draw(st.lists(st.integers(-4 if np.dtype(dtype).kind == "i" else 0, 5), min_size=n, max_size=n))
        return np.array(data, dtype=dtype).reshape(shape)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * 2
    if draw(st.booleans()):  # integer-valued floats: ties for '==', '>' and '<'
        values = np.round(values)
    return values.astype(dtype).reshape(shape)


def _index_values(draw: st.DrawFn, shape: tuple[int, ...]) -> np.ndarray:
    """G: integers from -3 to 6, so that some fall outside every tensor's rows (clamped)."""
    data = draw(st.lists(st.integers(-3, 6), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    return np.array(data, dtype=draw(st.sampled_from(INDEX_DTYPES))).reshape(shape)


@st.composite
def cases(draw: st.DrawFn, max_statements: int = 5) -> Case:
    ranks = {n: draw(st.integers(0, 3) if n == "D" else st.integers(1, 2)) for n in INPUTS + ("G",)}
    shapes = {n: tuple(draw(st.sampled_from([0, 1, 1, 2, 3, 3, 4])) for _ in range(r)) for n, r in ranks.items()}
    dtypes = {n: draw(st.sampled_from(SUPPORTED)) for n in INPUTS + ("S",)}
    dims = {n: tuple(f"{n}{a}" for a in range(ranks[n])) for n in INPUTS + ("G",)}
    sizes = tuple(d for n in dims for d in dims[n]) + ("K",)
    tensors = dict(ranks)
    tensors["S"] = 0
    statements: list[str] = []
    outputs: list[str] = []
    for s in range(draw(st.integers(0, 2))):  # integer statements over sizes, used as sizes below
        statements.append(f"Z{s} = {draw(size_statement(sizes[:-1]))}")  # (K is a tensor there)
        outputs.append(f"Z{s}")
    sizes += tuple(outputs)
    gathered: dict[str, int] = {}
    for s in range(draw(st.integers(1, max_statements))):
        out = f"O{s}"
        kind = draw(st.sampled_from(["contraction"] * 6 + ["elementwise"] * 2 + ["intrinsic"] * 2))
        if kind == "contraction":
            text, rank = draw(contraction(out, tensors, sizes))
        elif kind == "elementwise":
            text, rank = draw(elementwise(out, tensors, sizes))
        else:
            text, rank = draw(intrinsic(out, tensors, gathered, dims))
        if draw(st.integers(0, 7)) == 0:
            text = draw(st.sampled_from(ATTRIBUTES)) + text
        statements.append(text)
        outputs.append(out)
        if draw(st.integers(0, 3)) == 0:
            tensors[out] = rank  # later statements may read this one
    params = ", ".join(f"{n}[{', '.join(dims[n])}]" for n in INPUTS) + f", S[], G[{', '.join(dims['G'])}], K[]"
    body = "\n".join(f"    {s};" for s in statements)
    source = f"function ({params}) -> ({', '.join(outputs)}) {{\n{body}\n}}"
    arrays = tuple(_values(draw, dtypes[n], shapes[n]) for n in INPUTS) + (_values(draw, dtypes["S"], ()),)
    arrays += (_index_values(draw, shapes["G"]),
               np.array(draw(st.integers(0, 3)), dtype=draw(st.sampled_from(INDEX_DTYPES))))
    return Case(source, arrays, len(statements))


__all__ = ["Case", "cases"]
