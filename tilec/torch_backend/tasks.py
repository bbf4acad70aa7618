"""Every Tile program the backend has run in this process, with its input shapes and dtypes: the
fused kernels (tilec.torch_backend.compiler) and the library calls' programs (convolutions and
their derived gradients, tilec.torch_backend.lowering.library), so that `tuning_tasks()` can hand
them all to the tuner (`tilec tune model`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: (source, ((input name, shape, dtype name), ...)) -> how many places of the compiled graphs run
#: it (a fused kernel once per graph site; a convolution's program once per argument signature),
#: in the order first run
PROGRAMS: dict[tuple[str, tuple[tuple[str, tuple[int, ...], str], ...]], int] = {}


def note(source: str, names: Sequence[str], shapes: Sequence[Sequence[int]], dtypes: Sequence[torch.dtype]) -> None:
    """Remember that `source` runs, at one more place, on inputs `names` of these shapes and dtypes."""
    key = (source, tuple((n, tuple(int(d) for d in s), str(t).removeprefix("torch."))
                         for n, s, t in zip(names, shapes, dtypes)))
    PROGRAMS[key] = PROGRAMS.get(key, 0) + 1
