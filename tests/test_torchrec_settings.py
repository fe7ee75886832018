"""TorchRec table settings and topologies: plain values, checked without TorchRec installed."""

from __future__ import annotations

import pytest

from autoembed.errors import ConfigError
from autoembed.torchrec.settings import (
    INSTALL,
    RankTopology,
    TorchRecTable,
    table_settings,
)


def test_a_setting_reads_its_own_name_and_module() -> None:
    t = TorchRecTable("model.sparse_arch.ebc.t_cat_0", optimizer="adam", embedding_dim=64)
    assert (t.module, t.table) == ("model.sparse_arch.ebc", "t_cat_0")
    assert t.as_dict() == {"name": "model.sparse_arch.ebc.t_cat_0", "embedding_dim": 64,
                           "optimizer": "adam"}


@pytest.mark.parametrize(("kw", "words"), [
    ({"optimizer": "adamw"}, "optimizer' = 'adamw': must be one of"),
    ({"sharding_type": "rows"}, "sharding_type' = 'rows'"),
    ({"num_embeddings": 0}, "num_embeddings' = 0: must be an integer >= 1"),
    ({"data_type": "bf16"}, "data_type' = 'bf16'"),
    ({"cache_load_factor": 0.2}, "set compute_kernel fused_uvm_caching"),
    ({"compute_kernel": "fused_uvm_caching", "cache_load_factor": 1.5}, "(0.0, 1.0]"),
    ({"compute_kernel": "dense", "optimizer": "sgd"}, "compute_kernel dense trains the table"),
])
def test_a_setting_torchrec_cannot_express_is_one_line(kw: dict, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        TorchRecTable("ebc.t", **kw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_settings_from_dicts_name_an_unknown_key_and_a_repeat() -> None:
    got = table_settings({"ebc.a": {"optimizer": "sgd"}, "ebc.b": {}})
    assert [t.name for t in got] == ["ebc.a", "ebc.b"]
    with pytest.raises(ConfigError, match="unknown key 'optimiser' \\(did you mean 'optimizer'"):
        table_settings([{"name": "ebc.a", "optimiser": "sgd"}])
    with pytest.raises(ConfigError, match="'ebc.a' is given twice"):
        table_settings([{"name": "ebc.a"}, {"name": "ebc.a"}])


def test_a_topology_checks_its_numbers() -> None:
    assert RankTopology(world_size=2, batch_size=8).per_host == 2
    with pytest.raises(ConfigError, match="topology.world_size' = 0"):
        RankTopology(world_size=0, batch_size=8)
    with pytest.raises(ConfigError, match="topology.compute_device' = 'tpu'"):
        RankTopology(world_size=1, batch_size=8, compute_device="tpu")


def test_torchrec_missing_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from autoembed.torchrec import lib

    real = importlib.import_module

    def fail(name: str, *a: object) -> object:
        if name == "torchrec":
            raise ImportError("No module named 'torchrec'")
        return real(name, *a)

    monkeypatch.setattr(lib.importlib, "import_module", fail)
    with pytest.raises(ConfigError) as e:
        lib.require()
    assert INSTALL in str(e.value) and "\n" not in str(e.value)
    assert lib.available() is False
