"""Search spaces: loading, validation messages, Optuna mapping, conditions, grid, cheapest."""

from __future__ import annotations

import filecmp
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.pipeline.optuna_space import distributions, suggest
from autoembed.space import (
    BUILTIN_SPACES,
    builtin_space_path,
    cheapest_config,
    load_space,
    parse_objectives,
)
from autoembed.trace import estimate

ROOT = Path(__file__).resolve().parents[1]
optuna.logging.set_verbosity(optuna.logging.WARNING)

SMALL: dict[str, Any] = {
    "data": {"name": "synthetic-ctr", "vocab_sizes": [1_000_000, 1000]},
    "base": {"dense_layers": [16]},
    "params": {
        "dim": {"type": "int", "low": 8, "high": 64, "log": True, "multiple_of": 8},
        "compression": {"choices": ["none", "hash"]},
        "hash_buckets": {"when": {"compression": "hash"}, "type": "int", "low": 1000,
                         "high": 100_000, "log": True},
        "table_optimizer": {"choices": ["adam", "sgd"]},
        "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
    },
    "trials": 3,
}


def write(tmp_path: Path, body: Any, name: str = "space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(body if isinstance(body, str) else yaml.safe_dump(body))
    return p


def with_params(**params: Any) -> dict[str, Any]:
    return {**SMALL, "params": {**SMALL["params"], **params}}


@pytest.mark.parametrize("name", BUILTIN_SPACES)
def test_builtin_spaces_load(name: str) -> None:
    top = ROOT / "search_spaces" / f"{name}.yaml"
    space = load_space(top)
    assert space.params and space.trials >= 1
    # the packaged copy is the same file (autoembed/search_spaces -> ../search_spaces)
    assert filecmp.cmp(top, builtin_space_path(name), shallow=False)
    assert load_space(name).to_dict() == space.to_dict()


@pytest.mark.parametrize(
    ("body", "key", "value"),
    [
        ({**SMALL, "paramz": {}}, "paramz", None),
        (with_params(dim={"type": "int", "low": 64, "high": 8}), "params.dim",
         "low=64, high=8"),
        (with_params(lr={"type": "float", "low": 0.0, "high": 0.1, "log": True}),
         "params.lr.low", "0.0"),
        (with_params(dim={"type": "int", "low": 9, "high": 15, "multiple_of": 8}),
         "params.dim", "multiple_of=8"),
        (with_params(dimm={"choices": [8]}), "dimm", None),
        (with_params(dim={"type": "int", "low": "8", "high": 64}), "params.dim.low", "'8'"),
        (with_params(dim={"type": "float", "low": 8, "high": 64}), "params.dim.type",
         "'float'"),
        (with_params(precision={"choices": ["fp8"]}), "params.precision.choices", "'fp8'"),
        (with_params(compression={"choices": []}), "params.compression.choices", "[]"),
        (with_params(dim={"low": 8, "high": 64, "lo": 1}), "params.dim.lo", None),
        (with_params(qr_collisions={"when": {"compresion": "qr"}, "low": 4, "high": 8}),
         "params.qr_collisions.when.compresion", "'qr'"),
        ({**SMALL, "objectives": ["quality", "acuracy"]}, "objectives[1].name", "'acuracy'"),
        ({**SMALL, "objectives": [{"name": "memory", "direction": "maximize"}]},
         "objectives[0].direction", "'maximize'"),
        ({**SMALL, "run": {"max_step": 10}}, "run.max_step", None),
        ({**SMALL, "run": {"max_steps": 10, "epochs": 2}}, "run.epochs", "not both"),
        ({**SMALL, "run": {"max_steps": 10, "warmup_steps": 10}}, "run.warmup_steps",
         "leaves none of the 10 steps"),
        ({**SMALL, "trials": 0}, "trials", "0"),
        ({**SMALL, "base": {"tables": []}}, "base.tables", "[]"),
        ({**SMALL, "stand_in": {"vocab_scale": 2}}, "stand_in.vocab_scale", "2"),
    ],
)
def test_invalid_spaces_name_file_key_and_value(
    tmp_path: Path, body: dict[str, Any], key: str, value: str | None
) -> None:
    p = write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        load_space(p)
    msg = str(err.value)
    assert str(p) in msg and key in msg, msg
    if value is not None:
        assert value in msg, msg
    assert "\n" not in msg


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path, "params:\n  dim: {low: 8, high: [\n")
    with pytest.raises(ConfigError, match=r"space.yaml.* line \d+ is not valid YAML"):
        load_space(p)


def test_missing_file_lists_builtins(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist.*default, ctr, text, tiny"):
        load_space(tmp_path / "nope.yaml")


def test_unknown_parameter_suggests_a_name(tmp_path: Path) -> None:
    p = write(tmp_path, with_params(batchsize={"choices": [64]}))
    with pytest.raises(ConfigError, match="unknown parameter name 'batchsize'.*'batch_size'"):
        load_space(p)


def test_distributions_and_multiple_of(tmp_path: Path) -> None:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    space = load_space(write(tmp_path, SMALL))
    d = distributions(space)
    assert d["dim/8"] == IntDistribution(1, 8, log=True)
    assert d["compression"] == CategoricalDistribution(("none", "hash"))
    assert set(d) == {"dim/8", "compression", "hash_buckets", "table_optimizer", "lr"}


def asked(space: Any, n: int, seed: int) -> Any:
    """`n` random trials of `space`: (Optuna's trial, the config it suggests), each told."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        trial = study.ask()
        yield trial, suggest(space, trial)
        study.tell(trial, 0.0)


def test_conditional_params_only_when_their_condition_holds(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    seen = set()
    for trial, cfg in asked(space, 40, seed=3):
        assert isinstance(cfg, EmbeddingConfig)
        assert cfg.dim % 8 == 0 and 8 <= cfg.dim <= 64
        assert ("hash_buckets" in trial.params) == (cfg.compression == "hash")
        assert (cfg.hash_buckets is not None) == (cfg.compression == "hash")
        seen.add(cfg.compression)
    assert seen == {"none", "hash"}


def test_values_round_trip_through_optuna_params(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    values = {"dim": 24, "compression": "hash", "hash_buckets": 5000,
              "table_optimizer": "sgd", "lr": 0.01}
    params = space.optuna_params(values)
    assert params["dim/8"] == 3
    assert space.values_from_optuna(params) == values
    # an inactive conditional value is dropped
    assert "hash_buckets" not in space.values_from_optuna({**params, "compression": "none"})


def test_grid_respects_conditions(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    grid = space.grid()
    # dim units {1, 3, 8} (log spread of 1..8 rounded) x (none + hash x 3 buckets)
    # x 2 optimizers x 3 lrs
    assert len(grid) == 3 * (1 + 3) * 2 * 3
    assert len({tuple(sorted(g.items())) for g in grid}) == len(grid)
    for g in grid:
        assert ("hash_buckets" in g) == (g["compression"] == "hash")


def test_cheapest_config_is_the_cheapest_corner(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    tables = (TableConfig("f0", 1_000_000), TableConfig("f1", 1000))

    def price(cfg: EmbeddingConfig) -> int:
        from dataclasses import replace

        return int(estimate(replace(cfg, tables=tables)).device_total)

    values, cfg, cost = cheapest_config(space, price)
    # by hand: the smallest dim, hashing into the fewest buckets, and Adam: at 1000 rows x 8
    # dims Adam's state fits the one 2 MiB segment every other block of the step fits, and
    # SGD's sparse gradients (priced by formula and added whole, as the traced estimate adds
    # them: each table's over the batch's 256 lookups, 256 x 8 x 4 B of values and 256 x 8 B
    # of ids, and the step's coalesced copy of one) cost 3 x (8192 + 2048) B more
    assert (values["dim"], values["compression"], values["hash_buckets"]) == (8, "hash", 1000)
    by_hand = {"dim": 8, "compression": "hash", "hash_buckets": 1000,
               "table_optimizer": "adam", "lr": 1e-3}
    sgd = space.config_for({**by_hand, "table_optimizer": "sgd"})
    assert price(sgd) == cost + 3 * (8192 + 2048)
    assert cost == price(cfg) == price(space.config_for(by_hand))
    # and no grid point is cheaper
    grid_costs = [price(space.config_for(space.values_from_optuna(g))) for g in space.grid()]
    assert cost <= min(grid_costs)


def test_objectives_parse_names_and_comma_strings() -> None:
    objs = parse_objectives("quality, memory,latency", "cli")
    assert [(o.name, o.direction) for o in objs] == [
        ("quality", "maximize"), ("memory", "minimize"), ("latency", "minimize")]
    with pytest.raises(ConfigError, match="each objective may appear once"):
        parse_objectives(["quality", "quality"], "cli")


def test_log_grid_values_are_tidy(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    lr = next(p for p in space.params if p.name == "lr")
    assert lr.grid_values() == (0.001, 0.01, 0.1)
    assert all(math.isfinite(v) for v in lr.grid_values())


def test_wide_is_searchable_and_priced(tmp_path: Path) -> None:
    from dataclasses import replace

    from optuna.distributions import CategoricalDistribution

    space = load_space(write(tmp_path, with_params(wide={"choices": [False, True]})))
    assert distributions(space)["wide"] == CategoricalDistribution((False, True))
    tables = (TableConfig("f0", 1_000_000), TableConfig("f1", 1000))

    def price(cfg: EmbeddingConfig) -> int:
        return int(estimate(replace(cfg, tables=tables)).device_total)

    values, cfg, _ = cheapest_config(space, price)
    assert values["wide"] is False and cfg.wide is False
    with_wide = space.config_for({**values, "wide": True})
    assert with_wide.wide is True
    # at the cheapest corner (1000 hash buckets) the wide part is two fp32 [1000, 1] tables:
    # 4000 B each, 4096 B in 512 B allocator blocks
    added = (
        estimate(replace(with_wide, tables=tables)).parameters
        - estimate(replace(cfg, tables=tables)).parameters
    )
    assert added == 2 * 4096


def test_stepped_range_whose_high_is_off_the_step_is_refused_with_the_fix(
        tmp_path: Path) -> None:
    # Optuna would silently shorten [4, 15] step 4 to [4, 12] (a warning), and the space's
    # enumeration clamped onto 15, a value off the step
    for spec, fix in (({"low": 4, "high": 15, "step": 4}, "give high: 12"),
                      ({"low": 0.1, "high": 0.5, "step": 0.15}, "give high: 0.4")):
        field = "dim" if isinstance(spec["low"], int) else "mixed_dim_alpha"
        p = write(tmp_path, with_params(**{field: spec}))
        with pytest.raises(ConfigError, match=rf"params\.{field}\.high.*{fix}$"):
            load_space(p)
    ok = load_space(write(tmp_path, with_params(mixed_dim_alpha={
        "low": 0.1, "high": 0.55, "step": 0.15})))
    assert {p.name: p.high for p in ok.params}["mixed_dim_alpha"] == 0.55


def test_grid_values_of_a_stepped_range_lie_on_its_step(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, with_params(
        qr_collisions={"low": 2, "high": 16, "step": 2},
        mixed_dim_alpha={"low": 0.1, "high": 0.55, "step": 0.15},
        dense_lr={"low": 0.01, "high": 0.09, "step": 0.04})))
    by = {p.name: p for p in space.params}
    # middles 9, 0.325 and 0.05 moved onto low + k * step (9 -> 10 by round half to even),
    # each float as Optuna's stepped suggestion holds it (3 * 0.15 + 0.1 is 0.5499...)
    assert by["qr_collisions"].grid_values() == (2, 10, 16)
    assert by["mixed_dim_alpha"].grid_values() == (0.1, 2 * 0.15 + 0.1, 3 * 0.15 + 0.1)
    assert by["dense_lr"].grid_values() == (0.01, 1 * 0.04 + 0.01, 2 * 0.04 + 0.01)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    proposed = set()
    for _ in range(40):
        trial = study.ask()
        proposed.add(trial.suggest_float("a", 0.1, 0.55, step=0.15))
        study.tell(trial, 0.0)
    assert proposed == set(by["mixed_dim_alpha"].grid_values()) | {0.1 + 0.15}
    gridded = load_space(write(tmp_path, with_params(mixed_dim_alpha={
        "low": 0.1, "high": 0.55, "step": 0.15, "grid": [0.55]})))
    assert [p.grid_values() for p in gridded.params if p.name == "mixed_dim_alpha"] == [
        (3 * 0.15 + 0.1,)]
    with pytest.raises(ConfigError, match=r"params\.qr_collisions\.grid.* 5: .*steps of 2"):
        load_space(write(tmp_path, with_params(
            qr_collisions={"low": 2, "high": 16, "step": 2, "grid": [4, 5]})))


def test_a_condition_on_a_list_valued_param_holds_when_it_takes_that_list(
        tmp_path: Path) -> None:
    # `when: {dense_layers: "32,16"}` (the choice's label, which the loader asks for) or the
    # list itself: the param was never suggested (a proposal holds (32, 16), not "32,16")
    for cond in ("32,16", [[32, 16]]):
        body = {**SMALL, "base": {}, "params": {
            "dense_layers": {"choices": [[16], [32, 16]]},
            "dense_lr": {"when": {"dense_layers": cond}, "low": 0.001, "high": 0.1}}}
        space = load_space(write(tmp_path, body))
        seen = set()
        for trial, cfg in asked(space, 20, seed=0):
            assert ("dense_lr" in trial.params) == (cfg.dense_layers == (32, 16))
            seen.add("dense_lr" in trial.params)
        assert seen == {True, False}
    # a fixed list in `base` meets its condition too
    fixed = load_space(write(tmp_path, {**SMALL, "base": {"dense_layers": [32, 16]}, "params": {
        "dense_lr": {"when": {"dense_layers": "32,16"}, "low": 0.001, "high": 0.1}}}))
    assert fixed.params[0].active(fixed.base)


@pytest.mark.parametrize(("params", "base", "value", "why"), [
    ({"qr_collisions": {"low": 2, "high": 8, "step": 2},
      "qr_operation": {"choices": ["mult"], "when": {"qr_collisions": 3}}}, {}, "3",
     "is not a value qr_collisions takes"),
    ({"dim": {"low": 8, "high": 64, "multiple_of": 8},
      "lr": {"low": 0.01, "high": 0.1, "when": {"dim": 12}}}, {}, "12",
     "is not a value dim takes"),
    ({"dim": {"low": 8, "high": 64}, "lr": {"low": 0.01, "high": 0.1, "when": {"dim": 99}}},
     {}, "99", "is not in dim's range [8, 64]"),
    ({"dense_lr": {"low": 0.01, "high": 0.1},
      "lr": {"low": 0.01, "high": 0.1, "when": {"dense_lr": 0.05}}}, {}, "0.05",
     "dense_lr is a float range"),
    ({"hash_buckets": {"low": 10, "high": 100, "when": {"compression": "hash"}}},
     {"compression": "none"}, "'hash'", "'compression' is fixed at 'none' in `base`"),
])
def test_a_condition_that_can_never_hold_is_refused(
        tmp_path: Path, params: dict[str, Any], base: dict[str, Any], value: str,
        why: str) -> None:
    # such a param was never searched, silently
    p = write(tmp_path, {"data": SMALL["data"], "base": base, "params": params})
    with pytest.raises(ConfigError) as err:
        load_space(p)
    msg = str(err.value)
    assert ".when." in msg and f"= {value}: {why}" in msg and "\n" not in msg, msg


def test_conditions_that_can_hold_load(tmp_path: Path) -> None:
    load_space(write(tmp_path, {"data": SMALL["data"], "base": {"compression": "none"},
                                "params": {
        "qr_collisions": {"low": 2, "high": 8, "step": 2},
        "qr_operation": {"choices": ["mult"], "when": {"qr_collisions": [2, 4]}},
        "dim": {"low": 8, "high": 64, "multiple_of": 8},
        "lr": {"low": 0.01, "high": 0.1, "grid": [0.05], "when": {"dim": 16}},
        "momentum": {"low": 0.5, "high": 0.9, "when": {"lr": 0.05}},  # a grid value
        "hash_buckets": {"low": 10, "high": 100, "when": {"compression": ["hash", "none"]}}}}))


def test_a_latency_objective_with_latency_not_measured_is_refused(tmp_path: Path) -> None:
    # every trial ended without the objective's value (the front's latency: None)
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    run = {"max_steps": 4, "eval_every": 4, "measure_latency": False}
    space = write(tmp_path, {**SMALL, "run": run})
    for objectives in ("quality,latency", None):
        body = {**SMALL, "run": run, "objectives": ["quality", "latency"]}
        path = space if objectives else write(tmp_path, body, "latency.yaml")
        request = SearchRequest.parse("8GB", str(path), runs_dir=tmp_path, study="s",
                                      objectives=objectives)
        with pytest.raises(ConfigError, match=r"key 'run.measure_latency' = False: latency is "
                           r"an objective; drop measure_latency: false, or the latency "
                           r"objective$"):
            SearchPlan.build(request, {})


def test_a_condition_naming_a_misspelt_param_suggests_the_name(tmp_path: Path) -> None:
    p = write(tmp_path, with_params(qr_collisions={"when": {"compresion": "qr"}, "low": 4,
                                                   "high": 8}))
    with pytest.raises(ConfigError, match=r"when\.compresion' = 'qr': a condition must name a "
                       r"param listed above it \(searched or fixed\) \(did you mean "
                       r"'compression'\?\)$"):
        load_space(p)


@pytest.mark.parametrize("name", ["clicks.csv", "clicks.parquet", "log.tsv.gz"])
def test_a_data_file_given_as_the_space_is_told_to_go_to_data(tmp_path: Path,
                                                               name: str) -> None:
    """`--space clicks.csv` said "expected a mapping with keys ..., got str"; a Parquet
    file could not be read at all."""
    path = tmp_path / name
    path.write_text("user,clicked\n1,0\n")
    with pytest.raises(ConfigError, match=r"is a data file: give it with --data"):
        load_space(path)


def test_a_derived_space_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """SearchPlan.save_space writes space.yaml as every study file is written: a write that
    fails leaves the file a resume reads as it was (write_text truncated it first)."""
    import types

    import autoembed.files
    from autoembed.pipeline.plan import SearchPlan

    old = "embedding:\n  dim: [8, 16]\n"
    (tmp_path / "space.yaml").write_text(old)
    plan = types.SimpleNamespace(derived=True, out_dir=tmp_path,
                                 space=types.SimpleNamespace(text="embedding:\n  dim: [4]\n"))

    def fail(src, dst):  # type: ignore[no-untyped-def]
        raise OSError("disk full")

    monkeypatch.setattr(autoembed.files.os, "replace", fail)
    with pytest.raises(OSError):
        SearchPlan.save_space(plan)  # type: ignore[arg-type]
    assert (tmp_path / "space.yaml").read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["space.yaml"]
