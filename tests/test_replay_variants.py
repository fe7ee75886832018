"""The replays' variants of the `ehvi` sampler (benchmarks/replay/variants.py): each knob
turns the hook it names and no other, the product keeps only its own rule, and every replay
method of compare.py and time_box.py that runs `ehvi` builds and proposes on the tiny table."""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from test_priced_ehvi import BUDGET, OBJECTIVES, _drive, _price, _suggest

from autoembed.pipeline.interleave import is_random
from autoembed.pipeline.priced_ehvi import (
    RANDOM_EVERY,
    PricedEHVI,
    Pricing,
    _contains,
    ehvi_2d,
)
from autoembed.pipeline.records import ATTR

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))

import variants  # noqa: E402
from harness import Costs, Replay, table_workload  # noqa: E402
from table import Table  # noqa: E402


def test_the_product_takes_only_its_own_arguments() -> None:
    """The knobs the replays switched off are not the product's: its constructor takes the
    seed and what drives it deterministically, nothing else."""
    assert list(inspect.signature(PricedEHVI).parameters) == [
        "seed", "startup", "candidates", "price_budget_s", "clock"]


@pytest.mark.parametrize("dist, value, holds", [
    (CategoricalDistribution(["a", None, 3]), None, True),
    (CategoricalDistribution(["a", None, 3]), "b", False),
    (IntDistribution(8, 256, step=8), 48, True),
    (IntDistribution(8, 256, step=8), 50, False),  # off the step
    (IntDistribution(8, 256, step=8), 264, False),  # past the top
    (IntDistribution(1, 100, log=True), 0, False),  # log: not positive
    (FloatDistribution(0.0, 1.0, step=0.25), 0.75, True),
    (FloatDistribution(0.0, 1.0, step=0.25), 0.75 + 1e-12, True),  # within 1e-8 steps
    (FloatDistribution(0.0, 1.0, step=0.25), 0.8, False),
    (FloatDistribution(1e-3, 1e-1, log=True), 1e-2, True),
    (FloatDistribution(1e-3, 1e-1, log=True), 0.2, False),
    (FloatDistribution(0.0, 1.0), float("nan"), False),
    (FloatDistribution(0.0, 1.0), "x", False),
])
def test_a_chosen_value_is_handed_out_only_when_the_distribution_holds_it(
        dist: Any, value: Any, holds: bool) -> None:
    assert _contains(dist, value) is holds


def _ehvi_methods() -> dict[str, Any]:
    """compare.py's and time_box.py's replay methods that run `ehvi` or a variant of it."""
    import compare
    import time_box

    methods = {**compare.METHODS, **time_box.EXPERIMENTS}
    return {n: m for n, m in methods.items()
            if m.sampler == "ehvi" or hasattr(m.sampler, "knobs")}


BUDGET_S = 24.0  # replayed seconds per method

def _fewer_candidates(make: Any) -> Any:
    def fewer(seed: int, workload: Any) -> PricedEHVI:
        sampler = variants.build(seed) if make == "ehvi" else make(seed, workload)
        sampler.candidates = 16
        return sampler
    return fewer


# each knob's variant, by hand (the product's value of each: no variant)
KNOB_CLASS = {"quality_turns": "QualityTurns", "random_every": "RandomEvery",
              "onehot": "OneHot", "per_second": "NotPerSecond", "cost_cooling": "CostCooling",
              "neighbors": "Neighbors", "spread": "RandomStartup",
              "pending": "IgnoresPending", "margin": "Margin",
              "seconds_weight": "SecondsWeight", "pick_turns": "PickTurns",
              "random_quality": "RandomQuality"}


def test_every_ehvi_replay_method_builds_its_variant_and_proposes_on_the_tiny_table() -> None:
    """Each `ehvi` method of the replays builds the variant its knobs name and replays the
    tiny table past its start-up (the model proposing), never training an over-budget row."""
    methods = _ehvi_methods()
    assert {"ehvi-front", "ehvi-rs-front", "ehvi-q1-front", "ehvi-cc-front", "ehvi-oh-front",
            "ehvi-ns-front", "ehvi-nb-front", "ehvi-r2-front"} <= set(methods)
    tiny = Table.load(REPLAY / "tables" / "tiny.jsonl.gz")
    budget = int(tiny.header["budget_bytes"])
    real = table_workload(tiny)  # the table's pricing, built once as compare.py's run does
    started, replayed = time.process_time(), set()
    for name, method in methods.items():
        knobs = getattr(method.sampler, "knobs", {})
        if knobs:
            built = method.sampler(0, None)
            for knob in set(knobs) - {"startup"}:
                assert isinstance(built, getattr(variants, KNOB_CLASS[knob])), (name, knob)
        key = tuple(sorted(knobs.items()))
        if key in replayed:  # the same sampler with another schedule: replayed once
            continue
        replayed.add(key)
        # no fixed charges: ~3 s a trained trial, so a few model turns after the start-up;
        # 16 candidates an ask (pricing is most of an ask's time)
        small = dataclasses.replace(method, sampler=_fewer_candidates(method.sampler))
        result = Replay(tiny, seed=0, costs=Costs(0.0, 0.0), budget_s=BUDGET_S,
                        real=real).run(small)
        trained = [t for t in result.trials if t.status in ("complete", "pruned")]
        assert len(trained) > knobs.get("startup", 5) + 1, name
        assert all(tiny.rows[t.row]["estimate"]["device_total"] <= budget
                   for t in trained if t.row is not None), name
    assert time.process_time() - started < 30  # CPU seconds: the machine's load aside


def test_build_turns_only_the_knobs_given() -> None:
    assert type(variants.build(1)) is PricedEHVI
    assert type(variants.build(1, quality_turns=0, random_every=RANDOM_EVERY, onehot=False,
                               per_second=True, cost_cooling=False, neighbors=0,
                               spread=True, pending=True, margin=0.0,
                               seconds_weight=1.0)) is PricedEHVI  # the product's values
    both = variants.build(1, quality_turns=2, per_second=False, neighbors=8, startup=3)
    assert isinstance(both, variants.QualityTurns) and isinstance(both, variants.NotPerSecond)
    assert isinstance(both, variants.Neighbors) and not isinstance(both, variants.OneHot)
    assert (both.quality_turns, both.random_every, both.neighbors, both.startup) == (
        2, RANDOM_EVERY, 8, 3)
    r2 = variants.build(1, random_every=2)
    assert [n for n in range(5, 12) if r2._random_turn(n)] == [6, 8, 10]


@pytest.mark.parametrize("startup", [4, 8])
def test_a_random_start_up_is_random_sampling(startup: int) -> None:
    """spread=False: the start-up proposals are the random sampler's, as if unbound."""
    sampler = variants.build(2, startup=startup, spread=False)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    a = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    b = optuna.create_study(directions=["maximize", "minimize"],
                            sampler=optuna.samplers.RandomSampler(seed=2))
    for s in (a, b):
        for _ in range(startup):
            t = s.ask()
            x = float(_suggest(t)["x"])  # type: ignore[arg-type]
            t.set_user_attr(ATTR, {"status": "complete"})
            s.tell(t, [0.5, x * 1e6])
    assert [t.params for t in a.trials] == [t.params for t in b.trials]


def test_expected_improvement_is_the_closed_form() -> None:
    def want(mu: float, sd: float, best: float) -> float:  # E[max(Y - best, 0)], by hand
        z = (mu - best) / sd
        return (mu - best) * 0.5 * (1 + math.erf(z / math.sqrt(2))) + sd * math.exp(
            -z * z / 2) / math.sqrt(2 * math.pi)

    mu, sd = np.array([0.5, 0.2, 0.9]), np.array([0.1, 0.3, 1e-6])
    got = variants.expected_improvement(mu, sd, 0.6)
    assert got == pytest.approx([want(m, s, 0.6) for m, s in zip(mu, sd, strict=True)])
    assert got[2] == pytest.approx(0.3)  # a sure gain is the gain


def test_quality_turns_chase_the_best_quality() -> None:
    """quality_turns=1: the first model turn of each run of RANDOM_EVERY takes the expected
    improvement of quality alone. Quality and memory both rise with x, so EHVI turns spread
    over x while quality turns sit high in [1, 50] (the budget's end)."""
    sampler = variants.build(4, startup=6, quality_turns=1)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    out, _ = _drive(sampler, 46)
    turns = [n for n in range(6, 46) if (n - 6) % RANDOM_EVERY == 0]
    assert not any(is_random(n, 6, RANDOM_EVERY) for n in turns)
    quality = [int(out[n]["x"]) for n in turns]  # type: ignore[call-overload]
    assert len(quality) == 10 and sorted(quality)[len(quality) // 2] >= 40, quality


def test_pick_turns_are_not_per_second_and_the_other_model_turns_are() -> None:
    """pick_turns=1: the first model turn of each run of RANDOM_EVERY takes the expected
    improvement of quality, its seconds' exponent 0; the other model turns the product's
    (EHVI per second). Quality, memory and the told seconds all rise with x: the quality
    turns sit high in [1, 50] (the budget's end) however long those trials take."""
    weights: dict[int, float] = {}

    class Spy(variants.PickTurns):
        def _seconds_weight(self) -> float:
            weights[self._number] = w = super()._seconds_weight()
            return w

    def run(sampler: PricedEHVI, n: int) -> list[int]:
        sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                             budget_bytes=BUDGET))
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
        xs = []
        for _ in range(n):
            trial = study.ask()
            x = int(_suggest(trial)["x"])  # type: ignore[call-overload]
            mem, fits = _price({"x": x})
            trial.set_user_attr(ATTR, {"status": "complete" if fits else "infeasible",
                                       "metrics": {"wall_seconds": float(x) ** 2}})
            study.tell(trial, [math.log(x) if fits else 0.0, mem])
            xs.append(x)
        return [xs[k] for k in range(6, n) if (k - 6) % RANDOM_EVERY == 0]

    picked = run(Spy(4, startup=6, pick_turns=1), 30)
    turns = [k for k in range(6, 30) if not is_random(k, 6, RANDOM_EVERY)]
    assert weights == {k: 0.0 if (k - 6) % RANDOM_EVERY == 0 else 1.0 for k in turns}
    assert sorted(picked)[len(picked) // 2] >= 40, picked


@pytest.mark.parametrize("cooling, spent, weight", [
    (False, 0.7, 1.0),  # per second throughout
    (True, 0.0, 1.0),  # nothing spent: per second
    (True, 0.25, 0.75),  # the share of the budget left
    (True, 1.0, 0.0),  # all spent: the gain alone
    (True, 1.5, 0.0),  # a budget overrun (a trial ending late) is all spent
])
def test_cost_cooling_weighs_the_seconds_by_the_budget_left(cooling: bool, spent: float,
                                                             weight: float) -> None:
    """The predicted seconds' exponent in the acquisition (CArBO's cost cooling)."""
    sampler = variants.build(2, cost_cooling=cooling)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET, spent=lambda: spent))
    assert sampler._seconds_weight() == pytest.approx(weight)


def test_per_second_off_is_cost_cooling_with_the_budget_spent() -> None:
    """Two ways to drop the seconds from the acquisition (`per_second=False`, and cost
    cooling's exponent at 0) propose the same configs; per second, others. 12 trials: the
    start-up's 6, then 5 model turns and a random one (per second differs from the first
    model turn on; 20 trials took 3 times the CPU to show the same)."""
    def run(**kw: object) -> list[dict[str, object]]:
        spent = float(kw.pop("spent", 0.0))  # type: ignore[arg-type]
        s = variants.build(7, startup=6, **kw)
        s.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                       budget_bytes=BUDGET, spent=lambda: spent))
        return _drive(s, 12)[0]

    off = run(per_second=False)
    assert off == run(cost_cooling=True, spent=1.0)
    assert off != run()


def test_a_margin_adds_its_width_times_the_expected_improvement_of_the_best_quality(
) -> None:
    """margin=r, the reference r beyond the budget: a candidate's gain is its EHVI plus
    r x its expected improvement over the front's best quality (the strip [0, r] of the
    memory axis, covered by the front up to its best)."""
    front, r = [(0.5, 0.6), (0.9, 0.2)], 0.5
    x, mu, sd = np.array([0.3, 0.95]), np.array([0.8, 0.4]), np.array([0.1, 0.2])
    q = np.array([0.0, 1.0])  # the finished trials' range: the unit interval as it is
    got = variants.build(1, margin=r)._gain(9, q, front, x, mu, sd)
    want = ehvi_2d(front, x, mu, sd) + r * variants.expected_improvement(mu, sd, 0.6)
    assert got == pytest.approx(want, abs=2e-3)


def test_running_trials_ignored_are_none_and_the_seconds_weigh_as_set() -> None:
    sampler = variants.build(1, pending=False)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET, pending=lambda: [({"x": 3, "c": "a"}, 3e6)]))
    assert list(sampler._pending()) == [] and isinstance(sampler, variants.IgnoresPending)
    assert variants.build(1, seconds_weight=0.5)._seconds_weight() == 0.5


def test_onehot_features_are_one_column_per_label() -> None:
    params = [{"opt": "adam", "x": 10}, {"opt": "sgd", "x": 100}, {"x": 1}]
    labels = variants._labels(params)
    assert labels == {"opt": ["'adam'", "'sgd'"]}
    x = variants._onehot_encode(params, [1e3, 1e4, 1e5], ["opt", "x"], labels)
    # opt=adam, opt=sgd, log10 x, log10 memory (absent: no label set)
    assert x.tolist() == [[1, 0, 1, 3], [0, 1, 2, 4], [0, 0, 0, 5]]


def test_a_neighbor_keeps_the_parent_or_moves_within_the_range() -> None:
    parent = {"c": "b", "n": 48, "f": 0.01}

    def draw(rate: float, seed: int) -> dict[str, object]:
        t = variants.NeighborTrial(np.random.default_rng(seed), parent, rate)
        return {"c": t.suggest_categorical("c", ["a", "b", "z"]),
                "n": t.suggest_int("n", 8, 256, step=8),
                "f": t.suggest_float("f", 0.001, 0.1, log=True),
                "new": t.suggest_int("new", 1, 3)}  # the parent lacks it: a random draw

    kept = draw(0.0, 0)
    assert {k: kept[k] for k in parent} == parent and kept["new"] in (1, 2, 3)
    for seed in range(50):
        moved = draw(1.0, seed)
        assert moved["c"] in ("a", "z")  # another label, always
        n, f = moved["n"], moved["f"]
        assert isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0
        assert isinstance(f, float) and 0.001 <= f <= 0.1
    # a move is a step of 0.2 of the (log) range: within 4 of them nearly always
    fs = [draw(1.0, s)["f"] for s in range(200)]
    span = math.log(0.1 / 0.001)
    assert all(abs(math.log(f / 0.01)) <= 0.8 * span + 1e-9 for f in fs)  # type: ignore[arg-type]
    assert len({round(f, 9) for f in fs}) > 100  # type: ignore[arg-type]


def test_the_front_is_the_non_dominated_members_best_quality_first() -> None:
    done = [({"i": 0}, 0.70, 5.0, None), ({"i": 1}, 0.80, 9.0, None),
            ({"i": 2}, 0.75, 9.5, None), ({"i": 3}, 0.60, 1.0, None),
            ({"i": 4}, 0.70, 6.0, None)]
    # 2 is beaten by 1 (better and smaller), 4 by 0 (as good and smaller)
    assert variants._front(done) == [{"i": 1}, {"i": 0}, {"i": 3}]


def test_neighbor_candidates_lie_near_the_front_members() -> None:
    sampler = variants.build(0, candidates=0, neighbors=40)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    study = optuna.create_study(directions=["maximize", "minimize"])
    parent = {"x": 30, "c": "a"}
    study.enqueue_trial(parent)
    tried = study.ask()
    assert _suggest(tried) == parent
    study.tell(tried, [1.0, 3e7])  # the parent is tried: never a candidate
    _, cands = sampler._candidates(study, 1, [(parent, 1.0, 3e7, None)])  # on the front
    assert cands and all(p != parent for p, _ in cands)
    assert len({tuple(sorted(p.items())) for p, _ in cands}) == len(cands)  # each once
    assert all(_price(p)[1] for p, _ in cands)  # priced, within the budget
    one_moved = [p for p, _ in cands if p["x"] == 30 or p["c"] == "a"]
    assert len(one_moved) >= len(cands) // 2  # most keep one of the two params
    assert sampler._candidates(study, 1, [])[1] == []  # no front, no neighbors


def test_random_quality_turns_the_random_turn_into_quality_not_per_second() -> None:
    """`random_quality`: no random proposal after the start-up; the turn `is_random` names
    scores by the expected improvement of quality with the seconds' exponent 0, the others
    are the product's (EHVI, exponent 1)."""
    s = variants.build(0, random_quality=True)
    start, every = s.startup, s.random_every
    turn = start + every - 1  # the last of the first run: the random one in the product
    assert not any(s._random_turn(n) for n in range(start, start + 3 * every))
    q, front = np.array([0.5, 0.6]), [(0.6, 0.5)]
    x, mu, sd = np.array([[0.4], [0.9]]), np.array([0.9, 0.55]), np.array([0.01, 0.01])
    s._number = turn
    assert s._seconds_weight() == 0.0
    got = s._gain(turn, q, front, x, mu, sd)
    assert got[0] > 0.29 and got[1] < 1e-6  # EI over 0.6: 0.3 and ~0
    s._number = start
    assert s._seconds_weight() == 1.0


def _tried_study(sampler: PricedEHVI, told: list[dict[str, object]],
                 running: dict[str, object]) -> optuna.Study:
    """A study of `told` trials (complete, quality log x, 1-3 s each) and one `running`;
    the sampler prices 64 candidates an ask."""
    sampler.candidates = 64
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for k, params in enumerate(told):
        study.enqueue_trial(params)
        trial = study.ask()
        _suggest(trial)
        trial.set_user_attr(ATTR, {"status": "complete",
                                   "metrics": {"wall_seconds": 1.0 + k % 3}})
        study.tell(trial, [math.log(float(params["x"])), _price(params)[0]])  # type: ignore[arg-type]
    study.enqueue_trial(running)
    _suggest(study.ask())  # asked, never told: running
    return study


@pytest.mark.parametrize("seed", [0, 1])
def test_near_repeats_are_skipped_while_a_candidate_is_none(seed: int) -> None:
    """near=0.1: tried (told or running) at x in {5, 30, 50} for both labels of c; x in
    1..100 is not log, so a near-repeat is the same c and |x - x'| <= 9.9. The model turn
    proposes a fitting x (<= 50) outside every such band, x in 15..20 or 40, where the
    product, chasing quality log x, proposes next to the best (x = 50)."""
    tried = [{"x": x, "c": c} for x in (5, 30, 50) for c in ("a", "b")]
    running = tried.pop()  # x = 50, c = b: running, not told

    def proposed(sampler: PricedEHVI) -> dict[str, object]:
        study = _tried_study(sampler, tried, running)
        trial = study.ask()  # trial 6: a model turn (startup 5, 5 told)
        assert trial.number == 6 and not is_random(6, 5, RANDOM_EVERY)
        return _suggest(trial)

    def near(p: dict[str, object]) -> bool:
        return any(p["c"] == t["c"] and abs(int(p["x"]) - int(t["x"])) <= 0.1 * 99  # type: ignore[call-overload]
                   for t in [*tried, running])

    got = proposed(variants.build(seed, startup=5, near=0.1))
    assert not near(got) and _price(got)[1], got
    assert int(got["x"]) in (*range(15, 21), 40)  # type: ignore[call-overload]
    assert near(proposed(variants.build(seed, startup=5)))  # the product's: a near-repeat


def test_when_every_candidate_is_a_near_repeat_the_choice_is_the_products() -> None:
    """near=1: every candidate with a tried label is near; both labels tried, so all are,
    and the turn proposes what the product does."""
    tried = [{"x": x, "c": c} for x in (5, 30, 50) for c in ("a", "b")]
    running = tried.pop()
    got = [_suggest(_tried_study(s, tried, running).ask())
           for s in (variants.build(3, startup=5, near=1.0), variants.build(3, startup=5))]
    assert got[0] == got[1]


def test_near_tried_compares_each_param_on_its_own_scale() -> None:
    """The same params set, categoricals equal, numbers within f of their (log) range."""
    dists = {"n": IntDistribution(1, 1000, log=True), "c": CategoricalDistribution(["a", "b"]),
             "f": FloatDistribution(0.0, 1.0)}
    tried = optuna.trial.create_trial(params={"n": 100, "c": "a", "f": 0.5},
                                      distributions=dists, values=[0.0, 1.0])
    cands = [{"n": 130, "c": "a", "f": 0.55},  # log10: 0.038 of the range apart; 0.05
             {"n": 200, "c": "a", "f": 0.5},  # log10(2) / 3 = 0.10 of the range
             {"n": 100, "c": "b", "f": 0.5},  # another label
             {"n": 100, "c": "a"},  # f absent
             {"n": 100, "c": "a", "f": 0.5, "g": 1}]  # g the tried trial lacks
    got = variants.near_tried(cands, [tried], 0.08)
    assert got.tolist() == [True, False, False, False, False]
    assert variants.near_tried(cands, [tried], 0.11).tolist()[:2] == [True, True]
