"""A rewrite that is faithful or says no (issue 26): `autoembed.apply`, `autoembed.quantize` and
the `autoembed.nn` layers against torch's own layers on the same weights, or against
references written here (the pure-Python splitmix64 for hashed rows, sums of torch's
nn.Embedding rows where torch's CPU EmbeddingBag is known to be wrong: pytorch#190063 for
scale_grad_by_freq, trailing entries after include_last_offset's last offset in a mean)."""

from __future__ import annotations

import copy
import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed import nn as ae
from autoembed.config import EmbeddingConfig, TableConfig, save_config
from autoembed.errors import ConfigError, DataError
from autoembed.models.hot_cold import save_hot_sets
from autoembed.nn.hashing import hash_id_reference

V, D = 40, 6


def hashed(name: str, vocab: int, buckets: int, dim: int = D, **kw: Any) -> EmbeddingConfig:
    return EmbeddingConfig(tables=(TableConfig(name, vocab, compression="hash",
                                               hash_buckets=buckets),), dim=dim, **kw)


class LM(nn.Module):
    """Token table tied to the output layer (GPT's head)."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.tok(ids)))


IDS = torch.tensor([[1, 7, 39, 7], [0, 22, 5, 13]])


# ------------------------------------------------------------------------ tied heads
@pytest.mark.parametrize("copy_of", [copy.deepcopy,
                                     lambda m: autoembed.quantize(m, "int8")],
                         ids=["deepcopy", "quantize"])
def test_a_copy_of_a_tied_model_reads_its_own_table(copy_of: Any) -> None:
    torch.manual_seed(0)
    model = autoembed.apply(LM(), hashed("tok", V, 13))
    twin = copy_of(model)
    with torch.no_grad():
        before = twin(IDS)
        model.tok.store.weight.zero_()  # the original's table only
        after = twin(IDS)
    assert torch.equal(before, after) and before.abs().sum() > 0
    if copy_of is copy.deepcopy:  # by hand: the copy's own rows, hashed by the reference
        w = twin.tok.store.weight.detach()
        table = w[[hash_id_reference(i, 13) for i in range(V)]]
        want = torch.tanh(table[IDS]) @ table.T
        torch.testing.assert_close(after, want)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None  # the copy does not keep the original alive


def test_state_dict_round_trip_of_a_tied_model_reads_its_own_table() -> None:
    torch.manual_seed(1)
    a = autoembed.apply(LM(), hashed("tok", V, 13))
    b = autoembed.apply(LM(), hashed("tok", V, 13))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        want = b(IDS)
        a.tok.store.weight.zero_()
        assert torch.equal(b(IDS), want)


SEEDED = [("hash", {"hash_buckets": 13}), ("robe", {"robe_size": 50}),
          ("hot_cold", {"hot_share": 0.2, "hash_buckets": 5}),
          ("hash", {"hash_buckets": 13, "placement": "host_cached", "cache_rows": 5})]


@pytest.mark.parametrize(("compression", "kw"), SEEDED)
def test_a_state_dict_loads_only_under_the_hash_seed_it_was_saved_with(compression: str,
                                                                        kw: dict) -> None:
    """Under another seed the saved rows would be read by other ids: refused, naming both
    seeds; under the same seed, and from a state_dict without the entry, it loads."""
    def layer(seed: int) -> nn.Module:
        return nn.Sequential(ae.Embedding(V, D, compression=compression, hash_seed=seed, **kw))

    saved = layer(1).state_dict()
    for strict in (True, False):
        with pytest.raises(ConfigError, match="'0.hash_seed' is 1, and this layer hashes ids "
                                              "with hash_seed 2.*with hash_seed 1"):
            layer(2).load_state_dict(saved, strict=strict)
    same = layer(1)
    same.load_state_dict(saved)
    old = {k: v for k, v in saved.items() if k != "0.hash_seed"}  # saved before the entry
    layer(2).load_state_dict(old)
    if compression == "hash" and "placement" not in kw:  # by hand: the reference's buckets
        w = saved["0.store.weight"]
        want = w[[hash_id_reference(i, 13, 1) for i in range(V)]]
        torch.testing.assert_close(same(torch.arange(V)), want)


def test_estimate_model_prices_an_applied_tied_model() -> None:
    model = autoembed.apply(LM(), hashed("tok", V, 13))
    est = autoembed.estimate_model(model, IDS, optimizer="sgd",
                                   loss=lambda out, _: out.pow(2).mean())
    # by hand: the hashed table (13 x D fp32) is the model's only parameter: one 512 B block
    assert est.parameters == 512


# ------------------------------------------------------------------------ quantize
def test_quantize_packs_applied_hot_cold_layers() -> None:
    torch.manual_seed(2)
    cfg = EmbeddingConfig(tables=(TableConfig("tok", V, compression="hot_cold"),), dim=D,
                          hot_share=0.25, hash_buckets=5)
    model = autoembed.apply(LM(), cfg).eval()
    served = autoembed.quantize(model, "int8")
    w = model.tok.store.weight.detach()
    step = float((w.max(1).values - w.min(1).values).max()) / 255
    with torch.no_grad():
        got, want = served.tok(IDS), model.tok(IDS)
    assert (got - want).abs().max() <= step
    assert [n for n, _ in served.named_buffers()] == ["tok.store.hot_ids",
                                                      "tok.store.weight_packed"]


@pytest.mark.parametrize(("compression", "kw"), [("tt", {"tt_rank": 2}),
                                                 ("robe", {"robe_size": 64})])
def test_quantize_refuses_what_it_cannot_pack_in_one_line(compression: str, kw: dict) -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("tok", V, compression=compression),), dim=D, **kw)
    model = autoembed.apply(LM(), cfg)
    with pytest.raises(ConfigError, match=f"serving 'int8': 'tok.store' cannot be packed "
                       f"\\({compression}") as e:
        autoembed.quantize(model, "int8")
    assert "\n" not in str(e.value)


# ------------------------------------------------------------- torch's options, honoured
def _twins(cls: type, kw: dict) -> tuple[nn.Module, nn.Module]:
    """torch's layer and autoembed's with the same options and the same weights."""
    torch.manual_seed(3)
    theirs = getattr(nn, cls.__name__)(V, D, **kw)
    ours = cls(V, D, **kw)
    with torch.no_grad():
        ours.store.weight.copy_(theirs.weight)
    return theirs, ours


def _grad(p: torch.Tensor) -> torch.Tensor:
    g = p.grad
    assert g is not None
    return g.to_dense() if g.is_sparse else g


EMBEDDING_OPTIONS = [{"max_norm": 1.0}, {"max_norm": 0.7, "norm_type": 1.0},
                     {"scale_grad_by_freq": True}, {"sparse": True}, {"padding_idx": 7},
                     {"padding_idx": -1, "max_norm": 1.0, "scale_grad_by_freq": True}]


@pytest.mark.parametrize("kw", EMBEDDING_OPTIONS)
def test_embedding_options_as_torch(kw: dict) -> None:
    theirs, ours = _twins(ae.Embedding, kw)
    pos = torch.arange(D, dtype=torch.float32)
    for layer in (theirs, ours):
        (layer(IDS) * pos).sum().backward()
    torch.testing.assert_close(ours(IDS), theirs(IDS))
    torch.testing.assert_close(_grad(ours.store.weight), _grad(theirs.weight))
    torch.testing.assert_close(ours.store.weight, theirs.weight)  # max_norm renormalised
    assert ours.store.weight.grad.is_sparse == kw.get("sparse", False)


FLAT = torch.tensor([1, 0, 2, 2, 5, 0, 0, 9, 2])
OFFSETS = torch.tensor([0, 3, 5, 7])
ENDS = torch.tensor([0, 3, 5, 7, 9])  # include_last_offset: the last ends the last bag


def offsets_for(kw: dict) -> torch.Tensor:
    """(torch's CPU bag leaves its gradient uninitialised for entries after the last offset:
    those are compared with a reference below, not with torch)"""
    return ENDS if kw.get("include_last_offset") else OFFSETS
BAG_OPTIONS = [{"mode": "sum"}, {"mode": "max"}, {"mode": "max", "padding_idx": 0},
               {"mode": "mean", "padding_idx": 0}, {"mode": "mean", "max_norm": 1.0},
               {"mode": "sum", "sparse": True}, {"mode": "sum", "include_last_offset": True},
               {"mode": "max", "include_last_offset": True}]


@pytest.mark.parametrize("kw", BAG_OPTIONS)
def test_embedding_bag_options_as_torch(kw: dict) -> None:
    theirs, ours = _twins(ae.EmbeddingBag, kw)
    psw = torch.rand(FLAT.shape) if kw["mode"] == "sum" else None
    pos = torch.arange(D, dtype=torch.float32)
    offsets = offsets_for(kw)
    for layer in (theirs, ours):
        (layer(FLAT, offsets, psw) * pos).sum().backward()
    torch.testing.assert_close(ours(FLAT, offsets, psw), theirs(FLAT, offsets, psw))
    torch.testing.assert_close(_grad(ours.store.weight), _grad(theirs.weight))
    if not kw.get("include_last_offset"):
        two_d = FLAT[:8].view(2, 4)
        torch.testing.assert_close(ours(two_d), theirs(two_d))


def test_bag_scale_grad_by_freq_and_trailing_entries_as_torch_documents() -> None:
    """Where torch 2.13's CPU EmbeddingBag is wrong, the reference is nn.Embedding rows."""
    theirs, ours = _twins(ae.EmbeddingBag, {"mode": "sum", "scale_grad_by_freq": True})
    rows = nn.Embedding(V, D, scale_grad_by_freq=True)
    with torch.no_grad():
        rows.weight.copy_(theirs.weight)
    got = ours(FLAT, OFFSETS)
    want = torch.stack([rows(FLAT[a:b]).sum(0) for a, b in [(0, 3), (3, 5), (5, 7), (7, 9)]])
    got.sum().backward()
    rows(FLAT).sum().backward()  # one batch: every id's count over all the bags
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(_grad(ours.store.weight), _grad(rows.weight))
    # include_last_offset: the last offset ends the last bag, in a mean too
    _, mean = _twins(ae.EmbeddingBag, {"mode": "mean", "include_last_offset": True})
    w = mean.store.weight.detach()
    want = torch.stack([w[FLAT[a:b]].mean(0) for a, b in [(0, 3), (3, 5), (5, 7)]])
    torch.testing.assert_close(mean(FLAT, OFFSETS), want)


class Options(nn.Module):
    """A user's model whose tables carry torch's options."""

    def __init__(self, emb: dict, bag: dict) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D, **emb)
        self.bag = nn.EmbeddingBag(V, D, **bag)

    def forward(self, ids: torch.Tensor, flat: torch.Tensor,
                offsets: torch.Tensor) -> torch.Tensor:
        return self.emb(ids).sum(1) + self.bag(flat, offsets)[: ids.shape[0]]


def _identity(names: tuple[str, ...]) -> EmbeddingConfig:
    """Hashed into as many buckets as ids: no id shares a row, the rows are the module's."""
    return EmbeddingConfig(tables=tuple(TableConfig(n, V, compression="hash", hash_buckets=V)
                                        for n in names), dim=D)


@pytest.mark.parametrize(("emb", "bag"), [
    ({"max_norm": 1.0}, {"mode": "max", "padding_idx": 0}),
    ({"scale_grad_by_freq": True, "padding_idx": 2}, {"mode": "sum", "include_last_offset": True}),
    ({"sparse": True}, {"mode": "sum", "sparse": True}),
])
def test_apply_keeps_torch_options(emb: dict, bag: dict) -> None:
    torch.manual_seed(4)
    theirs = Options(emb, bag)
    ours = autoembed.apply(copy.deepcopy(theirs), _identity(("emb", "bag")), from_trained=True)
    assert isinstance(ours.emb, ae.Embedding) and isinstance(ours.bag, ae.EmbeddingBag)
    args = (IDS, FLAT, offsets_for(bag))
    torch.testing.assert_close(ours(*args), theirs(*args))
    for m in (theirs, ours):
        m(*args).pow(2).sum().backward()
    for name in ("emb", "bag"):
        torch.testing.assert_close(_grad(getattr(ours, name).store.weight),
                                   _grad(getattr(theirs, name).weight))
    if emb.get("sparse"):  # the user's SparseAdam steps the rewritten tables
        torch.optim.SparseAdam(list(ours.parameters())).step()


def test_apply_keeps_include_last_offset_shape_and_frozen_tables() -> None:
    class Frozen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding.from_pretrained(torch.randn(V, D), freeze=True)
            self.bag = nn.EmbeddingBag(V, D, include_last_offset=True).requires_grad_(False)

    model = autoembed.apply(Frozen(), EmbeddingConfig(tables=(
        TableConfig("emb", V, compression="qr", qr_collisions=4),
        TableConfig("bag", V, compression="hash", hash_buckets=11)), dim=D), from_trained=True)
    assert not any(p.requires_grad for p in model.parameters())
    assert model.bag(FLAT, OFFSETS).shape == (3, D)  # 4 offsets, the last one ends bag 3


@pytest.mark.parametrize("table", [{"compression": "hash", "hash_buckets": 11}, {"dim": D // 2}])
def test_apply_refuses_to_turn_a_frozen_pretrained_table_into_random_rows(table: dict) -> None:
    pretrained = torch.randn(V, D) * 0.1 + 0.5

    def model() -> nn.Module:
        return nn.Sequential(nn.Embedding.from_pretrained(pretrained, freeze=True),
                             nn.Embedding(V, D))

    cfg = {"tables": [{"name": "0", "vocab_size": V, **table}]}
    with pytest.raises(ConfigError, match="'0' is frozen .* from_trained=True") as e:
        autoembed.apply(model(), cfg)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="'0' is frozen"):  # priced (fake tensors) as trained
        autoembed.estimate_model(lambda: autoembed.apply(model(), cfg), IDS)
    fitted = autoembed.apply(model(), cfg, from_trained=True)  # rows near the pretrained ones
    assert abs(float(fitted[0].weight.mean()) - float(pretrained.mean())) < 0.05
    trainable = autoembed.apply(model(), {"tables": [{**cfg["tables"][0], "name": "1"}]})
    assert not isinstance(trainable[1], nn.Embedding)  # a table that trains starts at random
    with torch.device("meta"):  # no values to lose: it starts as any table
        on_meta = nn.Sequential(nn.Embedding(V, D).requires_grad_(False))
    assert not autoembed.apply(on_meta, cfg)[0].weight.requires_grad


@pytest.mark.parametrize(("module", "compression", "says"), [
    (nn.Embedding(V, D, max_norm=1.0), "qr", "max_norm = 1.0 with compression qr"),
    (nn.Embedding(V, D, sparse=True), "robe", "sparse = True with compression robe"),
    (nn.EmbeddingBag(V, D, mode="max"), "qr", "mode = 'max' with compression qr"),
])
def test_apply_refuses_what_it_cannot_honour_naming_option_and_module(
        module: nn.Module, compression: str, says: str) -> None:
    model = nn.Sequential()
    model.add_module("feat", module)
    kw: dict[str, Any] = {"robe_size": 64} if compression == "robe" else {}
    cfg = EmbeddingConfig(tables=(TableConfig("feat", V, compression=compression),), dim=D,
                          **kw)
    with pytest.raises(ConfigError) as e:
        autoembed.apply(model, cfg)
    assert str(e.value).startswith(f"table 'feat' ({type(module).__name__}): {says}")
    assert "\n" not in str(e.value)


def test_layers_refuse_unknown_settings_and_honour_max_norm() -> None:
    with pytest.raises(ConfigError, match="does not take 'hash_bucket' \\(did you mean "
                       "'hash_buckets'\\?\\)"):
        ae.Embedding(V, D, compression="hash", hash_bucket=5)
    emb = ae.Embedding(V, D, max_norm=1.0)
    assert emb(IDS).norm(dim=-1).max() <= 1.0 + 1e-6
    norms = emb.weight.detach().norm(dim=-1)
    assert norms[IDS.unique()].max() <= 1.0 + 1e-6 and norms.max() > 1.0  # only looked-up rows


def test_a_given_weight_frozen_and_its_padding_row_as_torch() -> None:
    w = torch.randn(V, D)  # its padding row is not zero: torch reads it as it is
    kw: dict[str, Any] = {"padding_idx": 1, "_freeze": True}
    ours, theirs = ae.Embedding(V, D, _weight=w.clone(), **kw), nn.Embedding(
        V, D, _weight=w.clone(), **kw)
    torch.testing.assert_close(ours(IDS.clamp(max=1)), theirs(IDS.clamp(max=1)))
    assert not any(p.requires_grad for p in ours.parameters())
    with pytest.raises(ConfigError, match="_weight = \\(40, 6\\) with compression hash"):
        ae.Embedding(V, D, compression="hash", hash_buckets=5, _weight=w)


def test_apply_refuses_a_table_whose_class_has_its_own_forward() -> None:
    class Scaled(nn.Embedding):  # as transformers' scaled word embeddings
        def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002
            return super().forward(input) * 8.0

    class Plain(nn.Embedding):
        pass

    for cls, refused in ((Scaled, True), (Plain, False)):
        model = nn.Sequential()
        model.add_module("feat", cls(V, D))
        if refused:
            with pytest.raises(ConfigError, match="module 'feat' is a Scaled, whose forward is "
                               "its own"):
                autoembed.apply(model, hashed("feat", V, 7))
        else:
            assert isinstance(autoembed.apply(model, hashed("feat", V, 7)).feat, ae.Embedding)


# ------------------------------------------------------------------ shared modules
class Shared(nn.Module):
    """One module under two paths."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.tower = nn.Module()
        self.tower.emb = self.emb

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids) + self.tower.emb(ids)


def test_one_module_under_two_paths_is_one_table_replaced_everywhere() -> None:
    assert [t.name for t in autoembed.tables(Shared())] == ["emb"]
    model = autoembed.apply(Shared(), hashed("emb", V, 8))
    assert isinstance(model.tower.emb, ae.Embedding) and model.tower.emb is model.emb
    assert sum(p.numel() for p in model.parameters()) == 8 * D
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), 2 * model.emb(IDS))
    both = EmbeddingConfig(tables=(TableConfig("emb", V), TableConfig("tower.emb", V,
                                                                      compression="hash",
                                                                      hash_buckets=8)), dim=D)
    with pytest.raises(ConfigError, match="tables 'emb' and 'tower.emb' are one module"):
        autoembed.apply(Shared(), both)


# ------------------------------------------------------------------------------ ids
LAYERS = [("none", {}), ("hash", {"hash_buckets": 7}), ("qr", {"qr_collisions": 4}),
          ("mixed_dim", {"small_dim": 3}), ("robe", {"robe_size": 50}), ("tt", {"tt_rank": 2}),
          ("hot_cold", {"hot_share": 0.2, "hash_buckets": 5}),
          ("hash", {"hash_buckets": 7, "placement": "host_cached", "cache_rows": 7})]


@pytest.mark.parametrize(("compression", "kw"), LAYERS)
@pytest.mark.parametrize("bag", [False, True])
def test_every_compression_checks_ids_as_torch(compression: str, kw: dict, bag: bool) -> None:
    layer = (ae.EmbeddingBag(V, D, mode="sum", compression=compression, **kw) if bag else
             ae.Embedding(V, D, compression=compression, **kw)).eval()
    torch_layer = nn.EmbeddingBag(V, D, mode="sum") if bag else nn.Embedding(V, D)
    with torch.no_grad():
        layer(torch.tensor([[0, V - 1]], dtype=torch.int32))  # int32 is an id dtype
        for bad, says in [(torch.tensor([[1.0, 2.0]]), "ids of dtype torch.float32"),
                          (torch.tensor([[3, -1]]), "id -1 is outside"),
                          (torch.tensor([[3, V]]), f"id {V} is outside \\[0, {V}\\)")]:
            with pytest.raises((RuntimeError, IndexError)):
                torch_layer(bad)  # torch refuses it too
            with pytest.raises(DataError, match=says):
                layer(bad)


@pytest.mark.parametrize(("compression", "kw"), LAYERS)
@pytest.mark.parametrize("bag", [False, True])
def test_the_decoded_padding_row_is_what_the_lookup_reads(compression: str, kw: dict,
                                                          bag: bool) -> None:
    """As torch's nn.Embedding: weight[padding_idx] starts at zero, and F.embedding over
    the weight (a tied head) gives the layer's forward; no gradient reaches a shared row
    through the padding row."""
    cls = ae.EmbeddingBag if bag else ae.Embedding
    layer = cls(V, D, padding_idx=7, compression=compression, **kw)
    ids = torch.arange(V)
    cached = kw.get("placement") == "host_cached"  # it steps only bound to an optimizer
    with torch.no_grad() if cached else torch.enable_grad():
        got = layer(ids.view(-1, 1)) if bag else layer(ids)
        assert torch.equal(F.embedding(ids, layer.weight), got)
    assert torch.equal(layer.weight[7], torch.zeros(D))
    if not cached and compression not in ("none", "mixed_dim"):  # (there: row 7, as torch)
        layer.full_weight()[7].sum().backward()
        assert all(not p.grad.any() for p in layer.parameters() if p.grad is not None)


# --------------------------------------------------------- forms of the public calls
def test_apply_takes_a_config_a_dict_or_a_path_with_its_hot_sets(tmp_path: Path) -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("tok", V, compression="hot_cold"),), dim=D,
                          hot_share=0.1, hash_buckets=5)
    save_hot_sets({"tok": np.array([3, 8, 20, 31])}, tmp_path / "hot_sets.npz")
    path = save_config(cfg, tmp_path / "best.yaml", extra={"hot_sets": "hot_sets.npz"})
    by_path = autoembed.apply(LM(), str(path))
    assert by_path.tok.store.hot_ids.tolist() == [3, 8, 20, 31]
    by_dict = autoembed.apply(LM(), {"tables": [{"name": "tok", "vocab_size": V,
                                                 "compression": "hash", "hash_buckets": 9}],
                                     "dim": D})
    assert by_dict.tok.store.weight.shape == (9, D)
    with pytest.raises(ConfigError, match="config = int: give an EmbeddingConfig, a dict"):
        autoembed.apply(LM(), 3)
    # the built-in model takes the same forms
    tables = [{"name": "f0", "vocab_size": 50}]
    built = autoembed.build_model({"tables": tables, "dim": 4, "dense_layers": [8]})
    assert built.table("f0").weight.shape == (50, 4)
    for fn, call in [("tables", lambda: autoembed.tables(3)),
                     ("materialize", lambda: autoembed.materialize("model")),
                     ("quantize", lambda: autoembed.quantize(None, "int8")),
                     ("apply", lambda: autoembed.apply(cfg, cfg))]:
        with pytest.raises(ConfigError, match=f"{fn}: model = \\w+; give the torch.nn.Module"):
            call()


def test_materialize_refuses_a_model_with_nothing_on_meta() -> None:
    model = LM()
    before = model.tok.weight.detach().clone()
    with pytest.raises(ConfigError, match="no parameter of the model is on the meta device"):
        autoembed.materialize(model)
    assert torch.equal(model.tok.weight, before)  # nothing re-initialised
    with torch.device("meta"):
        meta = LM()
    meta.head = nn.Linear(D, V)  # real, beside a table on meta
    with pytest.raises(ConfigError, match="parameter 'head.weight' has values"):
        autoembed.materialize(meta)


def test_f_embedding_reference_of_a_hashed_bag() -> None:
    """A hashed bag is torch's bag over the rows the pure-Python hash picks."""
    bag = ae.EmbeddingBag(V, D, mode="mean", compression="hash", hash_buckets=11,
                          padding_idx=0)
    rows = torch.tensor([hash_id_reference(int(i), 11) for i in FLAT])
    want = F.embedding_bag(rows, bag.store.weight, OFFSETS, mode="sum",
                           per_sample_weights=(FLAT != 0).float())
    count = torch.tensor([2, 2, 0, 2]).clamp(min=1).unsqueeze(1)
    torch.testing.assert_close(bag(FLAT, OFFSETS), want / count)
