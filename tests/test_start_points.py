"""Start points (issue 15): the known-good configs a search trains first. The rule against
hand-made spaces (values the space allows, searched params only, clamped, the cheapest corner
computed by hand), and the engine (no Ray): the first proposals are the start points, an
over-budget one is never trained, a resume does not repeat them. And the rule for
infeasible proposals: the sampler learns from their constraint, not their placeholders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.optuna_space import distribution
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.pipeline.study import load_rows, make_sampler, open_storage, recover
from autoembed.runner import Evaluation, TrialResult
from autoembed.space import (
    BUILTIN_SPACES,
    Param,
    builtin_space_path,
    cheapest_config,
    load_space,
    parse_space,
)
from autoembed.space.start import start_points, value_in_space
from autoembed.trace import estimate

ROOT = Path(__file__).resolve().parents[1]
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]

HAND = {
    "data": {"name": "synthetic-ctr", "vocab_sizes": [1000, 50], "rows": [2000, 200, 200]},
    "base": {"dense_optimizer": "adam"},
    "params": {
        "dim": {"type": "int", "low": 24, "high": 40, "multiple_of": 8},
        "compression": {"choices": ["hash", "none"]},
        "hash_buckets": {"when": {"compression": "hash"}, "type": "int", "low": 100,
                         "high": 900},
        "interaction": {"choices": ["concat", "dot"]},
        "wide": {"choices": [False, True]},
        "dense_layers": {"choices": [[128], [256, 64]]},
        "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
        "weight_decay": {"type": "float", "low": 0.001, "high": 0.01},
        "batch_size": {"choices": [100, 1000, 3000]},
        "table_optimizer": {"choices": ["sgd", "adagrad"]},
    },
}


def _hand_price(cfg: EmbeddingConfig) -> int:
    """A price whose minimum is plain to see: rows x dim, plus batch, layers and wide."""
    rows = int(cfg.hash_buckets or 0) if cfg.compression == "hash" else 1050
    return (rows * cfg.dim + cfg.batch_size + sum(cfg.dense_layers)
            + (1000 if cfg.wide else 0) + (7 if cfg.table_optimizer == "adagrad" else 0))


def test_ctr_start_points_take_the_nearest_values_the_space_allows() -> None:
    space = parse_space(HAND, "hand.yaml")
    corner, _, _ = cheapest_config(space, _hand_price)
    full, fm, cheap = start_points(space, "ctr", corner)
    # full+wide: dim 32 and lr 0.005 as preferred; weight_decay 2e-5 clamped up to 0.001;
    # batch 512 -> 1000 (nearest on a log scale); adam not offered -> the first optimizer
    assert (full.name, dict(full.values)) == ("full+wide", {
        "dim": 32, "compression": "none", "interaction": "concat", "wide": True,
        "dense_layers": (256, 64), "lr": 0.005, "weight_decay": 0.001, "batch_size": 1000,
        "table_optimizer": "sgd"})
    # fm: dim 16 clamped up to 24; no hidden-layer choice it prefers -> the first
    assert (fm.name, dict(fm.values)) == ("fm", {
        "dim": 24, "compression": "none", "interaction": "dot", "wide": True,
        "dense_layers": (128,), "lr": 0.003, "weight_decay": 0.001, "batch_size": 1000,
        "table_optimizer": "sgd"})
    # cheapest by hand: hash at 100 buckets x dim 24, batch 100, [128], no wide, sgd; its
    # lr and weight decay (memory-neutral) are full+wide's
    assert (cheap.name, dict(cheap.values)) == ("cheapest", {
        "dim": 24, "compression": "hash", "hash_buckets": 100, "interaction": "concat",
        "wide": False, "dense_layers": (128,), "lr": 0.005, "weight_decay": 0.001,
        "batch_size": 100, "table_optimizer": "sgd"})
    assert _hand_price(space.config_for(cheap.values)) == 100 * 24 + 100 + 128


def test_only_searched_params_and_duplicates_once() -> None:
    # no interaction, wide or lr searched: full+wide and fm differ by dim only, and with
    # one dim they are one point
    raw = {**HAND, "params": {"dim": {"choices": [16]},
                              "compression": {"choices": ["none", "hash"]},
                              "hash_buckets": HAND["params"]["hash_buckets"]}}
    space = parse_space(raw, "narrow.yaml")
    pts = start_points(space, "ctr")
    assert [(p.name, dict(p.values)) for p in pts] == [
        ("full+wide", {"dim": 16, "compression": "none"})]
    assert start_points(space, "ctr", {"dim": 16, "compression": "none"}) == pts
    assert start_points(space, "other-task") == []


def test_text_start_point_reads_whole_documents() -> None:
    raw = {"data": {"name": "synthetic-text", "vocab_size": 5000, "seq_len": 512,
                    "num_classes": 4, "rows": [400, 40, 40]},
           "base": {"dense_layers": []},
           "params": {"dim": {"type": "int", "low": 8, "high": 48, "multiple_of": 8},
                      "pooling": {"choices": ["sum", "mean"]},
                      "seq_len": {"choices": [32, 128, 512]},
                      "tokens_per_batch": {"choices": [4096, 32768]},
                      "lr": {"type": "float", "low": 0.02, "high": 0.2, "log": True}}}
    space = parse_space(raw, "text.yaml")
    (bag,) = start_points(space, "text")
    # dim 64 -> 48; mean; the longest seq_len; 16384 tokens -> 32768 (log-nearest of the two:
    # ties go to the first, and 16384 is nearer 32768 than 4096); lr 0.01 -> 0.02
    assert dict(bag.values) == {"dim": 48, "pooling": "mean", "seq_len": 512,
                                "tokens_per_batch": 32768, "lr": 0.02}


@pytest.mark.parametrize(("param", "want", "got"), [
    (Param("x", "float", low=0.1, high=1.0, step=0.25), (0.9,), 0.85),
    (Param("x", "float", low=0.1, high=1.0, step=0.25), (5.0,), 0.85),
    (Param("d", "int", low=20, high=70, multiple_of=8), (100,), 64),
    (Param("d", "int", low=20, high=70, multiple_of=8), (10,), 24),
    (Param("d", "int", low=20, high=70, multiple_of=8), (30,), 32),
    (Param("n", "int", low=3, high=11, step=4), (8,), 7),
    (Param("n", "int", low=1, high=100, log=True), (), 10),
    (Param("b", "categorical", choices=(1, True)), (True,), True),
    (Param("b", "categorical", choices=(1, True)), (1,), 1),
])
def test_values_are_clamped_into_the_range_and_onto_its_step(
        param: Param, want: tuple[Any, ...], got: Any) -> None:
    v = value_in_space(param, want)
    assert v == pytest.approx(got) and type(v) is type(got)


@pytest.mark.parametrize("name", BUILTIN_SPACES)
def test_builtin_spaces_start_points_live_in_the_space(name: str) -> None:
    space = load_space(builtin_space_path(name))
    spec, stand_in = data_spec_for(space)
    wl = build_workload(spec, stand_in, space.tables)
    corner, _, _ = cheapest_config(
        space, lambda c: int(estimate(wl.priced(c)).device_total))
    pts = start_points(space, spec.task, corner)
    assert pts and pts[-1].name == "cheapest"
    dists = {p.optuna_name: distribution(p) for p in space.params}
    keys = set()
    for pt in pts:
        params = pt.params(space)
        keys.add(json.dumps(params, sort_keys=True))
        for k, v in params.items():
            assert dists[k]._contains(dists[k].to_internal_repr(v)), (pt.name, k, v)
        # every active param is given, and nothing else: Optuna suggests exactly these
        assert space.values_from_optuna(params) == dict(pt.values)
    assert len(keys) == len(pts)


# ------------------------------------------------------------------ the engine


def _final(train_config: Any, quality: float) -> dict[str, Any]:
    res = TrialResult(status="complete", config=config_from_dict(dict(train_config)),
                      test_quality=quality, throughput=1000.0,
                      curve=(Evaluation(20, 100, quality, {"auc": quality}, 0.1),))
    return {"status": "complete", "result": json.loads(json.dumps(res.to_dict()))}


def test_engine_asks_the_start_points_first_and_a_resume_skips_them(tmp_path: Path) -> None:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    wl = build_workload(spec, stand_in)
    corner, _, _ = cheapest_config(space, lambda c: int(estimate(wl.priced(c)).device_total))
    pts = start_points(space, "ctr", corner)
    assert [p.name for p in pts] == ["full+wide", "fm", "cheapest"]
    budget = 1_500_000_000
    fits = [estimate(wl.priced(space.config_for(p.values))).device_total <= budget
            for p in pts]
    assert fits == [False, True, True]  # full tables at dim 32 do not fit 1.5 GB here
    storage = open_storage(tmp_path)

    def engine(trials: int) -> tuple[SearchEngine, Any]:
        study = optuna.load_study(study_name="s", storage=storage,
                                  sampler=make_sampler("random", 0))
        run = {"max_steps": 60, "eval_every": 20}
        return SearchEngine(study, SearchSettings(
            workload=BuiltinWorkload.of(space, wl, run=run), budget=Budget(budget, "1.5GB"),
            objectives=OBJ, trials=trials, start=[p.params(space) for p in pts])), study

    optuna.create_study(study_name="s", storage=storage,
                        directions=["maximize", "minimize", "maximize"])
    eng, study = engine(trials=1)
    first = eng.propose()  # full+wide is priced, rejected, never trained; then fm
    assert first is not None and first.number == 1
    assert study.trials[0].params == pts[0].params(space)
    assert eng.rows[0].status == "infeasible" and eng.trainables_started == 1
    assert study.trials[1].params == pts[1].params(space)
    # the driver dies with fm running: recover re-queues it once
    rec = recover(study, storage, "interrupted")
    assert rec.requeued == (1,)

    eng, study = engine(trials=4)
    launched = []
    while (p := eng.propose()) is not None:
        launched.append(p.number)
        eng.finish(p.number, _final(p.payload["config"], 0.7))
    trials = study.get_trials(deepcopy=False)
    assert launched == [2, 3, 4, 5]
    assert trials[2].params == pts[1].params(space)  # the retry of fm first
    assert trials[2].user_attrs.get("retry_of") == 1
    assert trials[3].params == pts[2].params(space)  # then the cheapest corner
    rows = load_rows(study)
    assert rows[3].status == "complete"
    # full+wide is not asked again, and each start point's params are told once (a retry
    # aside)
    told = [json.dumps(t.params, sort_keys=True) for t in trials
            if t.user_attrs.get("retry_of") is None]
    for pt in pts:
        assert told.count(json.dumps(pt.params(space), sort_keys=True)) == 1


# ------------------------------------------------------------------ infeasible proposals


def _history(placeholder: tuple[float, float, float]) -> optuna.Study:
    """A study told 12 trials: the odd ones over budget with `placeholder` values."""
    study = optuna.create_study(directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 0))
    dists = {"x": FloatDistribution(0.0, 1.0), "c": CategoricalDistribution(("a", "b"))}
    for i in range(12):
        x = (i * 0.37) % 1.0
        infeasible = i % 2 == 1
        values = (list(placeholder) if infeasible
                  else [1 - (x - 0.6) ** 2, 1.0 + x, 10.0 * (1 - x) ** 2])
        study.add_trial(create_trial(
            params={"x": x, "c": "ab"[i % 3 == 0]}, distributions=dists, values=values,
            constraints={"memory": 0.5 if infeasible else -0.1, "runs": 0.0},
            state=TrialState.COMPLETE))
    return study


@pytest.mark.parametrize("sampler", ["tpe", "tpe-mix"])
def test_infeasible_placeholders_do_not_steer_the_sampler(sampler: str) -> None:
    """Two histories that differ only in the placeholder values of infeasible trials: the
    sampler proposes the same next configs (it learns from their constraint alone)."""
    proposals = []
    for placeholder in ((0.0, 1.5, 0.0), (1.0, 0.0, 1e6)):
        study = _history(placeholder)
        study.sampler = make_sampler(sampler, 3)
        asked = []
        for _ in range(3):
            t = study.ask()
            asked.append((t.suggest_float("x", 0.0, 1.0), t.suggest_categorical("c", ["a", "b"])))
            study.tell(t, state=TrialState.FAIL)
        proposals.append(asked)
    assert proposals[0] == proposals[1]


# ------------------------------------------------------------------ the plan


@pytest.mark.parametrize(("options", "stored", "names"), [
    ({}, {}, ["full+wide", "fm", "cheapest"]),
    ({"start_points": False}, {}, []),
    ({"sampler": "grid"}, {}, []),
    ({}, {"sampler": "tpe"}, []),  # a study started before there were start points
    ({}, {"sampler": "tpe", "start_points": True}, ["full+wide", "fm", "cheapest"]),
])
def test_the_plan_has_start_points_unless_turned_off(
        tmp_path: Path, options: dict[str, Any], stored: dict[str, Any],
        names: list[str]) -> None:
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    request = SearchRequest.parse("8GB", "tiny", runs_dir=tmp_path, study="p", device="cpu",
                                  **options)
    notes: list[str] = []
    plan = SearchPlan.build(request, stored, notes.append)
    assert [p.name for p in plan.start] == names
    assert plan.meta()["start_points"] == (options.get("start_points", True) if not stored
                                           else bool(stored.get("start_points")))
    # the driver tells them once the session's checks have passed (bad input: one line)
    assert not [n for n in notes if n.startswith("start points")]


# ------------------------------------------------------------------ the search's seed


@pytest.mark.parametrize(("seed", "stored", "want"), [
    (None, {}, 0), (3, {}, 3), (None, {"seed": 5, "sampler": "tpe"}, 5)])
def test_the_search_seed_is_every_trials_seed(
        tmp_path: Path, seed: int | None, stored: dict[str, Any], want: int) -> None:
    """Seeds of one search differ in what they train (model init, data order), not only
    in what the sampler proposes; a resumed study keeps its stored seed."""
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    request = SearchRequest.parse("8GB", "tiny", runs_dir=tmp_path, study="s", device="cpu",
                                  seed=seed)
    plan = SearchPlan.build(request, stored)
    values = {p.name: p.grid_values()[0] for p in plan.space.params
              if p.active(plan.space.base)}
    assert plan.space.config_for(values).seed == want
    assert all(plan.space.config_for(p.values).seed == want for p in plan.start)


def test_a_space_that_sets_its_seed_keeps_it(tmp_path: Path) -> None:
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    text = (ROOT / "search_spaces" / "tiny.yaml").read_text()
    assert "\nbase:\n" in text
    space = tmp_path / "seeded.yaml"
    space.write_text(text.replace("\nbase:\n", "\nbase:\n  seed: 7\n", 1))
    request = SearchRequest.parse("8GB", str(space), runs_dir=tmp_path, study="k",
                                  device="cpu", seed=2)
    plan = SearchPlan.build(request, {})
    assert plan.space.base_config().seed == 7
