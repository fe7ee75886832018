"""Shared machinery of the concrete data sets: split checks, row order, batching."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from autoembed.batch import Batch
from autoembed.config import TableConfig
from autoembed.data.keyed_random import hash64
from autoembed.data.spec import SPLITS, DataSpec
from autoembed.data.vocab import VocabMap, Vocabulary
from autoembed.errors import DataError
from autoembed.rules import Integer

__all__ = ["BaseDataset", "InMemoryDataset", "split_index", "split_rows", "row_order"]

IntArray = npt.NDArray[np.int64]

# Above this many rows a shuffle is an affine bijection i -> (a*i + b) mod n instead of a
# full permutation, whose index array would take 8 bytes a row (2^24 rows: 128 MiB).
_FULL_SHUFFLE_MAX = 1 << 24
_TAG_SHUFFLE = 91  # hash purpose tag of the affine shuffle's constants


def split_index(split: str) -> int:
    if split not in SPLITS:
        raise DataError(f"split '{split}' does not exist; use one of {', '.join(SPLITS)}")
    return SPLITS.index(split)


def split_rows(n: int, fractions: tuple[float, float, float], seed: int) -> tuple[IntArray, ...]:
    """Deterministic disjoint train/valid/test row positions of an n-row table.

    Sizes: valid = floor(n * f_valid), test = floor(n * f_test), train the rest; rows are
    assigned by a permutation drawn from `seed`. Train's positions are sorted; valid's and
    test's stay in the permutation's order, so that the first k rows of either (what an
    evaluation of `eval_batches` batches reads) are a uniform sample of it, whatever order
    the source table is in (by date, by user, by label).
    """
    n_valid = int(n * fractions[1])
    n_test = int(n * fractions[2])
    perm = np.random.default_rng([seed, 0x5B17]).permutation(n)
    bounds = (0, n - n_valid - n_test, n - n_test, n)
    parts = [perm[bounds[i] : bounds[i + 1]] for i in range(3)]
    return (np.sort(parts[0]), parts[1], parts[2])


def row_order(n: int, split: int, seed: int, shuffle: bool) -> IntArray | tuple[int, int]:
    """Row positions in visiting order, or (a, b) of an affine bijection for huge n."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    if n <= _FULL_SHUFFLE_MAX:
        return np.random.default_rng([seed, split, 0x5EED]).permutation(n).astype(np.int64)
    h = int(hash64(seed, _TAG_SHUFFLE, split)[0])
    a = (h >> 1) % n | 1
    while math.gcd(a, n) != 1:
        a += 2
    return (a, (h >> 7) % n)


class BaseDataset(ABC):
    """Common behaviour; subclasses provide `_rows(split, positions) -> Batch` and metadata.
    `unused`: a data file's columns that auto-detection left out, each with why."""

    unused: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        spec: DataSpec,
        task: str,
        num_classes: int,
        tables: tuple[TableConfig, ...],
        seq_len: int,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        # the metadata (`Dataset`): set once here, read-only by contract
        self.spec = spec
        self.task = task
        self.num_classes = num_classes
        self.tables = tables
        self.seq_len = seq_len
        self.vocabulary = vocabulary or Vocabulary({}, (), spec.to_dict())

    @property
    def vocab_maps(self) -> Mapping[str, VocabMap]:
        return self.vocabulary.maps

    def save_vocab(self, directory: str | Path) -> Path:
        """Write the vocabulary maps, label values and data spec to `<directory>/vocab.json`."""
        return self.vocabulary.save(directory)

    def config_values(self) -> dict[str, Any]:
        """The data-dependent EmbeddingConfig fields: pass to dataclasses.replace(config, ...)."""
        return {"task": self.task, "tables": self.tables, "num_classes": self.num_classes,
                "seq_len": self.seq_len, "data": self.spec.to_dict()}

    def __repr__(self) -> str:
        rows = "/".join(str(self.num_rows(s)) for s in SPLITS)
        return f"{type(self).__name__}({self.spec.name!r}, task={self.task}, rows={rows})"

    # ------------------------------------------------------------------ rows
    @abstractmethod
    def num_rows(self, split: str) -> int: ...

    @abstractmethod
    def _rows(self, split: int, positions: IntArray) -> Batch:
        """The batch of the split's rows at `positions` (in that order)."""

    def batches(
        self,
        split: str,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> Iterator[Batch]:
        """Stream one pass over a split in batches of `batch_size` rows.

        The order is a function of (seed, split) when shuffling, the split's row order
        otherwise; the last batch is short unless `drop_last`.
        """
        s = split_index(split)
        Integer(1).check_argument("batch_size", batch_size, DataError)
        n = self.num_rows(split)
        order = row_order(n, s, seed, shuffle)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            end = min(start + batch_size, n)
            if isinstance(order, tuple):
                a, b = order
                pos = (np.arange(start, end, dtype=object) * a + b) % n  # exact big-int math
                yield self._rows(s, pos.astype(np.int64))
            else:
                yield self._rows(s, order[start:end])


class InMemoryDataset(BaseDataset):
    """Encoded arrays in memory (real and user data): features [n, L] int64, labels [n]."""

    def __init__(
        self,
        spec: DataSpec,
        task: str,
        num_classes: int,
        tables: tuple[TableConfig, ...],
        seq_len: int,
        vocabulary: Vocabulary,
        features: dict[str, IntArray],
        labels: npt.NDArray[Any],
        splits: tuple[IntArray, ...],
    ) -> None:
        super().__init__(spec, task, num_classes, tables, seq_len, vocabulary)
        self._features = features
        label_dtype = np.float32 if task == "ctr" else np.int64
        self._labels = np.asarray(labels, dtype=label_dtype)
        self._splits = splits

    def num_rows(self, split: str) -> int:
        return int(self._splits[split_index(split)].size)

    def split_rows(self, split: str) -> IntArray:
        """Positions in the source table (after dropped rows) of the split's rows, in batch
        order: ascending for train, a seeded random order for valid and test (`split_rows`)."""
        return self._splits[split_index(split)].copy()

    def split_labels(self, split: str) -> npt.NDArray[Any]:
        """The labels of the split's rows, in unshuffled batch order."""
        return self._labels[self._splits[split_index(split)]].copy()

    def _rows(self, split: int, positions: IntArray) -> Batch:
        rows = self._splits[split][positions]
        feats = {k: torch.from_numpy(v[rows]) for k, v in self._features.items()}
        return Batch(feats, torch.from_numpy(self._labels[rows]))
