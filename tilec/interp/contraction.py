"""One contraction executed by enumeration: shape, dtype and values straight from the definition.

Requires the values, shapes and dtypes of every tensor the statement reads, and the bound sizes
(which it extends with the output sizes it infers). Guarantees the language's meaning (the
README's tour of the language): a tuple of index values contributes exactly when every index
of every access, left and right, is an integer inside its tensor and every constraint holds; cells
no tuple writes hold 0, or the `default` tensor's value onto which the contributions aggregate.

Output sizes that are omitted, or a lone size symbol not bound yet over a lone index variable, are
inferred: 1 + the largest value the output index takes over the integer tuples of the variables
linked to it (through the accesses, constraints and explicit output sizes) that meet every condition
on those variables; 0 when no such tuple exists. Conditions on variables not linked to the output
index, and conditions without variables (``B[3]``, ``3 < 0``), do not shrink it: ``O[i] = +(A[i, j])``
on A of shape (3, 0) has shape (3,), like numpy.

A statement whose candidate tuples have no rational solution needs no ranges: its output is 0 (or
the default) even where a variable would be unbounded; a variable unbounded over a non-empty
solution set is a SemanticError.
"""

from __future__ import annotations

import math

import numpy as np

from tilec.errors import BindError, SemanticError, TilecError
from tilec.interp.polyhedron import Condition, Form, components, form_of, rational_box, size_value
from tilec.interp.tuples import MAX_TUPLES, integer_form, valid_tuples
from tilec.ir import tensor as T
from tilec.ir.dtypes import contraction_dtype
from tilec.ir.feasibility import check_feasible

_AT = {"+": np.add, "*": np.multiply, ">": np.maximum, "<": np.minimum}
_AT_BOOL = {"+": np.logical_or, "*": np.logical_and, ">": np.logical_or, "<": np.logical_and}


def _access_conditions(access: T.Access, shape: tuple[int, ...], sizes: dict[str, int],
                       what: str) -> list[Condition]:
    if len(shape) != len(access.indices):
        raise BindError(f"tensor '{access.tensor}' has shape {shape} (rank {len(shape)}) but {what} indexes it "
                        f"as {access} (rank {len(access.indices)})")
    return [Condition(form_of(e, sizes, what), n, f"{access.tensor} dimension {k}")
            for k, (e, n) in enumerate(zip(access.indices, shape))]


def _deferred(stmt: T.Contraction, axis: int, sizes: dict[str, int]) -> bool:
    """Whether output dimension `axis` is inferred rather than evaluated."""
    if stmt.sizes is None:
        return True
    size = stmt.sizes[axis]
    return isinstance(size, T.ISize) and size.name not in sizes and isinstance(stmt.indices[axis], T.IVar)


def _infer_extent(out: Form, variables: tuple[str, ...], conds: list[Condition], stmt: str, axis: int) -> int:
    """1 + the largest integer value of `out` over the linked variables' valid tuples (0 if none)."""
    group: set[str] = set(out.vars)
    for comp in components(variables, conds):
        if comp & group:
            group |= comp
    linked = tuple(v for v in variables if v in group)
    mine = [c for c in conds if c.form.vars and set(c.form.vars) <= group]
    box = rational_box(linked, mine)
    if box is None:
        raise SemanticError(f"cannot infer dimension {axis} of the output in '{stmt}': its index is unbounded; "
                            f"give the output sizes explicitly")
    best = -1
    for chunk in valid_tuples(linked, box, mine, f"'{stmt}'"):
        num, denom = numerators(out, chunk)
        integral = num[num % denom == 0]
        if len(integral):
            best = max(best, int(integral.max()) // denom)
    return max(0, best + 1)


def numerators(f: Form, chunk: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
    """(``D * f`` on every tuple of `chunk` as Python ints, D): f's exact values are ``num / D``."""
    denom, coeffs, const = integer_form(f)
    n = len(next(iter(chunk.values())))
    num = np.full(n, const, dtype=object)
    for v, c in coeffs:
        num = num + chunk[v].astype(object) * c
    return num, denom


def _identity(agg: str, dtype: np.dtype) -> object:
    """A start value that every contribution replaces (cells nothing writes are set to 0 afterwards)."""
    if agg in ("+", "="):
        return 0
    if agg == "*":
        return 1
    if dtype == np.bool_:
        return agg == "<"
    if dtype.kind == "f":
        return -np.inf if agg == ">" else np.inf
    info = np.iinfo(dtype)
    return info.min if agg == ">" else info.max


def _shape(stmt: T.Contraction, outs: list[Form], variables: tuple[str, ...], conds: list[Condition],
           sizes: dict[str, int]) -> tuple[int, ...]:
    """The output shape: explicit sizes evaluated, the others inferred (binding their size symbols)."""
    what = f"the size of output '{stmt.output}'"
    known: dict[int, int] = {}
    deferred = [axis for axis in range(len(outs)) if _deferred(stmt, axis, sizes)]
    for axis in range(len(outs)):
        if axis not in deferred:
            assert stmt.sizes is not None
            known[axis] = size_value(stmt.sizes[axis], sizes, what)
    limits = conds + [Condition(outs[a], n, f"output dimension {a}") for a, n in known.items()]
    inferred = {a: _infer_extent(outs[a], variables, limits, str(stmt), a) for a in deferred}
    for axis, n in inferred.items():
        size = stmt.sizes[axis] if stmt.sizes is not None else None
        if isinstance(size, T.ISize):
            sizes[size.name] = n
    shape = tuple({**known, **inferred}[a] for a in range(len(outs)))
    if any(n < 0 for n in shape):
        raise BindError(f"output '{stmt.output}' would have negative shape {shape} in '{stmt}'")
    if math.prod(shape) > MAX_TUPLES or any(n > MAX_TUPLES for n in shape):
        raise TilecError(f"output '{stmt.output}' would have shape {shape} in '{stmt}': too large for the "
                         f"interpreter (over {MAX_TUPLES} cells)")
    return shape


def _flat_index(forms: list[Form], shape: tuple[int, ...], chunk: dict[str, np.ndarray]) -> np.ndarray:
    """Flat (C order) cell numbers of in-bounds integral indices `forms` on the tuples of `chunk`."""
    n = len(next(iter(chunk.values())))
    flat = np.zeros(n, dtype=np.int64)
    for f, extent in zip(forms, shape):
        num, denom = numerators(f, chunk)
        flat = flat * extent + (num // denom).astype(np.int64)
    return flat


def _tuple_values(stmt: T.Contraction, loaded: list[np.ndarray], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """(value of each tuple in `dtype`, mask of the tuples that contribute or None for all)."""
    combo = stmt.combo
    if combo == "single":
        return loaded[0].astype(dtype), None
    if combo == "mul":
        return loaded[0].astype(dtype) * loaded[1].astype(dtype), None
    if combo == "add":
        return loaded[0].astype(dtype) + loaded[1].astype(dtype), None
    common = np.result_type(loaded[0].dtype, loaded[1].dtype)
    equal = loaded[0].astype(common) == loaded[1].astype(common)
    if combo == "eq":
        return equal.astype(dtype), None
    if combo == "cond":
        return loaded[2].astype(dtype), equal
    raise TilecError(f"the interpreter does not know the combination '{combo}' in '{stmt}'")


def run_contraction(stmt: T.Contraction, values: dict[str, np.ndarray], sizes: dict[str, int]) -> np.ndarray:
    """The output of `stmt` given the arrays it reads (by name); binds the size symbols it infers."""
    what = f"'{stmt}'"
    conds: list[Condition] = []
    for access in stmt.operands:
        conds += _access_conditions(access, values[access.tensor].shape, sizes, what)
    for c in stmt.constraints:
        conds.append(Condition(form_of(c.poly, sizes, what), size_value(c.bound, sizes, f"constraint '{c}'"),
                               f"constraint '{c}'"))
    outs = [form_of(e, sizes, what) for e in stmt.indices]
    variables = stmt.index_vars
    deferred = [axis for axis in range(len(outs)) if _deferred(stmt, axis, sizes)]
    shape = _shape(stmt, outs, variables, conds, sizes)
    check_feasible(stmt, [shape[a] for a in deferred], [values[a.tensor].shape for a in stmt.operands],
                   lambda e: size_value(e, sizes, what), what)  # PlaidML's rule, as tilec.ir.bounds applies it
    conds += [Condition(f, n, f"output dimension {a}") for a, (f, n) in enumerate(zip(outs, shape))]

    default = values[stmt.default] if stmt.default is not None else None
    dtype = np.dtype(contraction_dtype(stmt.combo, [values[a.tensor].dtype.name for a in stmt.operands],
                                       default.dtype.name if default is not None else None))
    if default is not None:
        try:
            out = np.array(np.broadcast_to(default, shape), dtype=dtype)
        except ValueError:
            raise BindError(f"default tensor '{stmt.default}' has shape {default.shape}, which does not broadcast "
                            f"to output '{stmt.output}' of shape {shape}") from None
    else:
        out = np.full(shape, _identity(stmt.agg, dtype), dtype=dtype)
    if out.size == 0:
        return out
    box = rational_box(variables, conds)
    if box is None:
        raise SemanticError(f"an index variable is unbounded in {what}: no access or constraint limits its range")
    flat_out = out.reshape(-1)
    written = np.zeros(out.size, dtype=bool)
    with np.errstate(all="ignore"):
        for chunk in valid_tuples(variables, box, conds, what):
            loaded = [values[a.tensor].reshape(-1)[_flat_index([form_of(e, sizes, what) for e in a.indices],
                                                                values[a.tensor].shape, chunk)]
                      for a in stmt.operands]
            value, mask = _tuple_values(stmt, loaded, dtype)
            cells = _flat_index(outs, shape, chunk)
            if mask is not None:
                value, cells = value[mask], cells[mask]
            _aggregate(stmt, flat_out, written, cells, value)
    if default is None:
        flat_out[~written] = 0
    return out


def _aggregate(stmt: T.Contraction, flat_out: np.ndarray, written: np.ndarray, cells: np.ndarray,
               value: np.ndarray) -> None:
    if stmt.agg == "=":
        unique, counts = np.unique(cells, return_counts=True)
        again = unique[(counts > 1) | written[unique]]
        if len(again):
            raise SemanticError(f"'=' in '{stmt}' writes output cell {int(again[0])} (in C order) more than "
                                f"once; use an aggregation such as '+' or '>', or constraints")
        flat_out[cells] = value
    elif flat_out.dtype == np.bool_:
        _AT_BOOL[stmt.agg].at(flat_out, cells, value)
    else:
        _AT[stmt.agg].at(flat_out, cells, value)
    written[cells] = True


__all__ = ["run_contraction"]
