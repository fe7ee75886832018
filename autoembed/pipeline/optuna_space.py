"""A search space as Optuna sees it: each `Param` as an Optuna distribution, and a trial's
suggestions as config values. The only place the space meets Optuna (`autoembed.space`
itself stays free of it)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from autoembed.config import EmbeddingConfig
from autoembed.space import Param, SearchSpace

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import BaseTrial

__all__ = ["distribution", "distributions", "suggest_param", "suggest_values", "suggest"]


def _int_step(p: Param) -> int:
    return int(p.step) if p.step and not p.log else 1


def distribution(p: Param) -> BaseDistribution:
    """The Optuna distribution of `p` under its Optuna name `p.optuna_name`."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if p.kind == "categorical":
        return CategoricalDistribution(p.labels)
    if p.kind == "int":
        lo, hi = p.int_bounds()
        return IntDistribution(lo, hi, log=p.log, step=_int_step(p))
    return FloatDistribution(p.low, p.high, log=p.log, step=None if p.log else p.step)


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """Optuna name -> distribution of every param (conditional ones included)."""
    return {p.optuna_name: distribution(p) for p in space.params}


def suggest_param(p: Param, trial: BaseTrial) -> Any:
    """Ask `trial` for `p`; the config value."""
    n = p.optuna_name
    if p.kind == "categorical":
        return p.from_optuna(trial.suggest_categorical(n, p.labels))
    if p.kind == "int":
        lo, hi = p.int_bounds()
        return p.from_optuna(trial.suggest_int(n, lo, hi, step=_int_step(p), log=p.log))
    return trial.suggest_float(n, p.low, p.high, log=p.log, step=None if p.log else p.step)


def suggest_values(space: SearchSpace, trial: BaseTrial,
                   skip: Collection[str] = ()) -> dict[str, Any]:
    """Ask `trial` for each param whose condition holds (but those named in `skip`);
    field -> value."""
    values: dict[str, Any] = dict(space.base)
    out: dict[str, Any] = {}
    for p in space.params:
        if p.name not in skip and p.active(values):
            out[p.name] = values[p.name] = suggest_param(p, trial)
    return out


def suggest(space: SearchSpace, trial: BaseTrial) -> EmbeddingConfig:
    """The config `trial` proposes (unresolved: the data fill in tables)."""
    return space.config_for(suggest_values(space, trial))
