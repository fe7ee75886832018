"""Per-table choice in the search (issue 16): a space searches a rule ("compress the tables
above N rows with method X at share s") or a method per table, with `when:` conditions that
keep optimizers off the methods that cannot take them, so no proposal fails by construction.

Grid sizes and the tables each rule selects are counted here by hand."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
import yaml

from autoembed.config import resolved_tables
from autoembed.errors import ConfigError
from autoembed.pipeline.optuna_space import suggest_values
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.runner import resolve_for_data
from autoembed.space import parse_space

# the default space's data at full size: 40M, 10M, 4M, 1M, 200k, 20k rows; 1/1000 stand-in
DATA = {"name": "synthetic-ctr",
        "vocab_sizes": [40000000, 10000000, 4000000, 1000000, 200000, 20000],
        "rows": [2000, 100, 100]}

RULE = """
- min_rows: {choices: [1000000, 10000000]}
  compression: {choices: [hash, robe, hot_cold]}
  hash_buckets: {choices: [0.01, 0.1], when: {compression: [hash, hot_cold]}}
  hot_share: {low: 0.001, high: 0.1, log: true, when: {compression: hot_cold}}
  robe_size: {type: float, low: 0.001, high: 0.1, log: true, when: {compression: robe}}
  table_optimizer: {choices: [adam, rowwise_adagrad], when: {compression: [hash, hot_cold]}}
- name: f5
  compression: {choices: [none, tt]}
  tt_rank: {choices: [2, 8], when: {compression: tt}}
"""


def _space(tables: str = RULE, params: dict[str, Any] | None = None,
           base: dict[str, Any] | None = None) -> Any:
    raw = {"data": DATA, "stand_in": {"vocab_scale": 0.001},
           "base": base or {"table_optimizer": "adam", "dense_layers": [8]},
           "tables": yaml.safe_load(tables),
           "params": params if params is not None else {"dim": {"choices": [16]}}}
    return parse_space(raw, "per-table")


def test_searched_keys_are_params_named_by_their_place() -> None:
    space = _space()
    assert [p.name for p in space.params] == [
        "tables[0].min_rows", "tables[0].compression", "tables[0].hash_buckets",
        "tables[0].hot_share", "tables[0].robe_size", "tables[0].table_optimizer",
        "tables[1].compression", "tables[1].tt_rank", "dim"]
    hot = {p.name: p for p in space.params}["tables[0].hot_share"]
    assert hot.when == (("tables[0].compression", ("hot_cold",)),)  # this entry's key
    # round trip: the searched keys go back into their table entries
    again = parse_space({**space.to_dict(), "data": DATA}, "again")
    assert again.params == space.params and again.tables == space.tables


def test_every_grid_point_prices_and_trains_without_failing() -> None:
    space = _space()
    spec, stand_in = data_spec_for(space)
    w = build_workload(spec, stand_in, space.tables)
    grid = space.grid()
    # rule 0: 2 thresholds x (hash: 2 bucket shares x 2 optimizers = 4; robe: 3 array
    # shares; hot_cold: 2 x 3 hot shares x 2 = 12) = 38; rule 1: none, or tt at 2 ranks = 3
    assert len(grid) == 38 * 3
    for params in grid:
        values = space.values_from_optuna(params)
        priced = w.priced(space.config_for(values))
        trained = resolve_for_data(w.trained(space.config_for(values)), w.train_dataset)
        want = {ts.name: ts.compression for ts in resolved_tables(priced)}
        assert {ts.name: ts.compression for ts in resolved_tables(trained)} == want
        threshold, method = values["tables[0].min_rows"], values["tables[0].compression"]
        rows = dict(zip([f"f{i}" for i in range(6)], DATA["vocab_sizes"], strict=True))
        for name, comp in want.items():
            if name == "f5":
                assert comp == values["tables[1].compression"]
            else:
                assert comp == (method if rows[name] >= threshold else "none"), (name, values)


def test_optuna_proposals_never_fail_by_construction() -> None:
    space = _space()
    spec, stand_in = data_spec_for(space)
    w = build_workload(spec, stand_in, space.tables)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        values = suggest_values(space, trial)
        cfg = w.priced(space.config_for(values))
        seen.add(values["tables[0].compression"])
        for ts in resolved_tables(cfg):  # robe / tt never got a row-wise optimizer
            if ts.compression in ("robe", "tt"):
                assert ts.table_optimizer == "adam"
        study.tell(trial, 0.5)
    assert seen == {"hash", "robe", "hot_cold"}


def test_without_the_when_a_proposal_fails_by_construction() -> None:
    rule = """
- min_rows: 1000000
  compression: {choices: [robe]}
  table_optimizer: {choices: [rowwise_adagrad]}
"""
    space = _space(rule)
    spec, stand_in = data_spec_for(space)
    w = build_workload(spec, stand_in, space.tables)
    values = space.values_from_optuna(space.grid()[0])
    with pytest.raises(ConfigError, match="table_optimizer"):
        w.priced(space.config_for(values))


@pytest.mark.parametrize(("rule", "needle"), [
    ("- {min_rows: 1000, compression: {choices: [hash, shared]}, hash_buckets: 0.1}",
     "tables[0].compression"),
    ("- {min_rows: {low: 10, high: 100}, compression: hash, hash_buckets: 0.1}",
     "tables[0].min_rows"),
    ("- {name: f0, compression: {choices: [hot_cold]}, hash_buckets: 9,"
     " hot_share: {low: 0.0, high: 0.5}}", "tables[0].hot_share"),
    ("- {name: f0, tt_rank: {choices: [0, 4]}, compression: tt}", "tables[0].tt_rank"),
    ("- {name: f0, compression: {choices: [tt]}, tt_rank: {choices: [4], when: {dimm: 8}}}",
     "tables[0].tt_rank.when.dimm"),
    ("- {name: f0, compression: {choices: [tt], bogus: 1}}", "bogus"),
    # a condition on a key the entry fixes: was "must name a param listed above it"
    ("- {name: f0, compression: hash, hash_buckets: {choices: [9, 99], when: {compression: "
     "hash}}}", "tables[0].hash_buckets.when.compression' = 'hash': 'compression' is fixed in "
     "this entry ('hash'), not searched: drop the condition"),
])
def test_bad_searched_table_keys_one_line(rule: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        _space(rule)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_global_param_may_depend_on_a_table_param() -> None:
    space = _space(params={"table_optimizer": {
        "choices": ["adam", "rowwise_adagrad"],
        "when": {"tables[0].compression": ["hash"]}}}, tables="""
- min_rows: 1000000
  compression: {choices: [hash, tt]}
  hash_buckets: 0.01
""", base={"dense_layers": [8]})
    spec, stand_in = data_spec_for(space)
    w = build_workload(spec, stand_in, space.tables)
    grid = space.grid()
    assert len(grid) == 3  # hash x 2 optimizers, tt alone
    for params in grid:
        w.priced(space.config_for(space.values_from_optuna(params)))  # none fails


def test_a_rule_naming_no_table_of_the_data_is_refused_before_any_trial() -> None:
    # the data's tables are f0 ... f5: `name: f6` (or a column of another file) set nothing,
    # silently, and every trial ran without the settings the user wrote
    from autoembed.pipeline.builtin import BuiltinWorkload

    space = _space("- {name: f6, compression: hash, hash_buckets: 0.01}")
    with pytest.raises(ConfigError) as e:
        BuiltinWorkload.of(space)
    msg = str(e.value)
    assert "'per-table'" in msg and "tables[0].name" in msg and "'f6'" in msg
    assert "f0, f1, f2, f3, f4, f5" in msg and "\n" not in msg
    assert BuiltinWorkload.of(_space("- {name: f5, compression: hash, hash_buckets: 0.01}"))


def test_the_front_tables_searched_values_are_the_proposals_values() -> None:
    # a table's searched key (tables[i].<key>) and a `multiple_of` range by their values, as
    # the space names them; they showed as "tables[0].min_rows=?"
    from autoembed.pipeline.builtin import BuiltinWorkload
    from autoembed.trial import TrialRow

    space = _space(params={"dim": {"low": 8, "high": 32, "multiple_of": 8}})
    values = {"tables[0].min_rows": 10000000, "tables[0].compression": "hash",
              "tables[0].hash_buckets": 0.1, "tables[0].table_optimizer": "adam",
              "tables[1].compression": "tt", "tables[1].tt_rank": 8, "dim": 24}
    params = space.optuna_params(values)
    assert params["dim/8"] == 3
    row = TrialRow(0, "complete", space.config_for(values), {}, params=params)
    assert BuiltinWorkload.of(space).searched(row) == values
