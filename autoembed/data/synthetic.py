"""Synthetic data with a planted model: the best achievable quality is known exactly.

Every row is a pure function of (seed, split, row index), computed by hashing: rows come in
any order, splits are disjoint by construction and nothing of size V is allocated for large
V. A split of at most `CACHE_BYTES` is generated once and sliced; a field of at most
`ID_TABLE_MAX` ids tabulates its per-id draws. Both give the same rows as generating alone.

synthetic-ctr. Field f has V_f ids. A row draws a Zipf rank r per id slot (exponent s_f,
`autoembed.zipf`) and shows id = pi_f(r), pi_f a keyed bijection of [0, V_f) (identity
without `scramble`), so popular ids are spread over the table. The label is planted:

    logit = ctr_bias + sum_f e_f(bag_f) + sum_{(f,g) in pairs} (scale / sqrt(k)) u_f . u_g
    e_f(id) = effect_scale * w(r) * z_f(id),   z_f(id) ~ N(0, 1) hashed from (seed, f, id)
    w(r)    = 1 for r < head_size, tail_scale beyond
    u_f(id) = w(r) * (k hashed N(0, 1) values),  k = interaction_rank
    label   ~ Bernoulli(sigmoid(logit))

(bags average e and u over their ids). The signal sits in the Zipf head, where a model sees
each id often enough to learn it (`head_size` ids: the default 100 puts it in a few hot
rows; 100_000 or more spreads it, what a comparison of compressions needs); hashing ids
into fewer buckets than the head merges planted effects and costs AUC. `oracle_auc(split)`
is the AUC of the planted logit: the best any model can reach on that split.
Measured with the defaults (seed 0, 200k/20k/20k rows, test split): oracle AUC 0.870; an MLP
over full tables (dim 16, SparseAdam 3e-3, batch 512) 0.850 after 1,500 steps, 0.802 with
every field hashed into 100 buckets; logistic regression on one-hot ids from 30k rows 0.849
(ids mod 1000: 0.836; mod 16: 0.707).

synthetic-text. Documents of length uniform in [seq_len // 4, seq_len] (at least 1) draw
tokens 1..V-1 by Zipf rank (id 0 pads). A share `indicative_share` of token ids (hashed;
never the 100 most frequent, which act as stopwords) each point to one hashed class; a
document's class scores count its indicative tokens per class, and label = argmax(scores +
label_noise * Gumbel noise). `oracle_accuracy(split)` is the accuracy of argmax(scores), the
Bayes-optimal prediction: 0.730 with the defaults (4 classes, V = 50,000, seq_len 64);
naive Bayes or logistic regression on token counts of the 200k train rows 0.62-0.63.
"""

from __future__ import annotations

import math
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch

from autoembed.batch import MISSING_ID, PAD_ID, Batch
from autoembed.config import TableConfig
from autoembed.data.base import BaseDataset, IntArray, split_index
from autoembed.data.keyed_random import hash64, normal, permute, uniform
from autoembed.data.metrics import accuracy, roc_auc
from autoembed.data.spec import DataSpec
from autoembed.zipf import zipf_frequency, zipf_ranks

__all__ = ["SyntheticCTR", "SyntheticText", "DEFAULT_TEXT_VOCAB", "DEFAULT_TEXT_SEQ_LEN"]

FloatArray = npt.NDArray[np.float64]

DEFAULT_TEXT_VOCAB = 50_000  # synthetic-text table rows (id 0 is padding)
DEFAULT_TEXT_SEQ_LEN = 64  # synthetic-text padded sequence length
_CHUNK = 65_536  # rows generated at a time for a whole split (bounds the temporaries)
# A split whose rows take at most this many bytes is generated once, on first use, and kept
# as tensors: its batches are then index slices of it (the same rows in the same order).
CACHE_BYTES = 256 << 20
# A field with at most this many ids keeps its per-id draws (scramble, planted effect and
# factors) in arrays of V entries, computed once, instead of hashing them per row.
ID_TABLE_MAX = 1 << 18
# The most frequent token ranks are never indicative (like stopwords): a few very common
# tokens pointing to one class would tilt most documents, and the labels, towards it.
STOPWORD_RANKS = 100

# Hash purpose tags: each random quantity gets its own stream.
_ROW, _LEN, _EFFECT, _FACTOR, _LABEL, _PERM = 1, 2, 3, 4, 5, 6
_TOKEN, _DOC_LEN, _CLASS, _INDICATIVE, _NOISE, _TOKEN_PERM = 11, 12, 13, 14, 15, 16


def _sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free form
    return out


# Per-id draws (elementwise over ids, so a table of them over [0, V) can stand in).
def _effect(ids: IntArray, seed: int, f: int) -> FloatArray:
    return normal(hash64(seed, _EFFECT, f, ids))


def _factors(ids: IntArray, seed: int, f: int, rank: int) -> FloatArray:
    return normal(hash64(seed, _FACTOR, f, ids[..., None], np.arange(rank, dtype=np.uint64)))


def _indicative(tokens: IntArray, seed: int, share: float) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = uniform(hash64(seed, _INDICATIVE, tokens)) < share
    return out


def _token_class(tokens: IntArray, seed: int, k: int) -> IntArray:
    return (hash64(seed, _CLASS, tokens) % np.uint64(k)).astype(np.int64)


class _Rows(NamedTuple):
    """Generated rows: the batch and a score per row (ctr: the planted logit; text: the
    oracle's predicted class)."""

    batch: Batch
    score: npt.NDArray[Any]


class _Synthetic(BaseDataset):
    """Rows are `_generate(split, rows)`, a pure function of (seed, split, row). A split of at
    most `CACHE_BYTES` is generated once and kept; its batches and oracle read the kept rows,
    so a batch is the same whether sliced from them or generated on its own."""

    def __init__(self, spec: DataSpec, task: str, num_classes: int,
                 tables: tuple[TableConfig, ...], seq_len: int) -> None:
        super().__init__(spec, task, num_classes, tables, seq_len, None)
        self._kept: dict[int, _Rows] = {}
        self._id_draws: dict[tuple[int, int], npt.NDArray[Any]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the kept rows and tables (rebuilt where they are used)."""
        state = dict(self.__dict__)
        state.update(_kept={}, _id_draws={}, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    @abstractmethod
    def _generate(self, split: int, rows: IntArray) -> _Rows: ...

    @abstractmethod
    def _row_bytes(self) -> int:
        """Bytes one kept row takes (features, label, score)."""

    def num_rows(self, split: str) -> int:
        return self.spec.rows[split_index(split)]

    def kept_bytes(self) -> int:
        """Host bytes the kept splits take once every split is used (the splits of at most
        `CACHE_BYTES`; larger ones are streamed): a worker's memory beyond its model."""
        sizes = (n * self._row_bytes() for n in self.spec.rows)
        return sum(b for b in sizes if b <= CACHE_BYTES)

    def _per_id(self, key: tuple[int, int], v: int, fn: Callable[[IntArray], npt.NDArray[Any]],
                ids: IntArray) -> npt.NDArray[Any]:
        """fn(ids) for ids in [0, v) (fn elementwise over ids): read from fn's table over all
        v ids, computed once, when v <= ID_TABLE_MAX."""
        if v > ID_TABLE_MAX:
            return fn(ids)
        table = self._id_draws.get(key)
        if table is None:
            table = self._id_draws[key] = fn(np.arange(v, dtype=np.int64))
        return table[ids]

    def _chunks(self, split: int) -> Iterator[_Rows]:
        n = self.spec.rows[split]
        for start in range(0, n, _CHUNK):
            yield self._generate(split, np.arange(start, min(n, start + _CHUNK), dtype=np.int64))

    def _split(self, split: int) -> _Rows | None:
        """Every row of the split, generated on first use; None when the split is too big to
        keep (it is then generated batch by batch)."""
        with self._lock:
            whole = self._kept.get(split)
            if whole is None and self.spec.rows[split] * self._row_bytes() <= CACHE_BYTES:
                parts = list(self._chunks(split))
                whole = _Rows(Batch.concat([p.batch for p in parts]),
                              np.concatenate([p.score for p in parts]))
                self._kept[split] = whole
            return whole

    def _rows(self, split: int, positions: IntArray) -> Batch:
        whole = self._split(split)
        if whole is None:
            return self._generate(split, positions).batch
        return whole.batch.take(torch.from_numpy(positions))

    def _whole(self, split: str) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """(labels, scores) of every row of the split, in unshuffled batch order (read-only
        views of the kept split, or generated chunk by chunk and not kept)."""
        s = split_index(split)
        whole = self._split(s)
        if whole is not None:
            return whole.batch.labels.numpy(), whole.score
        labels, scores = [], []
        for part in self._chunks(s):
            labels.append(part.batch.labels.numpy())
            scores.append(part.score)
        return np.concatenate(labels), np.concatenate(scores)

    def split_labels(self, split: str) -> npt.NDArray[Any]:
        """The labels of every row of the split, in unshuffled batch order."""
        return self._whole(split)[0].copy()


class SyntheticCTR(_Synthetic):
    """Categorical fields f0..f{F-1} with Zipf ids and a planted logistic label model."""

    def __init__(self, spec: DataSpec) -> None:
        self._vocabs = spec.vocab_sizes
        self._exps = spec.exponents()
        self._bags = spec.bag_sizes or (1,) * len(spec.vocab_sizes)
        self._pairs = spec.pairs()
        self._names = tuple(f"f{i}" for i in range(len(self._vocabs)))
        tables = tuple(
            TableConfig(
                name,
                v,
                pooling_factor=(bag + 1) / 2.0,  # bag lengths are uniform in [1, bag]
                frequency=zipf_frequency(v, s),
            )
            for name, v, s, bag in zip(
                self._names, self._vocabs, self._exps, self._bags, strict=True
            )
        )
        super().__init__(spec, "ctr", 2, tables, 1)

    def _row_bytes(self) -> int:
        return 8 * sum(self._bags) + 4 + 8

    # ------------------------------------------------------------------ generation
    def _generate(self, split: int, rows: IntArray) -> _Rows:
        sp = self.spec
        seed = sp.seed
        r = rows.astype(np.uint64)[:, None]
        n = rows.size
        logit = np.full(n, sp.ctr_bias, dtype=np.float64)
        in_pair = {f for p in self._pairs for f in p}
        factors: dict[int, FloatArray] = {}
        feats: dict[str, torch.Tensor] = {}
        for f, (name, v, s, bag) in enumerate(
            zip(self._names, self._vocabs, self._exps, self._bags, strict=True)
        ):
            slots = np.arange(bag, dtype=np.uint64)[None, :]
            u = uniform(hash64(seed, _ROW, split, r, f, slots))  # [n, bag]
            rank = zipf_ranks(u, v, s)
            ids = rank
            if sp.scramble:
                key = int(hash64(seed, _PERM, f)[0])
                ids = self._per_id((_PERM, f), v, partial(permute, n=v, key=key), rank)
            weight = np.where(rank < sp.head_size, 1.0, sp.tail_scale)
            if bag > 1:
                length = 1 + np.floor(uniform(hash64(seed, _LEN, split, r[:, 0], f)) * bag)
                present = slots.astype(np.float64) < length[:, None]
            else:
                present = np.ones((n, 1), dtype=bool)
            count = present.sum(axis=1)
            z = self._per_id((_EFFECT, f), v, partial(_effect, seed=seed, f=f), ids)
            effect = sp.effect_scale * weight * z
            logit += np.where(present, effect, 0.0).sum(axis=1) / count
            if f in in_pair:
                u_f = self._per_id((_FACTOR, f), v,
                                   partial(_factors, seed=seed, f=f, rank=sp.interaction_rank),
                                   ids)
                vec = np.where(present[..., None], weight[..., None] * u_f, 0.0)
                factors[f] = vec.sum(axis=1) / count[:, None]
            feats[name] = torch.from_numpy(np.where(present, ids, MISSING_ID).astype(np.int64))
        scale = sp.interaction_scale / math.sqrt(sp.interaction_rank)
        for f, g in self._pairs:
            logit += scale * (factors[f] * factors[g]).sum(axis=1)
        draw = uniform(hash64(seed, _LABEL, split, rows.astype(np.uint64)))
        labels = (draw < _sigmoid(logit)).astype(np.float32)
        return _Rows(Batch(feats, torch.from_numpy(labels)), logit)

    def hot_ids(self, field: str, count: int) -> IntArray:
        """The `count` most frequent ids of `field`, sorted: the ids of Zipf ranks
        0..count-1 through the field's id permutation (a hot/cold table's hot set, exact
        in expectation and with no pass over the data)."""
        f = self._names.index(field)
        ranks = np.arange(min(count, self._vocabs[f]), dtype=np.int64)
        if not self.spec.scramble:
            return ranks
        return np.sort(permute(ranks, self._vocabs[f], int(hash64(self.spec.seed, _PERM, f)[0])))

    # ------------------------------------------------------------------ oracle
    def oracle_scores(self, split: str) -> FloatArray:
        """The planted logit of every row of the split, in unshuffled batch order."""
        scores: FloatArray = self._whole(split)[1].copy()
        return scores

    def oracle_auc(self, split: str) -> float:
        """AUC of the planted logit on the split: the best achievable AUC."""
        labels, logits = self._whole(split)
        return roc_auc(logits, labels)


class SyntheticText(_Synthetic):
    """Zipf token sequences with planted token -> class associations."""

    def __init__(self, spec: DataSpec) -> None:
        self._vocab = spec.vocab_size or DEFAULT_TEXT_VOCAB
        seq_len = spec.seq_len or DEFAULT_TEXT_SEQ_LEN
        self._exp = spec.exponents()[0]
        self._min_len = max(1, seq_len // 4)
        table = TableConfig(
            "tokens",
            self._vocab,
            pooling_factor=float(seq_len),
            frequency=zipf_frequency(self._vocab - 1, self._exp),  # over real tokens 1..V-1
        )
        super().__init__(spec, "text", spec.num_classes, (table,), seq_len)

    def _row_bytes(self) -> int:
        return 8 * self.seq_len + 8 + 8

    def _generate(self, split: int, rows: IntArray) -> _Rows:
        """Tokens [n, seq_len] and labels [n], scored by the oracle's predictions [n]."""
        sp = self.spec
        seed, k, v = sp.seed, sp.num_classes, self._vocab
        r = rows.astype(np.uint64)[:, None]
        slots = np.arange(self.seq_len, dtype=np.uint64)[None, :]
        span = self.seq_len - self._min_len + 1
        length = self._min_len + np.floor(uniform(hash64(seed, _DOC_LEN, split, r[:, 0])) * span)
        present = slots.astype(np.float64) < length[:, None]
        draws = uniform(hash64(seed, _TOKEN, split, r, slots))
        rank = zipf_ranks(draws, v - 1, self._exp)
        ids = rank
        if sp.scramble:
            key = int(hash64(seed, _TOKEN_PERM)[0])
            ids = self._per_id((_TOKEN_PERM, 0), v - 1, partial(permute, n=v - 1, key=key), rank)
        tokens = np.where(present, ids + 1, PAD_ID).astype(np.int64)
        indicative = (
            present
            & (rank >= STOPWORD_RANKS)
            & self._per_id((_INDICATIVE, 0), v,
                           partial(_indicative, seed=seed, share=sp.indicative_share), tokens)
        )
        cls = self._per_id((_CLASS, 0), v, partial(_token_class, seed=seed, k=k), tokens)
        scores = np.stack([(indicative & (cls == c)).sum(axis=1) for c in range(k)], axis=1)
        scores = scores.astype(np.float64)
        u = uniform(hash64(seed, _NOISE, split, r, np.arange(k, dtype=np.uint64)[None, :]))
        gumbel = -np.log(-np.log(np.clip(u, 1e-300, None)))
        labels = np.argmax(scores + sp.label_noise * gumbel, axis=1).astype(np.int64)
        oracle = np.argmax(scores, axis=1).astype(np.int64)
        return _Rows(Batch({"tokens": torch.from_numpy(tokens)}, torch.from_numpy(labels)),
                     oracle)

    def oracle_accuracy(self, split: str) -> float:
        """Accuracy of the planted scores' argmax: the best achievable accuracy."""
        labels, oracle = self._whole(split)
        return accuracy(oracle, labels)
