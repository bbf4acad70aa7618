"""Search spaces of the templates: named knobs with explicit choice lists, constraints with
reasons, and an integer index over the legal points.

The legal points are enumerated once, in the mixed-radix order of the knobs (the last knob
varies fastest), so `config(i)` and `index(config)` are deterministic for a given task and
target. The heuristic's default config is always a point of the space, even where it breaks
a constraint (the constraints are the tuner's taste; the default is the baseline to beat).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tilec.errors import TilecError

Config = dict[str, Any]  # knob name -> value, one point of a Space
MAX_RAW_POINTS = 200_000  # knob combinations enumerated before constraints


class SpaceTooLarge(TilecError):
    """The knobs' choice lists multiply to more points than the cap."""


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[Any, ...]


@dataclass(frozen=True)
class Constraint:
    """`check(config)` is None when the config is legal, else the reason it is not."""

    name: str
    check: Callable[[Config], str | None]


class Space:
    def __init__(self, knobs: tuple[Knob, ...], constraints: tuple[Constraint, ...] = (),
                 default: Config | None = None, max_points: int = MAX_RAW_POINTS) -> None:
        self.knobs = knobs
        self.constraints = constraints
        self.names = tuple(k.name for k in knobs)
        raw = math.prod(len(k.choices) for k in knobs)
        if raw > max_points:
            sizes = ", ".join(f"{k.name}: {len(k.choices)}" for k in knobs)
            raise SpaceTooLarge(f"the search space has {raw} knob combinations ({sizes}), more than the cap of "
                                f"{max_points}; drop choices from the largest knob or raise max_points")
        self.rejections: Counter[str] = Counter()
        points = []
        for values in itertools.product(*(k.choices for k in knobs)):
            config = dict(zip(self.names, values))
            reason = self.reason(config)
            if reason is None or config == default:
                points.append(values)
            else:
                self.rejections[reason.split(":")[0]] += 1
        self._points: list[tuple[Any, ...]] = points
        self._index = {p: i for i, p in enumerate(points)}
        if not points:
            raise TilecError(f"the search space is empty: every point breaks a constraint ({dict(self.rejections)})")

    def __len__(self) -> int:
        return len(self._points)

    def config(self, i: int) -> Config:
        return dict(zip(self.names, self._points[i]))

    def index(self, config: Mapping[str, Any]) -> int | None:
        """The index of a legal config, None for one outside the space."""
        try:
            return self._index.get(tuple(config[n] for n in self.names))
        except KeyError:
            return None

    def reason(self, config: Mapping[str, Any]) -> str | None:
        """Why `config` is illegal ("name: explanation"), or None."""
        for c in self.constraints:
            why = c.check(dict(config))
            if why is not None:
                return f"{c.name}: {why}"
        return None

    def neighbours(self, i: int) -> list[int]:
        """Legal points differing from point i in one knob, by one step of its choice list."""
        point = self._points[i]
        out = []
        for k, knob in enumerate(self.knobs):
            pos = knob.choices.index(point[k])
            for step in (-1, 1):
                if 0 <= pos + step < len(knob.choices):
                    j = self._index.get(point[:k] + (knob.choices[pos + step],) + point[k + 1:])
                    if j is not None:
                        out.append(j)
        return out

    def random_neighbour(self, i: int, rng: Any) -> int:
        """A legal point differing from point i in one knob (any choice), or i if none is."""
        point = self._points[i]
        for _ in range(8):
            k = int(rng.integers(len(self.knobs)))
            value = self.knobs[k].choices[int(rng.integers(len(self.knobs[k].choices)))]
            j = self._index.get(point[:k] + (value,) + point[k + 1:])
            if j is not None and j != i:
                return j
        near = self.neighbours(i)
        return near[int(rng.integers(len(near)))] if near else i


def log_feature(x: float) -> float:
    """log2 of a positive quantity, as the cost model's features take sizes (0 and below: -30)."""
    return math.log2(max(x, 1e-9))


def choices_with(choices: tuple[Any, ...], *extra: Any) -> tuple[Any, ...]:
    """`choices` and `extra` (the default's value, say), sorted, each once."""
    return tuple(sorted(set(choices) | set(extra), key=lambda v: (str(type(v)), v)))


__all__ = ["Config", "Constraint", "Knob", "Space", "SpaceTooLarge", "choices_with", "log_feature"]
