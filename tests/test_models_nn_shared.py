"""The built-in models' tables are the `autoembed.nn` storages (issue 14: one
implementation): same classes, same parameter names as before (old state_dicts load), and
the built-in pooled lookup of one id equals the public layer's row of it. The layers' old
names for the hash and mixed_dim weights still load."""

from __future__ import annotations

import pytest
import torch

from autoembed import nn as ae
from autoembed.batch import PAD_ID
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.models import build_model
from autoembed.models.quantize import quantize
from autoembed.nn.hashing import hash_id_reference

V, D = 5000, 16
SETTINGS: dict[str, dict[str, object]] = {
    "qr": {"qr_collisions": 7, "qr_operation": "mult"},
    "robe": {"robe_size": 997, "robe_block": 4, "hash_seed": 3},
    "tt": {"tt_rank": 4},
    "hot_cold": {"hot_share": 0.01, "hash_buckets": 100, "hash_seed": 5},
}
# the names (and shapes) the built-in tables have always had: written out, not computed
OLD_STATE: dict[str, dict[str, tuple[int, ...]]] = {
    "qr": {"q_weight": (715, 16), "r_weight": (7, 16)},
    "robe": {"weight": (997,)},
    "tt": {"core0": (18, 2 * 4), "core1": (18, 4 * 2 * 4), "core2": (16, 4 * 4)},
    "hot_cold": {"hot_ids": (50,), "weight": (150, 16)},
}


def _table(compression: str) -> torch.nn.Module:
    cfg = EmbeddingConfig(tables=(TableConfig("item", V),), dim=D, compression=compression,
                          pooling="mean", dense_layers=(8,), **SETTINGS[compression])  # type: ignore[arg-type]
    return build_model(cfg).table("item")


@pytest.mark.parametrize("compression", list(SETTINGS))
def test_built_in_table_is_the_nn_storage_and_loads_an_old_state_dict(compression: str) -> None:
    table = _table(compression)
    assert isinstance(table, ae.COMPRESSIONS[compression])
    old = {k: torch.arange(torch.Size(s).numel()).reshape(s) for k, s in
           OLD_STATE[compression].items()}
    if compression == "tt":  # 5000 rows as 18 x 18 x 16 (>= 5000), dim 16 as 2 x 2 x 4
        assert (table.row_factors, table.dim_factors) == ((18, 18, 16), (2, 2, 4))  # type: ignore[attr-defined]
    state = table.state_dict()
    # beside the old names, the seed that maps ids to rows where one does (robe, hot_cold)
    assert int(state.pop("hash_seed", -1)) == SETTINGS[compression].get("hash_seed", -1)
    assert {k: tuple(v.shape) for k, v in state.items()} == OLD_STATE[compression]
    table.load_state_dict({k: v.to(table.state_dict()[k].dtype) for k, v in old.items()})
    for k, v in old.items():
        assert torch.equal(table.state_dict()[k], v.to(table.state_dict()[k].dtype))


@pytest.mark.parametrize("compression", list(SETTINGS))
def test_built_in_lookup_equals_the_public_layers_row(compression: str) -> None:
    torch.manual_seed(0)
    table = _table(compression)
    layer = ae.Embedding(V, D, compression=compression, **SETTINGS[compression])  # type: ignore[arg-type]
    state = table.state_dict()
    if compression == "hot_cold":  # the layer's hot set: given, not ids 0..hot-1
        state["hot_ids"] = torch.arange(0, V, 100)
        table.set_hot_ids(state["hot_ids"])  # type: ignore[operator]
    layer.load_state_dict({k if k == "hash_seed" else f"store.{k}": v for k, v in state.items()})
    ids = torch.tensor([0, 1, 6, 7, 100, 101, 4321, V - 1])
    pooled = table(ids.view(-1, 1))  # one id per bag: the mean is the row
    assert torch.allclose(pooled, layer(ids), atol=1e-6)


# none / hash / mixed_dim: the built-in PlainTable is the nn plain storage. The names and
# shapes its tables have always had, written out: V rows; 100 buckets; V rows of dim 8 and
# the projection 8 -> 16 (nn.Linear's weight is [out, in])
PLAIN: dict[str, tuple[dict[str, object], dict[str, object], dict[str, tuple[int, ...]]]] = {
    # compression: (config keys, the layer's settings, the table's state)
    "none": ({}, {}, {"weight": (V, D)}),
    "hash": ({"hash_buckets": 100, "hash_seed": 7}, {"hash_buckets": 100, "hash_seed": 7},
             {"weight": (100, D)}),
    "mixed_dim": ({}, {"small_dim": 8}, {"weight": (V, 8), "proj.weight": (D, 8)}),
}


def _plain_table(compression: str, task: str = "ctr") -> torch.nn.Module:
    keys, _, _ = PLAIN[compression]
    dim = 8 if compression == "mixed_dim" else None
    text = {"task": "text", "num_classes": 3, "seq_len": 4} if task == "text" else {}
    cfg = EmbeddingConfig(tables=(TableConfig("item", V, dim=dim),), dim=D,
                          compression=compression, pooling="mean", dense_layers=(8,),
                          **keys, **text)  # type: ignore[arg-type]
    return build_model(cfg).table("item")


@pytest.mark.parametrize("compression", list(PLAIN))
def test_built_in_plain_table_is_the_nn_storage_with_its_old_names(compression: str) -> None:
    table = _plain_table(compression)
    assert isinstance(table, ae.COMPRESSIONS["none"])  # _Plain: none, hash and mixed_dim
    state, saved = PLAIN[compression][2], table.state_dict()
    assert int(saved.pop("hash_seed", -1)) == PLAIN[compression][0].get("hash_seed", -1)
    assert {k: tuple(v.shape) for k, v in saved.items()} == state
    old = {k: torch.randn(s) for k, s in state.items()}
    table.load_state_dict(old)
    assert all(torch.equal(table.state_dict()[k], v) for k, v in old.items())


@pytest.mark.parametrize("compression", list(PLAIN))
def test_built_in_plain_lookup_equals_the_public_layers_row(compression: str) -> None:
    torch.manual_seed(0)
    table = _plain_table(compression)
    layer = ae.Embedding(V, D, compression=compression, **PLAIN[compression][1])  # type: ignore[arg-type]
    # the same names: one layout (the seed beside the layer's store, as beside the table)
    layer.load_state_dict({k if k == "hash_seed" else f"store.{k}": v
                           for k, v in table.state_dict().items()})
    ids = torch.tensor([0, 1, 6, 7, 100, 101, 4321, V - 1])
    w = table.state_dict()["weight"]
    if compression == "hash":  # the rows by the hash's reference, not by the code under test
        want = w[[hash_id_reference(int(i), 100, 7) for i in ids]]
    else:
        want = w[ids]
    if compression == "mixed_dim":
        want = want @ table.state_dict()["proj.weight"].T
    assert torch.allclose(layer(ids), want, atol=1e-6)
    assert torch.allclose(table(ids.view(-1, 1)), want, atol=1e-6)  # one id per bag


def test_text_plain_table_keeps_its_padding_row_at_zero() -> None:
    torch.manual_seed(0)
    table = _plain_table("none", "text")
    assert table.pads_in_place and not table.weight[PAD_ID].any()
    assert table.weight[PAD_ID + 1].abs().sum() > 0


# config-built models whose ids a seed maps to rows (the wide part hashes as its table)
SEEDED = {
    "hash": {"compression": "hash", "hash_buckets": 13, "wide": True},
    "robe": {"compression": "robe", "robe_size": 64},
    "hot_cold": {"compression": "hot_cold", "hot_share": 0.1, "hash_buckets": 5},
    "host_cached": {"compression": "hash", "hash_buckets": 13, "placement": "host_cached",
                    "table_optimizer": "sgd", "batch_size": 4, "cache_load_factor": 1.0},
}


@pytest.mark.parametrize("keys", list(SEEDED.values()), ids=list(SEEDED))
def test_a_built_models_state_dict_loads_only_under_its_hash_seed(keys: dict) -> None:
    """A built model's state_dict (a checkpoint's, model.pt) records each hashed table's
    seed as an applied layer's does: under another seed, where each id would read another
    id's row, it is refused naming both; under the same seed (other weights drawn) it gives
    the saved model's outputs; saved before the entry, it loads unchecked."""
    def model(hash_seed: int, seed: int = 0) -> torch.nn.Module:
        return build_model(EmbeddingConfig(tables=(TableConfig("item", 40),), dim=4,
                                           dense_layers=(4,), pooling="mean",
                                           hash_seed=hash_seed, seed=seed, **keys))

    first = model(1)
    saved = first.state_dict()
    want_keys = ["tables.item.hash_seed", *(["wide.item.hash_seed"] if keys.get("wide") else [])]
    assert sorted(k for k in saved if k.endswith("hash_seed")) == want_keys
    for strict in (True, False):
        with pytest.raises(ConfigError, match=r"'tables\.item\.hash_seed' is 1, and this table "
                                              "hashes ids with hash_seed 2.*hash_seed 1$"):
            model(2).load_state_dict(saved, strict=strict)
    ids = {"item": torch.tensor([[0], [7], [23], [39]])}
    same = model(1, seed=5)
    same.load_state_dict(saved)
    with torch.no_grad():
        assert torch.equal(same(ids), first(ids))
        if keys["compression"] == "hash" and "placement" not in keys:  # by the reference
            rows = saved["tables.item.weight"][[hash_id_reference(i, 13, 1)
                                                for i in (0, 7, 23, 39)]]
            assert torch.equal(same.table("item")(ids["item"]), rows)
    model(2).load_state_dict({k: v for k, v in saved.items() if not k.endswith("hash_seed")})


# state_dicts of `autoembed.nn` layers saved before hash and mixed_dim named their stored
# table `weight`: written by hand in the old format
class _User(torch.nn.Module):
    def __init__(self, compression: str, **settings: object) -> None:
        super().__init__()
        self.emb = ae.Embedding(300, D, compression=compression, **settings)  # type: ignore[arg-type]
        self.head = torch.nn.Linear(D, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


def test_layer_loads_a_state_dict_with_the_old_hash_and_mixed_dim_names() -> None:
    head = {"head.weight": torch.randn(2, D), "head.bias": torch.randn(2)}
    buckets = torch.randn(64, D)
    model = _User("hash", hash_buckets=64)
    model.load_state_dict({"emb.store.bucket_weight": buckets, **head})  # strict
    ids = torch.tensor([[0, 5, 299], [17, 64, 3]])
    rows = buckets[torch.tensor([[hash_id_reference(int(i), 64) for i in r] for r in ids])]
    assert torch.equal(model.emb(ids), rows)
    assert torch.equal(model.state_dict()["emb.store.weight"], buckets)

    small, proj = torch.randn(300, 8), torch.randn(D, 8)
    model = _User("mixed_dim", small_dim=8)
    model.load_state_dict({"emb.store.small_weight": small, "emb.store.proj.weight": proj,
                           **head})
    assert torch.allclose(model.emb(ids), small[ids] @ proj.T, atol=1e-6)


def test_served_layer_loads_old_packed_rows() -> None:
    torch.manual_seed(0)
    served = quantize(_User("hash", hash_buckets=64).eval(), "int8")
    # int8 rows of 16 values, align16(4 + 16) = 32 bytes each: fp16 scale 1.0, fp16 bias b
    # (row b), values 0..15, so row b reads b + (0, 1, ..., 15). An old save named them
    # after bucket_weight.
    b = torch.arange(64, dtype=torch.float16)
    packed = torch.zeros((64, 32), dtype=torch.uint8)
    packed[:, 0:2] = torch.ones(64, dtype=torch.float16).view(torch.uint8).view(64, 2)
    packed[:, 2:4] = b.view(torch.uint8).view(64, 2)
    packed[:, 4:20] = torch.arange(16, dtype=torch.uint8)
    head = {k: v for k, v in served.state_dict().items() if k.startswith("head.")}
    served.load_state_dict({"emb.store.bucket_weight_packed": packed, **head})  # strict
    ids = torch.tensor([0, 5, 299, 17])
    bucket = torch.tensor([hash_id_reference(int(i), 64) for i in ids], dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(served.emb(ids), bucket[:, None] + torch.arange(16.0))
