"""`Op`, the record of one op that `tilec bench` times, and the text of its --shape sizes.

An Op names its sizes, acceptance cases and quick case, and holds the functions that make its
Tile source, inputs and baseline and count its work (flops) and its traffic (the elements it must
read and write at least, for the roofline). Requires of `parse_shape`: the text of one
--shape argument. Guarantees: every size of the op, in its order, its defaults filled in, each an
integer at least the op's minimum, and the op's own shape check passed; anything else is a
BenchError that shows the expected form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilec.errors import TilecError

Shape = Mapping[str, int]
Inputs = tuple[np.ndarray, ...]


class BenchError(TilecError):
    """A benchmark cannot run as asked: bad --shape, missing baseline library, wrong result."""


def _no_check(s: Shape) -> None:
    pass


@dataclass(frozen=True)
class Op:
    """One op of the benchmark: its sizes and cases, and how to make its source, inputs and baseline."""

    name: str
    label: str  # the name in reports: "attention" or "attention-causal"
    sizes: tuple[str, ...]  # the --shape names, in report order
    defaults: Mapping[str, int]  # sizes that may be left out (conv2d's stride and pad)
    cases: tuple[Mapping[str, int], ...]  # the acceptance cases, run when no --shape is given
    quick: Mapping[str, int]  # a small case for --quick and the tests
    baseline: str  # what the baseline is, in JSON reports
    baseline_short: str  # and in the table
    source: Callable[[Shape], str]
    make_inputs: Callable[[Shape, str, np.random.Generator], Inputs]
    make_baseline: Callable[[Inputs, Shape], Callable[[], Any]]
    flops: Callable[[Shape], float]
    check_shape: Callable[[Shape], None] = _no_check
    minimums: Mapping[str, int] = field(default_factory=dict)  # sizes that may be 0 otherwise must be >= 1
    causal: bool = False
    wrt: tuple[str, ...] = ()  # a backward case: tilec.grad of `source` with respect to these inputs
    elements: Callable[[Shape], float] | None = None  # elements of the inputs and outputs (each once): the roofline's bytes
    # `flops` counts the direct method's; a fast algorithm (Winograd's convolution) does fewer, so a rate
    # above the FMA peak is no sign that the peak was measured low
    fast_algorithms: bool = False

    @property
    def backward(self) -> bool:
        return bool(self.wrt)


def parse_shape(op: Op, text: str) -> dict[str, int]:
    """`M=1024,N=1024,K=1024` -> {"M": 1024, ...}, in the op's order, defaults filled in."""
    expected = ", ".join(op.sizes)
    given: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise BenchError(f"--shape {text!r}: expected NAME=VALUE pairs separated by commas, such as "
                             f"{format_shape(op.cases[0])}; got {item!r}")
        if name not in op.sizes:
            raise BenchError(f"--shape {text!r}: unknown size '{name}' for {op.name}; its sizes are {expected}")
        if name in given:
            raise BenchError(f"--shape {text!r}: size '{name}' given twice")
        try:
            number = int(value)
        except ValueError:
            raise BenchError(f"--shape {text!r}: {name} must be an integer, got {value!r}") from None
        least = op.minimums.get(name, 1)
        if number < least:
            raise BenchError(f"--shape {text!r}: {name} must be at least {least}, got {number}")
        given[name] = number
    missing = [n for n in op.sizes if n not in given and n not in op.defaults]
    if missing:
        raise BenchError(f"--shape {text!r}: missing {', '.join(missing)}; {op.name} needs {expected}"
                         + (f" ({', '.join(f'{k}={v}' for k, v in op.defaults.items())} by default)"
                            if op.defaults else ""))
    shape = {n: given.get(n, op.defaults.get(n, 0)) for n in op.sizes}
    op.check_shape(shape)
    return shape


def format_shape(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())
