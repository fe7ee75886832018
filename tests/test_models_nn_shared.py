"""The built-in models' compressed tables are the `autoembed.nn` storages (issue 14: one
implementation): same classes, same parameter names as before (old state_dicts load), and
the built-in pooled lookup of one id equals the public layer's row of it."""

from __future__ import annotations

import pytest
import torch

from autoembed import nn as ae
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.models import build_model

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
    assert {k: tuple(v.shape) for k, v in table.state_dict().items()} == OLD_STATE[compression]
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
    layer.store.load_state_dict(state)
    ids = torch.tensor([0, 1, 6, 7, 100, 101, 4321, V - 1])
    pooled = table(ids.view(-1, 1))  # one id per bag: the mean is the row
    assert torch.allclose(pooled, layer(ids), atol=1e-6)
