"""tilec: a Tile tensor-expression language and kernel compiler.

    >>> import numpy as np, tilec
    >>> matmul = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
    >>> C = matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
"""

from __future__ import annotations

from typing import Any

from tilec.errors import (BindError, CodegenError, ScheduleError, SemanticError, TargetError, TilecError, TilecWarning,
                          TileSyntaxError)
from tilec.frontend import parse
from tilec.entry import compile_source
from tilec.runtime.function import Function
from tilec.schedule.primitives.records import Schedule
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.target import Target, cpu_target
from tilec.version import __version__
from tilec.autodiff import grad


def compile(source: str, target: "str | Target" = "llvm", **sizes: int) -> Function:  # noqa: A001
    """Compile Tile source; size symbols not bound by input shapes can be given as keywords.

    ``target="interp"`` returns the reference interpreter's function instead (tilec.interp): the
    same calling conventions, numpy executing the tensor IR, ``trace`` for every intermediate."""
    return compile_source(source, target, **sizes)  # type: ignore[no-any-return]


def explain(source: str, shapes: dict[str, Any], dtypes: dict[str, str] | None = None,
            stage: str | None = None, target: "str | Target" = "llvm", **sizes: int) -> str:
    """Every compilation stage (tensor IR, loop IR, LLVM IR) for the given input shapes, or one `stage`."""
    return compile(source, target, **sizes).explain(shapes, dtypes, stage)


def __getattr__(name: str) -> Any:
    """`tilec.do_bench` (tilec.runtime.timing) and `tilec.tune` (`tilec tune` from Python:
    tilec.cli.tune.tune_api), imported on first use so that `import tilec` stays quick."""
    if name == "do_bench":
        from tilec.runtime.timing import do_bench

        return do_bench
    if name == "tune":
        from tilec.cli.tune import tune_api

        return tune_api
    raise AttributeError(f"module 'tilec' has no attribute {name!r}")


__all__ = ["compile", "explain", "grad", "parse", "Function", "Schedule", "TemplateSchedule", "TemplateConfig", "Target",
           "cpu_target", "TilecError", "TilecWarning", "TileSyntaxError", "SemanticError", "BindError", "ScheduleError",
           "CodegenError", "TargetError", "__version__", "do_bench", "tune"]
