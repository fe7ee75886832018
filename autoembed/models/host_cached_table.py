"""The built-in models' host-resident table with a device cache (placement `host_cached`):
`autoembed.nn.host_cache.HostCache` (the structures, the cache policy, checkpoints:
its module docstring) pooled as a built-in table, and what a trial reports about its cache
(`cache_metrics`). The names of `autoembed.nn.host_cache` are re-exported here.

`HostCachedTable.forward` pools one field's [B, L] ids as the other tables do
(`autoembed.models.embedding`): the batch's rows are made resident, then the lookup reads
the cache. A text table without hashing pads in place: row PAD_ID starts at zero.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from autoembed.batch import PAD_ID
from autoembed.models.embedding import LookupSpec, TableModule
from autoembed.nn.host_cache import CacheStats, HostCache, bind_host_cached, host_cached_tables

__all__ = ["HostCachedTable", "HostCache", "CacheStats", "host_cached_tables", "total_stats",
           "cache_metrics", "bind_host_cached"]


class HostCachedTable(TableModule, HostCache):
    """A `HostCache` of `vocab` (+ `dynamic_rows`) rows pooled by `spec`; rows start
    N(0, init_std), by default 1/sqrt(dim) (PlainTable's draw)."""

    def __init__(self, vocab: int, dim: int, cache_rows: int, policy: str, optimizer: str,
                 spec: LookupSpec, **kw: Any) -> None:
        """`HostCache`'s arguments (`buckets`, `seed`, `dynamic_rows`, `device`, `dtype`,
        `init_std` by keyword), pooled by `spec`."""
        pad = PAD_ID if spec.text and kw.get("buckets") is None else None
        HostCache.__init__(self, vocab, dim, cache_rows, policy, optimizer, pad_row=pad, **kw)
        self.spec = spec

    @property
    def pads_in_place(self) -> bool:
        """Text ids index rows unchanged, so row PAD_ID is the padding row."""
        return self.pad_row is not None

    def _rows_of(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(table rows, valid mask) of one field's [B, L] ids, on the host."""
        if self.pads_in_place:
            idx, valid = ids, ids != PAD_ID
        else:
            idx, valid = self._masked(ids)
        return self._host_rows(idx, valid.cpu()), valid.cpu()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Pooled [B, dim] of one field's [B, L] ids."""
        idx, valid = self._rows_of(ids)
        dev = self.cache_weight.device
        read, got = self._resident(idx[valid])
        self._tmp_weight = read
        name = "cache_weight" if read is None else "_tmp_weight"
        sidx = torch.zeros_like(idx)
        sidx[valid] = got
        sidx, valid = sidx.to(dev), valid.to(dev)
        try:
            if self.spec.pooling == "naive":
                return self._maybe_checkpoint(self._naive, name, sidx, valid)
            return self._bags(name, [sidx], [valid])[0]
        finally:
            self._tmp_weight = None if name == "_tmp_weight" else self._tmp_weight

    def _naive(self, name: str, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self._pool_rows(self._rows(name, idx, valid, None), valid)


def total_stats(model: nn.Module) -> CacheStats:
    """Training-forward cache counts summed over the model's host-cached tables."""
    return sum((t.stats for _, t in host_cached_tables(model)), CacheStats())


def cache_metrics(model: nn.Module, steps: int, train_seconds: float) -> dict[str, float]:
    """What a trial reports about its cache (empty without host-cached tables): hit rate
    over distinct rows per batch, bytes moved per step (both ways), and the share of the
    training time spent making rows resident -- the throughput cost of misses."""
    tables = host_cached_tables(model)
    if not tables or steps <= 0:
        return {}
    s = total_stats(model)
    return {
        "cache_hit_rate": s.hit_rate,
        "cache_bytes_per_step": (s.bytes_to_device + s.bytes_to_host) / steps,
        "cache_misses_per_step": s.misses / steps,
        "cache_time_share": s.seconds / train_seconds if train_seconds > 0 else math.nan,
    }
