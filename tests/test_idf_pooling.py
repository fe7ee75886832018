"""pooling idf: tokens weighed by their inverse document frequency on the train split (the
weights against scikit-learn's TfidfVectorizer, the bag against a weighted mean written here,
the priced bytes by hand, the config's refusals, and a trial installing the data's weights)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from autoembed.batch import PAD_ID
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.models import build_model
from autoembed.models.idf import idf_weights, install_idf
from autoembed.runner import RunSettings, run_trial
from autoembed.trace import estimate

CORPUS = ["the cat sat", "the dog sat down", "a cat and a dog", "the end"]


def test_idf_weights_are_scikit_learns_smooth_idf() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(token_pattern=r"[a-z]+").fit(CORPUS)
    vocab = {t: i + 2 for i, t in enumerate(sorted(vec.vocabulary_))}  # 0 pad, 1 oov
    width = max(len(d.split()) for d in CORPUS) + 2
    docs = np.full((len(CORPUS), width), PAD_ID, dtype=np.int64)
    for i, d in enumerate(CORPUS):
        ids = [vocab[t] for t in d.split()]
        docs[i, : len(ids)] = ids
    got = idf_weights([docs[:2], docs[2:]], len(vocab) + 3, skip=(PAD_ID, 1))
    for token, col in vec.vocabulary_.items():
        assert got[vocab[token]] == pytest.approx(vec.idf_[col], rel=1e-12), token
    assert got[PAD_ID] == 0 and got[1] == 0  # not terms
    assert got[len(vocab) + 2] == pytest.approx(np.log(5 / 1) + 1)  # never seen: df 0


def _text(pooling: str = "idf", **kw: object) -> EmbeddingConfig:
    base = dict(task="text", tables=(TableConfig("tokens", 12),), dim=4, num_classes=3,
                seq_len=5, batch_size=2, dense_layers=(), pooling=pooling)
    return EmbeddingConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_the_bag_is_the_idf_weighted_mean_of_its_rows() -> None:
    model = build_model(_text())
    table = model.table("tokens")
    w = torch.arange(1.0, 13.0).repeat(4, 1).T * torch.tensor([1.0, -1.0, 0.5, 2.0])
    idf = torch.tensor([0.0, 0.0, 1.0, 2.0, 3.0, 1.5, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0])
    with torch.no_grad():
        table.weight.copy_(w)
        table.idf.copy_(idf)
    ids = torch.tensor([[3, 4, 4, 0, 0], [8, 2, 1, 0, 0]])  # 1 is OOV (weight 0)
    got = model.embed({"tokens": ids})
    want = torch.stack([(2 * w[3] + 3 * w[4] + 3 * w[4]) / 8, (4 * w[8] + 1 * w[2]) / 5])
    assert torch.allclose(got, want)
    # the serving path (int8 rows) pools the same way, up to the rows' rounding
    from autoembed.models import quantize

    served = quantize(model, "int8")
    assert torch.allclose(served.embed({"tokens": ids}), want, rtol=0.02, atol=0.05)


def test_serving_counts_the_idf_weights() -> None:
    from autoembed.models import quantize, serving_bytes

    config = _text(serving="int8")
    served = quantize(build_model(config), "int8")
    # 12 rows of align16(4 + 4) = 16 B, the idf buffer's 12 fp32 values, the linear layer
    want = 12 * 16 + 12 * 4 + (4 * 3 + 3) * 4
    assert serving_bytes(served) == want
    assert estimate(config).serving_bytes == want


def test_until_installed_idf_pooling_is_the_mean() -> None:
    idf, mean = build_model(_text()), build_model(_text("mean"))
    ids = torch.tensor([[3, 4, 4, 0, 0], [8, 2, 5, 6, 0]])
    assert torch.allclose(idf.embed({"tokens": ids}), mean.embed({"tokens": ids}))


def test_sparse_table_gradients_touch_only_the_weighted_rows() -> None:
    model = build_model(_text(table_optimizer="rowwise_adagrad"))
    ids = torch.tensor([[3, 4, 4, 0, 0], [8, 2, 0, 0, 0]])
    model({"tokens": ids}).sum().backward()
    grad = model.table("tokens").weight.grad.coalesce()
    assert sorted(set(grad.indices()[0].tolist())) == [2, 3, 4, 8]


def test_priced_bytes_by_hand() -> None:
    # a step-phase peak (a 200,003-row table): the idf buffer, 200,003 fp32 values in 512-byte
    # blocks (800,012 -> 800,256), is all that grows
    big = _text(tables=(TableConfig("tokens", 200_003),), dim=64, seq_len=256, batch_size=64)
    idf, mean = estimate(big), estimate(replace(big, pooling="mean"))
    assert idf.peak_phase == mean.peak_phase == "step"
    assert idf.allocated_peak - mean.allocated_peak == 800_256
    # the bag's weights [64, 256] and their sums [64], fp32, live from forward to backward
    assert idf.activations - mean.activations == 64 * 256 * 4 + 512
    # a backward-phase peak (a small table, long bags): buffer + weights + sums, as traced
    small = _text(tables=(TableConfig("tokens", 1003),), dim=64, seq_len=300, batch_size=4096)
    by_hand = 4096 + 4096 * 300 * 4 + 4096 * 4  # round_block(1003 x 4) = 4096
    for method in ("analytic", "traced"):
        a, b = estimate(small, method=method), estimate(replace(small, pooling="mean"),
                                                         method=method)
        assert a.peak_phase == "backward"
        assert a.allocated_peak - b.allocated_peak == by_hand, method


@pytest.mark.parametrize(
    ("change", "names"),
    [({"compression": "hash", "hash_buckets": 4}, "'compression' = 'hash'"),
     ({"tables": (TableConfig("tokens", 12, compression="qr", qr_collisions=2),)},
      "'tables[0].compression' = 'qr'"),
     ({"placement": "host_cached", "table_optimizer": "rowwise_adagrad",
       "cache_load_factor": 1.0}, "'pooling' = 'idf'"),
     ({"wide": True}, "'pooling' = 'idf'")],
)
def test_idf_refuses_what_it_cannot_weigh(change: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError) as e:
        _text(**change)
    msg = str(e.value)
    assert names in msg and "\n" not in msg
    assert "pooling mean" in msg


def test_idf_refuses_a_ctr_model() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("a", 10),), pooling="idf")
    with pytest.raises(ConfigError, match="pooling' = 'idf'.*use pooling mean for task ctr"):
        build_model(cfg)


def test_a_trial_installs_the_train_splits_idf(tmp_path: Path) -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    rows = [{"text": " ".join(words[i % 5: i % 5 + 2 + i % 4]), "label": i % 2}
            for i in range(60)]
    path = tmp_path / "docs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="label", text_column="text", seq_len=6))
    seen: dict[str, torch.Tensor] = {}

    def grab(trainer: object, step: int) -> None:
        seen["idf"] = trainer.model.table("tokens").idf.clone()  # type: ignore[attr-defined]

    cfg = EmbeddingConfig(task="text", dim=8, dense_layers=(), batch_size=8, pooling="idf")
    r = run_trial(cfg, data, RunSettings(max_steps=2, eval_batches=1, test_batches=1,
                                         measure_latency=False), on_step=grab)
    assert r.status == "complete", r.error
    train = np.concatenate([b.features["tokens"].numpy()
                            for b in data.batches("train", 16, shuffle=False)])
    oov = data.vocab_maps["tokens"].oov_id
    want = idf_weights([train], data.tables[0].vocab_size, (PAD_ID, oov))
    assert torch.allclose(seen["idf"].double(), torch.as_tensor(want), rtol=1e-6)
    assert seen["idf"][2:].min() >= 1.0  # every kept token was seen in train: df >= 1
    # a model without idf tables is left alone
    plain = build_model(replace(r.config, pooling="mean"))
    install_idf(plain, data)


def test_derived_text_spaces_search_idf_for_uncompressed_tables() -> None:
    from autoembed.space import parse_space
    from autoembed.space_auto import DataFacts, TableFacts, derive_space

    def pooling(rows: int) -> dict[str, object]:
        facts = DataFacts("text", (TableFacts("tokens", rows, 64.0),), 2_000, 200, 64,
                          (64,) * 2_000, {"name": "docs.csv"})
        raw = derive_space(facts, 8 * 10**9).to_space_dict()
        space = parse_space(raw, "auto")
        values = {"dim": 16, "pooling": "idf", "table_optimizer": "adam", "lr": 0.01,
                  "weight_decay": 0.0, "batch_size": 32, "compression": "none"}
        cfg = space.config_for({k: v for k, v in values.items() if k in raw["params"]})
        assert cfg.pooling == "idf"  # a valid config
        return dict(raw["params"]["pooling"])

    # 28k rows x 256 dims is >= 1% of 8 GB: compression is searched, idf only without it
    assert pooling(28_000) == {"choices": ["mean", "sum", "idf"],
                               "when": {"compression": "none"}}
    assert pooling(3_000) == {"choices": ["mean", "sum", "idf"]}  # nothing to compress
