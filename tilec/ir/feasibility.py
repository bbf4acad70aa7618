"""A contraction whose constraints no index value satisfies has no output size (PlaidML's rule).

PlaidML refuses such a contraction when it compiles it (tile/lang/lang_test.cc in plaidml/plaidml,
"Basic Infeasible Constraints": `O[2*i] = +(I[4*i]), i - 100 < 50` with I of 50 elements). tilec
also gives zero-size dimensions numpy's meaning (a reduction over an empty axis), so the rule is
applied where the two cannot be confused: an output dimension whose size is inferred comes out
empty although every tensor the statement reads has elements and every constraint bound is
positive -- each condition alone has solutions, only together they have none. Giving the output's
sizes explicitly asks for the zero-filled result instead.

Requires: the inferred extents and the statement's read shapes; `size_of` evaluates a constraint
bound. Guarantees: the compiled path (tilec.ir.bounds) and the interpreter (tilec.interp) apply
the same rule to the same numbers, so they refuse the same programs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tilec.errors import SemanticError
from tilec.ir import tensor as T


def check_feasible(stmt: T.Contraction, inferred: Sequence[int], read_shapes: Sequence[tuple[int, ...]],
                   size_of: Callable[[T.IExpr], int], what: str) -> None:
    """Raise a SemanticError when an `inferred` extent is 0 although no tensor read is empty and
    every constraint bound of `stmt` is positive; return otherwise."""
    if 0 not in inferred or any(math.prod(shape) == 0 for shape in read_shapes):
        return
    if any(size_of(c.bound) <= 0 for c in stmt.constraints):
        return
    raise SemanticError(f"cannot infer the sizes of output '{stmt.output}' in {what}: no index tuple meets the "
                        f"constraints and the input extents together, so the output would be empty (PlaidML refuses "
                        f"this too); check the constraints, or give the output sizes explicitly")
