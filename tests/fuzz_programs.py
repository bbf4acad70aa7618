"""Random valid Tile programs for the differential fuzzer (tests/test_fuzz_differential.py).

A program has four inputs of random ranks (0 to 3), tiny sizes (0 to 4, zero and odd sizes
included) and any supported dtype, a scalar input S, and several statements, each an output:
contractions with every aggregation and combination, affine indices of several variables
(small, huge and rational coefficients), complex left-hand sides, constraints, `default`, explicit,
omitted and inferred output sizes; elementwise statements with literals, comparisons, selects and
builtins. Later statements may read earlier results (chaining).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from tilec.ir.builtins import BUILTINS
from tilec.ir.dtypes import SUPPORTED

INPUTS = ("A", "B", "C", "D")
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
        shapes = ", ".join(f"{n}: {a.dtype}{list(a.shape)}" for n, a in zip(INPUTS + ("S",), self.arrays))
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
    if draw(st.integers(0, 6)) == 0:
        text += " default S"
    return text, rank


@st.composite
def elementwise(draw: st.DrawFn, out: str, tensors: dict[str, int]) -> tuple[str, int]:
    """(statement text, output rank): one tensor (and S and literals) so that shapes always broadcast."""
    name = draw(st.sampled_from(sorted(t for t in tensors if t != "S")))
    leaves = st.sampled_from([name, name, "S", "1", "2", "0.5", "3"])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        unary = st.builds(lambda f, a: f"{f}({a})", st.sampled_from([b.name for b in BUILTINS.values() if b.arity == 1]),
                          inner)
        binary = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["+", "-", "*", "/"]), inner)
        compare = st.builds(lambda a, op, b: f"({a} {op} {b})", inner, st.sampled_from(["<", ">", "==", "!=", "<=", ">="]),
                            inner)
        select = st.builds(lambda c, a, b: f"({c} ? {a} : {b})", inner, inner, inner)
        call2 = st.builds(lambda f, a, b: f"{f}({a}, {b})", st.sampled_from(["max", "min", "pow"]), inner, inner)
        return st.one_of(binary, unary, compare, select, call2, st.builds(lambda a: f"-{a}", inner))

    expr = draw(st.recursive(leaves, extend, max_leaves=5))
    if name not in expr:
        expr = f"({expr}) + {name}" if draw(st.booleans()) else f"{name} * ({expr})"
    return f"{out} = {expr}", tensors[name]


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


@st.composite
def cases(draw: st.DrawFn, max_statements: int = 5) -> Case:
    ranks = {n: draw(st.integers(0, 3) if n == "D" else st.integers(1, 2)) for n in INPUTS}
    shapes = {n: tuple(draw(st.sampled_from([0, 1, 1, 2, 3, 3, 4])) for _ in range(r)) for n, r in ranks.items()}
    dtypes = {n: draw(st.sampled_from(SUPPORTED)) for n in INPUTS + ("S",)}
    sizes = tuple(f"{n}{a}" for n in INPUTS for a in range(ranks[n]))
    tensors = dict(ranks)
    tensors["S"] = 0
    statements: list[str] = []
    outputs: list[str] = []
    for s in range(draw(st.integers(1, max_statements))):
        out = f"O{s}"
        kind = draw(st.sampled_from(["contraction"] * 3 + ["elementwise"]))
        text, rank = draw(contraction(out, tensors, sizes) if kind == "contraction" else elementwise(out, tensors))
        statements.append(text)
        outputs.append(out)
        if draw(st.integers(0, 3)) == 0:
            tensors[out] = rank  # later statements may read this one
    params = ", ".join(f"{n}[{', '.join(f'{n}{a}' for a in range(ranks[n]))}]" for n in INPUTS) + ", S[]"
    body = "\n".join(f"    {s};" for s in statements)
    source = f"function ({params}) -> ({', '.join(outputs)}) {{\n{body}\n}}"
    arrays = tuple(_values(draw, dtypes[n], shapes[n]) for n in INPUTS) + (_values(draw, dtypes["S"], ()),)
    return Case(source, arrays, len(statements))


__all__ = ["Case", "cases"]
