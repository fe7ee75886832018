"""placement host_cached on a user's own model: autoembed.nn layers and autoembed.apply."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed import nn as ae
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.models.optim import ROWWISE_ADAGRAD_EPS, RowWiseAdagrad

V, D, B, L = 300, 8, 16, 5
LR, DENSE_LR = 0.1, 0.05


class Seed(nn.Module):
    """The seed article's pattern: nn.Embedding + mean + nn.Linear, a scalar loss."""

    def __init__(self, vocab: int = V) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, D)
        self.lin = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((self.lin(self.emb(x).mean(1)).squeeze(-1) - y) ** 2).mean()


def cached(factor: float = 0.3, **kw: object) -> EmbeddingConfig:
    settings: dict = {"table_optimizer": "rowwise_adagrad", "dense_optimizer": "sgd", **kw}
    return EmbeddingConfig(tables=(TableConfig("emb", V, pooling_factor=L),), dim=D,
                           placement="host_cached", cache_load_factor=factor, lr=LR,
                           dense_lr=DENSE_LR, batch_size=B, **settings)


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, V, (B, L), generator=g), torch.randn(B, generator=g))
            for _ in range(n)]


def reference_steps(w: torch.Tensor, lin: nn.Linear,
                    data: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[list[float], ...]:
    """The same training written out: a device [V, D] table under row-wise Adagrad (FBGEMM's:
    s_r += mean(g_r^2); w_r -= lr g_r / (sqrt(s_r) + eps), rows of the batch), SGD on the
    Linear. Returns (losses, table, row sums)."""
    w = w.clone().requires_grad_(True)
    a, b = lin.weight.detach().clone().requires_grad_(True), lin.bias.detach().clone()
    b.requires_grad_(True)
    s = torch.zeros(V)
    losses = []
    for x, y in data:
        loss = ((F.linear(w[x].mean(1), a, b).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            rows = torch.unique(x)
            g = w.grad[rows]
            s[rows] += g.square().mean(1)
            w[rows] -= LR * g / (s[rows].sqrt() + ROWWISE_ADAGRAD_EPS).unsqueeze(1)
            for p in (a, b):
                p -= DENSE_LR * p.grad
                p.grad = None
            w.grad = None
    return losses, w.detach(), s


def train(model: nn.Module, opt: object, data: list[tuple[torch.Tensor, torch.Tensor]]
          ) -> list[float]:
    """The user's own loop."""
    out = []
    for x, y in data:
        loss = model(x, y)
        loss.backward()
        opt.step()  # type: ignore[attr-defined]
        opt.zero_grad()  # type: ignore[attr-defined]
        out.append(float(loss.detach()))
    return out


def test_a_host_cached_table_trains_in_a_plain_loop_like_a_device_table() -> None:
    torch.manual_seed(0)
    model = Seed()
    w0 = model.emb.weight.detach().clone()
    ref_losses, ref_w, ref_s = reference_steps(w0, model.lin, batches(20))
    autoembed.apply(model, cached())
    table = model.emb.store.table
    assert table.cache_rows == 90 and torch.equal(model.emb.weight, w0)  # ceil(0.3 x 300)
    opt = autoembed.build_optimizer(model, cached())
    losses = train(model, opt, batches(20))
    assert table.stats.evictions > 0  # rows left the cache and came back
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    # state_dict holds the full table, flushed from the cache first, and its row state
    sd = model.state_dict()
    assert torch.allclose(sd["emb.store.table.host.host_weight"], ref_w, atol=1e-5)
    assert torch.allclose(sd["emb.store.table.host.host_sum"], ref_s, rtol=1e-5)


def test_state_dict_round_trip_is_exact_and_training_continues() -> None:
    torch.manual_seed(1)
    model = autoembed.apply(Seed(), cached())
    opt = autoembed.build_optimizer(model, cached())
    data = batches(14, seed=3)
    train(model, opt, data[:8])
    again = autoembed.apply(Seed(), cached())
    again.load_state_dict(model.state_dict())
    assert torch.equal(again.emb.weight, model.emb.weight)  # the full tables
    opt2 = autoembed.build_optimizer(again, cached())
    opt2.load_state_dict(opt.state_dict())  # replaces its state tensors: re-bound on use
    assert train(again, opt2, data[8:]) == train(model, opt, data[8:])
    assert torch.equal(again.emb.weight, model.emb.weight)
    a, b = again.emb.store.table, model.emb.store.table
    assert torch.equal(a.slot_row, b.slot_row)  # the same rows evicted: the cache restored too


def block(n: int) -> int:
    return -(-n // 512) * 512


def test_real_bytes_equal_the_estimate_and_the_host_bytes_by_hand() -> None:
    cfg = cached(0.3)
    x = batches(1)[0]
    est = autoembed.estimate_model(lambda: autoembed.apply(Seed(), cfg), x,
                                   optimizer="rowwise_adagrad")
    c = 90  # ceil(0.3 x 300) rows on the device
    # parameters: cache [75, 8] fp32 + Linear weight [1, 8] + bias [1]
    assert est.parameters == block(c * D * 4) + block(D * 4) + block(4)
    # host: the table, its row-wise sum (fp32 a row), slot_of_row and use_count (int64 a row)
    assert est.host_bytes == V * D * 4 + V * 4 + 2 * V * 8
    assert est.cache[0].cache_rows == c and est.cache[0].rows == V
    # real tensors after apply and two steps of the user's loop
    model = autoembed.apply(Seed(), cfg)
    opt = autoembed.build_optimizer(model, cached(dense_optimizer="adagrad"))
    train(model, opt, batches(2))
    assert est.parameters == sum(block(p.untyped_storage().nbytes())
                                 for p in model.parameters())
    # Adagrad's 0-dim step counters stay on the host on any device (torch.optim makes them
    # with torch.tensor, as a non-capturable, non-fused group's): not device state
    state = sum(block(v.untyped_storage().nbytes()) for o in opt.all
                for s in o.state.values() for k, v in s.items()
                if not (k == "step" and isinstance(o, torch.optim.Adagrad)))
    assert est.optimizer_state == state  # row sums of the cache [90] + Adagrad's on the Linear
    table = model.emb.store.table
    assert est.host_bytes == sum(t.numel() * t.element_size()
                                 for t in table.host_tensors().values())
    # the device side is priced as a 90-row sparse table plus 3 int64 a slot
    twin = Seed(c)
    twin.emb = nn.Embedding(c, D, sparse=True)
    dev = autoembed.estimate_model(lambda: twin, (x[0] % c, x[1]), optimizer="rowwise_adagrad")
    assert est.allocated_peak == dev.allocated_peak + 3 * block(c * 8)


def test_an_optimizer_of_the_users_own_is_refused_unless_bound() -> None:
    model = autoembed.apply(Seed(), cached())
    x, y = batches(1)[0]
    opt = torch.optim.Adagrad(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="trains only bound to its optimizer") as e:
        model(x, y)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="built for optimizer 'rowwise_adagrad' cannot be "
                       "stepped by Adagrad"):
        model.emb.store.bind_optimizer(opt)
    with torch.no_grad():
        model(x, y)  # evaluation needs no binding
    own = RowWiseAdagrad([model.emb.store.table.cache_weight], lr=LR)
    model.emb.store.bind_optimizer(own)  # the documented way: bind it by hand
    model(x, y).backward()
    own.step()
    with pytest.raises(ConfigError, match="trains only bound"):
        copy.deepcopy(model)(x, y)  # a copy's cache is in no optimizer
    with pytest.raises(ConfigError, match="table 'emb' is host_cached for table_optimizer "
                       r"'rowwise_adagrad' \(its host state has that shape\), not 'adagrad'"):
        autoembed.build_optimizer(autoembed.apply(Seed(), cached()),
                                  cached(table_optimizer="adagrad"))


@pytest.mark.parametrize(("kw", "says"), [
    ({"cache_rows": V + 1}, f"cache_rows = {V + 1}: the cache holds 1 to {V} of"),
    ({"cache_rows": 10, "table_optimizer": "adam"}, "table_optimizer = 'adam' cannot step"),
    ({"cache_rows": 10, "compression": "qr"}, "compression 'qr' with placement host_cached"),
    ({"cache_rows": 10, "cache_policy": "fifo"}, "cache_policy = 'fifo': use lru or lfu"),
    ({"placement": "disk"}, "placement 'disk': use device or host_cached"),
    ({"cache_rows": 10, "mode": "max"}, "mode 'max' with placement host_cached"),
    ({"cache_rows": 10, "compression": "hash", "hash_buckets": 50, "dynamic_rows": 5},
     "dynamic_rows = 5: rows for new ids extend an unhashed table"),
])
def test_bad_layer_settings_are_one_line_config_errors(kw: dict, says: str) -> None:
    kw = {"placement": "host_cached", **kw}
    with pytest.raises(ConfigError) as e:
        ae.EmbeddingBag(V, D, **kw)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_hashed_host_cached_bag_reads_the_rows_the_hash_layer_reads() -> None:
    cached_bag = ae.EmbeddingBag(V, D, mode="sum", compression="hash", hash_buckets=50,
                                 placement="host_cached", cache_rows=40, table_optimizer="sgd")
    plain = ae.EmbeddingBag(V, D, mode="sum", compression="hash", hash_buckets=50)
    with torch.no_grad():
        plain.store.weight.copy_(cached_bag.store.table.host_weight)  # [50, D]
        x = torch.randint(0, V, (8, 6))  # up to 48 distinct rows: read around the cache
        assert torch.allclose(cached_bag(x), plain(x))
        assert torch.allclose(cached_bag(x[:2]), plain(x[:2]))  # through the cache


def test_half_precision_and_meta_build() -> None:
    from autoembed.models.user_step import UserStep

    x = batches(1)[0]
    est = autoembed.estimate_model(lambda: autoembed.apply(Seed(), cached()), x,
                                   optimizer="rowwise_adagrad", precision="bf16")
    # bf16 rows on the host, the row-wise sums fp32, two int64 a row
    assert est.host_bytes == V * D * 2 + V * 4 + 2 * V * 8
    step = UserStep.build(autoembed.apply(Seed(), cached()), precision="bf16",
                          optimizer="rowwise_adagrad")
    for b in batches(3):
        step.step(b)
    table = step.model.emb.store.table
    assert table.host_weight.dtype == table.cache_weight.dtype == torch.bfloat16
    assert est.host_bytes == table.host_bytes()
    with torch.device("meta"):
        model = Seed()
    autoembed.materialize(autoembed.apply(model, cached()))
    assert model.emb.store.table.cache_weight.device.type == "cpu"
    assert bool((model.emb.store.table.slot_row == -1).all())  # an empty cache
    with torch.device("meta"):
        bare = autoembed.apply(Seed(), cached())
    bare.to_empty(device="cpu")  # torch's own call: no values, so the cache starts empty
    assert bool((bare.emb.store.table.slot_row == -1).all())
    losses = train(model, autoembed.build_optimizer(model, cached()), batches(1) * 20)
    assert losses[-1] < losses[0] / 2  # it trains from the materialized table


def test_dynamic_rows_give_new_ids_their_own_rows() -> None:
    emb = ae.Embedding(10, D, placement="host_cached", cache_rows=12, dynamic_rows=4,
                       table_optimizer="sgd")
    with torch.no_grad():
        out = emb(torch.tensor([[3, 100, 200, 100]]))
    w = emb.store.table.host_weight  # [10 + 4, D]: the known rows, then one row per new id
    assert w.shape == (14, D) and torch.equal(emb.weight, w[:10])  # weight: ids 0..9
    assert torch.equal(out[0, 0], w[3]) and torch.equal(out[0, 1], w[10])
    assert torch.equal(out[0, 2], w[11]) and torch.equal(out[0, 3], w[10])


class TiedLM(nn.Module):
    """A language model whose output layer is tied to its token table."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.head = nn.Embedding(V, D), nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.tok(x))


def hashed_cached(buckets: int) -> dict:
    """A host_cached config hashing TiedLM's table into `buckets` rows, half of them cached."""
    return {"placement": "host_cached", "table_optimizer": "sgd", "batch_size": 2,
            "seq_len": 4, "cache_load_factor": 0.5,
            "tables": [{"name": "tok", "vocab_size": V, "compression": "hash",
                        "hash_buckets": buckets}]}


@pytest.mark.parametrize("meta", [False, True])
def test_a_hashed_host_cached_table_decodes_to_one_row_per_id(meta: bool) -> None:
    """Built with values or on meta and materialized (before: apply on meta raised torch's
    NotImplementedError for nonzero, copying the untied head from a cache with no values)."""
    from autoembed.nn.hashing import hash_id_reference

    with torch.device("meta" if meta else "cpu"):
        model = TiedLM()
    autoembed.apply(model, hashed_cached(5), untie=True)
    if meta:
        autoembed.materialize(model)
    buckets = model.tok.store.table.host_weight  # [5, D]
    want = buckets[[hash_id_reference(i, 5, 0) for i in range(V)]]
    assert torch.equal(model.tok.full_weight(), want)
    assert torch.equal(model.head.weight, want)  # the untied head: V logits, not 5


def test_a_tied_model_applied_host_cached_with_untie_prices() -> None:
    est = autoembed.estimate_model(lambda: autoembed.apply(TiedLM(), hashed_cached(100),
                                                           untie=True),
                                   torch.randint(0, V, (2, 4)), optimizer="sgd")
    # by hand: the untied head [V, D] and the cache's 50 of 100 bucket rows, fp32, 512 B blocks
    assert est.parameters == -(-V * D * 4 // 512) * 512 + -(-50 * D * 4 // 512) * 512
