"""Hot/cold table: the hot ids each own a row, the rest hash into cold buckets.

Layout: `autoembed.compression` (`hot_count`, `cold_rows`). One weight [hot + cold, D]; the
hot set is a buffer ``hot_ids`` (sorted, distinct int64 ids). An id's row:

    p = searchsorted(hot_ids, id)
    row = p                                  if hot_ids[p] == id  (a hot id)
          hot + hash_ids(id, cold, seed)     otherwise            (a cold id)

so no id -> row map over the vocabulary exists (8 B per hot id, not per id). Lookups,
pooling, sparse gradients and int8/int4 serving are a plain table's
(`autoembed.models.embedding.TableModule`), applied to the mapped rows.

`hot_ids_from_counts` picks the hot set from a split's id counts (most frequent first, ties
to the smaller id).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.errors import ConfigError
from autoembed.models.computed import projection
from autoembed.models.embedding import LookupSpec, TableModule
from autoembed.models.hashing import hash_ids

__all__ = ["HotColdTable", "hot_ids_from_counts", "install_hot_sets", "train_id_counts"]

_COUNT_BATCH = 65_536  # train rows read at a time when counting ids


def hot_ids_from_counts(counts: npt.ArrayLike, hot: int) -> npt.NDArray[np.int64]:
    """The `hot` ids with the largest counts (counts[i] = lookups of id i), sorted by id.
    Ties go to the smaller id (a stable sort), so the set is a pure function of the counts."""
    c = np.asarray(counts)
    if not 1 <= hot <= c.size:
        raise ConfigError(f"hot ids = {hot}: must be in [1, {c.size}] (the table's ids)")
    order = np.argsort(-c, kind="stable")[:hot]
    return np.sort(order).astype(np.int64)


def train_id_counts(dataset: Any, field: str, vocab: int) -> npt.NDArray[np.int64]:
    """Lookups of every id of `field` over the train split (missing ids and pads left out)."""
    counts = np.zeros(vocab, dtype=np.int64)
    for b in dataset.batches("train", _COUNT_BATCH, shuffle=False):
        ids = b.features[field].numpy().reshape(-1)
        ids = ids[(ids >= 0) & (ids < vocab)]
        counts += np.bincount(ids, minlength=vocab)
    return counts


def install_hot_sets(model: nn.Module, dataset: Any) -> None:
    """Give every hot/cold table of `model` (in its ``tables``) its data's hot set: the
    generator's when the data has one (`hot_ids(field, count)`, synthetic-ctr), else the most
    frequent ids of the train split."""
    tables = getattr(model, "tables", {})
    for field, table in tables.items():
        if not isinstance(table, HotColdTable):
            continue
        hot = int(table.hot_ids.shape[0])
        if hasattr(dataset, "hot_ids"):
            ids = dataset.hot_ids(field, hot)
        else:
            ids = hot_ids_from_counts(train_id_counts(dataset, field, table.vocab), hot)
        table.set_hot_ids(torch.as_tensor(np.asarray(ids), dtype=torch.int64))


class HotColdTable(TableModule):
    """`weight` [len(hot_ids) + cold, dim]; ids in `hot_ids` own rows, the rest hash."""

    hot_ids: torch.Tensor

    def __init__(
        self,
        vocab: int,
        dim: int,
        hot_ids: torch.Tensor,
        cold: int,
        spec: LookupSpec,
        *,
        seed: int = 0,
        out_dim: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(spec)
        self.vocab, self.cold, self.seed = vocab, cold, seed
        self.register_buffer("hot_ids", torch.empty(0, dtype=torch.int64, device=device))
        self.set_hot_ids(hot_ids)
        hot = int(hot_ids.shape[0])
        self.weight = nn.Parameter(torch.empty((hot + cold, dim), device=device, dtype=dtype))
        with torch.no_grad():
            self.weight.normal_(0.0, 1.0 / math.sqrt(dim))
        self.proj = projection(dim, out_dim, device, dtype)

    def set_hot_ids(self, hot_ids: torch.Tensor) -> None:
        """Install a hot set (sorted, distinct ids in [0, vocab)) of the built size."""
        ids = hot_ids.to(device=self.hot_ids.device, dtype=torch.int64).reshape(-1)
        if self.hot_ids.numel() and ids.numel() != self.hot_ids.numel():
            raise ConfigError(
                f"hot ids: {ids.numel()} given, the table was built for {self.hot_ids.numel()}; "
                "give the hot set it was built with"
            )
        if not is_fake(ids) and ids.numel():
            ok = bool((ids[1:] > ids[:-1]).all()) and int(ids[0]) >= 0
            if not ok or int(ids[-1]) >= self.vocab:
                raise ConfigError(
                    f"hot ids must be distinct, sorted and in [0, {self.vocab}); sort and "
                    "deduplicate them (hot_ids_from_counts does)"
                )
        if ids.numel() < 1:
            raise ConfigError("hot ids: none given; a hot/cold table needs at least 1")
        self.hot_ids = ids

    def row_of(self, idx: torch.Tensor) -> torch.Tensor:
        """Row of every non-negative id."""
        hot = self.hot_ids.shape[0]
        pos = torch.searchsorted(self.hot_ids, idx).clamp(max=hot - 1)
        is_hot = self.hot_ids[pos] == idx
        if self.cold == 0:
            return pos  # every id is hot
        return torch.where(is_hot, pos, hot + hash_ids(idx, self.cold, self.seed))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Pooled [B, D] of one field's [B, L] ids."""
        idx, valid = self._masked(ids)
        idx = self.row_of(idx)
        if self.spec.pooling == "naive":
            out = self._maybe_checkpoint(self._naive, idx, valid)
        else:
            out = self._bags("weight", [idx], [valid])[0]
        return out if self.proj is None else self.proj(out)

    def _naive(self, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self._pool_rows(self._rows("weight", idx, valid, None), valid)
