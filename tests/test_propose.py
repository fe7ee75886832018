"""What a search counts as a repeat: a proposal whose priced config is one the study has
tried already, whatever params it was drawn with (`propose.trial_key`). No Ray, no
training: the proposer is driven directly on an in-memory study."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig, TableConfig, model_key, resolved_tables
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.priced_data import build_priced_data, data_spec_for
from autoembed.pipeline.records import params_key
from autoembed.space import load_space
from autoembed.trial import TrialResult

ROOT = Path(__file__).resolve().parents[1]
OBJ = [("quality", "maximize"), ("memory", "minimize")]
# seed_ctr at dim 8 under mixed_dim: its four tables are within ~22% of each other's row
# frequency, so every alpha up to ~0.25 rounds each table back to the full 8 dims
BASE = {"dim": 8, "compression": "mixed_dim", "precision": "fp32", "table_optimizer": "adam",
        "lr": 0.01, "batch_size": 512}


@pytest.fixture(scope="module")
def seed_ctr() -> BuiltinWorkload:
    space = load_space(ROOT / "autoembed" / "search_spaces" / "seed_ctr.yaml")
    spec, stand_in = data_spec_for(space)
    data = build_priced_data(spec, stand_in, space.tables, space.source)
    return BuiltinWorkload.of(space, data, run=dict(space.run))


def _engine(workload: BuiltinWorkload) -> SearchEngine:
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=0))
    return SearchEngine(study, SearchSettings(workload=workload, budget=Budget(10**12, "1TB"),
                                              objectives=OBJ, trials=10))


def _mixed_dims(freqs: list[float], dim: int, alpha: float, least: int = 4) -> list[int]:
    """The mixed-dim rule by hand: round(dim x (p / top)^alpha), within [least, dim]."""
    top = max(freqs)
    return [max(min(dim, round(dim * (p / top) ** alpha)), least) for p in freqs]


def test_two_alphas_that_build_one_model_train_it_once(seed_ctr: BuiltinWorkload) -> None:
    """mixed_dim_alpha 0.15 and 0.25 give every seed_ctr table its full 8 dims priced (the
    rule computed here on the data's row frequencies), and [7, 7, 7, 8] on the stand-in
    both train (`test_a_stand_in_that_trains_another_model_is_not_a_repeat`): one model.
    The first trains; the second is a repeat, told FAIL, no row, nothing launched."""
    eng = _engine(seed_ctr)
    space, study = seed_ctr.space, eng.study
    first, second = ({**BASE, "mixed_dim_alpha": a} for a in (0.15, 0.25))
    freqs = [float(t.frequency or 0) for t in seed_ctr.data.dataset.tables]
    assert len(freqs) == 4 and min(freqs) > 0
    for values in (first, second):
        assert _mixed_dims(freqs, 8, values["mixed_dim_alpha"]) == [8, 8, 8, 8]
        priced = seed_ctr.price(values).config  # type: ignore[union-attr]
        assert [t.dim for t in priced.tables] == [8, 8, 8, 8]
    study.enqueue_trial(space.optuna_params(first))
    asked = eng.proposer.ask()
    assert asked.proposal is not None and asked.row is not None
    eng._take(asked)
    study.enqueue_trial(space.optuna_params(second))
    again = eng.proposer.ask()
    assert again.proposal is None and again.row is None
    assert study.trials[again.trial.number].state == TrialState.FAIL
    assert sorted(eng.rows) == [asked.trial.number]


def _both_train(eng: SearchEngine, alphas: tuple[float, float]) -> None:
    """Propose BASE at each alpha in turn: each is launched, a trial of its own."""
    for alpha in alphas:
        eng.study.enqueue_trial(eng.settings.workload.space.optuna_params(
            {**BASE, "mixed_dim_alpha": alpha}))
        asked = eng.proposer.ask()
        assert asked.proposal is not None, alpha
        eng._take(asked)
    assert len(eng.rows) == 2


def test_an_alpha_that_builds_another_model_is_not_a_repeat(seed_ctr: BuiltinWorkload) -> None:
    """alpha 0.5 narrows seed_ctr's rarest tables (the rule by hand): another model,
    trained."""
    eng = _engine(seed_ctr)
    freqs = [float(t.frequency or 0) for t in seed_ctr.data.dataset.tables]
    assert _mixed_dims(freqs, 8, 0.5) != [8, 8, 8, 8]
    _both_train(eng, (0.15, 0.5))


def test_a_stand_in_that_trains_another_model_is_not_a_repeat(
        seed_ctr: BuiltinWorkload) -> None:
    """seed_ctr trains a scaled-down stand-in: alphas 0.10 and 0.25 price to one model (8
    dims each at full size) but the stand-in's row frequencies round them to [7, 7, 8, 8]
    and [7, 7, 7, 8] (the rule by hand): two models, both trained."""
    eng = _engine(seed_ctr)
    full = [float(t.frequency or 0) for t in seed_ctr.data.dataset.tables]
    small = [float(t.frequency or 0) for t in seed_ctr.data.train_dataset.tables]
    assert _mixed_dims(full, 8, 0.10) == _mixed_dims(full, 8, 0.25) == [8, 8, 8, 8]
    assert _mixed_dims(small, 8, 0.10) == [7, 7, 8, 8]
    assert _mixed_dims(small, 8, 0.25) == [7, 7, 7, 8]
    _both_train(eng, (0.10, 0.25))


def test_a_grid_point_that_repeats_trains_nothing_in_its_place(
        seed_ctr: BuiltinWorkload) -> None:
    """A grid of two points that train one model (alphas 0.15 and 0.25: 8 dims priced,
    [7, 7, 7, 8] trained, by hand in the tests above): the first trains, the second is a
    repeat, and the search ends with the grid; no config off the grid trains."""
    space = seed_ctr.space
    grid = [space.optuna_params({**BASE, "mixed_dim_alpha": a}) for a in (0.15, 0.25)]
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=0))
    eng = SearchEngine(study, SearchSettings(workload=seed_ctr, budget=Budget(10**12, "1TB"),
                                             objectives=OBJ, trials=10, grid=grid))
    first = eng.propose()
    assert first is not None and study.trials[first.number].params == grid[0]
    assert eng.propose() is None and eng.stop_reason == "every grid point was tried"
    assert [t.params for t in study.trials] == grid
    assert [t.state for t in study.trials][1] == TrialState.FAIL


def _finish(eng: SearchEngine, number: int) -> None:
    """Tell trial `number` a made-up complete result (nothing trains)."""
    res = TrialResult(status="complete", config=eng.rows[number].config, valid_quality=0.7,
                      steps=1, wall_seconds=1.0, throughput=100.0)
    eng.finish(number, {"status": "complete", "result": res.to_dict()})


def test_the_sampler_is_told_a_config_tried_does_not_train(seed_ctr: BuiltinWorkload) -> None:
    """The pricing bound to a sampler (`price_candidate`) says a candidate whose config the
    study has tried would not train, so the sampler's candidates skip it; alpha 0.5 (another
    model) still would."""
    eng = _engine(seed_ctr)
    eng.study.enqueue_trial(seed_ctr.space.optuna_params({**BASE, "mixed_dim_alpha": 0.15}))
    eng._take(eng.proposer.ask())
    same = eng.proposer.price_candidate({**BASE, "mixed_dim_alpha": 0.25})
    other = eng.proposer.price_candidate({**BASE, "mixed_dim_alpha": 0.5})
    assert same is not None and not same[1]
    assert other is not None and other[1]


def test_a_resume_knows_the_configs_its_rows_tried(seed_ctr: BuiltinWorkload) -> None:
    """A new engine on the study (a resume) rebuilds what was tried from the stored rows'
    configs: the other alpha of the same model is a repeat there too."""
    eng = _engine(seed_ctr)
    space, study = seed_ctr.space, eng.study
    study.enqueue_trial(space.optuna_params({**BASE, "mixed_dim_alpha": 0.15}))
    asked = eng.proposer.ask()
    eng._take(asked)
    _finish(eng, asked.trial.number)
    resumed = SearchEngine(study, eng.settings)
    assert [r.status for r in resumed.rows.values()] == ["complete"]
    study.enqueue_trial(space.optuna_params({**BASE, "mixed_dim_alpha": 0.25}))
    again = resumed.proposer.ask()
    assert again.proposal is None and again.row is None


def test_a_row_whose_params_are_not_the_spaces_is_keyed_by_them_and_a_bug_is_raised(
        seed_ctr: BuiltinWorkload, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed row an older version stored (a param the space asks missing, or a choice
    it no longer has) is keyed by its params; every other ValueError while a row is keyed
    was taken for one such row too and swallowed: it is raised now."""
    import autoembed.pipeline.propose as propose

    eng = _engine(seed_ctr)
    eng.study.enqueue_trial(seed_ctr.space.optuna_params({**BASE, "mixed_dim_alpha": 0.15}))
    asked = eng.proposer.ask()
    eng._take(asked)
    row = eng.rows[asked.trial.number]
    lacking = {k: v for k, v in row.params.items() if k != "lr"}
    for params in (lacking, {**row.params, "precision": "fp8"}):
        old = replace(row, params=params)
        assert eng.proposer._row_key(old) == ("params", params_key(params))

    def bug(*_: Any, **__: Any) -> dict[str, Any]:
        raise ValueError("a bug in the space's values")

    monkeypatch.setattr(propose, "suggest_values", bug)
    with pytest.raises(ValueError, match="a bug"):
        eng.proposer._row_key(row)


def test_the_configs_tried_are_counted_by_the_keys_known_when_asked(
        seed_ctr: BuiltinWorkload, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the search ends on "every fitting config tried: N", each row's key is the one
    worked out when it was asked (or loaded), not worked out again for every row."""
    eng = _engine(seed_ctr)
    _both_train(eng, (0.15, 0.5))
    calls: list[int] = []
    monkeypatch.setattr(type(eng.proposer), "_row_key",
                        lambda self, row: calls.append(row.number))
    assert eng.proposer._tried_fitting() == 2 and calls == []


def _table(name: str, rows: int, freq: float) -> TableConfig:
    return TableConfig(name, rows, frequency=freq)


@pytest.mark.parametrize(("a", "b", "same"), [
    # QR shares: ceil(1 / 0.26) = ceil(1 / 0.3) = 4 collisions; ceil(1 / 0.4) = 3
    ({"compression": "qr", "qr_collisions": 0.26}, {"compression": "qr", "qr_collisions": 0.3},
     True),
    ({"compression": "qr", "qr_collisions": 0.26}, {"compression": "qr", "qr_collisions": 0.4},
     False),
    ({"compression": "qr", "qr_collisions": 0.3}, {"compression": "qr", "qr_collisions": 4},
     True),
    # hash shares 0.0995 and 0.1 of 1000 and 500 rows: ceil(99.5) = 100, ceil(49.75) = 50
    ({"compression": "hash", "hash_buckets": 0.0995}, {"compression": "hash", "hash_buckets": 0.1},
     True),
    ({"compression": "hash", "hash_buckets": 0.1}, {"compression": "hash", "hash_buckets": 100},
     False),
    # mixed_dim at dim 8 on frequencies 0.3 and 0.4: round(8 x 0.75^a) = 8 for a <= 0.2
    ({"compression": "mixed_dim", "mixed_dim_alpha": 0.1},
     {"compression": "mixed_dim", "mixed_dim_alpha": 0.2}, True),
    ({"compression": "mixed_dim", "mixed_dim_alpha": 0.1},
     {"compression": "mixed_dim", "mixed_dim_alpha": 0.9}, False),
    # keys compression none does not read are no new model; keys it reads are
    ({"hash_buckets": 100, "qr_collisions": 8, "tt_rank": 4, "hot_share": 0.5,
      "mixed_dim_alpha": 0.5}, {}, True),
    ({"compression": "tt", "tt_rank": 4}, {"compression": "tt", "tt_rank": 8}, False),
    ({"lr": 0.01}, {"lr": 0.02}, False),
])
def test_model_key_is_what_the_model_reads(a: dict[str, Any], b: dict[str, Any],
                                           same: bool) -> None:
    """Configs built here, two tables of 1000 and 500 rows: equal model keys exactly where
    the tables the model builds are the same (counts, dims worked out by hand above)."""
    tables = (_table("a", 1000, 0.3), _table("b", 500, 0.4))
    ka, kb = (model_key(EmbeddingConfig(tables=tables, dim=8, **kw)) for kw in (a, b))
    assert (ka == kb) is same
    if a.get("compression") == "mixed_dim" and same:
        dims = [t.dim for t in resolved_tables(EmbeddingConfig(tables=tables, dim=8, **a)
                                               .resolve())]
        assert dims == [8, 8]
    if a.get("compression") == "qr":
        m = [t.qr_collisions for t in resolved_tables(EmbeddingConfig(tables=tables, **a))]
        assert m == [math.ceil(1 / a["qr_collisions"] - 1e-9)] * 2
