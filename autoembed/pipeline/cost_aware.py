"""Cost-aware TPE (`tpe-cost`, `tpe-mix-cost`): TPE's acquisition per predicted second.

TPE ranks candidates by log l(x) - log g(x); `CostAwareTPE` subtracts the log of each
candidate's predicted seconds (`CostModel`: ridge regression of log(seconds) on the
parameters, numeric ones in Optuna's internal form, log-scaled where the distribution is log,
categorical ones one-hot, fitted on this search's trials that ran to their end). Until
MIN_TRIALS trials have a cost, the acquisition is TPE's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.distributions import CategoricalDistribution
from optuna.samplers import TPESampler

from autoembed.pipeline.records import ATTR

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial

__all__ = ["CostAwareTPE", "CostModel", "MIN_TRIALS", "trial_seconds"]

MIN_TRIALS = 5  # trials with a cost before the cost is used
RIDGE = 1.0  # ridge penalty on standardised features


def trial_seconds(trial: FrozenTrial) -> float | None:
    """The seconds a finished trial ran (its recorded row's `wall_seconds`), else None."""
    row = trial.user_attrs.get(ATTR)
    metrics = row.get("metrics") if isinstance(row, Mapping) else None
    secs = metrics.get("wall_seconds") if isinstance(metrics, Mapping) else None
    if isinstance(secs, (int, float)) and math.isfinite(secs) and secs > 0:
        return float(secs)
    return None


class CostModel:
    """log(seconds) ~ ridge over encoded parameters (module docstring)."""

    def __init__(self, space: Mapping[str, BaseDistribution],
                 observed: Sequence[tuple[Mapping[str, float], float]]) -> None:
        """`observed`: (internal representation of each param of `space`, seconds)."""
        self.space = dict(space)
        x = self.encode({k: np.array([o[0][k] for o in observed]) for k in self.space})
        y = np.log([s for _, s in observed])
        self.mean, self.std = x.mean(axis=0), x.std(axis=0) + 1e-9
        z = (x - self.mean) / self.std
        self.y0 = float(y.mean())
        a = z.T @ z + RIDGE * np.eye(z.shape[1])
        self.coef = np.linalg.solve(a, z.T @ (y - self.y0))

    def encode(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        cols: list[np.ndarray] = []
        for name, dist in self.space.items():
            v = np.asarray(values[name], dtype=float)
            if isinstance(dist, CategoricalDistribution):
                cols.extend((v == k).astype(float) for k in range(len(dist.choices)))
            elif getattr(dist, "log", False):
                cols.append(np.log(np.maximum(v, 1e-300)))
            else:
                cols.append(v)
        return np.stack(cols, axis=1) if cols else np.zeros((len(next(iter(values.values()),
                                                                  [])), 0))

    def log_seconds(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        z = (self.encode(values) - self.mean) / self.std
        return np.asarray(self.y0 + z @ self.coef, dtype=float)


class CostAwareTPE(TPESampler):
    """TPE whose acquisition is divided by the predicted seconds (module docstring)."""

    _study: Study | None = None
    _space: dict[str, BaseDistribution] | None = None

    def _sample(self, study: Study, trial: FrozenTrial,
                search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        self._study, self._space = study, search_space
        return super()._sample(study, trial, search_space)

    def _compute_acquisition_func(self, samples: dict[str, np.ndarray], mpe_below: Any,
                                  mpe_above: Any) -> np.ndarray:
        acq = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        model = self.cost_model()
        return acq if model is None else acq - model.log_seconds(samples)

    def cost_model(self) -> CostModel | None:
        """The model fitted on the study's finished trials (None: too few yet)."""
        from optuna.trial import TrialState

        if self._study is None or self._space is None:
            return None
        space = self._space
        observed = []
        for t in self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            secs = trial_seconds(t)
            if secs is not None and space.keys() <= t.params.keys():
                observed.append(({k: d.to_internal_repr(t.params[k])
                                  for k, d in space.items()}, secs))
        return CostModel(space, observed) if len(observed) >= MIN_TRIALS else None
