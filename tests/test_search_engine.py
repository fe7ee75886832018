"""The search engine without Ray: pricing before launch, what Optuna is told, early stopping,
pruned trials and crash recovery. Trial outcomes are fabricated, so these run in seconds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autoembed.budget import Budget
from autoembed.config import config_from_dict
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.early_stop import Progress, cannot_reach_front, optimistic_metrics
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.pipeline.records import ATTR, TRAINED_STATUSES
from autoembed.pipeline.study import load_rows, make_sampler, open_storage, recover
from autoembed.runner import Evaluation, TrialResult
from autoembed.space import load_space
from autoembed.trace import estimate

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 800_000_000
LIMIT = Budget(BUDGET, "800MB")  # the engine's budget
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    return space, build_workload(spec, stand_in)


def make_engine(tmp_path: Path, tiny: tuple[Any, Any], trials: int = 4, seed: int = 0,
                early_stop: bool = False, name: str = "s",
                sampler: str = "random") -> tuple[SearchEngine, Any, Any]:
    space, workload = tiny
    storage = open_storage(tmp_path)
    study = optuna.create_study(study_name=name, storage=storage,
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler(sampler, seed))
    run = {"max_steps": 60, "eval_every": 20}
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run=run), budget=LIMIT,
        objectives=OBJ, trials=trials, early_stop=early_stop))
    return eng, study, storage


def fake_final(train_config: dict[str, Any], quality: float, throughput: float,
               status: str = "complete") -> dict[str, Any]:
    cfg = config_from_dict(train_config)
    res = TrialResult(status=status, config=cfg, test_quality=quality, throughput=throughput,
                      curve=(Evaluation(20, 100, quality, {"auc": quality}, 0.1),),
                      error=None if status == "complete" else "boom")
    return {"status": status, "result": json.loads(json.dumps(res.to_dict()))}


def test_infeasible_proposals_are_told_and_never_launched(tmp_path: Path, tiny: Any) -> None:
    eng, study, _ = make_engine(tmp_path, tiny, trials=6, seed=1)
    launched = []
    while (p := eng.propose()) is not None:
        # every launched proposal fits, by an estimate computed here
        assert estimate(p.config).device_total <= BUDGET
        launched.append(p.number)
        eng.finish(p.number, fake_final(dict(p.payload["config"]), 0.7, 1000.0))
    rows = eng.rows
    infeasible = [r for r in rows.values() if r.status == "infeasible"]
    assert len(launched) == 6 == eng.trainables_started
    assert infeasible, "seed 1 proposes some over-budget configs in tiny.yaml at 800MB"
    assert not {r.number for r in infeasible} & set(launched)
    for r in infeasible:
        t = study.trials[r.number]
        assert t.state == TrialState.COMPLETE  # samplers learn only from COMPLETE trials
        assert t.constraints["memory"] == pytest.approx(
            (estimate(r.config).device_total - BUDGET) / BUDGET) and t.constraints["memory"] > 0
        assert t.values[0] == 0.0 and t.values[2] == 0.0  # worst-case placeholders
    for n in launched:
        assert study.trials[n].constraints["memory"] <= 0
    assert {r.number for r in rows.values() if r.status in TRAINED_STATUSES} == set(launched)


def test_tpe_mix_through_the_engine(tmp_path: Path, tiny: Any) -> None:
    """tpe-mix in the engine: its start-up and every 2nd trial after it propose what random
    with the seed proposes, trial for trial (TPE the others), over-budget ones included."""
    params = {}
    for kind in ("tpe-mix", "random"):
        eng, study, _ = make_engine(tmp_path / kind, tiny, trials=12, seed=4, sampler=kind)
        while (p := eng.propose()) is not None:
            q = 0.6 + 0.01 * (p.number % 7)  # an outcome by trial number: the same in both
            eng.finish(p.number, fake_final(dict(p.payload["config"]), q, 1000.0 + p.number))
        params[kind] = [t.params for t in study.trials]
    mix, rnd = params["tpe-mix"], params["random"]
    scheduled = [n for n in range(len(mix)) if n < 8 or n % 2 == 1]
    assert len(mix) >= 14 and [mix[n] for n in scheduled] == rnd[:len(scheduled)]
    assert all(mix[n] not in rnd for n in range(8, len(mix), 2))  # TPE's own


def test_pruned_trials_are_told_pruned_and_never_on_the_front(tmp_path: Path,
                                                              tiny: Any) -> None:
    eng, study, _ = make_engine(tmp_path, tiny, trials=4, early_stop=True)
    a = eng.propose()
    assert a is not None
    eng.finish(a.number, fake_final(dict(a.payload["config"]), 0.80, 5000.0))
    b = eng.propose()
    assert b is not None
    # b's memory is what it is; make a's metrics dominate b's best reachable point
    member = dict(eng.rows[a.number].metrics)
    member["memory"] = 0.0
    member["throughput"] = 1e12
    eng.rows[a.number] = eng.rows[a.number].with_(metrics=member)
    eng._front_cache = None
    assert not eng.observe(b.number, {"quality": 0.55, "step": 20, "samples": 5120,
                                      "elapsed_s": 1.0})  # one evaluation: no slope yet
    assert eng.observe(b.number, {"quality": 0.56, "step": 40, "samples": 10240,
                                  "elapsed_s": 2.0})
    c = eng.propose()
    assert c is not None
    for step, q in ((20, 0.55), (40, 0.56), (60, 0.56)):
        # dominated too, but its last evaluation (step 60 = max_steps) saves nothing: kept
        stop = eng.observe(c.number, {"quality": q, "step": step, "samples": 1, "elapsed_s": 1})
        assert stop == (step == 40)
    row = eng.finish(b.number, None)  # Tune stopped it: no final report
    assert row is not None and row.status == "pruned"
    assert study.trials[b.number].state == TrialState.PRUNED
    assert b.number not in {r.number for r in eng.front()}
    assert a.number in {r.number for r in eng.front()}


def test_failed_and_diverged_outcomes(tmp_path: Path, tiny: Any) -> None:
    eng, study, _ = make_engine(tmp_path, tiny, trials=3)
    p = eng.propose()
    assert p is not None
    eng.finish(p.number, None, error="the trial's process failed")
    assert study.trials[p.number].state == TrialState.FAIL
    q = eng.propose()
    assert q is not None
    eng.finish(q.number, fake_final(dict(q.payload["config"]), 0.5, 10.0, status="diverged"))
    t = study.trials[q.number]
    assert t.state == TrialState.COMPLETE and t.constraints["runs"] == 1.0
    assert eng.rows[q.number].status == "diverged" and not eng.front()


def test_recover_interrupts_running_trials_and_requeues_once(tmp_path: Path, tiny: Any) -> None:
    eng, study, storage = make_engine(tmp_path, tiny, trials=4)
    p1 = eng.propose()
    assert p1 is not None
    eng.finish(p1.number, fake_final(dict(p1.payload["config"]), 0.7, 100.0))
    p2 = eng.propose()  # left RUNNING: the driver "dies" here
    assert p2 is not None
    rec = recover(study, storage, "interrupted")
    assert rec.interrupted == (p2.number,) and rec.requeued == (p2.number,)
    assert study.trials[p2.number].state == TrialState.FAIL
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1
    assert waiting[0].system_attrs["fixed_params"] == study.trials[p2.number].params
    # a resumed engine asks the re-queued trial first and counts it once
    eng2 = SearchEngine(study, SearchSettings(workload=eng.workload, budget=LIMIT,
                                              objectives=OBJ, trials=4))
    assert eng2.trained == 1  # the interrupted trial does not count
    p3 = eng2.propose()
    assert p3 is not None and eng2.rows[p3.number].retry_of == p2.number
    assert study.trials[p3.number].params == study.trials[p2.number].params
    # the retry dies too: it is not re-queued a second time
    rec2 = recover(study, storage, "interrupted")
    assert rec2.interrupted == (p3.number,) and rec2.requeued == ()
    assert rec2.retried == (p3.number,)
    rows = load_rows(study)
    assert rows[p1.number].status == "complete" and rows[p2.number].interrupted
    assert study.trials[p1.number].user_attrs[ATTR]["status"] == "complete"


def test_grid_sampler_visits_distinct_points(tmp_path: Path, tiny: Any) -> None:
    space, workload = tiny
    storage = open_storage(tmp_path)
    study = optuna.create_study(study_name="g", storage=storage,
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("grid", 0))
    grid = space.grid()
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run={}), budget=LIMIT,
        objectives=OBJ, trials=5, grid=grid))
    while (p := eng.propose()) is not None:
        eng.finish(p.number, fake_final(dict(p.payload["config"]), 0.6, 1.0))
    seen = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(seen) == len(set(seen))
    assert all(dict(s) in grid for s in seen)


def test_early_stop_keeps_the_cheap_end() -> None:
    # a poor-quality trial that is cheaper than every front member is never stopped
    prog = Progress(qualities=(0.60, 0.61), step=40, samples=10_000, elapsed_s=2.0,
                    max_steps=60, eval_every=20, device_total=1e8)
    front = [{"quality": 0.80, "memory": 5e8, "throughput": 1e3}]
    obj = OBJ
    assert not cannot_reach_front(prog, front, obj)
    # the same trial at the member's memory or more, slower and worse: stopped
    dear = Progress(qualities=(0.60, 0.61), step=40, samples=1_000, elapsed_s=2.0,
                    max_steps=60, eval_every=20, device_total=6e8)
    assert cannot_reach_front(dear, front, obj)
    # optimistic quality: last + gain x evaluations left + slack
    assert optimistic_metrics(dear)["quality"] == pytest.approx(0.61 + 0.01 * 1 + 0.005)
    # a latency objective is unknown until the end: never stopped
    assert not cannot_reach_front(dear, [{**front[0], "latency": 0.05}],
                                  [*obj, ("latency", "minimize")])


def test_early_stop_counts_the_best_evaluation_a_trial_keeps() -> None:
    # a curve that peaked at 0.79 and fell to 0.76: judged by its last evaluation it cannot
    # pass the member's 0.78 (0.76 + 0 gain + slack); judged by its best (validation
    # selection) it already has 0.79, so the member does not dominate it
    curve = (0.77, 0.79, 0.785, 0.77, 0.76)
    front = [{"quality": 0.78, "memory": 1e8, "throughput": 1e9}]
    last = Progress(qualities=curve, step=100, samples=1_000, elapsed_s=2.0, max_steps=160,
                    eval_every=20, device_total=2e8)
    assert optimistic_metrics(last)["quality"] == pytest.approx(0.76 + 0.005)
    assert cannot_reach_front(last, front, OBJ)
    best = dataclasses.replace(last, keeps_best=True)
    assert optimistic_metrics(best)["quality"] == pytest.approx(0.79 + 0.005)
    assert not cannot_reach_front(best, front, OBJ)


def test_the_builtin_workload_keeps_the_best_under_fit_to_data() -> None:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    assert BuiltinWorkload.of(space, run={"fit_to_data": True}).keeps_best
    assert not BuiltinWorkload.of(space, run={"fit_to_data": False}).keeps_best


def test_spent_is_the_further_of_trials_and_seconds(tmp_path: Path, tiny: Any) -> None:
    """The share of the budget a sampler's cost cooling reads: trials proposed of the count,
    or seconds of the time budget, whichever is further, at most 1."""
    space, workload = tiny
    now = [100.0]
    study = optuna.create_study(storage=open_storage(tmp_path), study_name="spent",
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 0))
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run={}), budget=LIMIT,
        objectives=OBJ, trials=4, time_budget_s=50.0), clock=lambda: now[0])
    assert eng.spent() == 0.0
    now[0] += 10.0  # 10 of 50 s
    assert eng.spent() == pytest.approx(0.2)
    assert eng.propose() is not None and eng.trained == 1  # 1 of 4 trials
    assert eng.spent() == pytest.approx(0.25)
    now[0] += 30.0  # 40 of 50 s
    assert eng.spent() == pytest.approx(0.8)
    now[0] += 60.0  # past the time budget
    assert eng.spent() == 1.0


def test_a_sampler_declaring_bind_is_bound_to_the_engines_pricing(tmp_path: Path,
                                                                  tiny: Any) -> None:
    """A sampler that prices its candidates declares `bind` (the `PricingSampler`
    protocol, as `PricedEHVI` does): the engine binds it once, with its budget, objectives,
    share spent and a price that judges a candidate as its proposal is judged; a sampler
    without `bind` is not one."""
    from autoembed.memory.objective import MEMORY_BASIS, memory_value
    from autoembed.pipeline.priced_ehvi import PricedEHVI
    from autoembed.pipeline.propose import PricingSampler

    class Binding(optuna.samplers.RandomSampler):
        def __init__(self) -> None:
            super().__init__(seed=0)
            self.bound: list[Any] = []

        def bind(self, pricing: Any) -> None:
            self.bound.append(pricing)

    assert isinstance(PricedEHVI(seed=0), PricingSampler)
    assert not isinstance(optuna.samplers.TPESampler(seed=0), PricingSampler)
    space, workload = tiny
    sampler = Binding()
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=sampler)
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run={}), budget=LIMIT, objectives=OBJ,
        trials=2))
    assert len(sampler.bound) == 1
    pricing = sampler.bound[0]
    assert pricing.budget_bytes == BUDGET and list(pricing.objectives) == OBJ
    assert pricing.spent() == 0.0
    p = eng.propose()
    assert p is not None
    assert pricing.spent() == 0.5  # one of two trials
    values = pricing.suggest(study.trials[p.number])
    # it fits, but its config is training now: a proposal of it would not train
    assert p.estimate.device_total <= BUDGET
    assert pricing.price(values) == (memory_value(p.estimate.to_dict(), MEMORY_BASIS), False)
