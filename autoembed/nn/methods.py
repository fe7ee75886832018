"""Storages of `autoembed.nn` layers for ROBE, tensor-train and hot/cold (issue 16).

The same layouts and lookups as the config-built tables (`autoembed.models.robe`, `tt`,
`hot_cold`; rules in `autoembed.compression`), so `apply` rewrites a user's nn.Embedding
into exactly what the config prices:

* ``robe``: ``weight`` [robe_size] (a count, or a share in (0, 1) of V x D values);
  rows read ceil(D / robe_block) blocks at hashed offsets (field 0's seed of `hash_seed`).
* ``tt``: ``core0``, ``core1``, ``core2`` of rank `tt_rank` (`compression.tt_shapes`).
* ``hot_cold``: ``weight`` [hot + cold, D] and the buffer ``hot_ids`` (sorted ids: `hot_ids`
  given, e.g. the hot sets saved beside an exported config, else ids 0..hot-1), cold ids
  hashed into `hash_buckets` rows.

Bags pool the looked-up rows (sum, mean; per-sample weights in sum). Initialisation is
torch's for an embedding: rows of N(0, 1) entries (tt: cores with std r^(-1/3), so a row's
entries have variance 1).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autoembed.compression import (
    check_hot_cold,
    check_robe,
    check_tt,
    cold_rows,
    hot_count,
    tt_dims,
    tt_init_std,
    tt_rows,
    tt_shapes,
)
from autoembed.errors import ConfigError
from autoembed.nn import _Storage

__all__ = ["METHOD_STORAGES"]


def _pool(rows: torch.Tensor, offsets: torch.Tensor | None, mode: str,
          psw: torch.Tensor | None) -> torch.Tensor:
    """Bags of per-id rows: [B, L, D] (no offsets) or [N, D] cut at `offsets`."""
    if psw is not None:
        rows = rows * psw.unsqueeze(-1).to(rows.dtype)
    if offsets is None:
        return rows.sum(dim=-2) if mode == "sum" else rows.mean(dim=-2)
    n = rows.shape[0]
    bag = torch.bucketize(torch.arange(n, device=rows.device), offsets, right=True) - 1
    out = rows.new_zeros(offsets.shape[0], rows.shape[-1]).index_add(0, bag, rows)
    if mode == "mean":
        count = torch.bincount(bag, minlength=offsets.shape[0]).clamp(min=1)
        out = out / count.unsqueeze(1).to(out.dtype)
    return out


class _Computed(_Storage):
    """Rows computed per id (robe, tt): bags pool the computed rows."""

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return _pool(self.rows(ids), offsets, mode, psw)


class _Robe(_Computed):
    def __init__(self, num: int, dim: int, factory: dict[str, Any], *,
                 robe_size: int | float, robe_block: int = 8, hash_seed: int = 0,
                 **_: Any) -> None:
        from autoembed.config import buckets_of

        super().__init__(num, dim, factory)
        if isinstance(robe_size, float) and not 0.0 < robe_size < 1.0:
            raise ConfigError(f"robe_size = {robe_size}: a share of the table's values is in "
                              "(0, 1); give a count for more")
        size = buckets_of(robe_size, num * dim)
        if isinstance(robe_size, float):
            size = max(robe_block, size)  # at least one block, as the config resolves it
        self._layout(size, robe_block, (dim,), hash_seed)
        self.weight = nn.Parameter(torch.empty(size, **factory))
        if self.draws_init and not self.weight.is_meta:
            nn.init.normal_(self.weight)

    def _layout(self, size: int, block: int, dims: tuple[int, ...], seed: int,
                first_field: int = 0) -> None:
        """An array of `size` values read in blocks of `block` by fields of dims `dims`;
        field f hashes with `robe_seed(seed, first_field + f)`."""
        from autoembed.models.robe import robe_seed

        check_robe(size, block)
        self.size, self.block, self.dims = size, block, dims
        self.seeds = tuple(robe_seed(seed, first_field + f) for f in range(len(dims)))

    def positions(self, ids: torch.Tensor, field: int = 0) -> torch.Tensor:
        """Array positions [*ids.shape, D] of field `field`'s rows of `ids`."""
        from autoembed.models.robe import robe_positions

        return robe_positions(ids, self.size, self.block, self.dims[field], self.seeds[field])

    def rows(self, ids: torch.Tensor, field: int = 0) -> torch.Tensor:
        return self.weight[self.positions(ids, field)]


class _TT(_Computed):
    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, tt_rank: int = 8,
                 **_: Any) -> None:
        super().__init__(num, dim, factory)
        check_tt(tt_rank)
        self.rank, self.row_factors, self.dim_factors = tt_rank, tt_rows(num), tt_dims(dim)
        shapes = tt_shapes(num, dim, tt_rank)
        self.core0, self.core1, self.core2 = (
            nn.Parameter(torch.empty(shape, **factory)) for _, shape in shapes)
        if not self.core0.is_meta:
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Cores of std r^(-1/3): a row's entries have variance 1, as torch's rows."""
        for p in (self.core0, self.core1, self.core2):
            nn.init.normal_(p, 0.0, tt_init_std(1, self.rank))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        from autoembed.models.tt import tt_lookup

        return tt_lookup(ids, (self.core0, self.core1, self.core2), self.row_factors,
                         self.dim_factors, self.rank)


class _HotCold(_Storage):
    hot_ids: torch.Tensor

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, hot_share: float = 0.01,
                 hash_buckets: int | None = None, hash_seed: int = 0, hot_ids: Any = None,
                 **_: Any) -> None:
        from autoembed.models.hot_cold import checked_hot_ids

        super().__init__(num, dim, factory)
        check_hot_cold(hot_share, hash_buckets if hash_buckets is not None else 0)
        assert hash_buckets is not None  # checked: >= 1
        hot = hot_count(num, hot_share)
        ids = checked_hot_ids(torch.arange(hot) if hot_ids is None else hot_ids, num, hot)
        self._layout(ids, cold_rows(num, hot_share, hash_buckets), hash_seed)

    def _layout(self, ids: torch.Tensor, cold: int, seed: int) -> None:
        """The buffer ``hot_ids`` (checked `ids`) and ``weight`` [hot + cold, D]."""
        self.cold, self.seed = cold, seed
        self._hot_host = ids.cpu()  # kept to restore the buffer after materialize's to_empty
        device = self.factory.get("device")
        real = None if device is not None and torch.device(device).type == "meta" else device
        self.register_buffer("hot_ids", ids.to(real or "cpu"))
        self.weight = self._param(int(ids.shape[0]) + cold, self.dim)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.hot_ids.copy_(self._hot_host)

    def row_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Row of every non-negative id (`models.hot_cold.hot_cold_rows`)."""
        from autoembed.models.hot_cold import hot_cold_rows

        return hot_cold_rows(ids, self.hot_ids, self.cold, self.seed)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(self.row_of(ids), self.weight)

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return F.embedding_bag(self.row_of(ids), self.weight, offsets, mode=mode,
                               per_sample_weights=psw)


METHOD_STORAGES: dict[str, type[_Storage]] = {"robe": _Robe, "tt": _TT, "hot_cold": _HotCold}
