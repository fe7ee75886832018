"""autoembed.apply / tables / materialize and autoembed.nn on users' models."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autoembed
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.errors import ConfigError
from autoembed.models.user_step import UserStep

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples import gpt_lm, seed_mean  # noqa: E402

GPT = gpt_lm.SIZES["twin"]


def block(n: int) -> int:
    return -(-n // 512) * 512


def hashed(name: str, vocab: int, buckets: int, dim: int) -> EmbeddingConfig:
    return EmbeddingConfig(tables=(TableConfig(name, vocab, compression="hash",
                                               hash_buckets=buckets),), dim=dim)


def test_tables_lists_embedding_modules_by_path() -> None:
    got = autoembed.tables(gpt_lm.build_model(**GPT))
    assert [(t.name, t.vocab_size, t.dim) for t in got] == [
        ("tok", GPT["vocab"], GPT["dim"]), ("pos", 1024, GPT["dim"])]


def test_meta_build_apply_materialize_keeps_the_tie_and_trains() -> None:
    with torch.device("meta"):
        model = gpt_lm.build_model(**GPT)
    autoembed.apply(model, hashed("tok", GPT["vocab"], 100, GPT["dim"]))
    autoembed.materialize(model)
    names = [n for n, _ in model.named_parameters()]
    assert "tok.store.weight" in names and "lm_head.weight" not in names
    assert model.tok.store.weight.shape == (100, GPT["dim"])  # 100 rows, not 1000
    # the head reads the decoded V x D table: same logits as by hand
    x = gpt_lm.make_example(**GPT)
    from autoembed.nn.hashing import hash_ids

    full = model.tok.store.weight[hash_ids(torch.arange(GPT["vocab"]), 100)]
    assert torch.equal(model.tok.full_weight(), full)
    step = UserStep.build(model, optimizer="adam")
    losses = [float(step.step(x)) for _ in range(30)]
    assert losses[-1] < losses[0]
    # state_dict round trip
    again = gpt_lm.build_model(**GPT)
    autoembed.apply(again, hashed("tok", GPT["vocab"], 100, GPT["dim"]))
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(x), model(x))


def test_untie_gives_the_head_its_own_full_weight() -> None:
    model = gpt_lm.build_model(**GPT)
    autoembed.apply(model, hashed("tok", GPT["vocab"], 100, GPT["dim"]), untie=True)
    assert model.lm_head.weight.shape == (GPT["vocab"], GPT["dim"])
    assert isinstance(model.lm_head.weight, nn.Parameter)


@pytest.mark.parametrize("meta", [False, True])
def test_an_untied_head_starts_as_the_tables_rows_built_on_meta_or_not(meta: bool) -> None:
    """The head `untie` gives its own weight starts as the hashed table's rows (by hand: each
    id's bucket row), whether the model had values or was built on meta and materialized
    (before: materialize drew it by nn.Linear's reset_parameters, kaiming-uniform, so the
    head of one model started at another scale than the other's)."""
    from autoembed.nn.hashing import hash_ids

    with torch.device("meta" if meta else "cpu"):
        model = gpt_lm.build_model(**GPT)
    autoembed.apply(model, hashed("tok", GPT["vocab"], 100, GPT["dim"]), untie=True)
    if meta:
        autoembed.materialize(model)
    rows = model.tok.store.weight[hash_ids(torch.arange(GPT["vocab"]), 100)]
    assert torch.equal(model.lm_head.weight, rows)


@pytest.mark.parametrize("precision", ["fp32", "bf16_master"])
@pytest.mark.parametrize("optimizer", ["adam", "rowwise_adagrad"])
def test_real_bytes_after_apply_equal_the_estimate(precision: str, optimizer: str) -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("embedding", 5000, compression="qr",
                                              qr_collisions=8),), dim=32)
    size = {"vocab": 5000, "dim": 32, "batch": 8, "seq": 16}

    def build() -> nn.Module:
        return autoembed.apply(seed_mean.build_model(**size), cfg)

    est = autoembed.estimate_model(build, seed_mean.make_example(**size),
                                   precision=precision, optimizer=optimizer)
    step = UserStep.build(build(), precision=precision, optimizer=optimizer)
    for _ in range(2):
        step.step(seed_mean.make_example(**size))
    tensors = list(step.model.parameters())
    if step.masters is not None:
        tensors += list(step.masters.masters.values())
    params = sum(block(t.untyped_storage().nbytes()) for t in tensors)
    state = sum(block(v.untyped_storage().nbytes()) for o in step.optimizers  # the device's:
                for s in o.state.values() for k, v in s.items() if k != "step")  # on CPU
    assert est.parameters == params
    assert est.optimizer_state == state
    # by hand: QR with m=8 stores 625 + 8 rows of 32 floats instead of 5000
    assert step.model.embedding.store.q_weight.shape == (625, 32)


def test_autoembed_nn_layers_take_torch_call_signatures() -> None:
    from autoembed import nn as ae

    emb = ae.Embedding(50, 4, padding_idx=0)
    ids = torch.tensor([[0, 3], [5, 0]])
    out = emb(ids)
    assert out.shape == (2, 2, 4) and torch.equal(out[0, 0], torch.zeros(4))
    assert torch.equal(out[0, 1], emb.weight[3])
    bag = ae.EmbeddingBag(50, 4, mode="mean", padding_idx=0)
    flat, offsets = torch.tensor([1, 2, 0, 3]), torch.tensor([0, 2])
    got = bag(flat, offsets)
    w = bag.weight
    assert torch.allclose(got[0], (w[1] + w[2]) / 2) and torch.allclose(got[1], w[3])
    psw = torch.tensor([1.0, 2.0, 3.0, 4.0])
    s = ae.EmbeddingBag(50, 4, mode="sum", compression="hash", hash_buckets=7)
    ref = F.embedding_bag(flat, s.weight, offsets, mode="sum", per_sample_weights=psw)
    assert torch.allclose(s(flat, offsets, psw), ref)


def test_bad_configs_are_one_line_errors() -> None:
    model = gpt_lm.build_model(**GPT)
    with pytest.raises(ConfigError, match="did you mean 'tok'") as info:
        autoembed.apply(model, hashed("tokk", 10, 5, GPT["dim"]))
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="is a Linear"):
        autoembed.apply(model, hashed("lm_head", 10, 5, GPT["dim"]))
    with pytest.raises(ConfigError, match="no nn.Embedding"):
        autoembed.tables(nn.Linear(2, 2))
    cached = EmbeddingConfig(tables=(TableConfig("tok", GPT["vocab"]),), dim=GPT["dim"],
                             placement="host_cached", table_optimizer="rowwise_adagrad",
                             cache_load_factor=0.5)
    with pytest.raises(ConfigError, match="table 'tok' is tied to 'lm_head', and a "
                       "host_cached table's rows live on the host"):
        autoembed.apply(model, cached)  # the head could not read the host rows


def test_a_config_whose_vocab_size_is_not_the_modules_rows_is_refused() -> None:
    """A share of the rows (hash_buckets 0.1) is read against the config's vocab_size: with
    the wrong one the table was silently left at full size (0.1 of 200,000 > 2,000 rows)."""
    model = nn.Sequential(nn.Embedding(2000, 8), nn.Embedding(50, 8))
    before = list(model)
    cfg = {"tables": [{"name": "1", "vocab_size": 50, "compression": "hash", "hash_buckets": 10},
                      {"name": "0", "vocab_size": 200_000, "compression": "hash",
                       "hash_buckets": 0.1}]}
    with pytest.raises(ConfigError, match="^config table '0': vocab_size 200000, but module '0' "
                       "has 2000 rows; give vocab_size 2000") as info:
        autoembed.apply(model, cfg)
    assert "\n" not in str(info.value) and list(model) == before  # nothing rewritten
    cfg["tables"][1]["vocab_size"] = 2000
    autoembed.apply(model, cfg)
    assert model[0].store.weight.shape == (200, 8)  # 0.1 of its 2,000 rows


def test_a_refused_config_rewrites_no_table() -> None:
    """Every table is checked before any is rewritten: a refusal leaves the user's model."""
    class Three(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Embedding(20, 4)
            self.b = nn.Embedding(20, 4)
            self.c = nn.Embedding(20, 4)
            self.c.weight = self.b.weight  # b and c: one weight

    model = Three()
    before = {n: m for n, m in model.named_children()}
    cfg = EmbeddingConfig(tables=(TableConfig("a", 20, compression="hash", hash_buckets=8),
                                  TableConfig("b", 20), TableConfig("c", 20)), dim=4)
    with pytest.raises(ConfigError, match="tables 'b' and 'c' share one weight"):
        autoembed.apply(model, cfg)
    assert {n: m for n, m in model.named_children()} == before  # 'a' kept, not hashed
    assert type(model.a) is nn.Embedding and model.a.num_embeddings == 20
    model.d = nn.Embedding(20, 4, sparse=True)  # a qr table cannot take sparse gradients
    cfg = EmbeddingConfig(tables=(TableConfig("a", 20, compression="hash", hash_buckets=8),
                                  TableConfig("d", 20, compression="qr")), dim=4)
    with pytest.raises(ConfigError, match="sparse"):
        autoembed.apply(model, cfg)
    assert type(model.a) is nn.Embedding and type(model.d) is nn.Embedding


def test_materialize_refuses_buffers_without_values() -> None:
    with torch.device("meta"):
        model = seed_mean.build_model(vocab=100, dim=4)
        model.register_buffer("position_ids", torch.arange(8))
    with pytest.raises(ConfigError, match="buffer 'position_ids'"):
        autoembed.materialize(model)


def test_materialize_initialises_as_the_build_does_or_refuses() -> None:
    """torch's nn.MultiheadAttention starts its projections' biases at 0 (its private
    `_reset_parameters`, after out_proj's own): materialize on meta gives the same; a
    parameter that nothing draws is refused in one line, not left as memory was."""
    class Attention(nn.MultiheadAttention):  # a subclass draws by torch's code too
        pass

    torch.manual_seed(0)
    built = nn.MultiheadAttention(16, 2)
    with torch.device("meta"):
        model = Attention(16, 2)
    autoembed.materialize(model)
    for name, p in built.named_parameters():
        got, p = dict(model.named_parameters())[name].detach(), p.detach()
        if name.endswith("bias"):
            assert torch.equal(got, torch.zeros_like(p)), name
        else:  # xavier / kaiming uniform: the same bound
            assert float(got.abs().max()) <= float(p.abs().max()) * 1.05, name

    class Bare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(3, 3))  # no reset_parameters draws it

    with torch.device("meta"):
        holder = nn.ModuleDict({"bare": Bare(), "e": nn.Embedding(10, 3)})
    with pytest.raises(ConfigError, match=r"^materialize: parameter 'bare\.w' \(Bare\) is "
                                          r"drawn by no reset_parameters.*real device$"):
        autoembed.materialize(holder)


def test_an_optimizer_built_before_apply_is_refused_at_its_step() -> None:
    qr = {"tables": [{"name": "0", "vocab_size": 100, "compression": "qr"}]}
    autoembed.apply(nn.Sequential(nn.Embedding(100, 4)), qr)  # an earlier apply elsewhere
    model = nn.Sequential(nn.Embedding(100, 4), nn.Linear(4, 1))
    early = torch.optim.SGD(model.parameters(), lr=0.5)  # holds the table apply replaces
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.5)
    model(torch.tensor([1, 2])).sum().backward()
    early.step()  # trains the table before apply, as it should
    autoembed.apply(model, qr, from_trained=True)
    model(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ConfigError, match=r"^SGD steps '0\.weight' of the table autoembed\."
                                          r"apply replaced.*build the optimizer after apply"):
        early.step()
    other.step()  # an optimizer without a replaced table steps as before
    before = model[0].full_weight().detach().clone()
    between = torch.optim.SGD(model.parameters(), lr=0.5)  # built after apply: the table trains
    between.step()
    assert not torch.allclose(model[0].full_weight(), before)
    autoembed.apply(model, {"tables": [{"name": "0", "vocab_size": 100, "compression": "hash",
                                        "hash_buckets": 10}]}, from_trained=True)
    with pytest.raises(ConfigError, match=r"steps '0\.store\.q_weight' of the table"):
        between.step()  # it holds the qr layer's storage, replaced in its turn


def test_a_mixed_dim_config_rewrites_the_smaller_tables_and_keeps_the_others() -> None:
    """Config compression mixed_dim (its dims resolved per table) was a TypeError in the
    layer (mixed_dim without small_dim): a table at a smaller dim is a mixed_dim layer
    (small rows, projected back), one at the module's dim is kept as it is."""
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Embedding(1000, 16), nn.Embedding(50, 16)

    model = Two()
    b = model.b
    cfg = EmbeddingConfig(tables=(TableConfig("a", 1000, dim=8), TableConfig("b", 50)),
                          compression="mixed_dim", dim=16)
    autoembed.apply(model, cfg)
    assert model.b is b
    small, proj = model.a.store.weight, model.a.store.proj.weight
    assert small.shape == (1000, 8) and proj.shape == (16, 8)
    ids = torch.tensor([[0, 7, 999], [3, 3, 500]])
    with torch.no_grad():  # by hand: the small row, projected
        torch.testing.assert_close(model.a(ids), small[ids] @ proj.T)
    # no table dims given: the config resolves them (rows looked up 1/1000 against 1/50 of
    # the time: round(16 x (0.001 / 0.02)^0.3) = 7; b, the most popular, keeps 16). Before,
    # nothing was resolved and nothing rewritten
    want = round(16 * (0.001 / 0.02) ** 0.3)
    assert want == 7
    tables = [{"name": "a", "vocab_size": 1000}, {"name": "b", "vocab_size": 50}]
    for given in (EmbeddingConfig(tables=(TableConfig("a", 1000), TableConfig("b", 50)),
                                  compression="mixed_dim", dim=16),
                  {"compression": "mixed_dim", "dim": 16, "tables": tables}):
        model = Two()
        b = model.b
        autoembed.apply(model, given)
        assert model.b is b and model.a.store.weight.shape == (1000, want)
