"""A search space as Optuna sees it: each `Param` as an Optuna distribution, and a trial's
suggestions as config values. The only place the space meets Optuna (`autoembed.space`
itself stays free of it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, cast

from autoembed.config import EmbeddingConfig
from autoembed.space import Param, SearchSpace

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.trial import BaseTrial

__all__ = ["distribution", "distributions", "suggest_param", "suggest_values", "suggest",
           "NotTheSpace", "replay"]


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


class NotTheSpace(Exception):
    """Stored params replayed into a space that asks one they lack, or a choice that is not
    among its labels: a row an older version stored (`replay`)."""


class _Replay:
    """Stored params asked back as Optuna's FixedTrial answers (the value as stored, a
    number out of range too); where they are not the space's, NotTheSpace, not FixedTrial's
    bare ValueError, which any bug may raise as well."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = params

    def _value(self, name: str, choices: Collection[Any] | None = None) -> Any:
        if name not in self._params:
            raise NotTheSpace(f"param '{name}' is not among the stored params")
        value = self._params[name]
        if choices is not None and value not in choices:
            raise NotTheSpace(f"param '{name}' = {value!r} is not among {list(choices)}")
        return value

    def suggest_categorical(self, name: str, choices: Collection[Any]) -> Any:
        return self._value(name, choices)

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> Any:
        return self._value(name)

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> Any:
        return self._value(name)


def replay(params: Mapping[str, Any]) -> BaseTrial:
    """A trial that answers with `params` (a stored trial's) for `suggest_values`;
    NotTheSpace when they are not the space's."""
    return cast("BaseTrial", _Replay(params))
