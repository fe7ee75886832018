"""The sampler kinds the benchmarks measured and the product left out, made here.

* `gp`: Optuna's GPSampler (numeric params modelled, conditional ones random), 8 random
  start-up proposals; `tpe-plain`: Optuna's TPE defaults (each parameter on its own);
  `tpe-s4`: `tpe` with its model from the fourth observation on. None beat random
  sampling's hypervolume (results/sampler_comparison.md): `tpe-plain` 0.99x [0.99, 1.00]
  on the default space at 50 trained trials, `gp` 1.00x [0.99, 1.00] and `tpe-s4` 1.00x
  (one seed) on MovieLens' derived space at 20.
* `tpe-cost`, `tpe-mix-cost`: `tpe` and `tpe-mix` with TPE's acquisition per predicted
  second (`CostAwareTPE`); `make_sampler(kind, seed, prior=points)`: the TPE kinds leaning
  towards start points early (`PriorTPE`, piBO). Replayed with MO-ASHA on the tables of
  about 80 rows (20 seeds; search_efficiency_replay_81rows.md, git history at fbf29c6),
  `tpe-mix-cost` reached 95% of the front in 0.80-1.16x random search's compute and the
  prior in 0.50-1.07x, `tpe-mix` itself in 0.85-1.19x; `ehvi` (the default, which divides
  its own gain by predicted seconds) took 0.61x on the default table where the prior took
  1.07x.

How a benchmark uses them: `make_sampler` (the product's kinds too) for an engine it builds
itself (the replays: `Method(name, kind(name))`); `experiment_kinds()` around a
`autoembed.search(...)` call, which then takes these kinds by name (the driver looks
`pipeline.study.make_sampler` and `SAMPLERS` up at each call; outside the block a search
refuses them with one line).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.distributions import CategoricalDistribution
from optuna.samplers import TPESampler

from autoembed.pipeline import study as product
from autoembed.pipeline.records import ATTR

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.samplers import BaseSampler
    from optuna.study import Study
    from optuna.trial import FrozenTrial

__all__ = ["EXPERIMENTS", "make_sampler", "kind", "experiment_kinds", "CostModel",
           "CostAwareTPE", "PriorTPE", "StartPrior", "trial_seconds"]

EXPERIMENTS = ("gp", "tpe-plain", "tpe-s4", "tpe-cost", "tpe-mix-cost")
assert set(EXPERIMENTS) == set(product.MOVED_SAMPLERS)  # the product's refusal names them
TPE_SHORT_STARTUP = 4  # tpe-s4: the model from the fourth observation on
MIN_TRIALS = 5  # trials with a cost before CostAwareTPE uses it
RIDGE = 1.0  # CostModel's ridge penalty on standardised features
BETA = 10.0  # the prior's weight: BETA / n after n trials (piBO's beta)
WIDTH = 0.15  # a numeric component's standard deviation, on [0, 1] of the range
PICK = 0.7  # a categorical component's mass on the start point's choice
_product_sampler = product.make_sampler  # as imported, not as `experiment_kinds` sets it


def make_sampler(kind: str, seed: int,
                 prior: Sequence[Mapping[str, Any]] = ()) -> BaseSampler:
    """A seeded sampler of `kind`: one of EXPERIMENTS, or a product kind
    (`pipeline.study.make_sampler`). `prior`: Optuna params of start points that a TPE kind
    leans towards early (`PriorTPE`)."""
    import optuna

    if kind not in EXPERIMENTS and not (prior and kind in ("tpe", "tpe-mix")):
        return _product_sampler(kind, seed)
    if kind == "tpe-plain":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=product.TPE_STARTUP)
    if kind == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=product.TPE_STARTUP,
                                         warn_independent_sampling=False)
    cost = kind.endswith("-cost")
    if kind in ("tpe", "tpe-s4", "tpe-cost"):
        startup = TPE_SHORT_STARTUP if kind == "tpe-s4" else product.TPE_STARTUP
        return _tpe(seed, startup, cost, prior)
    from autoembed.pipeline.interleave import InterleavedSampler

    model = _tpe((seed + product.MIX_MODEL_SEED_OFFSET) % 2**32, product.TPE_STARTUP, cost,
                 prior)
    return InterleavedSampler(model, optuna.samplers.RandomSampler(seed=seed),
                              product.TPE_STARTUP, product.MIX_EVERY)


def kind(name: str, prior: Callable[[Any], Sequence[Mapping[str, Any]]] | None = None,
         ) -> Callable[[int, Any], BaseSampler]:
    """A replay method's sampler (harness.Method's (seed, workload) -> sampler) of kind
    `name`; `prior(workload)`: the start points it leans towards."""
    def make(seed: int, workload: Any) -> BaseSampler:
        return make_sampler(name, seed, prior(workload) if prior is not None else ())
    return make


@contextmanager
def experiment_kinds() -> Iterator[None]:
    """Within the block, `autoembed.search(sampler=...)` takes EXPERIMENTS too: the product's
    `SAMPLERS` and `make_sampler` are this module's for the block, then restored."""
    saved = product.SAMPLERS, product.make_sampler
    product.SAMPLERS = (*saved[0], *EXPERIMENTS)
    product.make_sampler = make_sampler
    try:
        yield
    finally:
        product.SAMPLERS, product.make_sampler = saved


def _tpe(seed: int, startup: int, cost: bool,
         prior: Sequence[Mapping[str, Any]]) -> TPESampler:
    """The product's multivariate TPE (`study.tpe_settings`), cost-aware and with a prior
    where asked."""
    import optuna

    kw = product.tpe_settings(seed, startup)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if prior:
            return PriorTPE(prior=prior, cost=cost, **kw)
        return CostAwareTPE(**kw) if cost else TPESampler(**kw)


# ------------------------------------------------------------------ cost-aware TPE

def trial_seconds(trial: FrozenTrial) -> float | None:
    """The seconds a finished trial ran (its recorded row's `wall_seconds`), else None."""
    row = trial.user_attrs.get(ATTR)
    metrics = row.get("metrics") if isinstance(row, Mapping) else None
    secs = metrics.get("wall_seconds") if isinstance(metrics, Mapping) else None
    if isinstance(secs, (int, float)) and math.isfinite(secs) and secs > 0:
        return float(secs)
    return None


class CostModel:
    """log(seconds) ~ ridge regression on the parameters: numeric ones in Optuna's internal
    form (log-scaled where the distribution is log), categorical ones one-hot."""

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
    """TPE ranking candidates by log l(x) - log g(x) - log(predicted seconds) (`CostModel`,
    fitted on the study's complete trials once MIN_TRIALS have a cost; TPE's own until)."""

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


# ------------------------------------------------------------------ start points as a prior

def _unit(dist: Any, internal: np.ndarray) -> np.ndarray:
    """A numeric parameter's (Float/IntDistribution) internal values on [0, 1] of its range
    (log where log)."""
    lo, hi = float(dist.low), float(dist.high)
    v = np.asarray(internal, dtype=float)
    if dist.log:
        lo, hi, v = math.log(lo), math.log(hi), np.log(np.maximum(v, 1e-300))
    return (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v)


class StartPrior:
    """A mixture with one component per start point (`points`: Optuna params): a Gaussian of
    width WIDTH on each numeric parameter (on [0, 1] of its range, log-scaled where log);
    PICK on the point's categorical choice, the rest shared by the others; uniform on a
    parameter the point does not set."""

    def __init__(self, points: Sequence[Mapping[str, Any]]) -> None:
        self.points = [dict(p) for p in points]

    def log_pdf(self, space: Mapping[str, BaseDistribution],
                samples: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(samples.values())))
        comps = [self._component(point, space, samples, n) for point in self.points]
        if not comps:
            return np.zeros(n)
        stacked = np.stack(comps)
        top = stacked.max(axis=0)
        return np.asarray(top + np.log(np.exp(stacked - top).mean(axis=0)), dtype=float)

    @staticmethod
    def _component(point: Mapping[str, Any], space: Mapping[str, BaseDistribution],
                   samples: Mapping[str, np.ndarray], n: int) -> np.ndarray:
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
        return logp


class PriorTPE(CostAwareTPE):
    """TPE (cost-aware when `cost`) plus (BETA / n) log pi(x) in its acquisition (n: trials
    told so far; pi: `StartPrior`), so the prior's weight decays as evidence grows (piBO,
    Hvarfner et al. 2022)."""

    def __init__(self, *, prior: Sequence[Mapping[str, Any]], cost: bool = False,
                 beta: float = BETA, **kw: Any) -> None:
        super().__init__(**kw)
        self.prior = StartPrior(prior)
        self.cost = cost
        self.beta = beta

    def cost_model(self) -> CostModel | None:
        return super().cost_model() if self.cost else None

    def _compute_acquisition_func(self, samples: dict[str, np.ndarray], mpe_below: Any,
                                  mpe_above: Any) -> np.ndarray:
        acq = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        if self._study is None or self._space is None or not self.prior.points:
            return acq
        n = max(len(self._study.get_trials(deepcopy=False)), 1)
        return acq + (self.beta / n) * self.prior.log_pdf(self._space, samples)
