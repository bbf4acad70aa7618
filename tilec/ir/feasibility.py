"""A contraction whose constraints no index value satisfies has no output size (PlaidML's rule).

PlaidML refuses such a contraction when it compiles it (tile/lang/lang_test.cc in plaidml/plaidml,
"Basic Infeasible Constraints": `O[2*i] = +(I[4*i]), i - 100 < 50` with I of 50 elements). An
output dimension inferred as empty is right only when a tensor the statement reads is empty
(numpy's reductions over zero-size axes), so that case stays legal.

Requires: the index ranges bounds inference found (`lo > hi` where a variable has no value).
Guarantees: `check_feasible` returns when some read tensor is empty; otherwise it raises a
SemanticError naming the output and the variables without a value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tilec.errors import SemanticError


def check_feasible(output: str, read_shapes: Sequence[tuple[int, ...]],
                   ranges: Mapping[str, tuple[float, float]], what: str) -> None:
    """Called when the inferred iteration space is empty: refuse it unless a tensor read is empty."""
    if any(math.prod(shape) == 0 for shape in read_shapes):
        return
    empty = [v for v, (lo, hi) in ranges.items() if lo > hi]
    raise SemanticError(f"cannot infer the sizes of output '{output}' in {what}: no value of index "
                        f"variable(s) {', '.join(repr(v) for v in empty) or 'the statement'} satisfies "
                        f"the constraints and the input extents together")
