"""`tilec.compile(src, target="interp")`: the tensor IR executed statement by statement with numpy.

Obviously correct and slow, and independent of the compiler's lowering and code generation (which
tuples contribute and every value are its own), so that it can be their oracle
(tests/test_fuzz_differential.py) and a debugging aid. What it shares with the compiler is what
defines shapes: binding an input's declared dims (tilec.ir.bounds.bind_param) and the shape of an
output whose sizes are omitted (tilec.ir.bounds.contraction_shape).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilec.errors import TilecError, located
from tilec.interp.contraction import run_contraction
from tilec.interp.elementwise import run_elementwise
from tilec.interp.intrinsics import run_intrinsic
from tilec.interp.sizes import bind_size_inputs, define_size
from tilec.ir import tensor as T
from tilec.ir.bounds import bind_param
from tilec.ir.dtypes import Widening, check_supported, contraction_dtype, elementwise_dtype, expr_type
from tilec.ir.size_values import is_size_expr
from tilec.runtime.function import Function, _as_array


class InterpretedFunction(Function):
    """A Tile program run by the reference interpreter. Call it like any compiled Function.

    Arguments bind as for a compiled Function (positionally or by name, the same BindErrors), and
    the result is the output array, or a tuple of them for several outputs.

    Printing intermediates on request:

    - ``f.trace(*args)`` runs the program and returns ``{name: array}`` for the inputs and every
      statement's result, in program order;
    - ``f.log = print`` (any callable taking a str) reports each statement and a summary of its
      result (shape, dtype, min, max) as it runs; ``f.log = None`` (the default) is silent;
    - ``f.order_dependent(*args)`` names the results that may depend on the order in which a
      floating-point sum or product aggregates (unspecified by the language: compiled kernels
      reassociate), because some partial result may leave its type's range.

    Candidate index tuples are enumerated over a box derived with exact integer arithmetic; a
    statement with more than tilec.interp.tuples.MAX_TUPLES of them is refused with a TilecError.
    """

    def __init__(self, source: str, **sizes: int) -> None:
        super().__init__(source, "llvm", **sizes)
        self.target_name = "interp"
        self.log: Callable[[str], None] | None = None

    def __repr__(self) -> str:
        return f"<tilec.Function ({', '.join(self.inputs)}) -> ({', '.join(self.outputs)}) interpreted>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        env = self.trace(*args, **kwargs)
        results = [env[name] for name in self.outputs]
        return results[0] if len(results) == 1 else tuple(results)

    def trace(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """Every input and every statement's result by name (see the class docstring)."""
        return self._run(args, kwargs, None)

    def order_dependent(self, *args: Any, **kwargs: Any) -> set[str]:
        """The statements' results (by name) that may depend on the order of a floating-point
        aggregation on these arguments: a sum or product some of whose partial results, in some
        order, leave the range of its type (tilec.interp.contraction.OrderBound), and every result
        computed from one of those. Other results are determined up to rounding."""
        found: set[str] = set()
        self._run(args, kwargs, found)
        for stmt in self.program.statements:
            if any(name in found for name in T.statement_reads(stmt)):
                found.add(stmt.output)
        return found

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any], order_dependent: set[str] | None
             ) -> dict[str, np.ndarray]:
        values = {name: _as_array(name, self._values(args, kwargs)[name]) for name in self.inputs}
        for name, array in values.items():
            check_supported(name, array.dtype)
        sizes = dict(self.sizes)
        bind_size_inputs(self.size_inputs, values, sizes)
        for param in self.program.params:
            with located(param.pos, self.program.source):
                bind_param(param, values[param.name].shape, sizes)
        weak: set[str] = set()
        declared = {name: array.dtype.name for name, array in values.items()}
        widening = Widening(self.program)
        for stmt in self.program.statements:
            typed = declared_dtype(stmt, declared, weak)
            held = "float32" if typed is not None and widening.held(stmt, typed) else typed
            values[stmt.output] = value = run_statement(stmt, values, sizes, weak, order_dependent, held)
            declared[stmt.output] = typed if typed is not None else value.dtype.name
            if self.log is not None:
                self.log(f"{stmt};  ->  {summary(values[stmt.output])}")
        return values

    def kernel_for(self, shapes: Any, dtypes: Any, size_values: Any = None) -> Any:
        raise TilecError("the interpreter (target 'interp') has no kernels; compile with target 'llvm' for them")

    def kernel(self, sig: Any) -> Any:
        raise TilecError("the interpreter (target 'interp') has no kernels; compile with target 'llvm' for them")

    def explain(self, shapes: Any, dtypes: Any = None, stage: str | None = None) -> str:
        """The interpreter runs the tensor IR itself: that is all there is to show."""
        return str(self.program)

    def with_schedule(self, schedule: Any) -> "Function":
        raise TilecError("the interpreter (target 'interp') takes no schedule")


def run_statement(stmt: T.Statement, values: dict[str, np.ndarray], sizes: dict[str, int],
                  weak: set[str], order_dependent: set[str] | None = None, store_as: str | None = None) -> np.ndarray:
    """The result of one statement over the arrays computed so far.

    `sizes` gains the sizes the statement binds (inferred output sizes, integer statements over
    sizes); `weak` names the 0-d results of literal-only statements (a literal ``default``, which
    takes the contraction's type rather than promoting it) and gains this statement's output if so;
    `order_dependent`, where given, gains the output of a contraction whose value may depend on the
    order of aggregation (tilec.interp.contraction.run_contraction); `store_as`, where given, is the
    type of the result (a contraction's or an elementwise statement's) instead of the one computed
    from the values' types (see declared_dtype).
    """
    if isinstance(stmt, T.Contraction):
        return run_contraction(stmt, values, sizes, stmt.default in weak, order_dependent, store_as)
    if isinstance(stmt, T.Intrinsic):
        return run_intrinsic(stmt, values, sizes)
    if not isinstance(stmt, T.Elementwise):
        raise TilecError(f"the interpreter does not know the statement '{stmt}'")
    if is_size_expr(stmt.expr):
        weak.add(stmt.output)
        return define_size(stmt, sizes)
    if isinstance(expr_type(stmt.expr, {n: values[n].dtype.name for n in T.eexpr_tensors(stmt.expr)}), type):
        weak.add(stmt.output)
        store_as = None
    return run_elementwise(stmt, values, sizes, store_as)


def declared_dtype(stmt: T.Statement, declared: dict[str, str], weak: set[str]) -> str | None:
    """The type of `stmt`'s result by the language's rules (tilec.ir.dtypes) from the declared types
    of what it reads (`weak`: the literal-only results so far), where it may differ from the type of
    the value computed from the values held (a 16-bit temporary is held in float32): for
    contractions and elementwise statements reading a tensor; None for the others (their computed
    value has it)."""
    if isinstance(stmt, T.Contraction):
        default = None if stmt.default is None or stmt.default in weak else declared[stmt.default]
        return contraction_dtype(stmt.combo, [declared[a.tensor] for a in stmt.operands], default)
    if isinstance(stmt, T.Elementwise) and T.eexpr_tensors(stmt.expr):
        return elementwise_dtype(stmt.expr, declared)
    return None


def summary(array: np.ndarray) -> str:
    """``dtype[shape]`` and, for non-empty arrays, the range of the values."""
    text = f"{array.dtype.name}{list(array.shape)}"
    if array.size:
        text += f" min {array.min()} max {array.max()}"
    return text


__all__ = ["InterpretedFunction", "run_statement", "summary"]
