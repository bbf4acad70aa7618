"""One contraction executed by enumeration: shape, dtype and values straight from the definition.

Requires the values, shapes and dtypes of every tensor the statement reads, and the bound sizes
(which it extends with the output sizes it infers). Guarantees the language's meaning (the
README's tour of the language): a tuple of index values contributes exactly when every index
of every access, left and right, is an integer inside its tensor and every constraint holds; cells
no tuple writes hold 0, or the `default` tensor's value onto which the contributions aggregate.

Output shapes follow the language's shape rule, which the interpreter takes from
:func:`tilec.ir.bounds.contraction_shape` (explicit sizes evaluated; an omitted size, or a lone
size symbol not bound yet over a lone index variable, is 1 + the largest value its index takes over
the variables' inferred ranges; 0 beside an empty range, so ``O[i] = +(A[i, j])`` on A of shape
(3, 0) has shape (3,), like numpy). That rule is the one thing shared with the compiler: which
tuples contribute and every value are computed here, independently, by exact enumeration.

A statement whose candidate tuples have no rational solution needs no ranges: its output is 0 (or
the default) even where a variable would be unbounded; a variable unbounded over a non-empty
solution set is a SemanticError.
"""

from __future__ import annotations

import math

import numpy as np

from tilec.errors import BindError, SemanticError, TilecError
from tilec.interp.polyhedron import Condition, Form, form_of, rational_box, size_value
from tilec.interp.tuples import MAX_TUPLES, integer_form, valid_tuples
from tilec.ir import tensor as T
from tilec.ir.bounds import contraction_shape
from tilec.ir.dtypes import accumulator_dtype, contraction_dtype, numpy_common

_AT = {"+": np.add, "*": np.multiply, ">": np.maximum, "<": np.minimum}
_AT_BOOL = {"+": np.logical_or, "*": np.logical_and, ">": np.logical_or, "<": np.logical_and}


def _access_conditions(access: T.Access, shape: tuple[int, ...], sizes: dict[str, int],
                       what: str) -> list[Condition]:
    if len(shape) != len(access.indices):
        raise BindError(f"tensor '{access.tensor}' has shape {shape} (rank {len(shape)}) but {what} indexes it "
                        f"as {access} (rank {len(access.indices)})")
    return [Condition(form_of(e, sizes, what), n, f"{access.tensor} dimension {k}")
            for k, (e, n) in enumerate(zip(access.indices, shape))]


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


def _shape(stmt: T.Contraction, values: dict[str, np.ndarray], sizes: dict[str, int]) -> tuple[int, ...]:
    """The output shape by the language's shape rule (binding the size symbols it infers)."""
    shape = contraction_shape(stmt, {n: v.shape for n, v in values.items()},
                              {n: v.dtype.name for n, v in values.items()}, sizes)
    if math.prod(shape) > MAX_TUPLES:  # an empty output of huge extent costs nothing
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


def _tuple_values(stmt: T.Contraction, loaded: list[np.ndarray], result_dtype: np.dtype,
                  dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """(value of each tuple in `dtype`, the accumulator's type, of operands converted to the
    contraction's `result_dtype` first; mask of the tuples that contribute or None for all)."""
    combo = stmt.combo
    if result_dtype != dtype:  # (a temporary held in float32 for a 16-bit type goes to the accumulator unrounded)
        def convert(x: np.ndarray) -> np.ndarray:
            return x if x.dtype == dtype else x.astype(result_dtype).astype(dtype)
        loaded = [convert(x) for x in loaded] if combo != "cond" else loaded[:2] + [convert(loaded[2])]
    if combo == "single":
        return loaded[0].astype(dtype), None
    if combo == "mul":
        return loaded[0].astype(dtype) * loaded[1].astype(dtype), None
    if combo == "add":
        return loaded[0].astype(dtype) + loaded[1].astype(dtype), None
    common = numpy_common(loaded[0].dtype.name, loaded[1].dtype.name)
    equal = loaded[0].astype(common) == loaded[1].astype(common)
    if combo == "eq":
        return equal.astype(dtype), None
    if combo == "cond":
        return loaded[2].astype(dtype), equal
    raise TilecError(f"the interpreter does not know the combination '{combo}' in '{stmt}'")


def run_contraction(stmt: T.Contraction, values: dict[str, np.ndarray], sizes: dict[str, int],
                    weak_default: bool = False, order_dependent: set[str] | None = None,
                    store_as: str | None = None) -> np.ndarray:
    """The output of `stmt` given the arrays it reads (by name); binds the size symbols it infers.

    `weak_default`: the default is a literal's 0-d result, whose type does not take part in the
    output's (it is converted to the type of the combination, as a weak literal is).
    `order_dependent`: gains ``stmt.output`` when the result depends on the order of aggregation
    beyond rounding (see :class:`OrderBound`). `store_as`: the result's type where given (a 16-bit
    temporary held in float32, or the declared type a value held in float32 rounds to)."""
    what = f"'{stmt}'"
    conds: list[Condition] = []
    for access in stmt.operands:
        conds += _access_conditions(access, values[access.tensor].shape, sizes, what)
    for c in stmt.constraints:
        conds.append(Condition(form_of(c.poly, sizes, what), size_value(c.bound, sizes, f"constraint '{c}'"),
                               f"constraint '{c}'"))
    outs = [form_of(e, sizes, what) for e in stmt.indices]
    variables = stmt.index_vars
    shape = _shape(stmt, values, sizes)
    conds += [Condition(f, n, f"output dimension {a}") for a, (f, n) in enumerate(zip(outs, shape))]

    default = values[stmt.default] if stmt.default is not None else None
    dtype = np.dtype(contraction_dtype(stmt.combo, [values[a.tensor].dtype.name for a in stmt.operands],
                                       None if default is None or weak_default else default.dtype.name))
    if store_as is not None:
        dtype = np.dtype(store_as)
    result_dtype, dtype = dtype, np.dtype(accumulator_dtype(dtype.name))  # 16-bit floats accumulate in float32
    if default is not None:
        if weak_default:
            _check_literal_default(stmt, default, result_dtype)
        try:
            with np.errstate(all="ignore"):  # a float default out of range becomes infinite
                out = np.array(np.broadcast_to(default, shape), dtype=result_dtype).astype(dtype)
        except ValueError:
            raise BindError(f"default tensor '{stmt.default}' has shape {default.shape}, which does not broadcast "
                            f"to output '{stmt.output}' of shape {shape}") from None
    else:
        out = np.full(shape, _identity(stmt.agg, dtype), dtype=dtype)
    if out.size == 0:
        return out.astype(result_dtype)
    box = rational_box(variables, conds)
    if box is None:
        raise SemanticError(f"an index variable is unbounded in {what}: no access or constraint limits its range")
    flat_out = out.reshape(-1)
    written = np.zeros(out.size, dtype=bool)
    bound = OrderBound.of(stmt.agg, flat_out) if order_dependent is not None else None
    with np.errstate(all="ignore"):
        for chunk in valid_tuples(variables, box, conds, what):
            loaded = [values[a.tensor].reshape(-1)[_flat_index([form_of(e, sizes, what) for e in a.indices],
                                                                values[a.tensor].shape, chunk)]
                      for a in stmt.operands]
            value, mask = _tuple_values(stmt, loaded, result_dtype, dtype)
            cells = _flat_index(outs, shape, chunk)
            if mask is not None:
                value, cells = value[mask], cells[mask]
            if bound is not None:
                bound.add(cells, value)
            _aggregate(stmt, flat_out, written, cells, value)
    if default is None:
        flat_out[~written] = 0
    if bound is not None and order_dependent is not None and bound.exceeds(out.dtype):
        order_dependent.add(stmt.output)
    with np.errstate(over="ignore"):  # a float32 accumulator beyond a float16 output's range: inf
        return out.astype(result_dtype, copy=False)


class OrderBound:
    """A bound, per output cell, on the magnitude any partial result of a floating-point ``+`` or
    ``*`` aggregation reaches, whatever the order of its contributions (and of the start value).

    The language leaves that order unspecified (compiled kernels reassociate sums and products to
    vectorise them), which changes only the rounding unless a partial result leaves the type's
    range: then one order can give inf or NaN where another gives a finite value. The bound is the
    sum of the magnitudes (``+``) or the product of the magnitudes of at least 1 (``*``) of the finite
    values, in float64 (an inf or NaN value decides the result in every order where the finite ones
    stay in range).
    """

    def __init__(self, agg: str, bound: np.ndarray) -> None:
        self.agg, self.bound = agg, bound

    @staticmethod
    def of(agg: str, start: np.ndarray) -> "OrderBound | None":
        """The bound for aggregation `agg` onto the flat `start` values, or None where the order of
        aggregation cannot matter (integers, booleans, maximum, minimum, assignment)."""
        if start.dtype.kind != "f" or agg not in ("+", "*"):
            return None
        with np.errstate(all="ignore"):
            return OrderBound(agg, OrderBound._magnitude(agg, start))

    @staticmethod
    def _magnitude(agg: str, values: np.ndarray) -> np.ndarray:
        wide = values.astype(np.float64)
        magnitude = np.where(np.isfinite(wide), np.abs(wide), 0.0)
        return magnitude if agg == "+" else np.maximum(magnitude, 1.0)

    def add(self, cells: np.ndarray, value: np.ndarray) -> None:
        """Accounts for contributions `value` to the flat output cells `cells`."""
        (np.add if self.agg == "+" else np.multiply).at(self.bound, cells, self._magnitude(self.agg, value))

    def exceeds(self, dtype: np.dtype) -> bool:
        """Whether some cell's partial results may leave the range of `dtype` (or are NaN)."""
        with np.errstate(invalid="ignore"):
            return bool(np.any(~(self.bound <= np.finfo(dtype).max)))


def _check_literal_default(stmt: T.Contraction, default: np.ndarray, dtype: np.dtype) -> None:
    """A literal default takes the output's integer type only where its value (truncated toward
    zero) is one of that type's: outside, the conversion has no meaning (a BindError, not a guess)."""
    if dtype.kind not in "iu":
        return
    value = default.item()
    info = np.iinfo(dtype)
    if isinstance(value, float) and not math.isfinite(value) or not info.min <= int(value) <= info.max:
        raise BindError(f"the default {value} of '{stmt}' does not fit in its output type {dtype.name} "
                        f"({info.min} to {info.max}); give a default in range, or a tensor default")


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


__all__ = ["OrderBound", "run_contraction"]
