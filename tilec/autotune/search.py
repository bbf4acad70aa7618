"""Search over a Space's indices: batches of candidates to measure (`next_batch(n)`) and the
measurements coming back (`update(results)`).

`ModelSearch` proposes the best-predicted unmeasured points of the cost model. A space of at
most `SWEEP_POINTS` points (every template space so far: GEMM and conv2d spaces hold ~4,200)
is swept whole: each point is scored at every batch, which costs a few milliseconds once the
points are featurised and never misses the model's best. Larger spaces are searched by
simulated annealing over the predictions (chains started from the best measured points and
from random ones, one-knob moves, a cooling temperature). Each slot of a batch is instead a
random point with probability `explore` (epsilon-greedy: the model's only view of regions it
scores low). Optionally (`local`) a share of each batch is the best-predicted one-knob
neighbours of the best measured points, off by default: on replayed GEMM 512^3 measurements it
did worse (noise makes the incumbents' neighbourhoods a poor bet). Ties between predictions are
broken at random. On the replayed GEMM 512^3 table (docs/gemm512_space.json, 60 seeds) this
reaches 95% of the best in 95 trials on average (median 83, every seed within 400 trials);
annealing with the same exploration needs 116, the earlier setting (annealing, a fixed 20% of
each batch random) at least 125 (4 seeds not within 400 trials), random search 326.
`RandomSearch` is the baseline the model must beat. Both never propose a point twice, stop
early when the best time has not improved for `patience` batches, and are reproducible for a
fixed seed.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from tilec.autotune.features import Featurizer
from tilec.autotune.model import CostModel
from tilec.autotune.space import Space

Result = tuple[int, "float | None"]  # (space index, seconds or None for a failure)
SWEEP_POINTS = 20_000  # spaces up to this size are scored whole at every batch instead of annealed


class Search(Protocol):
    def next_batch(self, n: int) -> list[int]: ...

    def update(self, results: Sequence[Result]) -> None: ...

    @property
    def done(self) -> bool: ...


class RandomSearch:
    def __init__(self, space: Space, seed: int = 0, patience: int = 0, first: Sequence[int] = ()) -> None:
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.patience = patience  # 0: never stop early
        self.first = [i for i in first]
        self.measured: dict[int, float | None] = {}
        self.proposed: set[int] = set()
        self.best_time = math.inf
        self.stale = 0

    # ------------------------------------------------------------ bookkeeping
    @property
    def done(self) -> bool:
        return len(self.proposed) >= len(self.space) or (self.patience > 0 and self.stale >= self.patience)

    @property
    def best_index(self) -> int | None:
        ok = [(t, i) for i, t in self.measured.items() if t is not None]
        return min(ok)[1] if ok else None

    def update(self, results: Sequence[Result]) -> None:
        improved = False
        for index, time_s in results:
            self.proposed.add(index)
            self.measured[index] = time_s
            if time_s is not None and time_s < self.best_time:
                improved = True
                self.best_time = time_s
        self.stale = 0 if improved else self.stale + 1
        self._refit()

    def _refit(self) -> None:
        pass

    # ------------------------------------------------------------ proposing
    def _random(self, k: int, taken: set[int]) -> list[int]:
        out: list[int] = []
        free = len(self.space) - len(self.proposed) - len(taken)
        if free <= 4 * k:  # nearly exhausted: enumerate what is left
            left = [i for i in range(len(self.space)) if i not in self.proposed and i not in taken]
            return [left[j] for j in self.rng.permutation(len(left))[:k]]
        while len(out) < k:
            i = int(self.rng.integers(len(self.space)))
            if i not in self.proposed and i not in taken:
                taken.add(i)
                out.append(i)
        return out

    def _firsts(self, n: int) -> list[int]:
        out: list[int] = []
        while self.first and len(out) < n:
            i = self.first.pop(0)
            if i not in self.proposed and i not in out:
                out.append(i)
        return out

    def next_batch(self, n: int) -> list[int]:
        batch = self._firsts(n)
        batch += self._random(n - len(batch), set(batch))
        self.proposed.update(batch)
        return batch


class ModelSearch(RandomSearch):
    def __init__(self, space: Space, featurizer: Featurizer, model: CostModel, seed: int = 0, patience: int = 0,
                 first: Sequence[int] = (), explore: float = 0.05, local: float = 0.0, chains: int = 48,
                 steps: int = 30, sweep_points: int = SWEEP_POINTS) -> None:
        super().__init__(space, seed, patience, first)
        self.featurizer = featurizer
        self.model = model
        self.explore = explore
        self.local = local
        self.chains = chains
        self.steps = steps
        self.sweep_points = sweep_points
        self._all_features: np.ndarray | None = None  # the whole space's, for the sweep

    def _scores(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        return self.model.predict(self.featurizer.matrix([self.space.config(i) for i in indices]))

    def _refit(self) -> None:
        items = sorted(self.measured.items())
        self.model.fit(self.featurizer.matrix([self.space.config(i) for i, _ in items]), [t for _, t in items])

    def _predicted_best(self, k: int, taken: set[int]) -> list[int]:
        """The k best-predicted unproposed points: the whole space scored if it is small, else annealing."""
        if len(self.space) > self.sweep_points:
            return self._anneal(k, taken)
        if self._all_features is None:
            self._all_features = self.featurizer.matrix([self.space.config(i) for i in range(len(self.space))])
        free = np.array([i for i in range(len(self.space)) if i not in self.proposed and i not in taken], np.int64)
        if k <= 0 or len(free) == 0:
            return []
        return self._ranked(k, free, self.model.predict(self._all_features[free]))

    def _anneal(self, k: int, taken: set[int]) -> list[int]:
        """The k best-predicted unproposed points that annealing chains visit."""
        ranked = sorted((t, i) for i, t in self.measured.items() if t is not None)
        starts = [i for _, i in ranked[: self.chains // 2]]
        starts += [int(self.rng.integers(len(self.space))) for _ in range(self.chains - len(starts))]
        current = np.array(starts)
        score = self._scores(current)
        seen: dict[int, float] = {int(i): float(s) for i, s in zip(current, score)}
        spread = float(np.std(score)) or 1.0
        for step in range(self.steps):
            temperature = spread * (1.0 - step / self.steps) + 1e-6
            proposal = np.array([self.space.random_neighbour(int(i), self.rng) for i in current])
            new = self._scores(proposal)
            seen.update((int(i), float(s)) for i, s in zip(proposal, new))
            accept = self.rng.random(len(current)) < np.exp(np.minimum(0.0, (new - score) / temperature))
            current = np.where(accept, proposal, current)
            score = np.where(accept, new, score)
        return self._top(k, [i for i in seen if i not in self.proposed and i not in taken], seen)

    def _top(self, k: int, candidates: Sequence[int], scores: dict[int, float] | None = None) -> list[int]:
        """The k best-predicted of `candidates`; ties (common: trees predict in steps) broken at random."""
        if not candidates or k <= 0:
            return []
        cand = np.array(sorted(set(candidates)))
        return self._ranked(k, cand, np.array([scores[int(i)] for i in cand]) if scores is not None
                            else self._scores(cand))

    def _ranked(self, k: int, cand: np.ndarray, score: np.ndarray) -> list[int]:
        """The k of `cand` with the highest `score`, ties broken at random."""
        order = np.lexsort((self.rng.random(len(cand)), -score))
        return [int(i) for i in cand[order[:k]]]

    def _around_best(self, k: int, taken: set[int]) -> list[int]:
        """The k best-predicted unproposed one-knob neighbours of the best measured points: the
        fine steps around the incumbents that annealing over a coarse model overlooks."""
        ranked = sorted((t, i) for i, t in self.measured.items() if t is not None)
        near: set[int] = set()
        for _, i in ranked[:4]:
            near.update(j for j in self.space.neighbours(i) if j not in self.proposed and j not in taken)
        return self._top(k, list(near))

    def next_batch(self, n: int) -> list[int]:
        batch = self._firsts(n)
        if self.model.trained and len(batch) < n:
            explore = int(self.rng.binomial(n - len(batch), self.explore))  # epsilon-greedy: random slots
            room = n - len(batch) - explore  # the model's share
            local = self._around_best(min(room, int(round(self.local * n))), set(batch))
            batch += local
            batch += self._predicted_best(room - len(local), set(batch))
        batch += self._random(n - len(batch), set(batch))
        self.proposed.update(batch)
        return batch
