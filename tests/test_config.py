from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoembed.config import (
    EmbeddingConfig,
    TableConfig,
    config_from_dict,
    load_config,
    param_specs,
    save_config,
)
from autoembed.errors import ConfigError


def seed_text(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        task="text",
        tables=(TableConfig("tokens", 1_000_000),),
        dim=300,
        seq_len=512,
        batch_size=64,
        num_classes=4,
        dense_layers=(),
        pooling="naive",
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def test_yaml_and_json_round_trip(tmp_path: Path) -> None:
    c = EmbeddingConfig(
        tables=(TableConfig("user", 1000, 1.0), TableConfig("genre", 20, 2.5)),
        compression="qr",
        qr_collisions=8,
        qr_operation="concat",
        precision="bf16_master",
        table_optimizer="rowwise_adagrad",
        dense_optimizer="adagrad",
        dense_layers=(32, 16),
        data={"name": "synthetic-ctr", "rows": 1000},
    )
    for suffix in (".yaml", ".json"):
        p = save_config(c, tmp_path / f"c{suffix}")
        back = load_config(p)
        assert back == c
        assert back.data == {"name": "synthetic-ctr", "rows": 1000}
    assert config_from_dict(json.loads(c.to_json())) == c


def test_frozen() -> None:
    c = EmbeddingConfig()
    with pytest.raises(AttributeError):
        c.dim = 8  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"dim": 0}, "dim"),
        ({"tables": (TableConfig("a", -5),)}, "vocab_size"),
        ({"compression": "hash"}, "hash_buckets"),
        ({"compression": "zip"}, "compression"),
        ({"compression": "qr", "qr_collisions": 2_000_000}, "qr_collisions"),
        ({"mixed_dim_alpha": 1.5}, "mixed_dim_alpha"),
        ({"dense_optimizer": "sparse_adam"}, "dense_optimizer"),
        ({"dense_optimizer": "rowwise_adagrad"}, "dense_optimizer"),
        ({"serving": "int4", "dim": 301}, "int4"),
        ({"precision": "fp16", "adam_eps": 1e-8}, "adam_eps"),
        ({"batch_size": 0}, "batch_size"),
        # text may have several tables (one text field each), but not one inside another
        ({"tables": (TableConfig("a", 10), TableConfig("a.b", 10))}, "sits inside table 'a'"),
        ({"tables": (TableConfig("a..b", 10),)}, "module path"),
        ({"tables": (TableConfig("a", 10, hash_buckets=1.5),)}, "tables[0].hash_buckets"),
        ({"tables": (TableConfig("a", 10, compression="hash"),)}, "tables[0].hash_buckets"),
        ({"tables": (TableConfig("a", 10, compression="shared"),)}, "tables[0].compression"),
        ({"tables": (TableConfig("a", 10, compression="qr", qr_collisions=10),)},
         "tables[0].qr_collisions"),
    ],
)
def test_invalid_values_name_key_and_value(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        seed_text(**kw)
    assert needle in str(e.value)


def test_unknown_key_suggests_the_fix() -> None:
    with pytest.raises(ConfigError, match="did you mean 'precision'"):
        config_from_dict({"presicion": "fp16"}, "x.yaml")
    with pytest.raises(ConfigError, match="tables\\[0\\].vocab"):
        config_from_dict({"tables": [{"name": "a", "vocab_size": 3, "vocab": 4}]})


def test_fp16_gets_a_safe_adam_eps() -> None:
    assert seed_text(precision="fp16").effective_adam_eps == 1e-4
    assert seed_text(precision="fp32").effective_adam_eps == 1e-8


def test_mixed_dim_power_rule_by_hand() -> None:
    # d_i = round(D * (p_i / p_max) ** alpha), p = 1/V: V=1000 -> 64; V=1e6 -> 64*0.001**0.5=2.02
    # -> clamped to mixed_dim_min 4; V=4e3 -> 64 * 0.25**0.5 = 32.
    c = EmbeddingConfig(
        tables=(TableConfig("a", 1000), TableConfig("b", 1_000_000), TableConfig("c", 4000)),
        dim=64,
        compression="mixed_dim",
        mixed_dim_alpha=0.5,
    ).resolve()
    assert [t.dim for t in c.tables] == [64, 4, 32]
    shapes = {s.name: s.shape for s in param_specs(c)}
    assert shapes["tables.b.proj.weight"] == (64, 4)
    assert "tables.a.proj.weight" not in shapes


def test_param_specs_by_hand() -> None:
    c = seed_text(compression="qr", qr_collisions=4, qr_operation="concat", dense_layers=(16,))
    shapes = [(s.name, s.shape, s.kind) for s in param_specs(c)]
    assert shapes == [
        ("tables.tokens.q_weight", (250_000, 150), "table"),
        ("tables.tokens.r_weight", (4, 150), "table"),
        ("tower.0.weight", (16, 300), "dense"),
        ("tower.0.bias", (16,), "dense"),
        ("tower.1.weight", (4, 16), "dense"),
        ("tower.1.bias", (4,), "dense"),
    ]


def test_config_module_imports_without_torch_or_yaml() -> None:
    code = (
        "import sys, autoembed.config, autoembed.memory, autoembed.budget;"
        "bad=[m for m in ('torch','yaml','ray','mlflow','optuna') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_number_with_an_exponent_and_no_dot_is_a_float_in_json_and_yaml(tmp_path) -> None:
    """JSON writes 2e-05 for 0.00002 (an exported --format json file) and people write
    `lr: 1e-3` in YAML: both are numbers, as JSON and YAML 1.2 read them (PyYAML's YAML
    1.1 resolver alone made them strings, refused as 'must be a number')."""
    from autoembed.config import EmbeddingConfig, load_config, save_config

    cfg = EmbeddingConfig(weight_decay=2e-5, lr=1e-4)
    save_config(cfg, tmp_path / "c.json")
    assert '"weight_decay": 2e-05' in (tmp_path / "c.json").read_text()
    assert load_config(tmp_path / "c.json") == cfg
    (tmp_path / "c.yaml").write_text("config:\n  lr: 1e-3\n  weight_decay: -0E+1\n"
                                     "  tables: [{name: '1e3', vocab_size: 1000}]\n")
    got = load_config(tmp_path / "c.yaml")
    assert (got.lr, got.weight_decay, got.tables[0].name) == (0.001, 0.0, "1e3")


def test_a_data_file_given_as_the_config_is_told_what_a_config_is(tmp_path: Path) -> None:
    """`--config clicks.csv` said only "expected a mapping of config keys, got str"."""
    path = tmp_path / "clicks.csv"
    path.write_text("user,item,clicked\n1,2,0\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "clicks.csv" in str(e.value) and "got str" in str(e.value)
    assert str(e.value).endswith("; give a config such as an exported best.yaml")


@pytest.mark.parametrize("space", ["tiny.yaml", "../examples/text_space.yaml"])
def test_a_search_space_given_as_the_config_says_it_is_one(space: str) -> None:
    """`--config search_spaces/tiny.yaml` said "unknown key 'description'; valid keys: ..."."""
    path = Path(__file__).resolve().parents[1] / "search_spaces" / space
    with pytest.raises(ConfigError, match=r"is a search space, not a config; search it "
                                          r"\(autoembed search --space "):
        load_config(path)
