"""A benchmark case, what the harness runs: an op at one shape, dtype and target, and its choice.

Requires: an Op and its sizes. Guarantees: `Case.prepare` gives zero-argument calls of tilec (the
Tile program compiled on its first call, or its gradient for a backward case) and of the
baseline on the same inputs, and `check` raises a BenchError unless their results agree
(loosely: float32 sums differ); `select_cases` gives the cases `tilec bench` runs for its
arguments, or a BenchError for arguments that do not go together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tilec.bench.ops.backward import BACKWARD_OPS, backward_op
from tilec.bench.ops.op import BenchError, Op, format_shape, parse_shape
from tilec.bench.ops.table import OP_NAMES, OPS, get_op

LOW_PRECISION = ("bfloat16", "float16")  # checked at their own tolerance; baselines in torch
DTYPES = ("float32", "float64") + LOW_PRECISION


@dataclass(frozen=True)
class Prepared:
    """Zero-argument calls of both sides on the same inputs, and a check of their results."""

    tilec: Callable[[], Any]
    baseline: Callable[[], Any]
    check: Callable[[Any, Any], None]


@dataclass(frozen=True)
class Case:
    op: Op
    shape: Mapping[str, int]
    dtype: str = "float32"
    target: str = "llvm"
    seed: int = 0

    @property
    def flops(self) -> float:
        return self.op.flops(self.shape)

    @property
    def bytes(self) -> float:
        """The bytes the case must move at least: its inputs read and its outputs written, once each
        (0 where the op does not say)."""
        elements = self.op.elements
        return elements(self.shape) * np.dtype(self.dtype).itemsize if elements is not None else 0.0

    def source(self) -> str:
        return self.op.source(self.shape)

    def prepare(self) -> Prepared:
        """Make the inputs and both callables; the Tile program is compiled on its first call."""
        from tilec.autodiff import grad
        from tilec.entry import compile_source

        inputs = self.op.make_inputs(self.shape, self.dtype, np.random.default_rng(self.seed))
        if self.op.wrt:
            fn = grad(self.source(), self.op.wrt, target=self.target)
        else:
            fn = compile_source(self.source(), self.target)
        baseline = self.op.make_baseline(inputs, self.shape)
        return Prepared(lambda: fn(*inputs), baseline, self.check)

    def check(self, got: Any, expected: Any) -> None:
        """Raise a BenchError unless tilec's result matches the baseline's (loosely: fp32 sums differ)."""
        if isinstance(expected, (tuple, list)):  # a backward case: one result per gradient
            got = got if isinstance(got, (tuple, list)) else (got,)
            if len(got) != len(expected):
                raise BenchError(f"{self.op.label}: tilec gives {len(got)} gradients, the baseline {len(expected)}")
            for k, (g, e) in enumerate(zip(got, expected)):
                self._check_one(g, e, f" (d{self.op.wrt[k]})" if k < len(self.op.wrt) else "")
            return
        self._check_one(got, expected, "")

    def _check_one(self, got: Any, expected: Any, what: str) -> None:
        got = np.asarray(got).astype(np.float64)
        expected = expected.detach().double().numpy() if hasattr(expected, "detach") else np.asarray(expected)
        expected = expected.astype(np.float64)
        where = f"{self.op.label}{what} {format_shape(self.shape)}"
        if got.shape != expected.shape:
            raise BenchError(f"{where}: tilec's result has shape {got.shape}, {self.op.baseline} gives "
                             f"{expected.shape}")
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        tolerance = 1e-2 if self.dtype in LOW_PRECISION else 1e-3  # a 16-bit result rounds once more
        rtol, atol = tolerance, tolerance * max(scale, 1e-6)
        bad = ~np.isclose(got, expected, rtol=rtol, atol=atol)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise BenchError(f"{where}: tilec's result differs from {self.op.baseline} at {int(bad.sum())} of "
                             f"{bad.size} elements; first at {first}: tilec {got[first]!r}, baseline "
                             f"{expected[first]!r} (rtol {rtol}, atol {atol:.3g})")


def select_cases(op_name: str, shapes: Sequence[str] = (), *, causal: bool = False, quick: bool = False,
                 dtype: str = "float32", target: str = "llvm", backward: bool = False) -> list[Case]:
    """The cases `tilec bench` runs: for one op (or "all"), the --shape ones, the quick one or the
    acceptance cases. "all" includes causal attention; with `backward`, "all" is the ops that have
    a backward case (conv2d, attention, causal attention), each case's gradients."""
    if dtype not in DTYPES:
        raise BenchError(f"--dtype {dtype}: the benchmarks run in {', '.join(DTYPES)}")
    if shapes and quick:
        raise BenchError("give --shape or --quick, not both")
    if op_name == "all":
        if shapes:
            raise BenchError("--shape needs one op: tilec bench OP --shape ...")
        if causal:
            raise BenchError("--causal needs the attention op: tilec bench attention --causal")
        chosen = [OPS[name] for name in OP_NAMES] + [get_op("attention", causal=True)]
        if backward:
            chosen = [op for op in chosen if op.name in BACKWARD_OPS]
    else:
        chosen = [get_op(op_name, causal)]
    if backward:
        chosen = [backward_op(op) for op in chosen]
    cases = []
    for op in chosen:
        if shapes:
            picked: Sequence[Mapping[str, int]] = [parse_shape(op, text) for text in shapes]
        else:
            picked = [op.quick] if quick else list(op.cases)
        if dtype in LOW_PRECISION and op.baseline.startswith("numpy"):  # numpy has no 16-bit products: torch's
            op = replace(op, baseline=op.baseline.replace("numpy", "torch"),
                         baseline_short=op.baseline_short.replace("numpy", "torch"))
        cases += [Case(op, dict(shape), dtype, target) for shape in picked]
    return cases
