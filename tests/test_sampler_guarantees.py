"""What every sampler the CLI offers (and each kind benchmarks/samplers.py makes) guarantees
through the real engine: no trial trains a config over the budget, none trains a config
already tried, and a space with fewer fitting configs than trials ends once each has
trained ("every fitting config tried: N").

The workload is a stand-in (`FakeWorkload`): a config's bytes are a sum of per-value costs
drawn by the test, its pricing advances a simulated clock (slower than an ask's window
for some spaces), its trials are told a made-up result at once. Over budget and repeats
are judged here from each launched trial's params, not by the engine's own verdicts."""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import pytest

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig
from autoembed.memory import MemoryEstimate
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.optuna_space import suggest_values
from autoembed.pipeline.priced_ehvi import PricedEHVI
from autoembed.pipeline.records import params_key
from autoembed.pipeline.study import SAMPLERS
from autoembed.pipeline.untried import RandomTrial, space_configs
from autoembed.pipeline.workload import Launch, Priced
from autoembed.space import Param, SearchSpace
from autoembed.trial import TrialResult
from benchmarks.samplers import EXPERIMENTS, make_sampler

KINDS = SAMPLERS + EXPERIMENTS  # the product's and the benchmarks' (their make_sampler: both)

OBJ = [("quality", "maximize"), ("memory", "minimize")]
MB = 1_000_000


def _estimate(nbytes: int) -> MemoryEstimate:
    return MemoryEstimate(method="fake", parameters=nbytes, gradients=0, optimizer_state=0,
                          activations=0, temporaries=0, allocated_peak=nbytes,
                          reserved_peak=nbytes, overhead=0, device_total=nbytes,
                          serving_bytes=0, tables=())


@dataclass
class FakeWorkload:
    """A workload whose config costs `cost[(param, value)]` MB each (plus 1 MB), priced in
    `delay` simulated seconds on `now`."""

    space: SearchSpace
    cost: Mapping[tuple[str, Any], float]
    delay: float = 0.0
    now: list[float] = field(default_factory=lambda: [0.0])
    kind: str = "builtin"
    target: float | None = None
    use_measured: bool = False
    stand_in: bool = False
    keeps_best: bool = False

    def bytes_of(self, values: Mapping[str, Any]) -> int:
        return int(MB * (1 + sum(self.cost[(k, v)] if (k, v) in self.cost else float(v)
                                 for k, v in values.items())))

    def trains(self, values: Mapping[str, Any], priced: EmbeddingConfig) -> Any:
        """Each proposal's values are a model of their own (the engine's rule of a repeat)."""
        return tuple(sorted((k, repr(v)) for k, v in values.items()))

    def price(self, values: Mapping[str, Any]) -> Priced:
        self.now[0] += self.delay
        est = _estimate(self.bytes_of(values))
        return Priced(EmbeddingConfig(), est, lambda n: Launch({"values": dict(values)}, 0))


def _result(params: Mapping[str, Any], number: int) -> dict[str, Any]:
    """A made-up complete result: quality from the params' text, seconds from the trial."""
    q = (zlib.crc32(repr(sorted(params.items())).encode()) % 1000) / 1000
    res = TrialResult(status="complete", config=EmbeddingConfig(), valid_quality=q,
                      steps=1, wall_seconds=1.0 + number % 3, throughput=100.0)
    return {"status": "complete", "result": res.to_dict()}


def _space(params: list[Param]) -> SearchSpace:
    return SearchSpace(source="generated", params=tuple(params), kind="user")


def _engine(kind: str, workload: FakeWorkload, budget: int, trials: int,
            seed: int = 0) -> SearchEngine:
    sampler = make_sampler(kind, seed)
    if isinstance(sampler, PricedEHVI):
        sampler.clock = lambda: workload.now[0]  # the simulated seconds of its pricing
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    grid = None
    if kind == "grid":  # as the driver gives it: every grid point, seeded order
        grid = workload.space.grid()
        random.Random(seed).shuffle(grid)
    return SearchEngine(study, SearchSettings(workload=workload, budget=Budget(budget, "gen"),
                                              objectives=OBJ, trials=trials, grid=grid),
                        clock=lambda: workload.now[0])


def _run(engine: SearchEngine) -> list[dict[str, Any]]:
    """Drive the engine to its end; the params of every launched trial, in order."""
    launched = []
    while (p := engine.propose()) is not None:
        params = dict(engine.study.trials[p.number].params)
        launched.append(params)
        engine.finish(p.number, _result(params, p.number))
    return launched


# ------------------------------------------------------------------ the generated spaces
CHOICES = (None, 1, 2, "a", "b")


def _param(rng: random.Random, i: int, before: list[Param]) -> Param:
    name = f"p{i}"
    cats = [p for p in before if p.kind == "categorical"]
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    if cats and rng.random() < 0.4:  # a conditional param
        parent = rng.choice(cats)
        when = ((parent.name, (rng.choice(parent.choices),)),)
    roll = rng.random()
    if roll < 0.6:
        k = rng.choice((1, 2, 2, 3))
        return Param(name, "categorical", choices=tuple(rng.sample(CHOICES, k)), when=when)
    if roll < 0.85:
        low = rng.randint(0, 2)
        return Param(name, "int", low=low, high=low + rng.randint(0, 3), when=when)
    return Param(name, "float", low=0.0, high=2.0, when=when)  # not enumerable


@dataclass(frozen=True)
class Case:
    workload: FakeWorkload
    budget: int
    trials: int
    fitting: set[tuple[tuple[str, str], ...]] | None  # every config that fits (None: infinite)


def _case(seed: int) -> Case:
    """A small space (0-3 params: None among choices, conditionals, a float now and then),
    costs per value, a budget from tiny (the cheapest config) to most, 1-10 trials, and
    pricing 0 s or 2.5 s (beyond the ask's window of 1 s)."""
    rng = random.Random(seed)
    params: list[Param] = []
    for i in range(rng.choice((0, 1, 2, 2, 3, 3))):
        params.append(_param(rng, i, params))
    space = _space(params)
    cost = {(p.name, c): rng.uniform(0, 8) for p in params for c in p.choices}
    workload = FakeWorkload(space, cost, delay=rng.choice((0.0, 0.0, 2.5)))
    configs = space_configs(lambda t: suggest_values(space, t))
    gen = np.random.default_rng(seed)
    sample = configs or [(t.params, suggest_values(space, t))
                         for t in (RandomTrial(gen) for _ in range(200))]
    costs = sorted(workload.bytes_of(v) for _, v in sample)
    # tiny: the cheapest only; else a share (a space that is not enumerated: half or more)
    share = rng.choice((0.0, 0.3, 0.6, 1.0)) if configs else rng.choice((0.5, 1.0))
    budget = costs[min(len(costs) - 1, int(share * len(costs)))]
    fitting = None if configs is None else {
        params_key(p) for p, v in configs if workload.bytes_of(v) <= budget}
    return Case(workload, budget, rng.randint(1, 10), fitting)


SPACES_PER_SAMPLER = 20  # 10 kinds x 20 + gp's 8: 208 generated spaces
SPACES_GP = 8  # gp's model asks take seconds each (from its 9th trial on)


@pytest.mark.parametrize("kind", KINDS)
def test_no_sampler_trains_over_budget_or_a_config_twice(kind: str) -> None:
    for seed in range(SPACES_GP if kind == "gp" else SPACES_PER_SAMPLER):
        case = _case(1000 * KINDS.index(kind) + seed)
        w = case.workload
        engine = _engine(kind, w, case.budget, case.trials, seed)
        launched = _run(engine)
        where = f"{kind} space {seed}: {w.space.params} budget {case.budget}"
        keys = [params_key(p) for p in launched]
        assert len(set(keys)) == len(keys), f"a config trained twice; {where}"
        for p in launched:
            values = w.space.values_from_optuna(p)
            assert w.bytes_of(values) <= case.budget, f"{p} over budget; {where}"
        if kind == "grid":
            continue  # its points are the grid's, not every config
        want = case.trials if case.fitting is None else min(case.trials, len(case.fitting))
        assert len(launched) == want, f"{engine.stop_reason}; {where}"
        if case.fitting is not None and len(case.fitting) < case.trials:
            assert set(keys) == case.fitting
            assert engine.stop_reason == f"every fitting config tried: {len(case.fitting)}"
        if kind == "ehvi":  # every turn priced, the random ones included: none over budget
            assert not [r.number for r in engine.rows.values() if r.status == "infeasible"], where


def test_the_generated_spaces_cover_the_edges() -> None:
    """The spaces the property test runs: None among the choices, conditional params, one
    config only, fewer fitting configs than trials, the cheapest config alone fitting, a
    float space (not enumerated), and pricing slower than an ask's window, each many times."""
    cases = [_case(1000 * i + seed) for i, kind in enumerate(KINDS)
             for seed in range(SPACES_GP if kind == "gp" else SPACES_PER_SAMPLER)]
    assert len(cases) >= 200
    params = [c.workload.space.params for c in cases]
    counts = {
        "None": sum(any(None in p.choices for p in ps) for ps in params),
        "conditional": sum(any(p.when for p in ps) for ps in params),
        "one config": sum(c.fitting is not None and len(space_configs(
            lambda t, sp=c.workload.space: suggest_values(sp, t)) or ()) == 1 for c in cases),
        "fewer fit": sum(c.fitting is not None and len(c.fitting) < c.trials for c in cases),
        "one fits": sum(c.fitting is not None and len(c.fitting) == 1 for c in cases),
        "float": sum(c.fitting is None for c in cases),
        "slow": sum(c.workload.delay > 1.0 for c in cases),
    }
    assert min(counts.values()) >= 10, counts


def _nine() -> tuple[FakeWorkload, int]:
    """3 x 3 configs: a in {None, 1, 2} costs 0/1/8 MB, b in {1, 2, 3} costs b MB, plus
    1 MB; at a budget of 4.5 MB five fit."""
    space = _space([Param("a", "categorical", choices=(None, 1, 2)),
                    Param("b", "categorical", choices=(1, 2, 3))])
    cost = {("a", None): 0.0, ("a", 1): 1.0, ("a", 2): 8.0,
            ("b", 1): 1.0, ("b", 2): 2.0, ("b", 3): 3.0}
    return FakeWorkload(space, cost), 4_500_000


def test_a_space_with_fewer_fitting_configs_than_trials_trains_each_once_and_ends() -> None:
    """9 configs, 5 fit (by hand: (None,1) (None,2) (None,3) (1,1) (1,2)), 16 trials: each
    of the 5 trains once, none over budget, and the search ends saying so."""
    w, budget = _nine()
    engine = _engine("ehvi", w, budget, trials=16)
    launched = _run(engine)
    want = {(None, 1), (None, 2), (None, 3), (1, 1), (1, 2)}
    assert sorted(map(repr, ((p["a"], p["b"]) for p in launched))) == sorted(map(repr, want))
    assert engine.stop_reason == "every fitting config tried: 5"
    assert not [r for r in engine.rows.values() if r.status == "infeasible"]


def test_a_pricing_slower_than_the_ask_window_still_proposes_only_what_fits() -> None:
    """Pricing takes 2.5 s (the window is 1 s), and most configs are over budget: every
    ask of `ehvi` (start-up and model turns) prices on until a config fits."""
    space = _space([Param("x", "int", low=1, high=60)])
    w = FakeWorkload(space, {}, delay=2.5)  # x MB + 1: x <= 5 fits
    engine = _engine("ehvi", w, 6 * MB, trials=5)
    launched = _run(engine)
    assert sorted(p["x"] for p in launched) == [1, 2, 3, 4, 5]
    assert not [r for r in engine.rows.values() if r.status == "infeasible"]
