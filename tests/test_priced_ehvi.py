"""The `ehvi` sampler (pipeline/priced_ehvi.py): its expected hypervolume improvement against
areas worked out by hand, and its proposals: priced before they are made, never over the
budget, never a config already tried."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
import pytest

from autoembed.pipeline.interleave import is_random
from autoembed.pipeline.priced_ehvi import (
    RANDOM_EVERY,
    PricedEHVI,
    Pricing,
    ehvi_2d,
    van_der_corput,
)
from autoembed.pipeline.records import ATTR

SURE = np.array([1e-6])  # a quality known almost exactly


def test_ehvi_of_a_sure_point_is_the_area_it_adds() -> None:
    # nothing yet: the point's own rectangle, 0.5 x 0.5
    assert ehvi_2d([], np.array([0.5]), np.array([0.5]), SURE)[0] == pytest.approx(0.25, abs=3e-3)
    # a front point (1.0, 0.5) covers quality up to 0.5 at every memory; (0.5, 0.8) adds
    # the strip above it: 0.5 x (0.8 - 0.5)
    got = ehvi_2d([(1.0, 0.5)], np.array([0.5]), np.array([0.8]), SURE)[0]
    assert got == pytest.approx(0.15, abs=3e-3)
    # a dominated point adds nothing
    assert ehvi_2d([(0.9, 0.9)], np.array([0.5]), np.array([0.5]), SURE)[0] == pytest.approx(0.0)


def test_ehvi_is_the_expected_area_under_an_uncertain_quality() -> None:
    # x = 1, nothing yet: the area is max(Y, 0); E = mu*Phi(mu/sd) + sd*phi(mu/sd)
    mu, sd = 0.1, 0.2
    z = mu / sd
    want = mu * 0.5 * (1 + math.erf(z / math.sqrt(2))) + sd * math.exp(-z * z / 2) / math.sqrt(
        2 * math.pi)
    got = ehvi_2d([], np.array([1.0]), np.array([mu]), np.array([sd]))[0]
    assert got == pytest.approx(want, abs=5e-3)
    # more spread, same mean: more expected gain where the front caps the sure gain
    narrow, wide = ehvi_2d([(1.0, 0.5)], np.array([0.5, 0.5]), np.array([0.4, 0.4]),
                           np.array([0.01, 0.3]))
    assert narrow == pytest.approx(0.0, abs=1e-3) and wide > 0.01


OBJECTIVES = [("quality", "maximize"), ("memory", "minimize")]
BUDGET = 50e6  # x <= 50 fits


def _suggest(trial: optuna.trial.BaseTrial) -> dict[str, object]:
    return {"x": trial.suggest_int("x", 1, 100), "c": trial.suggest_categorical("c", ["a", "b"])}


def _price(values: dict[str, object]) -> tuple[float, bool]:
    mem = float(values["x"]) * 1e6  # type: ignore[arg-type]
    return mem, mem <= BUDGET


def test_proposals_are_priced_first_never_over_budget_nor_repeated() -> None:
    sampler = PricedEHVI(seed=3, startup=6)
    calls = []

    def price(values: dict[str, object]) -> tuple[float, bool]:
        calls.append(values)
        return _price(values)

    sampler.bind(Pricing(price=price, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    chosen, finished = [], 0
    for _ in range(30):
        trial = study.ask()
        values = _suggest(trial)
        mem, fits = _price(values)
        # the model's turn: not a random trial number, and 6 trials trained to their end
        if finished >= 6 and not is_random(trial.number, 6, RANDOM_EVERY):
            chosen.append(values)
        if not fits:  # over budget: never trained, told as in a search (a placeholder)
            trial.set_user_attr(ATTR, {"status": "infeasible"})
            study.tell(trial, [0.0, mem])
            continue
        quality = math.log(float(values["x"])) + (0.3 if values["c"] == "b" else 0.0)
        trial.set_user_attr(ATTR, {"status": "complete", "metrics": {"wall_seconds": 1.0}})
        study.tell(trial, [quality, mem])
        finished += 1
    assert len(chosen) >= 10 and calls  # the model proposed, after pricing candidates
    assert all(_price(v)[1] for v in chosen)  # none over the budget
    keys = [tuple(sorted(v.items())) for v in chosen]
    assert len(set(keys)) == len(keys)  # none repeated


def _priced_turns(sampler: PricedEHVI, suggest: Any, price: Any,
                  n: int) -> list[dict[str, object]]:
    """n trials told as a search tells them (over budget: a placeholder); the values of
    each (start-up, model and random turns: the sampler priced them all)."""
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    priced = []
    for _ in range(n):
        trial = study.ask()
        values = suggest(trial)
        priced.append(values)
        mem, fits = price(values)
        trial.set_user_attr(ATTR, {"status": "complete" if fits else "infeasible",
                                   "metrics": {"wall_seconds": 1.0}})
        study.tell(trial, [math.log(float(values["x"])) if fits else 0.0, mem])
    return priced


def test_a_chosen_none_is_handed_out_as_the_candidate_priced() -> None:
    """`big` in {None, 1}, every config with big = 1 over budget: each proposal (start-up,
    model and random turns) is the candidate it priced, big = None included, so none is
    over budget."""
    def suggest(trial: optuna.trial.BaseTrial) -> dict[str, object]:
        return {"big": trial.suggest_categorical("big", [None, 1]),
                "x": trial.suggest_int("x", 1, 40)}

    def price(values: dict[str, Any]) -> tuple[float, bool]:
        mem = float(values["x"]) * 1e6 * (100.0 if values["big"] == 1 else 1.0)
        return mem, mem <= BUDGET

    sampler = PricedEHVI(seed=1, startup=4)
    sampler.bind(Pricing(price=price, suggest=suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    priced = _priced_turns(sampler, suggest, price, 20)
    assert len(priced) == 20 and all(v["big"] is None for v in priced), priced


def test_an_ask_prices_past_its_window_until_a_candidate_fits() -> None:
    """Every price takes 2 s of a 1-s window, and 1 config in 10 fits: the first candidate
    priced is mostly over budget, yet every priced proposal fits (priced on, never an
    unpriced random one, the random turns included)."""
    now = [0.0]

    def price(values: dict[str, Any]) -> tuple[float, bool]:
        mem = float(values["x"]) * 1e6
        return mem, mem <= 10e6

    def slow(values: dict[str, Any]) -> tuple[float, bool]:
        now[0] += 2.0
        return price(values)

    sampler = PricedEHVI(seed=3, startup=4, clock=lambda: now[0])
    sampler.bind(Pricing(price=slow, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=10e6))
    priced = _priced_turns(sampler, _suggest, price, 12)
    assert len(priced) == 12 and all(int(v["x"]) <= 10 for v in priced), priced  # type: ignore[call-overload]


def test_unbound_it_is_random_sampling() -> None:
    a = optuna.create_study(sampler=PricedEHVI(seed=1, startup=0))
    b = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for s in (a, b):
        s.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=5)
    assert [t.params for t in a.trials] == [t.params for t in b.trials]


def _drive(sampler: PricedEHVI, n: int, calls: list[int] | None = None,
           ) -> tuple[list[dict[str, object]], list[int]]:
    """n trials told as a search tells them; (their values, price calls made by each ask)."""
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    out, per_ask = [], []
    for _ in range(n):
        before = calls[0] if calls else 0
        trial = study.ask()
        values = _suggest(trial)
        per_ask.append((calls[0] if calls else 0) - before)
        out.append(values)
        mem, fits = _price(values)
        ok = {"status": "complete" if fits else "infeasible",
              "metrics": {"wall_seconds": 1.0 + len(out) % 3}}
        trial.set_user_attr(ATTR, ok)
        quality = math.log(float(values["x"])) if fits else 0.0  # type: ignore[arg-type]
        study.tell(trial, [quality, mem])
    return out, per_ask


def test_a_repeatable_search_lets_no_clock_decide() -> None:
    """Pricing that takes longer than the per-ask cap (a clock that moves 1 s per price):
    an ask prices until its first candidate that fits, then stops; a repeatable one prices
    them all, and two runs propose the same configs."""

    def run(repeatable: bool) -> tuple[list[dict[str, object]], list[int], list[bool]]:
        now, calls, fits = [0.0], [0], []

        def slow(values: dict[str, object]) -> tuple[float, bool]:
            now[0] += 1.0
            calls[0] += 1
            fits.append(_price(values)[1])
            return _price(values)

        s = PricedEHVI(seed=5, startup=6, candidates=24, price_budget_s=0.5,
                       clock=lambda: now[0])
        s.bind(Pricing(price=slow, suggest=_suggest, objectives=OBJECTIVES,
                       budget_bytes=BUDGET, repeatable=repeatable))
        return (*_drive(s, 16, calls), fits)

    (_, capped, fits), (again, every, _), (twice, _, _) = run(False), run(True), run(True)
    asks, at = [], 0
    for c in capped:
        asks.append(fits[at:at + c])
        at += c
    # the cap: over budget ones priced on, and the first that fits the last priced
    assert [a for a in asks if a] and all(a[-1] and not any(a[:-1]) for a in asks if a)
    assert any(len(a) > 1 for a in asks)  # x > 50 first, priced past the window
    # every candidate not tried before (24 drawn, a few repeat a trial); a random turn
    # prices until its first that fits
    model = [c for n, c in enumerate(every) if n < 6 or not is_random(n, 6, RANDOM_EVERY)]
    assert model and all(c >= 18 for c in model if c)
    assert again == twice


def test_without_a_memory_objective_it_improves_quality_alone() -> None:
    """Objectives quality only: every candidate at the same memory, so the gain is the
    expected improvement of quality; still priced (never over budget). Quality rises with
    x up to the budget's 50, so the model's proposals sit high in [1, 50]."""
    sampler = PricedEHVI(seed=2, startup=6)
    sampler.bind(Pricing(price=_price, suggest=_suggest, objectives=[("quality", "maximize")],
                         budget_bytes=BUDGET))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    chosen, finished = [], 0
    for _ in range(30):
        trial = study.ask()
        values = _suggest(trial)
        _, fits = _price(values)
        if finished >= 6 and not is_random(trial.number, 6, RANDOM_EVERY):
            chosen.append(int(values["x"]))  # type: ignore[call-overload]
        trial.set_user_attr(ATTR, {"status": "complete" if fits else "infeasible"})
        study.tell(trial, math.log(float(values["x"])) if fits else 0.0)  # type: ignore[arg-type]
        finished += fits
    assert len(chosen) >= 10 and all(x <= 50 for x in chosen)
    assert sorted(chosen)[len(chosen) // 2] >= 35, chosen  # random's median would be ~25


def _fits_one_in_five(values: dict[str, Any]) -> tuple[float, bool]:
    """x MB, fitting when x is a multiple of 5 (40 configs of _suggest's 200), the others
    over budget whatever their memory."""
    return float(values["x"]) * 1e6, int(values["x"]) % 5 == 0


def _all_turns(seed: int, n: int, sampler: type[PricedEHVI] = PricedEHVI,
               ) -> list[dict[str, object]]:
    """The values of n trials ehvi proposes (start-up 4) in _suggest's space priced by
    `_fits_one_in_five`, a repeatable search, told as a search tells them."""
    s = sampler(seed=seed, startup=4)
    s.bind(Pricing(price=_fits_one_in_five, suggest=_suggest, objectives=OBJECTIVES,
                   budget_bytes=100e6, repeatable=True))
    return _priced_turns(s, _suggest, _fits_one_in_five, n)


def test_every_proposal_fits_the_random_turns_included_and_a_seed_repeats_them() -> None:
    """One config in five fits: an unpriced random turn (trials 7, 11, 15, 19 of 20) would
    fit with chance 1/5 each; every proposal is one that fits, none twice, and the same
    seed proposes the same configs (another seed others)."""
    assert [n for n in range(20) if n >= 4 and is_random(n, 4, RANDOM_EVERY)] == [7, 11, 15, 19]
    got = _all_turns(3, 20)
    assert len(got) == 20 and all(int(v["x"]) % 5 == 0 for v in got), got  # type: ignore[call-overload]
    assert len({tuple(sorted(v.items())) for v in got}) == 20
    assert _all_turns(3, 20) == got and _all_turns(4, 8) != got[:8]


class _BrokenModel(PricedEHVI):
    def _gain(self, *args: Any) -> np.ndarray:
        raise RuntimeError("model broke")


def test_a_model_failure_falls_back_to_a_priced_random_proposal(
        caplog: pytest.LogCaptureFixture) -> None:
    """The model's turns all fail: each proposes the random turn's priced config instead,
    so every trial fits, with a warning, and the search goes on."""
    got = _all_turns(5, 16, _BrokenModel)
    assert len(got) == 16 and all(int(v["x"]) % 5 == 0 for v in got), got  # type: ignore[call-overload]
    assert "no model proposal for trial 4 (model broke); a priced random one" in caplog.text


def test_no_model_is_fitted_within_the_start_up(caplog: pytest.LogCaptureFixture) -> None:
    """STARTUP trials, each finished before the next ask (a search's best case for the
    model): none is the model's proposal, so a new study of no more trials never needs
    scikit-learn (study.warm_sampler does not import it); the next trial's ask is."""
    from autoembed.pipeline.priced_ehvi import STARTUP

    s = _BrokenModel(seed=5)
    s.bind(Pricing(price=_fits_one_in_five, suggest=_suggest, objectives=OBJECTIVES,
                   budget_bytes=100e6, repeatable=True))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=s)
    for n in range(STARTUP + 2):  # trial number STARTUP: the first model turn (not random)
        assert ("model broke" in caplog.text) == (n > STARTUP), n
        trial = study.ask()
        values = _suggest(trial)
        trial.set_user_attr(ATTR, {"status": "complete"})
        study.tell(trial, [float(values["x"]), float(values["x"])])  # type: ignore[arg-type]
    assert "no model proposal for trial" in caplog.text


def test_a_pricing_that_raises_falls_back_to_an_unpriced_random_proposal(
        caplog: pytest.LogCaptureFixture) -> None:
    """Pricing that raises at every ask: nothing can be priced, so each trial is proposed
    at random unpriced, with a warning, and the search goes on."""
    def broken(values: dict[str, object]) -> tuple[float, bool]:
        raise RuntimeError("pricing broke")

    sampler = PricedEHVI(seed=4, startup=3)
    sampler.bind(Pricing(price=broken, suggest=_suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for _ in range(8):
        trial = study.ask()
        values = _suggest(trial)
        trial.set_user_attr(ATTR, {"status": "complete"})
        study.tell(trial, [float(values["x"]), float(values["x"])])  # type: ignore[arg-type]
    assert len(study.trials) == 8
    assert "no model proposal for trial 0" in caplog.text  # the start-up's, then random
    assert "no random proposal for trial 6 (pricing broke)" in caplog.text  # a random turn


def test_warm_sampler_imports_the_trees_on_a_thread_of_its_own() -> None:
    # a fresh interpreter: the driver calls it before Ray starts, so the first ask finds
    # scikit-learn loaded (about 3 s of import otherwise charged to the search's first ask)
    code = (
        "import sys, threading\n"
        "from autoembed.pipeline.study import warm_sampler\n"
        "from autoembed.pipeline.priced_ehvi import STARTUP\n"
        "warm_sampler('random')\n"
        "warm_sampler('ehvi', STARTUP)\n"  # a new study this short never fits the model
        "assert threading.active_count() == 1 and 'sklearn' not in sys.modules\n"
        "warm_sampler('ehvi')\n"
        "[t] = [t for t in threading.enumerate() if t.name == 'autoembed-sampler-warm']\n"
        "assert not t.daemon\n"
        "t.join()\n"
        "assert 'sklearn.ensemble' in sys.modules and 'scipy.special' in sys.modules\n")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_forest_spread_is_that_of_its_trees_predictions() -> None:
    """`_forest` reads each tree directly; scikit-learn's own per-tree predict, refitted
    with the same seed, gives the same mean and spread."""
    from sklearn.ensemble import ExtraTreesRegressor

    from autoembed.pipeline.priced_ehvi import _forest

    gen = np.random.default_rng(3)
    x, x_new = gen.random((40, 5)), gen.random((30, 5))
    y = x[:, 0] * 2 + gen.normal(0, 0.1, 40)
    seed = int(np.random.default_rng(11).integers(2**31))  # what _forest draws first
    mu, sd = _forest(x, y, x_new, np.random.default_rng(11))
    ref = ExtraTreesRegressor(n_estimators=64, bootstrap=True, random_state=seed).fit(x, y)
    per_tree = np.stack([t.predict(x_new) for t in ref.estimators_])
    np.testing.assert_array_equal(mu, per_tree.mean(axis=0))
    np.testing.assert_array_equal(sd, per_tree.std(axis=0))


def test_van_der_corput_mirrors_the_binary_digits() -> None:
    # k = 1, 2, 3, 6 in binary: 1, 10, 11, 110 -> 0.1, 0.01, 0.11, 0.011
    got = [van_der_corput(k) for k in (0, 1, 2, 3, 6)]
    assert got == [0.0, 0.5, 0.25, 0.75, 0.375]


def test_the_start_up_spans_the_memory_axis_and_fits() -> None:
    """Start-up 4 of a space whose memory is x MB (x log-uniform on [1, 100], x <= 50 fits):
    four random draws land in four different quarters of [log 1, log 50] with chance
    4!/4**4 = 0.09, all four fit with chance 1/16; the start-up puts one in each quarter
    and none over the budget."""

    def suggest(trial: optuna.trial.BaseTrial) -> dict[str, object]:
        return {"x": trial.suggest_float("x", 1.0, 100.0, log=True)}

    sampler = PricedEHVI(seed=7, startup=4)
    sampler.bind(Pricing(price=_price, suggest=suggest, objectives=OBJECTIVES,
                         budget_bytes=BUDGET))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    xs = []
    for _ in range(4):
        trial = study.ask()
        x = float(suggest(trial)["x"])  # type: ignore[arg-type]
        xs.append(x)
        trial.set_user_attr(ATTR, {"status": "complete", "metrics": {"wall_seconds": 1.0}})
        study.tell(trial, [math.log(x), x * 1e6])
    assert all(x <= 50 for x in xs)
    quarters = sorted(min(int(4 * math.log(x) / math.log(50)), 3) for x in xs)
    assert quarters == [0, 1, 2, 3], xs


def test_the_start_up_without_a_memory_objective_is_priced_random() -> None:
    """Objectives quality only: no memory axis to spread over, so the start-up (8 trials)
    is the random turn's, priced: each fits one config in five (unpriced, all 8 would fit
    with chance 5**-8), none twice."""
    sampler = PricedEHVI(seed=2, startup=8)
    sampler.bind(Pricing(price=_fits_one_in_five, suggest=_suggest,
                         objectives=[("quality", "maximize")], budget_bytes=100e6))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    xs = []
    for _ in range(8):
        t = study.ask()
        xs.append(int(_suggest(t)["x"]))  # type: ignore[call-overload]
        t.set_user_attr(ATTR, {"status": "complete"})
        study.tell(t, 0.5)
    assert all(x % 5 == 0 for x in xs), xs
    assert len({tuple(t.params.items()) for t in study.trials}) == 8
