"""tpe-mix (issue 15): TPE with random proposals interleaved. Which trials are random, by a
hand-written schedule; that the random share is the random sampler's own stream; that a seed
gives the same proposals twice. (That over-budget trials teach it only through their
constraint: tests/test_start_points.py, with the default sampler's test.)"""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.samplers import RandomSampler
from optuna.trial import TrialState

from autoembed.pipeline.interleave import InterleavedSampler, is_random
from autoembed.pipeline.study import make_sampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

# TPE_STARTUP = 8 random start-up trials, then every 2nd (MIX_EVERY) random
MIX_RANDOM = [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13, 15, 17, 19]


def test_schedule_by_hand() -> None:
    assert [n for n in range(20) if is_random(n, 8, 2)] == MIX_RANDOM
    assert [n for n in range(12) if is_random(n, 3, 3)] == [0, 1, 2, 5, 8, 11]
    assert [n for n in range(5) if is_random(n, 0, 1)] == [0, 1, 2, 3, 4]
    assert [n for n in range(5) if is_random(n, 2, 10**6)] == [0, 1]


class _Recording(RandomSampler):
    def __init__(self, seed: int) -> None:
        super().__init__(seed=seed)
        self.asked: set[int] = set()

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        self.asked.add(trial.number)
        return super().sample_independent(study, trial, name, dist)


def test_each_trial_goes_to_the_scheduled_sampler() -> None:
    model, rnd = _Recording(1), _Recording(2)
    study = optuna.create_study(sampler=InterleavedSampler(model, rnd, 8, 2))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=20)
    assert sorted(rnd.asked) == MIX_RANDOM
    assert sorted(model.asked) == [n for n in range(20) if n not in MIX_RANDOM]


def _proposals(kind: str, seed: int, n: int = 20) -> list[dict[str, Any]]:
    """`n` proposals on a two-objective study with a conditional parameter and a memory
    constraint (x > 0.8 over budget)."""
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=make_sampler(kind, seed))
    for _ in range(n):
        t = study.ask()
        x = t.suggest_float("x", 0.0, 1.0)
        if t.suggest_categorical("c", ["a", "b"]) == "a":
            t.suggest_int("y", 1, 10)
        t.set_constraint("memory", x - 0.8)
        study.tell(t, [x * (1 - x) + 0.01 * t.params.get("y", 0), x])
    return [t.params for t in study.trials]


def test_random_share_is_random_samplers_stream() -> None:
    """tpe-mix's random trials propose what `random` with the same seed proposes, in order
    (so the comparison pairs them with common draws)."""
    mix, rnd = _proposals("tpe-mix", 5), _proposals("random", 5)
    assert [mix[n] for n in MIX_RANDOM] == rnd[:len(MIX_RANDOM)]
    tpe_trials = [mix[n] for n in range(20) if n not in MIX_RANDOM]
    assert all(p not in rnd for p in tpe_trials)  # TPE's own proposals, not random's


@pytest.mark.parametrize("kind", ["tpe-mix", "tpe"])
def test_a_seed_proposes_the_same_twice(kind: str) -> None:
    assert _proposals(kind, 7) == _proposals(kind, 7)
    assert _proposals(kind, 7) != _proposals(kind, 8)


def test_failed_trials_do_not_break_the_schedule() -> None:
    """A failed trial still takes its number: the schedule follows numbers, not outcomes."""
    model, rnd = _Recording(1), _Recording(2)
    study = optuna.create_study(sampler=InterleavedSampler(model, rnd, 2, 3))
    for n in range(9):
        t = study.ask()
        t.suggest_float("x", 0, 1)
        study.tell(t, state=TrialState.FAIL if n % 2 else TrialState.COMPLETE,
                   values=None if n % 2 else 0.5)
    assert sorted(rnd.asked) == [0, 1, 4, 7]


def test_bad_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="every 0"):
        InterleavedSampler(RandomSampler(), RandomSampler(), 8, 0)
