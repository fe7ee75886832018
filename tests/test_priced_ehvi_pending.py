"""`ehvi` and running trials (pipeline/priced_ehvi.py, `Pricing.pending`): the engine hands
the sampler each running trial with the memory it was priced at, and the sampler believes
it (the kriging believer): on the front at the quality its model predicts, so concurrent
asks spread instead of piling onto one place."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from autoembed.budget import Budget
from autoembed.memory.objective import MEMORY_BASIS, memory_value
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.priced_data import build_priced_data, data_spec_for
from autoembed.pipeline.priced_ehvi import PricedEHVI, Pricing
from autoembed.pipeline.records import ATTR
from autoembed.space import load_space

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = [("quality", "maximize"), ("memory", "minimize")]
BUDGET = 100e6


def test_the_engine_hands_the_sampler_its_running_trials_at_their_priced_memory() -> None:
    """Two launched trials are pending, each with its Optuna params and the memory
    objective of its own estimate; one finished, only the other is."""
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    workload = BuiltinWorkload.of(space, build_priced_data(spec, stand_in), run={})
    bound: list[Pricing] = []

    class Binding(optuna.samplers.RandomSampler):
        def bind(self, pricing: Pricing) -> None:
            bound.append(pricing)

    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=Binding(seed=0))
    eng = SearchEngine(study, SearchSettings(
        workload=workload, budget=Budget(800_000_000, "800MB"),
        objectives=[("quality", "maximize"), ("memory", "minimize"),
                    ("throughput", "maximize")], trials=3))
    assert list(bound[0].pending()) == []
    a, b = eng.propose(), eng.propose()
    assert a is not None and b is not None

    def seen(p: Any) -> tuple[dict[str, Any], float]:
        return study.trials[p.number].params, memory_value(p.estimate.to_dict(), MEMORY_BASIS)

    assert list(bound[0].pending()) == [seen(a), seen(b)]
    eng.finish(a.number, None, error="crashed")
    assert list(bound[0].pending()) == [seen(b)]


def _suggest(trial: optuna.trial.BaseTrial) -> dict[str, Any]:
    return {"x": trial.suggest_int("x", 1, 100), "y": trial.suggest_int("y", 1, 100)}


def _price(values: dict[str, Any]) -> tuple[float, bool]:
    return float(values["x"]) * 1e6, True


def _quality(values: dict[str, Any]) -> float:
    return math.log(values["x"]) - ((values["y"] - 70) / 30) ** 2


class Fronts(PricedEHVI):
    """The product, keeping the front each model turn scored its candidates against."""

    fronts: list[list[tuple[float, float]]]

    def _gain(self, number: int, q: np.ndarray, front: Any, x: np.ndarray,
              mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        self.fronts.append(list(front))
        return super()._gain(number, q, front, x, mu, sd)


def _study(pending: list[dict[str, Any]] | None, seed: int = 2,
           ) -> tuple[Fronts, optuna.Study]:
    """25 trials trained; `pending`: the running trials the sampler is told (None: it is
    told none, as before it believed them)."""
    sampler = Fronts(seed=seed, startup=5, candidates=32)
    sampler.fronts = []
    running = (lambda: [(p, _price(p)[0]) for p in pending]) if pending is not None else (
        lambda: ())
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET, pending=running))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for x in range(3, 100, 4):  # 25 trials trained: quality rises with x, peaks at y = 70
        v = {"x": x, "y": (37 * x) % 100 + 1}
        trial = optuna.trial.create_trial(
            params=v, distributions={n: optuna.distributions.IntDistribution(1, 100)
                                     for n in v},
            values=[_quality(v), _price(v)[0]],
            user_attrs={ATTR: {"status": "complete"}})  # no seconds: EHVI alone
        study.add_trial(trial)
    return sampler, study


def test_a_running_trial_is_on_the_front_at_its_predicted_quality() -> None:
    """A running trial at x = 50 joins the front the candidates are scored against: at its
    memory on the unit interval (log scale from the budget down to the cheapest config
    seen, x = 1 to 3) and at a quality inside the finished trials' range (the trees'
    mean)."""
    sampler, study = _study([{"x": 50, "y": 70}])
    study.ask()  # trial 25: a model turn
    front = sampler.fronts[-1]
    assert len(front) == 26
    x_run, q_run = front[-1]
    hi = math.log(BUDGET)
    lo_range = [math.log(1e6 * k) for k in (3, 1)]  # the cheapest seen: x = 3 or less
    low, high = sorted((hi - math.log(50e6)) / (hi - lo) for lo in lo_range)
    assert low - 1e-9 <= x_run <= high + 1e-9
    assert all(0.0 <= fx <= 1.0 for fx, _ in front)
    assert 0.0 <= q_run <= 1.0


def test_without_running_trials_the_front_is_the_finished_ones() -> None:
    sampler, study = _study([])
    study.ask()
    assert len(sampler.fronts[-1]) == 25


def _close_pairs(believe: bool, seed: int) -> int:
    """Eight asks in a row, each launched before the next (none finished): pairs of the
    model's proposals within 0.5 of log x (memory) and 10 of y."""
    running: list[dict[str, Any]] = []
    sampler, study = _study(running if believe else None, seed)
    chosen = []
    for _ in range(8):
        values = _suggest(study.ask())
        running.append(values)
        if len(sampler.fronts) > len(chosen):  # a model turn
            chosen.append(values)
    assert len(chosen) == 6  # trials 25-32 less the two random turns
    return sum(abs(math.log(a["x"] / b["x"])) <= 0.5 and abs(a["y"] - b["y"]) <= 10
               for i, a in enumerate(chosen) for b in chosen[i + 1:])


def test_concurrent_asks_spread_when_running_trials_are_believed() -> None:
    """Seeds 0-3: believing the running trials, concurrent proposals pile up (close pairs)
    at most a third as often as when each ask sees the finished trials alone."""
    believed = sum(_close_pairs(True, seed) for seed in range(4))
    blind = sum(_close_pairs(False, seed) for seed in range(4))
    assert blind >= 4 and believed * 3 <= blind, (believed, blind)
