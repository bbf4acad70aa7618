"""`compile` as `tilec.compile` gives it, for modules inside the package (importing the package's
root from them would make every module import every other).

Requires: Tile source and a target. Guarantees: a Function (a compiled backend) or, for an
interpreted target, the reference interpreter's InterpretedFunction, with the same calling
conventions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilec.pipeline.backends import is_interpreted
from tilec.runtime.function import Function

if TYPE_CHECKING:
    from tilec.target import Target


def compile_source(source: str, target: "str | Target" = "llvm", **sizes: int) -> Any:
    """Compile Tile source; size symbols not bound by input shapes can be given as keywords.

    ``target="interp"`` returns the reference interpreter's function instead (tilec.interp): the
    same calling conventions, numpy executing the tensor IR, ``trace`` for every intermediate."""
    if is_interpreted(target):
        from tilec.interp import InterpretedFunction

        return InterpretedFunction(source, **sizes)
    return Function(source, target, **sizes)


__all__ = ["compile_source"]
