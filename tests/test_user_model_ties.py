"""Ties after `autoembed.apply` on a transformers model: a later `tie_weights()` or
`resize_token_embeddings` must not re-bind the MLM head to the compressed storage."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _copies import COPIES

import autoembed
from autoembed.config import config_from_dict
from autoembed.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if os.environ.get("CI") != "true":
    pytest.importorskip("transformers")
bert_mlm = importlib.import_module("examples.bert_mlm")
SIZE = bert_mlm.SIZES["twin"]
WORDS, HEAD = "bert.embeddings.word_embeddings", "cls.predictions.decoder"


def _hashed(untie: bool = False, hash_seed: int = 0) -> Any:
    torch.manual_seed(0)
    model = bert_mlm.build_model(**SIZE)
    cfg = config_from_dict({"tables": [{"name": WORDS, "vocab_size": SIZE["vocab"],
                                        "dim": SIZE["hidden"], "compression": "hash",
                                        "hash_buckets": 100}], "hash_seed": hash_seed})
    return autoembed.apply(model, cfg, untie=untie)


def _head_weight_in_forward(model: Any, example: dict[str, torch.Tensor]) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    head = model.get_submodule(HEAD)
    h = head.register_forward_pre_hook(lambda m, i: seen.append(m.weight.detach().clone()))
    model(**example)
    h.remove()
    return seen[0]


def test_tie_weights_keeps_the_head_on_the_decoded_table() -> None:
    model = _hashed()
    example = bert_mlm.make_example(**SIZE)
    before = model(**example).loss.item()
    model.tie_weights()
    words = model.get_submodule(WORDS)
    head = model.get_submodule(HEAD)
    # the head holds no weight parameter of its own, and reads the whole decoded [V, D] table
    assert "weight" not in dict(head.named_parameters(recurse=False))
    seen = _head_weight_in_forward(model, example)
    assert seen.shape == (SIZE["vocab"], SIZE["hidden"])
    assert torch.equal(seen, words.full_weight().detach())
    assert model(**example).loss.item() == pytest.approx(before)
    # the decoded table trains the hashed buckets through the head
    model.zero_grad()
    model(**example).loss.backward()
    assert words.store.weight.grad is not None


def test_tie_weights_after_untie_keeps_the_heads_own_weight() -> None:
    model = _hashed(untie=True)
    head = model.get_submodule(HEAD)
    own = head.weight
    model.tie_weights()
    assert head.weight is own and isinstance(own, torch.nn.Parameter)
    assert own.shape == (SIZE["vocab"], SIZE["hidden"])


def test_resize_token_embeddings_is_refused_in_one_line() -> None:
    model = _hashed()
    with pytest.raises(ConfigError) as info:
        model.resize_token_embeddings(SIZE["vocab"] + 8)
    msg = str(info.value)
    assert WORDS in msg and HEAD in msg and "\n" not in msg
    assert model.get_submodule(WORDS).num_embeddings == SIZE["vocab"]  # nothing changed


def test_a_model_built_on_meta_starts_its_rewritten_table_at_its_own_init() -> None:
    """transformers draws its tables in `_init_weights` (std config.initializer_range), which
    draws nothing on the meta device: the rewritten table starts as that init would have
    drawn the module (measured on a model built on the CPU), not at torch's N(0, 1)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=2000, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    torch.manual_seed(0)
    want = float(GPT2LMHeadModel(cfg).transformer.wte.weight.detach().std())
    assert want == pytest.approx(cfg.initializer_range, rel=0.02)  # 0.02
    with torch.device("meta"):
        model = GPT2LMHeadModel(cfg)
    autoembed.apply(model, {"tables": [{"name": "transformer.wte", "vocab_size": 2000,
                                        "compression": "hash", "hash_buckets": 500}]})
    autoembed.materialize(model)
    with torch.no_grad():
        rows = model.transformer.wte(torch.arange(2000))
    # 500 x 32 independent bucket values: the std within 5 of its standard errors
    assert float(rows.std()) == pytest.approx(want, rel=5 * (2 / (500 * 32)) ** 0.5 / 2)


def test_materialize_draws_a_transformers_model_by_its_own_init() -> None:
    """A GPT-2 built on meta and materialised: every weight as the CPU build draws it
    (transformers' `_init_weights`, std 0.02), the head tied to the table. Before,
    materialize ran `reset_parameters`: the token table N(0, 1) and GPT-2's Conv1D (which
    has none) left as `to_empty` left it (NaN here)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=2000, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    torch.manual_seed(0)
    cpu = GPT2LMHeadModel(cfg)
    with torch.device("meta"):
        model = GPT2LMHeadModel(cfg)
    autoembed.materialize(model)
    assert model.lm_head.weight is model.transformer.wte.weight
    want = dict(cpu.named_parameters())
    for name, p in model.named_parameters():
        p, ref = p.detach(), want[name].detach()
        if ref.numel() < 256 or float(ref.std()) == 0.0:  # biases, norms: constants
            assert torch.equal(p, ref), name
        else:  # 2000 x 32 or 32 x 96 draws: the std within 5 of its standard errors
            tol = 5 * (2 / p.numel()) ** 0.5
            assert float(p.std()) == pytest.approx(float(ref.std()), rel=tol), name


def test_the_models_own_init_draws_its_rewritten_tables() -> None:
    """A model built on meta with buffers (BERT's position ids) is materialised by its own
    init (`to_empty`, then `init_weights()`), whose `_init_weights` knows no autoembed layer:
    the rewritten tables are drawn too, at its std (0.02), mixed_dim's projection with them."""
    from transformers import BertConfig

    cfg = BertConfig(vocab_size=1000, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=512)
    with torch.device("meta"):
        model = bert_mlm.build_model(vocab=1000, hidden=16, layers=1, heads=2)
    autoembed.apply(model, {"tables": [
        {"name": WORDS, "vocab_size": 1000, "compression": "hash", "hash_buckets": 200},
        {"name": "bert.embeddings.position_embeddings", "vocab_size": 512, "dim": 4}]})
    model.to_empty(device="cpu")
    model.init_weights()
    emb = model.bert.embeddings
    with torch.no_grad():
        words = emb.word_embeddings(torch.arange(1, 1000))  # id 0 pads: zeros
        where = emb.position_embeddings(torch.arange(512))
    # independent values: 200 x 16 bucket values; 512 projected rows
    for rows, n in ((words, 200 * 16), (where, 512)):
        assert float(rows.std()) == pytest.approx(cfg.initializer_range, rel=5 * (2 / n) ** 0.5 / 2)


@pytest.mark.parametrize("copy_of", list(COPIES.values()), ids=list(COPIES))
def test_an_applied_transformers_model_copies_and_pickles_whole(copy_of: Any) -> None:
    """torch.save of the whole applied model failed (apply's tie_weights and
    resize_token_embeddings were closures, its _init_weights a method pickle could not find
    by name). A copy gives the same loss and state_dict, hash seed included; it still refuses
    a resize, and its own init draws its own table, not the original's."""
    model = _hashed(hash_seed=3).eval()
    example = bert_mlm.make_example(**SIZE)
    twin = copy_of(model)
    with torch.no_grad():
        assert torch.equal(twin(**example).logits, model(**example).logits)
    mine, theirs = model.state_dict(), twin.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert int(theirs[f"{WORDS}.hash_seed"]) == 3
    with pytest.raises(ConfigError, match=f"'{WORDS}' \\(tied to '{HEAD}'\\) is compressed"):
        twin.resize_token_embeddings(SIZE["vocab"] + 8)
    twin.tie_weights()  # a no-op: the head still reads the decoded table
    assert "weight" not in dict(twin.get_submodule(HEAD).named_parameters(recurse=False))
    before = model.get_submodule(WORDS).store.weight.detach().clone()
    twin.init_weights()
    assert torch.equal(model.get_submodule(WORDS).store.weight, before)
    drawn = twin.get_submodule(WORDS).store.weight.detach()
    assert not torch.equal(drawn, before)
    assert float(drawn.std()) == pytest.approx(0.02, rel=0.2)  # BERT's initializer_range
