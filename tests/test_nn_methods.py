"""robe, tt and hot_cold as `autoembed.nn` layers and through `autoembed.apply` (issue 16).

Lookups against references written here (ROBE offsets from the pure-Python splitmix64, TT
rows by explicit sums of core products, hot ids by a dictionary); bags against torch's
embedding_bag over the decoded table; bytes against the config's layout rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed import nn as ae
from autoembed.compression import hot_cold_shapes, param_bytes, robe_shapes, tt_shapes
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.nn.hashing import hash_id_reference


def _robe_ref(arr: list[float], i: int, dim: int, block: int, hash_seed: int) -> list[float]:
    m, blocks = len(arr), -(-dim // block)
    seed = hash_id_reference(0, 1 << 63, hash_seed)  # field 0's seed
    pos = [(hash_id_reference(i * blocks + c, m, seed) + j) % m
           for c in range(blocks) for j in range(block)]
    return [arr[p] for p in pos[:dim]]


def test_robe_layer_rows_match_the_paper() -> None:
    torch.manual_seed(0)
    emb = ae.Embedding(1000, 6, compression="robe", robe_size=41, robe_block=4, hash_seed=9)
    assert emb.store.weight.shape == (41,)
    arr = emb.store.weight.detach().tolist()
    ids = torch.tensor([[0, 7], [999, 123]])
    got = emb(ids)
    for b in range(2):
        for k in range(2):
            want = _robe_ref(arr, int(ids[b, k]), 6, 4, 9)
            assert got[b, k].tolist() == pytest.approx(want, abs=0)
    # share of the table's values: ceil(0.01 x 6000) = 60
    assert ae.Embedding(1000, 6, compression="robe", robe_size=0.01).store.weight.shape == (60,)


def test_robe_layer_gradient_is_dense_on_the_read_values() -> None:
    torch.manual_seed(1)
    emb = ae.Embedding(100, 4, compression="robe", robe_size=29, robe_block=3)
    emb(torch.tensor([5])).sum().backward()
    g = emb.store.weight.grad
    assert g is not None and not g.is_sparse
    want = [0.0] * 29
    blocks, seed = 2, hash_id_reference(0, 1 << 63, 0)
    pos = [(hash_id_reference(5 * blocks + c, 29, seed) + j) % 29
           for c in range(blocks) for j in range(3)][:4]
    for p in pos:
        want[p] += 1.0
    assert g.tolist() == want


def test_tt_layer_rows_are_core_products() -> None:
    torch.manual_seed(2)
    emb = ae.Embedding(50, 12, compression="tt", tt_rank=2)  # rows (4, 4, 4), dim (2, 2, 3)
    st = emb.store
    c0, c1, c2 = (c.detach().double().tolist() for c in (st.core0, st.core1, st.core2))
    r, (d1, d2, d3) = 2, (2, 2, 3)
    for i in (0, 17, 49):
        i1, rem = divmod(i, 16)
        i2, i3 = divmod(rem, 4)
        want = [sum(c0[i1][k1 * r + a] * c1[i2][a * d2 * r + k2 * r + b] * c2[i3][b * d3 + k3]
                    for a in range(r) for b in range(r))
                for k1 in range(d1) for k2 in range(d2) for k3 in range(d3)]
        assert emb(torch.tensor(i)).double().tolist() == pytest.approx(want, rel=1e-5, abs=1e-7)
    # initialised as torch's layer: entries of variance about 1
    big = ae.Embedding(4096, 16, compression="tt", tt_rank=4).weight.detach()
    assert 0.7 < float(big.var()) < 1.4


def test_hot_cold_layer_rows_by_dictionary_and_bags() -> None:
    torch.manual_seed(3)
    hot = [2, 30, 77]
    bag = ae.EmbeddingBag(100, 4, mode="mean", compression="hot_cold", hot_share=0.03,
                          hash_buckets=5, hash_seed=4, hot_ids=hot)
    w = bag.store.weight
    assert w.shape == (3 + 5, 4) and bag.store.hot_ids.tolist() == hot
    table = bag.weight  # decoded [V, D]
    for i in range(100):
        row = hot.index(i) if i in hot else 3 + hash_id_reference(i, 5, 4)
        assert torch.equal(table[i], w[row])
    flat, offsets = torch.tensor([30, 5, 77, 9, 2]), torch.tensor([0, 2])
    assert torch.allclose(bag(flat, offsets), F.embedding_bag(flat, table, offsets, mode="mean"))
    with pytest.raises(ConfigError, match="built for 3"):
        ae.Embedding(100, 4, compression="hot_cold", hot_share=0.03, hash_buckets=5,
                     hot_ids=[1, 2])


@pytest.mark.parametrize("compression", ["robe", "tt"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_computed_bags_match_embedding_bag_of_the_decoded_table(
    compression: str, mode: str
) -> None:
    torch.manual_seed(4)
    kw = {"robe_size": 200} if compression == "robe" else {"tt_rank": 3}
    bag = ae.EmbeddingBag(300, 8, mode=mode, compression=compression, **kw)
    table = bag.weight
    flat, offsets = torch.tensor([1, 299, 5, 5, 42, 7]), torch.tensor([0, 3, 3])  # one empty
    psw = torch.rand(6) if mode == "sum" else None
    want = F.embedding_bag(flat, table, offsets, mode=mode, per_sample_weights=psw)
    assert torch.allclose(bag(flat, offsets, psw), want, atol=1e-6)
    two_d = torch.tensor([[1, 299], [5, 42]])
    assert torch.allclose(bag(two_d), F.embedding_bag(two_d, table, mode=mode), atol=1e-6)


class Users(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.item = nn.EmbeddingBag(5000, 16, mode="sum")
        self.head = nn.Linear(16, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.item(ids))


@pytest.mark.parametrize(("compression", "kw", "shapes", "state"), [
    ("robe", {"robe_size": 0.01}, robe_shapes(800), 0),
    ("tt", {"tt_rank": 4}, tt_shapes(5000, 16, 4), 0),
    ("hot_cold", {"hot_share": 0.01, "hash_buckets": 100},
     hot_cold_shapes(5000, 16, 0.01, 100), 8 * 50),
])
def test_apply_builds_what_the_config_prices(
    compression: str, kw: dict[str, object], shapes: object, state: int
) -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("item", 5000, compression=compression),),  # type: ignore[arg-type]
                          dim=16, **kw)  # type: ignore[arg-type]
    hot = {"item": np.arange(1000, 1050)} if compression == "hot_cold" else None
    model = autoembed.apply(Users(), cfg, hot_sets=hot)
    store = model.item.store
    assert sum(p.nbytes for p in store.parameters()) == param_bytes(shapes, 4)  # type: ignore[arg-type]
    assert sum(b.nbytes for b in store.buffers()) == state
    if hot is not None:
        assert store.hot_ids.tolist() == list(range(1000, 1050))
    out = model(torch.tensor([[3, 1020, 4999]]))
    out.sum().backward()
    assert out.shape == (1, 1)


def test_apply_refuses_a_shared_robe_array() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("item", 5000, compression="robe"),), dim=16,
                          robe_shared=True)
    with pytest.raises(ConfigError, match="'robe_shared' = True") as e:
        autoembed.apply(Users(), cfg)
    assert "\n" not in str(e.value)


def test_meta_build_apply_materialize_keeps_the_hot_set() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("item", 5000, compression="hot_cold"),), dim=16,
                          hot_share=0.01, hash_buckets=100)
    with torch.device("meta"):
        model = Users()
    autoembed.apply(model, cfg, hot_sets={"item": np.arange(7, 57)})
    autoembed.materialize(model, "cpu")
    assert model.item.store.hot_ids.tolist() == list(range(7, 57))
    assert torch.isfinite(model(torch.tensor([[8, 9000 % 5000]]))).all()


V = 216


def _representable(compression: str) -> tuple[dict[str, object], torch.Tensor]:
    """A [216, 8] table the method holds exactly, built from its definition here (216 =
    6^3 rows: TT pads nothing)."""
    torch.manual_seed(5)
    v, d = V, 8
    if compression == "hash":  # ids sharing a bucket share a row
        rows = torch.randn(13, d)
        return {"hash_buckets": 13}, rows[[hash_id_reference(i, 13, 0) for i in range(v)]]
    if compression == "qr":  # q[i // m] * r[i % m]
        q, r = torch.randn(22, d), torch.randn(10, d)
        return {"qr_collisions": 10}, q[torch.arange(v) // 10] * r[torch.arange(v) % 10]
    if compression == "mixed_dim":  # rank 4
        return {"dim": 4}, torch.randn(v, 4) @ torch.randn(4, d)
    if compression == "tt":  # TT ranks <= 2: a tt layer's own decoded table
        return {"tt_rank": 2}, ae.Embedding(v, d, compression="tt", tt_rank=2).weight.detach()
    if compression == "robe":  # read from an array of 120 values
        src = ae.Embedding(v, d, compression="robe", robe_size=120, robe_block=4)
        return {"robe_size": 120, "robe_block": 4}, src.weight.detach()
    # hot_cold: hot rows anything, cold ids in a bucket share a row
    hot = [3, 50, 199]
    cold = torch.randn(7, d)
    w = cold[[hash_id_reference(i, 7, 0) for i in range(v)]]
    w[hot] = torch.randn(3, d)
    return {"hot_share": 3 / V, "hash_buckets": 7}, w


@pytest.mark.parametrize("compression", ["hash", "qr", "mixed_dim", "tt", "robe", "hot_cold"])
def test_apply_from_trained_reproduces_a_representable_table(compression: str) -> None:
    kw, w = _representable(compression)
    dim = kw.pop("dim", None)
    comp = "none" if compression == "mixed_dim" else compression
    tkw = {"dim": dim} if dim else {}
    cfg = EmbeddingConfig(tables=(TableConfig("item", V, compression=comp, **tkw),),  # type: ignore[arg-type]
                          dim=8, **kw)  # type: ignore[arg-type]

    class Trained(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.item = nn.Embedding(V, 8)
            self.item.weight.data.copy_(w)

    hot = {"item": np.array([3, 50, 199])} if compression == "hot_cold" else None
    model = autoembed.apply(Trained(), cfg, hot_sets=hot, from_trained=True)
    assert type(model.item).__module__ == "autoembed.nn"
    assert torch.allclose(model.item.weight, w, atol=1e-4), compression
    fresh = autoembed.apply(Trained(), cfg, hot_sets=hot)  # without: random, far from w
    assert not torch.allclose(fresh.item.weight, w, atol=1e-1)
