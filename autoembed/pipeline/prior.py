"""Start points as a prior the sampler can move away from (piBO, Hvarfner et al. 2022).

`PriorTPE` (on `CostAwareTPE`; `cost=False` leaves the cost out) adds (BETA / n) log pi(x)
to TPE's acquisition (n: trials told so far), so the prior's weight decays as evidence
grows. `StartPrior` is a mixture with one component per start point: a Gaussian of width
WIDTH on each numeric parameter (on [0, 1] of its range, log-scaled where the distribution
is log); PICK on the point's categorical choice, the rest shared by the others; uniform on
a parameter the point does not set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.distributions import CategoricalDistribution

from autoembed.pipeline.cost_aware import CostAwareTPE

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

__all__ = ["BETA", "PICK", "PriorTPE", "StartPrior", "WIDTH"]

BETA = 10.0  # the prior's weight: BETA / n after n trials (piBO's beta)
WIDTH = 0.15  # a numeric component's standard deviation, on [0, 1] of the range
PICK = 0.7  # a categorical component's mass on the start point's choice


def _unit(dist: Any, internal: np.ndarray) -> np.ndarray:
    """A numeric parameter's (Float/IntDistribution) internal values on [0, 1] of its range
    (log where log)."""
    lo, hi = float(dist.low), float(dist.high)
    v = np.asarray(internal, dtype=float)
    if dist.log:
        lo, hi, v = math.log(lo), math.log(hi), np.log(np.maximum(v, 1e-300))
    return (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v)


class StartPrior:
    """The mixture over start points (module docstring); `points`: Optuna params."""

    def __init__(self, points: Sequence[Mapping[str, Any]]) -> None:
        self.points = [dict(p) for p in points]

    def log_pdf(self, space: Mapping[str, BaseDistribution],
                samples: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(samples.values())))
        comps = []
        for point in self.points:
            logp = np.zeros(n)
            for name, dist in space.items():
                if name not in point:
                    continue
                x = np.asarray(samples[name], dtype=float)
                if isinstance(dist, CategoricalDistribution):
                    if point[name] not in dist.choices:
                        continue
                    k = dist.choices.index(point[name])
                    rest = (1 - PICK) / max(len(dist.choices) - 1, 1)
                    logp += np.log(np.where(np.round(x) == k, PICK, rest))
                else:
                    mu = _unit(dist, np.array([dist.to_internal_repr(point[name])]))[0]
                    z = (_unit(dist, x) - mu) / WIDTH
                    logp += -0.5 * z**2 - math.log(WIDTH * math.sqrt(2 * math.pi))
            comps.append(logp)
        if not comps:
            return np.zeros(n)
        stacked = np.stack(comps)
        top = stacked.max(axis=0)
        return np.asarray(top + np.log(np.exp(stacked - top).mean(axis=0)), dtype=float)


class PriorTPE(CostAwareTPE):
    """TPE (cost-aware when `cost`) with the start points' prior (module docstring)."""

    def __init__(self, *, prior: Sequence[Mapping[str, Any]], cost: bool = False,
                 beta: float = BETA, **kw: Any) -> None:
        super().__init__(**kw)
        self.prior = StartPrior(prior)
        self.cost = cost
        self.beta = beta

    def cost_model(self) -> Any:
        return super().cost_model() if self.cost else None

    def _compute_acquisition_func(self, samples: dict[str, np.ndarray], mpe_below: Any,
                                  mpe_above: Any) -> np.ndarray:
        acq = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        if self._study is None or self._space is None or not self.prior.points:
            return acq
        n = max(len(self._study.get_trials(deepcopy=False)), 1)
        return acq + (self.beta / n) * self.prior.log_pdf(self._space, samples)
