"""Synthetic data: determinism, the Batch contract, Zipf ids, huge vocabularies, the oracle."""

from __future__ import annotations

import hashlib
import math
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from autoembed.batch import MISSING_ID, PAD_ID, Batch
from autoembed.data import DataSpec, load_dataset
from autoembed.data.synthetic import SyntheticCTR, SyntheticText
from autoembed.errors import DataError

_settings = settings(deadline=None, derandomize=True, max_examples=20)
SMALL = DataSpec(rows=(3000, 600, 600))


def _ctr(spec: DataSpec) -> SyntheticCTR:
    data = load_dataset(spec)
    assert isinstance(data, SyntheticCTR)
    return data


def _text(spec: DataSpec) -> SyntheticText:
    data = load_dataset(spec)
    assert isinstance(data, SyntheticText)
    return data


def _stack(batches: list[Batch]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    feats = {k: torch.cat([b.features[k] for b in batches]).numpy() for k in batches[0].features}
    return feats, torch.cat([b.labels for b in batches]).numpy()


def _same(a: list[Batch], b: list[Batch]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x.labels, y.labels)
        and x.features.keys() == y.features.keys()
        and all(torch.equal(x.features[k], y.features[k]) for k in x.features)
        for x, y in zip(a, b, strict=True)
    )


# ------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", ["synthetic-ctr", "synthetic-text"])
def test_same_seed_gives_identical_batches(name: str) -> None:
    spec = DataSpec(name, rows=(1000, 200, 200), seed=7)
    first = list(load_dataset(spec).batches("train", 128, seed=3))
    second = list(load_dataset(spec).batches("train", 128, seed=3))
    assert _same(first, second)
    other_order = list(load_dataset(spec).batches("train", 128, seed=4))
    assert not _same(first, other_order)
    reseeded = load_dataset(DataSpec(name, rows=(1000, 200, 200), seed=8))
    other_data = list(reseeded.batches("train", 128, seed=3))
    assert not _same(first, other_data)


def _digest(batches: Iterator[Batch]) -> str:
    h = hashlib.sha256()
    for b in batches:
        for k in sorted(b.features):
            h.update(k.encode())
            h.update(b.features[k].numpy().tobytes())
        h.update(b.labels.numpy().tobytes())
    return h.hexdigest()[:16]


# Digests of batches drawn by the generator before splits were kept and per-id draws
# tabulated (commit 30a7be5): the stand-in data must stay the same data.
_PINNED = [
    (DataSpec(rows=(3000, 600, 600), vocab_sizes=(40000, 1000, 20, 10**8), bag_sizes=(1, 5, 1, 2),
              seed=3),
     ("d702882c65e4cc70", "7545536354079d9e", "9d565218b27a21fa"), 0.7815564962552914),
    (DataSpec("synthetic-text", rows=(2000, 300, 300), vocab_size=5000, seq_len=32,
              num_classes=3, seed=5),
     ("70d752fe49b33be4", "1c045c826f9c8aef", "dc77bc0e7a9109f6"), 0.6833333333333333),
]


@pytest.mark.parametrize(("keep", "tabulate"), [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize(("spec", "digests", "oracle"), _PINNED)
def test_kept_and_generated_rows_are_the_pinned_data(
    monkeypatch: pytest.MonkeyPatch, keep: bool, tabulate: bool, spec: DataSpec,
    digests: tuple[str, str, str], oracle: float,
) -> None:
    import autoembed.data.synthetic as synthetic

    if not keep:  # every batch generated on its own, as before splits were kept
        monkeypatch.setattr(synthetic, "CACHE_BYTES", 0)
    if not tabulate:  # every per-id draw hashed per row
        monkeypatch.setattr(synthetic, "ID_TABLE_MAX", 0)
    data = load_dataset(spec)
    got = (_digest(data.batches("train", 128, seed=2, drop_last=True)),
           _digest(data.batches("valid", 100, shuffle=False)),
           _digest(data.batches("test", 1, seed=1)))
    assert got == digests
    best = data.oracle_auc("valid") if isinstance(data, SyntheticCTR) else \
        data.oracle_accuracy("valid")  # type: ignore[attr-defined]
    assert best == oracle
    if not keep:
        assert data._kept == {}  # noqa: SLF001 - nothing of the split held


def test_kept_split_is_not_changed_by_its_batches() -> None:
    data = _ctr(SMALL)
    first = next(data.batches("valid", 50, shuffle=False))
    first.features["f0"].fill_(7)  # a consumer writing into its batch
    first.labels.fill_(2.0)
    again = next(data.batches("valid", 50, shuffle=False))
    fresh = next(_ctr(SMALL).batches("valid", 50, shuffle=False))
    assert _same([again], [fresh])


def test_kept_bytes_count_the_splits_that_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import autoembed.data.synthetic as synthetic

    # per row: ids 8 B per bag slot (1 + 5 + 1), label 4 B, planted logit 8 B
    ctr = _ctr(DataSpec(rows=(3000, 600, 500), vocab_sizes=(10, 1000, 10**6), bag_sizes=(1, 5, 1)))
    assert ctr.kept_bytes() == (3000 + 600 + 500) * (7 * 8 + 4 + 8)
    # per row: 32 tokens of 8 B, label 8 B, oracle prediction 8 B
    text = _text(DataSpec("synthetic-text", rows=(400, 50, 50), vocab_size=5000, seq_len=32))
    assert text.kept_bytes() == 500 * (32 * 8 + 16)
    monkeypatch.setattr(synthetic, "CACHE_BYTES", 600 * 68)  # train no longer fits
    assert ctr.kept_bytes() == (600 + 500) * 68
    next(ctr.batches("train", 64))
    next(ctr.batches("test", 64))
    kept = ctr._kept  # noqa: SLF001 - what the worker holds
    assert sorted(kept) == [2]
    assert kept[2].batch.features["f1"].shape == (500, 5)


def test_a_pickled_dataset_gives_the_same_batches_without_its_kept_rows() -> None:
    import pickle

    data = _ctr(SMALL)
    first = list(data.batches("train", 256, seed=4))
    raw = pickle.dumps(data)
    assert len(raw) < 20_000  # the kept split (3000 rows) and per-id tables stay behind
    assert _same(list(pickle.loads(raw).batches("train", 256, seed=4)), first)


def test_shuffle_permutes_the_same_rows() -> None:
    data = _ctr(SMALL)
    plain, plain_y = _stack(list(data.batches("valid", 97, shuffle=False)))
    mixed, mixed_y = _stack(list(data.batches("valid", 64, seed=1)))
    rows = lambda f, y: sorted(zip(*(f[k][:, 0] for k in sorted(f)), y, strict=True))  # noqa: E731
    assert rows(plain, plain_y) == rows(mixed, mixed_y)
    assert not np.array_equal(plain["f3"], mixed["f3"])


@_settings
@given(
    n=st.integers(1, 300),
    batch=st.integers(1, 70),
    drop_last=st.booleans(),
    split=st.sampled_from(["train", "valid", "test"]),
)
def test_batch_sizes_cover_the_split(n: int, batch: int, drop_last: bool, split: str) -> None:
    data = _ctr(DataSpec(rows=(n, n, n), vocab_sizes=(50, 7)))
    sizes = [b.size for b in data.batches(split, batch, drop_last=drop_last)]
    assert data.num_rows(split) == n
    if drop_last:
        assert sizes == [batch] * (n // batch)
    else:
        assert sum(sizes) == n and all(s == batch for s in sizes[:-1]) and 0 < sizes[-1] <= batch


def test_splits_are_distinct_rows() -> None:
    # Six fields up to 10^6 ids: two independent rows coincide with probability ~1e-10.
    data = _ctr(SMALL)
    keys = {}
    for split in ("train", "valid", "test"):
        feats, _ = _stack(list(data.batches(split, 512, shuffle=False)))
        keys[split] = set(zip(*(feats[k][:, 0].tolist() for k in sorted(feats)), strict=True))
        assert len(keys[split]) == data.num_rows(split)
    assert not keys["train"] & keys["valid"]
    assert not keys["train"] & keys["test"]
    assert not keys["valid"] & keys["test"]


def test_bad_split_or_batch_size() -> None:
    data = _ctr(SMALL)
    with pytest.raises(DataError, match="split 'dev'.*train, valid, test"):
        next(data.batches("dev", 4))
    with pytest.raises(DataError, match="^batch_size = 0: must be an integer >= 1$"):
        next(data.batches("train", 0))


# ------------------------------------------------------------------------- contract


def test_ctr_batches_follow_the_contract() -> None:
    spec = DataSpec(rows=(500, 100, 100), vocab_sizes=(10, 1000, 10**6), bag_sizes=(1, 5, 1))
    data = _ctr(spec)
    assert data.task == "ctr" and data.num_classes == 2 and data.seq_len == 1
    assert [t.name for t in data.tables] == ["f0", "f1", "f2"]
    assert [t.pooling_factor for t in data.tables] == [1.0, 3.0, 1.0]
    for batch in data.batches("train", 64):
        assert batch.labels.dtype == torch.float32 and batch.labels.shape == (batch.size,)
        assert set(batch.labels.unique().tolist()) <= {0.0, 1.0}
        for t in data.tables:
            x = batch.features[t.name]
            assert x.dtype == torch.int64 and x.dim() == 2 and x.shape[0] == batch.size
            real = x[x != MISSING_ID]
            assert int(real.min()) >= 0 and int(real.max()) < t.vocab_size
            if t.name != "f1":
                assert x.shape[1] == 1 and bool((x >= 0).all())
        bag = batch.features["f1"]
        assert bag.shape[1] == 5
        assert bool((bag[:, 0] >= 0).all())  # a bag holds at least one id
        missing = bag == MISSING_ID
        # padding only on the right: once missing, missing to the end
        assert bool((missing[:, :-1] <= missing[:, 1:]).all())
    lengths = torch.cat([(b.features["f1"] >= 0).sum(1) for b in data.batches("train", 500)])
    assert abs(float(lengths.float().mean()) - 3.0) < 0.3  # uniform on 1..5


def test_text_batches_follow_the_contract() -> None:
    spec = DataSpec(
        "synthetic-text", rows=(400, 50, 50), vocab_size=5000, seq_len=32, num_classes=3
    )
    data = _text(spec)
    assert data.task == "text" and data.num_classes == 3 and data.seq_len == 32
    (table,) = data.tables
    assert table.name == "tokens" and table.vocab_size == 5000 and table.pooling_factor == 32.0
    for batch in data.batches("train", 64):
        assert batch.labels.dtype == torch.int64
        assert int(batch.labels.min()) >= 0 and int(batch.labels.max()) < 3
        x = batch.features["tokens"]
        assert x.dtype == torch.int64 and x.shape == (batch.size, 32)
        pad = x == PAD_ID
        assert bool((pad[:, :-1] <= pad[:, 1:]).all())  # right padding only
        assert bool((~pad[:, 0]).all())  # at least one token
        lengths = (~pad).sum(1)
        assert int(lengths.min()) >= 8  # lengths uniform in [seq_len // 4, seq_len]
        assert int(x.max()) < 5000


# ------------------------------------------------------------------------- Zipf ids


def _zipf_p(k: int, v: int, s: float) -> float:
    """P(rank = k) of the discretised power law: ((k+2)^(1-s) - (k+1)^(1-s)) / ((V+1)^(1-s) - 1),
    and ln((k+2)/(k+1)) / ln(V+1) when s = 1."""
    if s == 1.0:
        return math.log((k + 2) / (k + 1)) / math.log(v + 1)
    a = 1.0 - s
    return ((k + 2) ** a - (k + 1) ** a) / ((v + 1) ** a - 1)


@pytest.mark.parametrize(("v", "s"), [(1000, 1.1), (10**6, 1.0), (10**8, 1.3), (50, 0.0)])
def test_top_id_frequency_matches_the_power_law(v: int, s: float) -> None:
    n = 40_000
    data = _ctr(DataSpec(rows=(n, 1, 1), vocab_sizes=(v,), zipf_exponent=s, scramble=False))
    ids = torch.cat([b.features["f0"] for b in data.batches("train", 8192)]).numpy().ravel()
    p0 = _zipf_p(0, v, s)
    share = float((ids == 0).mean())  # unscrambled: id = rank, so id 0 is the top id
    assert abs(share - p0) < 5 * math.sqrt(p0 * (1 - p0) / n)


def test_scrambled_ids_keep_the_law_but_spread_the_head() -> None:
    n, v, s = 40_000, 10**6, 1.1
    data = _ctr(DataSpec(rows=(n, 1, 1), vocab_sizes=(v,), zipf_exponent=s))
    ids = torch.cat([b.features["f0"] for b in data.batches("train", 8192)]).numpy().ravel()
    counts = np.bincount(ids) if ids.max() < 5 * 10**6 else None
    assert counts is not None
    top = np.sort(counts)[::-1][:3] / n
    for k in range(3):
        p = _zipf_p(k, v, s)
        assert abs(top[k] - p) < 5 * math.sqrt(p * (1 - p) / n)
    popular = np.argsort(counts)[::-1][:20]
    assert popular.max() > v // 10  # the head is not just ids 0, 1, 2, ...


@pytest.mark.parametrize(("v", "s"), [(100_000, 1.1), (300_000, 0.7), (2_000_000, 1.05)])
def test_table_frequency_is_the_sum_of_squared_probabilities(v: int, s: float) -> None:
    (table,) = _ctr(DataSpec(rows=(1, 1, 1), vocab_sizes=(v,), zipf_exponent=s)).tables
    k = np.arange(v, dtype=np.float64)
    a = 1.0 - s
    p = ((k + 2) ** a - (k + 1) ** a) / ((v + 1) ** a - 1)
    assert table.frequency == pytest.approx(float(np.sum(p * p)), rel=1e-6)


def test_table_frequency_of_uniform_ids_is_one_over_v() -> None:
    (table,) = _ctr(DataSpec(rows=(1, 1, 1), vocab_sizes=(12345,), zipf_exponent=0.0)).tables
    assert table.frequency == pytest.approx(1 / 12345, rel=1e-9)


def test_table_frequency_matches_the_sampled_ids() -> None:
    # unbiased estimate of sum p^2 from counts: sum c(c-1) / (n(n-1))
    n = 50_000
    data = _ctr(DataSpec(rows=(n, 1, 1), vocab_sizes=(300,), zipf_exponent=1.2))
    ids = torch.cat([b.features["f0"] for b in data.batches("train", 10_000)]).numpy().ravel()
    c = np.bincount(ids).astype(np.float64)
    estimate = float((c * (c - 1)).sum() / (n * (n - 1)))
    assert data.tables[0].frequency == pytest.approx(estimate, rel=0.05)


def test_vocab_of_10_to_the_8_uses_little_memory() -> None:
    spec = DataSpec(rows=(20_000, 2_000, 2_000), vocab_sizes=(10**8, 10**8, 1000))
    tracemalloc.start()
    try:
        data = _ctr(spec)
        seen = 0
        for batch in data.batches("train", 4096):
            seen = max(seen, int(batch.features["f0"].max()))
        auc = data.oracle_auc("valid")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a V-sized int64 array alone would be 800 MB; numpy reports its buffers to tracemalloc
    assert peak < 64 * 2**20
    assert data.tables[0].vocab_size == 10**8 and 0 < (data.tables[0].frequency or 0) < 0.05
    assert seen > 10**7  # ids spread over the whole range
    assert 0.5 < auc <= 1.0


def test_vocab_of_10_to_the_8_keeps_rss_small() -> None:
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    before = rss()
    data = _ctr(DataSpec(rows=(10_000, 10, 10), vocab_sizes=(10**8,) * 4))
    for _ in data.batches("train", 2048):
        pass
    assert rss() - before < 200 * 2**20


# ------------------------------------------------------------------------- planted model


def test_oracle_scores_align_with_unshuffled_labels() -> None:
    data = _ctr(SMALL)
    _, labels = _stack(list(data.batches("test", 100, shuffle=False)))
    assert np.array_equal(data.split_labels("test"), labels)
    scores = data.oracle_scores("test")
    assert scores.shape == (600,)
    # labels are Bernoulli(sigmoid(score)): the mean label tracks the mean probability
    assert abs(labels.mean() - (1 / (1 + np.exp(-scores))).mean()) < 0.05


def _one_hot(feats: dict[str, np.ndarray], keep: dict[str, dict[int, int]]) -> object:
    from scipy import sparse

    cols, rows = [], []
    offset = 0
    n = next(iter(feats.values())).shape[0]
    for name in sorted(keep):
        col = np.array([keep[name].get(int(i), -1) for i in feats[name][:, 0]])
        hit = col >= 0
        rows.append(np.nonzero(hit)[0])
        cols.append(col[hit] + offset)
        offset += len(keep[name])
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sparse.csr_matrix((np.ones(r.size), (r, c)), shape=(n, offset))


def test_oracle_beats_logistic_regression_on_head_ids() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    data = _ctr(DataSpec(rows=(30_000, 1, 6_000)))
    train, y_train = _stack(list(data.batches("train", 10_000, shuffle=False)))
    test, y_test = _stack(list(data.batches("test", 10_000, shuffle=False)))
    oracle = data.oracle_auc("test")
    assert oracle == pytest.approx(roc_auc_score(y_test, data.oracle_scores("test")))
    assert oracle > 0.75

    def fit(bucket: int | None) -> float:
        tr = {k: v % bucket if bucket else v for k, v in train.items()}
        te = {k: v % bucket if bucket else v for k, v in test.items()}
        keep = {}
        for name, ids in tr.items():  # head ids: seen at least 5 times in train
            values, counts = np.unique(ids[:, 0], return_counts=True)
            keep[name] = {int(v): i for i, v in enumerate(values[counts >= 5])}
        model = LogisticRegression(C=0.5, max_iter=300).fit(_one_hot(tr, keep), y_train)
        return float(roc_auc_score(y_test, model.decision_function(_one_hot(te, keep))))

    full = fit(None)
    hashed = fit(16)  # every field hashed into 16 buckets: head ids collide
    assert 0.6 < full < oracle
    assert hashed < full - 0.02


def test_text_oracle_beats_chance_and_a_bag_of_words_model() -> None:
    from scipy import sparse
    from sklearn.naive_bayes import MultinomialNB

    k, v = 4, 5_000
    data = _text(DataSpec("synthetic-text", rows=(8_000, 1, 2_000), vocab_size=v, num_classes=k))
    oracle = data.oracle_accuracy("test")
    assert oracle > 1 / k + 0.25
    labels = data.split_labels("test")
    assert np.bincount(labels, minlength=k).min() > 0.1 * labels.size  # no class is starved

    def counts(split: str) -> tuple[object, np.ndarray]:
        x, y = _stack(list(data.batches(split, 4096, shuffle=False)))
        tokens = x["tokens"]
        rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
        real = tokens.ravel() != PAD_ID
        m = sparse.coo_matrix(
            (np.ones(int(real.sum())), (rows[real], tokens.ravel()[real])), shape=(len(y), v)
        )
        return m.tocsr(), y

    xtr, ytr = counts("train")
    xte, yte = counts("test")
    acc = float((MultinomialNB().fit(xtr, ytr).predict(xte) == yte).mean())
    assert 1 / k + 0.1 < acc < oracle


# ------------------------------------------------------------------------- building blocks


@_settings
@given(n=st.integers(1, 3000), key=st.integers(0, 2**32))
def test_id_scramble_is_a_bijection(n: int, key: int) -> None:
    from autoembed.data.keyed_random import permute

    out = permute(np.arange(n), n, key)
    assert np.array_equal(np.sort(out), np.arange(n))


def test_huge_splits_shuffle_without_a_permutation_array(monkeypatch: pytest.MonkeyPatch) -> None:
    import autoembed.data.base as base

    monkeypatch.setattr(base, "_FULL_SHUFFLE_MAX", 100)  # force the affine order
    data = _ctr(DataSpec(rows=(1000, 1, 1), vocab_sizes=(10**8,)))
    plain = torch.cat([b.features["f0"] for b in data.batches("train", 64, shuffle=False)])
    mixed = torch.cat([b.features["f0"] for b in data.batches("train", 64, seed=2)])
    assert not torch.equal(plain, mixed)
    assert sorted(plain.ravel().tolist()) == sorted(mixed.ravel().tolist())


def test_hot_ids_are_the_most_frequent_ids() -> None:
    data = _ctr(DataSpec(vocab_sizes=(5000,), rows=(20000, 10, 10)))
    feats, _ = _stack(list(data.batches("train", 20000, shuffle=False)))
    counts = np.bincount(feats["f0"].reshape(-1), minlength=5000)
    hot = data.hot_ids("f0", 20)
    assert hot.tolist() == sorted(hot.tolist()) and len(set(hot.tolist())) == 20
    top5 = set(np.argsort(-counts, kind="stable")[:5].tolist())  # clear winners under Zipf
    assert top5 <= set(hot.tolist())
    assert counts[hot].sum() > 0.5 * counts.sum()  # the head holds most lookups


@pytest.mark.parametrize(("head", "spread"), [(100, False), (100_000, True)])
def test_head_size_spreads_the_signal_beyond_the_hot_ids(head: int, spread: bool) -> None:
    spec = DataSpec(vocab_sizes=(1_000_000,), rows=(4000, 10, 10), head_size=head,
                    tail_scale=0.0, interaction_pairs=())
    data = _ctr(spec)
    feats, _ = _stack(list(data.batches("train", 4000, shuffle=False)))
    logits = data._generate(0, np.arange(4000))[1]
    cold = ~np.isin(feats["f0"][:, 0], data.hot_ids("f0", 100))
    assert cold.sum() > 500  # plenty of rows look up an id outside the 100 most frequent
    # those rows carry planted effects only when the head reaches past them
    assert (np.std(logits[cold]) > 0.5) == spread
