"""`grad`: the gradient of a Tile source, derived and compiled into a callable Function.

Requires: Tile source text whose inputs include those named in `wrt`. Guarantees: the returned
Function runs the program `derive` gives (renaming copies removed) on the chosen target.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilec.autodiff.driver import derive
from tilec.frontend import parse
from tilec.runtime.function import Function
from tilec.target import Target


def grad(source: str, wrt: "str | Sequence[str]", target: "str | Target" = "llvm", **sizes: int) -> Function:
    """Compile the gradient of Tile `source` with respect to the inputs in `wrt`.

    The returned Function takes the forward inputs followed by one gradient per forward output
    (``D<Output>``, shaped like that output) and returns ``D<Name>`` for each name in `wrt`, in
    order; its `source` is the derived Tile program.
    """
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    program = parse(source, sizes)
    return Function(str(derive(program, names)), target, **sizes)
