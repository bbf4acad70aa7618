"""The cost model: gradient-boosted trees (XGBoost) predicting how fast candidates are.

Only the order of candidates matters to the search. The model regresses each candidate's speed
relative to the fastest of its group (`speed_labels`: -log2(time / best time); one group per
task, since times of different shapes are not comparable), which on replayed GEMM 512^3 tables
found the top within 160 trials on as many or more seeds than the pairwise ranking objective
(`params={"objective": "rank:pairwise"}`, labels from `relevance`; BENCHMARKS.md). A failed
candidate (time None or inf) scores below every measured one. `fit(X, y_seconds)` refits from
scratch on all the data (cheap: hundreds of rows). Prior data from other shapes of the same
template (`add_prior`) joins every fit as groups of its own: transfer learning. Persisted as
XGBoost's JSON model, never pickled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

MIN_ROWS = 4  # below this a fit is not worth it: predict() returns zeros (a random ranking)
PARAMS = {"objective": "reg:squarederror", "eta": 0.3, "max_depth": 5, "min_child_weight": 1e-3,
          "subsample": 1.0, "nthread": 1, "verbosity": 0, "tree_method": "hist"}
ROUNDS = 60


def _xgb() -> Any:
    try:
        import xgboost
    except ImportError:
        from tilec.errors import TilecError

        raise TilecError("the autotuner's cost model needs XGBoost: pip install xgboost-cpu "
                         "(or install tilec with its test extra: pip install -e '.[test]')") from None
    return xgboost


def relevance(times: Sequence[float | None]) -> np.ndarray:
    """Ranking labels: 0 for failures, then 1.. by descending time (the fastest gets the largest)."""
    t = np.array([np.inf if x is None or not np.isfinite(x) else float(x) for x in times])
    labels = np.zeros(len(t), np.float32)
    ok = np.isfinite(t)
    if ok.any():
        order = np.argsort(-t[ok], kind="stable")  # slowest first
        ranks = np.empty(ok.sum(), np.float32)
        ranks[order] = np.arange(1, ok.sum() + 1)
        labels[ok] = ranks
    return labels


def speed_labels(times: Sequence[float | None]) -> np.ndarray:
    """Regression labels: -log2 of the time relative to the group's best (0 for the best, -1 for
    twice as slow); failures one below the slowest measured."""
    t = np.array([np.inf if x is None or not np.isfinite(x) else float(x) for x in times])
    ok = np.isfinite(t)
    labels = np.zeros(len(t), np.float32)
    if ok.any():
        labels[ok] = -np.log2(t[ok] / t[ok].min())
        labels[~ok] = labels[ok].min() - 1.0
    return labels


class CostModel:
    def __init__(self, seed: int = 0, rounds: int = ROUNDS, params: dict[str, Any] | None = None) -> None:
        self.seed = seed
        self.rounds = rounds
        self.params = {**PARAMS, **(params or {})}
        self.booster: Any = None
        self._prior: list[tuple[np.ndarray, np.ndarray]] = []  # (X, labels) groups from other tasks

    def _labels(self, times: Sequence[float | None]) -> np.ndarray:
        return relevance(times) if str(self.params["objective"]).startswith("rank:") else speed_labels(times)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def add_prior(self, X: np.ndarray, y_seconds: Sequence[float | None]) -> None:  # noqa: N803
        """Measurements of another task of the same template (another shape): one more group."""
        if len(y_seconds) >= 2:
            self._prior.append((np.asarray(X, np.float32), self._labels(y_seconds)))

    def fit(self, X: np.ndarray, y_seconds: Sequence[float | None]) -> None:  # noqa: N803
        groups = list(self._prior)
        if len(y_seconds) > 0:
            groups.append((np.asarray(X, np.float32), self._labels(y_seconds)))
        rows = sum(len(g[1]) for g in groups)
        if rows < MIN_ROWS:
            return
        xgb = _xgb()
        data = xgb.DMatrix(np.concatenate([g[0] for g in groups]), label=np.concatenate([g[1] for g in groups]),
                           nthread=1)
        data.set_group([len(g[1]) for g in groups])
        self.booster = xgb.train({**self.params, "seed": self.seed}, data, num_boost_round=self.rounds)

    def predict(self, X: np.ndarray) -> np.ndarray:  # noqa: N803
        """Scores: higher means predicted faster. Zeros before the first fit."""
        X = np.asarray(X, np.float32)  # noqa: N806
        if self.booster is None or len(X) == 0:
            return np.zeros(len(X), np.float32)
        # inplace_predict: no DMatrix (building one costs ~50 ms whatever its size on a loaded machine)
        return np.asarray(self.booster.inplace_predict(X), np.float32)

    def save(self, path: str | Path) -> None:
        if self.booster is None:
            raise ValueError("the cost model has not been fitted yet: nothing to save")
        path = Path(path)
        if path.suffix != ".json":
            raise ValueError(f"cost models are saved as XGBoost JSON; give a path ending in .json, not {path.name}")
        self.booster.save_model(str(path))

    @classmethod
    def load(cls, path: str | Path, seed: int = 0) -> "CostModel":
        model = cls(seed)
        model.booster = _xgb().Booster()
        model.booster.load_model(str(path))
        return model
