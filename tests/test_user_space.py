"""The user space file: `embedding:` (applied by autoembed) and `user:` (passed through)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest

from autoembed.errors import ConfigError
from autoembed.pipeline.optuna_space import suggest_values
from autoembed.space import parse_space
from autoembed.space.loader import WHEN_RULE
from autoembed.user.space import config_for, load_user_space, params_for

SPACE = textwrap.dedent("""
    description: text classifier
    embedding:
      precision: {choices: [fp32, bf16_master]}
      table_optimizer: adam
    user:
      dim: {choices: [16, 32]}
      lr: {low: 0.001, high: 0.1, log: true}
      layers: {low: 1, high: 3}
      batch_size: 64
      widths: [64, 32]
      wd: {low: 0.0, high: 0.1, when: {layers: [2, 3]}}
    metrics: [loss]
    objectives: [quality, memory]
    trials: 7
""")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return p


def test_parse_and_suggest(tmp_path: Path) -> None:
    space = load_user_space(write(tmp_path, SPACE))
    assert space.trials == 7 and space.metrics == ("loss",)
    assert [o.name for o in space.objectives] == ["quality", "memory"]
    names = [p.name for p in space.params]
    assert names == ["embedding.precision", "user.dim", "user.lr", "user.layers", "user.wd"]
    kinds = {p.name: p.kind for p in space.params}
    assert kinds["user.layers"] == "int" and kinds["user.lr"] == "float"
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen_layers = set()
    for _ in range(12):
        trial = study.ask()
        values = suggest_values(space, trial)
        params = params_for(space, values)
        assert params["batch_size"] == 64 and params["widths"] == (64, 32)
        assert params["dim"] in (16, 32) and 0.001 <= params["lr"] <= 0.1
        assert params["embedding"] == {"precision": values["embedding.precision"],
                                       "table_optimizer": "adam"}
        assert ("wd" in params) == (params["layers"] >= 2)  # the condition holds
        seen_layers.add(params["layers"])
        # the stored Optuna params give the same values back (a resume)
        assert space.values_from_optuna(trial.params) == values
        assert space.optuna_params(values) == trial.params
        study.tell(trial, 0.0)
    assert seen_layers == {1, 2, 3}


def test_config_for_merges_table_rules_in_file_order() -> None:
    space = parse_space({
        "embedding": {"precision": "fp32",
                      "tables": {"*": {"table_optimizer": {"choices": ["adam", "sgd"]}},
                                 "enc.tok": {"table_optimizer": "adagrad"}}},
        "user": {"dim": {"choices": [8, 16]}}}, "s.yaml", kind="user")
    values = {**space.base, "embedding.tables.*.table_optimizer": "sgd", "user.dim": 8}
    tables = [{"name": "enc.tok", "vocab_size": 100}, {"name": "pos", "vocab_size": 10}]
    params = params_for(space, values)
    assert params["embedding"]["tables"] == {"*": {"table_optimizer": "sgd"},
                                             "enc.tok": {"table_optimizer": "adagrad"}}
    cfg = config_for(space, values, tables)
    by = {t.name: t for t in cfg.tables}
    assert by["enc.tok"].table_optimizer == "adagrad" and by["pos"].table_optimizer == "sgd"


def test_a_rule_naming_no_module_is_one_line_with_a_suggestion() -> None:
    space = parse_space({"embedding": {"tables": {"item_emb": {"compression": "none"}}},
                         "user": {"dim": {"choices": [8, 16]}}}, "s.yaml", kind="user")
    with pytest.raises(ConfigError) as e:
        config_for(space, {}, [{"name": "items_emb", "vocab_size": 10}])
    msg = str(e.value)
    assert "'item_emb' names no embedding module" in msg and "did you mean 'items_emb'" in msg
    assert "\n" not in msg


def test_config_wide_values_reach_the_config() -> None:
    space = parse_space({"embedding": {"precision": {"choices": ["fp32", "bf16"]},
                                       "table_optimizer": "rowwise_adagrad"},
                         "user": {"dim": 8}}, "s.yaml", kind="user")
    values = {**space.base, "embedding.precision": "bf16"}
    cfg = config_for(space, values, [{"name": "emb", "vocab_size": 50}])
    assert (cfg.precision, cfg.table_optimizer) == ("bf16", "rowwise_adagrad")
    assert [(t.name, t.vocab_size) for t in cfg.tables] == [("emb", 50)]


@pytest.mark.parametrize("raw, says", [
    ({"embeding": {}}, "unknown key 'embeding' (did you mean 'embedding'?)"),
    ({"embedding": {"precison": "fp32"}, "user": {"d": {"choices": [1, 2]}}},
     "unknown key 'embedding.precison' (did you mean 'precision'?)"),
    ({"embedding": {"precision": {"choices": ["fp32", "fp8"]}}},
     "key 'embedding.precision.choices' = 'fp8': must be one of"),
    ({"embedding": {"precision": "fp8"}, "user": {"d": {"choices": [1, 2]}}},
     "key 'embedding.precision' = 'fp8'"),
    ({"embedding": {"tables": {"*": {"dim": 8}}}, "user": {"d": {"choices": [1, 2]}}},
     "unknown key 'embedding.tables.*.dim'"),
    ({"embedding": {"tables": {"*": {}}}, "user": {"d": {"choices": [1, 2]}}},
     "key 'embedding.tables.*' = {}: give settings"),
    ({"user": {"dim": 8}}, "nothing is searched"),
    ({"user": {"dim": {"choices": []}}}, "key 'user.dim.choices' = []: must be a non-empty"),
    ({"user": {"dim": {"choices": [8, 8]}}}, "must not repeat a value"),
    ({"user": {"dim": {"low": 16, "high": 8}}}, "empty range"),
    ({"user": {"lr": {"low": 0, "high": 1, "log": True}}}, "a log-scale range needs low > 0"),
    ({"user": {"lr": {"low": 0.1, "hgh": 1}}}, "unknown key 'user.lr.hgh' (did you mean"),
    ({"user": {"n": {"low": 1, "high": 4, "type": "int", "step": 0.5}}}, "user.n.step"),
    ({"user": {"wd": {"low": 0.0, "high": 1.0, "when": {"layers": 2}}}},
     WHEN_RULE),
    ({"user": {"embedding": 1, "d": {"choices": [1, 2]}}}, "is an embedding setting"),
    ({"embedding": {"precision": "fp32"}, "user": {"precision": {"choices": [1, 2]}}},
     "is an embedding setting"),
    ({"user": {"d": {"choices": [1, 2]}}, "metrics": ["throughput"]},
     "is reported or measured already"),
    ({"user": {"d": {"choices": [1, 2]}}, "objectives": ["qualty"]}, "unknown objective"),
    ({"user": {"d": {"choices": [1, 2]}}, "trials": 0}, "key 'trials' = 0"),
    ({"user": {"d": {"choices": [1, 2]}}, "early_stop": {"max_steps": 100}},
     "key 'early_stop.eval_every' = None: must be an integer >= 1"),
    ({"user": {"d": {"choices": [1, 2]}}, "early_stop": {"max_step": 100, "eval_every": 5}},
     "unknown key 'early_stop.max_step' (did you mean 'max_steps'?)"),
    ({"user": {"d": {"choices": [1, 2]}}, "early_stop": {"max_steps": 0, "eval_every": 5}},
     "key 'early_stop.max_steps' = 0"),
    ([1, 2], "expected a mapping"),
    # built-in model settings a user's model would silently ignore
    ({"embedding": {"checkpointing": {"choices": [True, False]}}},
     "key 'embedding.checkpointing' = {'choices': [True, False]}: name the modules"),
    ({"embedding": {"placement": "host_cached"}, "user": {"d": {"choices": [1, 2]}}},
     "key 'embedding.placement' = 'host_cached': host_cached is not searched over your"),
])
def test_bad_spaces_are_one_line_errors(raw, says) -> None:
    with pytest.raises(ConfigError) as e:
        parse_space(raw, "s.yaml", kind="user")
    assert says in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="space file 'nope.yaml' does not exist"):
        load_user_space("nope.yaml")


def test_share_of_rows_per_table_reaches_the_resolved_table() -> None:
    from autoembed.config import resolved_tables

    space = parse_space({
        "embedding": {"tables": {"big*": {"compression": "hash",
                                          "hash_buckets": {"choices": [0.01, 0.5]}}}},
        "user": {"dim": 8}}, "s.yaml", kind="user")
    values = {**space.base, "embedding.tables.big*.hash_buckets": 0.01}
    cfg = config_for(space, values, [{"name": "big_items", "vocab_size": 100_000},
                                     {"name": "small", "vocab_size": 50}])
    by = {t.name: t for t in resolved_tables(cfg)}
    assert (by["big_items"].compression, by["big_items"].hash_buckets) == ("hash", 1000)
    assert (by["small"].compression, by["small"].hash_buckets) == ("none", None)


def test_bad_per_table_value_names_the_rule() -> None:
    with pytest.raises(ConfigError) as e:
        parse_space({"embedding": {"tables": {"emb": {"hash_buckets": {
            "choices": [0.5, 1.5]}}}}}, "s.yaml", kind="user")
    assert "key 'embedding.tables.emb.hash_buckets.choices' = 1.5" in str(e.value)


def test_early_stop_is_off_unless_the_space_says() -> None:
    raw = {"user": {"d": {"choices": [1, 2]}}}
    assert parse_space(raw, "s.yaml", kind="user").early_stop is None
    on = parse_space({**raw, "early_stop": {"max_steps": 400, "eval_every": 50}}, "s.yaml",
                     kind="user")
    assert on.early_stop == (400, 50)
