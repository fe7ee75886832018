"""A model-based sampler with random proposals interleaved (SMAC3's "random design", for
`tpe-mix`): the first `startup` trials and every `every`-th after them are random, the model
proposes the rest, which keeps the front's extremes that TPE alone misses.

Which sampler proposes a trial depends on its number alone (`is_random`), so a search is
reproducible for a seed and a resume keeps the schedule. Both samplers see every trial's
`after_trial`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from optuna.samplers import BaseSampler

from autoembed.rules import Integer

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.study import Study
    from optuna.trial import FrozenTrial, TrialState

__all__ = ["InterleavedSampler", "is_random"]


def is_random(number: int, startup: int, every: int) -> bool:
    """Whether trial `number` is a random proposal: one of the first `startup`, or after
    them the last of each run of `every` (every=2: trials startup+1, startup+3, ...)."""
    return number < startup or (number - startup) % every == every - 1


class InterleavedSampler(BaseSampler):
    """`model` proposes a trial unless `is_random(trial.number, startup, every)`, in which
    case `random` does."""

    def __init__(self, model: BaseSampler, random: BaseSampler, startup: int,
                 every: int) -> None:
        Integer(0).check_argument("startup", startup, sep=" ")
        Integer(1).check_argument("every", every, sep=" ")
        self.model, self.random, self.startup, self.every = model, random, startup, every

    def _for(self, trial: FrozenTrial) -> BaseSampler:
        return self.random if is_random(trial.number, self.startup, self.every) else self.model

    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._for(trial).sample_independent(study, trial, param_name,
                                                   param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.model.before_trial(study, trial)
        self.random.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.model.after_trial(study, trial, state, values)
        self.random.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.model.reseed_rng()
        self.random.reseed_rng()
