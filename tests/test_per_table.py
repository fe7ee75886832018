"""Per-table settings (issue 13): each table's own compression, sizes (a count or a share of
its rows), dim and table optimizer; dotted (module-path) table names through YAML, export
and `train`; several tables for the text task."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from autoembed.batch import Batch
from autoembed.config import (
    EmbeddingConfig,
    TableConfig,
    config_from_dict,
    load_config,
    resolved_tables,
    save_config,
)
from autoembed.errors import ConfigError
from autoembed.export import config_from_flat
from autoembed.models import build_model, make_trainer
from autoembed.models.optim import RowWiseAdagrad
from autoembed.trace import estimate


def blk(n: int) -> int:
    return -(-n // 512) * 512  # the CUDA caching allocator's 512 B blocks


def mixed() -> EmbeddingConfig:
    """Three tables, three treatments, under one config whose defaults are none/adam."""
    return EmbeddingConfig(
        tables=(
            # 1% of 10,000 rows -> 100 hash buckets
            TableConfig("user.id", 10_000, compression="hash", hash_buckets=0.01),
            # 50 collisions -> q [100, 16] + r [50, 16], row-wise Adagrad (sparse gradients)
            TableConfig("item.id", 5_000, compression="qr", qr_collisions=50,
                        table_optimizer="rowwise_adagrad"),
            # a narrower table: [30, 8] plus its projection to the common dim, [16, 8]
            TableConfig("cat", 30, dim=8),
        ),
        dim=16, batch_size=64, dense_layers=(32,), table_optimizer="adam",
        dense_optimizer="sgd",
    )


# Hand computation (fp32, 4 B an element, every tensor in 512 B blocks):
USER_W = blk(100 * 16 * 4)  # 6,400 B -> 6,656
ITEM_Q, ITEM_R = blk(100 * 16 * 4), blk(50 * 16 * 4)  # 6,656 and 3,584
CAT_W, CAT_PROJ = blk(30 * 8 * 4), blk(16 * 8 * 4)  # 1,024 and 512
TOWER = blk(32 * 48 * 4) + blk(32 * 4) + blk(1 * 32 * 4) + blk(1 * 4)  # input 3 x 16 = 48
PARAMS = USER_W + ITEM_Q + ITEM_R + CAT_W + CAT_PROJ + TOWER
# Adam: 2 states a table element; row-wise Adagrad: one fp32 a row; SGD (the dense part): 0
STATE = 2 * USER_W + blk(100 * 4) + blk(50 * 4) + 2 * CAT_W
# item.id's sparse gradient: one row (16 fp32 + an int64 index) per lookup, per tensor
ITEM_GRADS = 2 * (blk(64 * 16 * 4) + blk(64 * 8))


def test_resolution_reads_each_tables_own_settings() -> None:
    user, item, cat = resolved_tables(mixed())
    assert (user.compression, user.hash_buckets, user.hashed) == ("hash", 100, (100, 100))
    assert (item.compression, item.qr_collisions, item.table_optimizer) == (
        "qr", 50, "rowwise_adagrad")
    assert item.sparse and not user.sparse
    assert (cat.compression, cat.dim, cat.table_optimizer, cat.hash_buckets) == (
        "none", 8, "adam", None)
    # a QR share s keeps at most s of the rows in the quotient table: m = ceil(1 / s)
    cfg = EmbeddingConfig(tables=(TableConfig("a", 1000, compression="qr", qr_collisions=0.1),))
    assert resolved_tables(cfg)[0].qr_collisions == 10


def test_mixed_tables_priced_against_a_hand_computation() -> None:
    est = estimate(mixed())
    assert est.parameters == PARAMS == 26_112
    assert est.optimizer_state == STATE == 16_384
    rows = {t.name: t for t in est.tables}
    assert (rows["user.id"].rows, rows["user.id"].parameters) == (100, USER_W)
    assert rows["user.id"].optimizer_state == 2 * USER_W
    assert rows["user.id"].gradients == USER_W  # adam: a dense gradient
    assert (rows["item.id"].rows, rows["item.id"].parameters) == (150, ITEM_Q + ITEM_R)
    assert rows["item.id"].optimizer_state == blk(400) + blk(200)
    assert rows["item.id"].gradients == ITEM_GRADS
    assert (rows["cat"].rows, rows["cat"].dim, rows["cat"].parameters) == (30, 8, CAT_W)
    # the traced step sees the same tensors (Adam's 0-dim step counters are host tensors,
    # not priced) and a peak within the 5% the two methods agree to
    traced = estimate(mixed(), method="traced")
    assert traced.parameters == PARAMS
    assert traced.optimizer_state == STATE
    assert abs(traced.device_total - est.device_total) / est.device_total < 0.05


def _batch(cfg: EmbeddingConfig) -> Batch:
    g = torch.Generator().manual_seed(0)
    feats = {t.name: torch.randint(0, t.vocab_size, (cfg.batch_size, 1), generator=g)
             for t in cfg.tables}
    return Batch(feats, torch.randint(0, 2, (cfg.batch_size,), generator=g).float())


def test_mixed_tables_build_as_priced() -> None:
    cfg = mixed()
    tr = make_trainer(cfg, "cpu")
    tr.step([_batch(cfg)])
    shapes = {n: tuple(p.shape) for n, p in tr.model.named_parameters()}
    assert shapes == {
        "tables.user.id.weight": (100, 16),
        "tables.item.id.q_weight": (100, 16), "tables.item.id.r_weight": (50, 16),
        "tables.cat.weight": (30, 8), "tables.cat.proj.weight": (16, 8),
        "tower.0.weight": (32, 48), "tower.0.bias": (32,),
        "tower.1.weight": (1, 32), "tower.1.bias": (1,),
    }
    user = tr.model.table("user.id")
    assert user.buckets == 100  # ids are hashed into the 100 rows
    params = sum(blk(p.numel() * p.element_size()) for p in tr.model.parameters())
    state = sum(blk(v.numel() * v.element_size()) for o in tr.optimizers.all
                for st in o.state.values() for v in st.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0)
    assert (params, state) == (PARAMS, STATE)
    # one torch optimizer per table optimizer: adam for user.id and cat, row-wise for item.id
    kinds = [type(o).__name__ for o in tr.optimizers.tables]
    assert kinds == ["Adam", "RowWiseAdagrad"] and type(tr.optimizers.dense).__name__ == "SGD"
    item = tr.model.table("item.id")
    assert isinstance(tr.optimizers.table_for(item.q_weight), RowWiseAdagrad)
    assert item.q_weight.grad is not None and item.q_weight.grad.is_sparse
    assert user.weight.grad is not None and not user.weight.grad.is_sparse


def test_old_global_settings_are_the_defaults() -> None:
    """A table without its own settings takes the config's: the same model as before."""
    old = EmbeddingConfig(tables=(TableConfig("a", 900), TableConfig("b", 90)), dim=8,
                          compression="hash", hash_buckets=100)
    same = EmbeddingConfig(
        tables=(TableConfig("a", 900, compression="hash", hash_buckets=100),
                TableConfig("b", 90, compression="hash", hash_buckets=100)), dim=8)
    assert estimate(old) == estimate(same)
    shapes = [tuple(p.shape) for p in build_model(old).parameters()]
    assert shapes[:2] == [(100, 8), (90, 8)]


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"hash_buckets": 1.0}, "tables[0].hash_buckets' = 1.0"),
        ({"hash_buckets": 0}, "tables[0].hash_buckets' = 0"),
        ({"qr_collisions": 1}, "tables[0].qr_collisions' = 1"),
        ({"compression": "qr", "qr_collisions": 500}, "below the vocab size (500)"),
        ({"compression": "mixed"}, "tables[0].compression' = 'mixed'"),
        ({"table_optimizer": "lion"}, "tables[0].table_optimizer' = 'lion'"),
        ({"compression": "qr", "qr_operation": "concat", "dim": 5}, "even dim"),
    ],
)
def test_bad_table_settings_name_the_key(table: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"tables": [{"name": "a", "vocab_size": 500, **table}]}, "c.yaml")
    assert needle in str(e.value) and str(e.value).startswith("c.yaml: ")


def test_host_cached_tables_follow_their_own_settings() -> None:
    with pytest.raises(ConfigError, match="tables\\[1\\].table_optimizer' = 'adam'"):
        EmbeddingConfig(
            tables=(TableConfig("a", 900), TableConfig("b", 90, table_optimizer="adam")),
            placement="host_cached", table_optimizer="sgd", batch_size=8)
    cfg = EmbeddingConfig(
        tables=(TableConfig("a", 1000, compression="hash", hash_buckets=0.5),
                TableConfig("b", 90)),
        placement="host_cached", table_optimizer="sgd", batch_size=8, dim=8,
        cache_load_factor=0.5)
    est = estimate(cfg)
    assert [(c.name, c.rows, c.cache_rows) for c in est.cache] == [("a", 500, 250), ("b", 90, 45)]


def test_text_with_two_tables_concatenates_the_fields() -> None:
    cfg = EmbeddingConfig(task="text", tables=(TableConfig("title", 50), TableConfig("body", 80)),
                          num_classes=3, seq_len=6, dim=4, dense_layers=(8,), batch_size=5)
    model = build_model(cfg)
    assert model.tower[0].weight.shape == (8, 2 * 4)  # [title ; body] -> 8
    g = torch.Generator().manual_seed(1)
    ids = {"title": torch.randint(1, 50, (5, 6), generator=g),
           "body": torch.randint(1, 80, (5, 6), generator=g)}
    want = torch.cat([model.table("title")(ids["title"]), model.table("body")(ids["body"])], 1)
    torch.testing.assert_close(model.embed(ids), want)
    assert model(ids).shape == (5, 3)


# ===================================================================== dotted names end to end


def _csv(path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 600
    user = rng.integers(0, 40, size=n)
    item = rng.integers(0, 12, size=n)
    label = ((user % 3 == 0) ^ (item % 2 == 0)).astype(int)
    pd.DataFrame({"user.id": user.astype(str), "item.cat": item.astype(str),
                  "label": label}).to_csv(path, index=False)
    return path


def _dotted(data: dict[str, object]) -> EmbeddingConfig:
    return EmbeddingConfig(
        tables=(TableConfig("user.id", 41, compression="hash", hash_buckets=0.5),
                TableConfig("item.cat", 13, dim=4, table_optimizer="sgd")),
        dim=8, batch_size=32, dense_layers=(8,), table_optimizer="adam", data=data,
    )


def test_dotted_names_round_trip_yaml_export_and_train(tmp_path: Path) -> None:
    from autoembed.cli import main
    from autoembed.training import train

    data = {"name": str(_csv(tmp_path / "clicks.csv")), "categorical": ["user.id", "item.cat"]}
    cfg = _dotted(data)
    # YAML and JSON
    assert load_config(save_config(cfg, tmp_path / "c.yaml")) == cfg
    assert load_config(save_config(cfg, tmp_path / "c.json")) == cfg
    assert config_from_dict(config_from_flat(cfg.flat_params(), "t")) == cfg
    # export from a study's records: pareto.json's member and trials.csv's flat columns
    sdir = tmp_path / "runs" / "s"
    sdir.mkdir(parents=True)
    member = {"trial": 0, "config": cfg.to_dict(), "device_total": 1, "allocated_peak": 1,
              "metrics": {"quality": 0.6, "memory": 1}, "measured_allocated_peak": None}
    (sdir / "pareto.json").write_text(json.dumps({
        "study": "s", "budget_bytes": 10**9, "members": [member], "best": 0, "pick": "knee",
        "objectives": [{"name": "quality", "direction": "maximize"},
                       {"name": "memory", "direction": "minimize"}]}))
    flat = {f"config.{k}": v for k, v in cfg.flat_params().items()}
    with (sdir / "trials.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["trial", "status", *flat])
        w.writeheader()
        w.writerow({"trial": 1, "status": "complete", **flat})
    for pick, name in (("trial:0", "front.yaml"), ("trial:1", "flat.yaml")):
        out = tmp_path / name
        assert main(["export", "--study", "s", "--runs-dir", str(tmp_path / "runs"),
                     "--pick", pick, "--out", str(out)]) == 0
        got = load_config(out)
        assert got.tables == cfg.tables, pick
    # train the exported config on the CSV whose columns the names are
    res = train(load_config(tmp_path / "front.yaml"), out_dir=tmp_path / "t", max_steps=6,
                checkpoint_every=3)
    assert res.status == "complete" and res.steps == 6
    state = torch.load(tmp_path / "t" / "model.pt", weights_only=True)
    assert tuple(state["tables.user.id.weight"].shape) == (21, 8)  # ceil(0.5 x 41) buckets
    assert tuple(state["tables.item.cat.proj.weight"].shape) == (8, 4)


@pytest.mark.parametrize("pooling", ["mean", "naive"])
@pytest.mark.parametrize("op", ["mult", "add", "concat"])
def test_projected_qr_tables_traced_and_analytic_agree(pooling: str, op: str) -> None:
    """A QR table narrower than the common dim is combined, then projected: the analytic
    peak stays within the 5% the two methods agree to on every other config."""
    cfg = EmbeddingConfig(
        tables=(TableConfig("q", 200_000, 3.0, compression="qr", qr_collisions=0.01, dim=32,
                            qr_operation=op),
                TableConfig("h", 300_000, 2.0, compression="hash", hash_buckets=0.05, dim=128)),
        dim=64, batch_size=2048, dense_layers=(64,), pooling=pooling)
    an = estimate(cfg).allocated_peak
    tr = estimate(cfg, method="traced").allocated_peak
    assert abs(an - tr) / tr < 0.05, (an, tr)


# ===================================================================== spaces and rules


def _space(tables: object) -> dict[str, object]:
    return {"data": {"name": "synthetic-ctr", "vocab_sizes": [200_000, 3_000, 40]},
            "base": {"dense_layers": [8]}, "tables": tables,
            "params": {"dim": {"choices": [8, 16]}}}


def test_space_tables_select_by_name_or_rows_and_reach_the_priced_config() -> None:
    from autoembed.pipeline.priced_data import build_priced_data as build_workload
    from autoembed.pipeline.priced_data import data_spec_for
    from autoembed.space import parse_space

    space = parse_space(_space([
        {"min_rows": 1000, "compression": "hash", "hash_buckets": 0.01},
        {"name": "f1", "hash_buckets": 64, "table_optimizer": "sgd"},  # later entry wins
        {"name": "f2", "dim": 4},
    ]), "s.yaml")
    spec, stand_in = data_spec_for(space)
    cfg = build_workload(spec, stand_in, space.tables).priced(space.config_for({"dim": 8}))
    f0, f1, f2 = resolved_tables(cfg)
    assert (f0.compression, f0.hash_buckets) == ("hash", 2_000)  # 1% of 200,000 rows
    assert (f1.compression, f1.hash_buckets, f1.table_optimizer) == ("hash", 64, "sgd")
    assert (f2.compression, f2.dim, f2.hash_buckets) == ("none", 4, None)
    assert parse_space(space.to_dict(), "again").tables == space.tables


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        ([{"name": "f0", "hash_buckets": 1.5}], "key 'tables[0].hash_buckets' = 1.5: must be"),
        ([{"min_rows": 0, "dim": 8}], "key 'tables[0].min_rows' = 0: must be an integer >= 1"),
        ([{"name": "f0", "min_rows": 5, "dim": 8}], "by `name` or by `min_rows`"),
        ([{"name": "f0", "hash_bukets": 9}], "unknown key 'tables[0].hash_bukets' (did you "
         "mean 'hash_buckets'?)"),
        ([{"name": "f0", "compression": "hash"}], "hash_buckets"),  # no buckets anywhere
        ([{"name": "f0"}], "sets nothing"),
        ({"f0": {}}, "key 'tables'"),
    ],
)
def test_bad_space_tables_name_the_key(tables: object, needle: str) -> None:
    from autoembed.space import parse_space

    with pytest.raises(ConfigError) as e:
        parse_space(_space(tables), "s.yaml")
    assert needle in str(e.value) and "search space 's.yaml'" in str(e.value)


@pytest.mark.parametrize(
    ("field", "bad"),
    [("dim", 0), ("hash_seed", -1), ("lr", 0.0), ("momentum", 1.5), ("cache_load_factor", 0.0),
     ("precision", "fp8"), ("dense_optimizer", "sparse_adam"), ("wide", 1)],
)
def test_one_rule_words_the_config_and_the_space_alike(field: str, bad: object) -> None:
    """A field's rule is declared once: the config and the space loader refuse the same
    value with the same words."""
    from autoembed.config import FIELD_RULES
    from autoembed.space import parse_space

    with pytest.raises(ConfigError) as by_config:
        EmbeddingConfig(**{field: bad})  # type: ignore[arg-type]
    spec: dict[str, object] = {"choices": [bad]}
    if FIELD_RULES[field].kind in ("int", "float"):
        spec = {"low": bad, "high": bad}
    with pytest.raises(ConfigError) as by_space:
        parse_space({**_space(None), "params": {field: spec}}, "s.yaml")
    text = FIELD_RULES[field].text
    assert str(by_config.value) == f"config key '{field}' = {bad!r}: {text}"
    assert str(by_space.value).endswith(f" = {bad!r}: {text}")


def test_cli_flags_come_from_the_declared_fields(tmp_path: Path) -> None:
    from autoembed.pricing.price import config_flags, fields_of_flags

    assert {"batch", "seq", "grad_accum", "optimizer", "cache_policy"} <= config_flags()
    assert fields_of_flags({"batch": 8, "optimizer": "sparse_adam", "seq": 3}) == {
        "batch_size": 8, "seq_len": 3, "table_optimizer": "sparse_adam",
        "dense_optimizer": "adam"}
    # an explicit --dense-optimizer wins over the alias
    assert fields_of_flags({"optimizer": "sgd", "dense_optimizer": "adam"})[
        "dense_optimizer"] == "adam"


def test_a_tables_own_setting_wins_over_the_spaces() -> None:
    from autoembed.space import TableRule, apply_table_rules

    rules = (TableRule(None, 100, {"compression": "hash", "hash_buckets": 0.5, "dim": 4}),)
    cfg = EmbeddingConfig(tables=(TableConfig("a", 1000, hash_buckets=10, dim=8),
                                  TableConfig("b", 50)), dim=8)
    a, b = apply_table_rules(rules, cfg).tables
    assert (a.compression, a.hash_buckets, a.dim) == ("hash", 10, 8)  # a's own values kept
    assert b == TableConfig("b", 50)  # below min_rows: untouched


def test_text_with_two_tables_traced_and_analytic_agree() -> None:
    cfg = EmbeddingConfig(
        task="text",
        tables=(TableConfig("title", 50_000), TableConfig("body.tok", 200_000, dim=32)),
        num_classes=4, seq_len=128, dim=64, dense_layers=(32,), batch_size=256)
    an = estimate(cfg).allocated_peak
    tr = estimate(cfg, method="traced").allocated_peak
    assert abs(an - tr) / tr < 0.05, (an, tr)


def test_a_space_may_search_hash_buckets_as_a_share() -> None:
    from autoembed.space import parse_space

    share = {"type": "float", "low": 0.001, "high": 0.1, "log": True}
    raw = {**_space(None), "params": {"compression": {"choices": ["hash"]},
                                      "hash_buckets": share}}
    space = parse_space(raw, "s.yaml")
    p = space.params[1]
    assert (p.kind, p.low, p.high) == ("float", 0.001, 0.1)
    cfg = space.config_for({"compression": "hash", "hash_buckets": 0.01})
    assert cfg.hash_buckets == 0.01
    raw["params"] = {"hash_buckets": {"type": "float", "low": 0.01, "high": 1.0}}
    with pytest.raises(ConfigError, match="params.hash_buckets.high' = 1.0: must be an integer"):
        parse_space(raw, "s.yaml")
