"""Storages of `autoembed.nn` layers for ROBE, tensor-train and hot/cold, and `COMPRESSIONS`
(every layer compression's storage by name): the layouts and lookups of the config-built
tables (`autoembed.models`; rules in `autoembed.compression`), so `apply` rewrites a user's
nn.Embedding into exactly what the config prices. ``robe_size`` is a count or a share in
(0, 1) of V x D values; hot/cold's ``hot_ids`` default to ids 0..hot-1.

Bags pool the looked-up rows (sum, mean; per-sample weights in sum). The layer draws the
parameters so that the rows' entries have the mean and std it starts from (`nn.draws`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.compression import (
    METHOD_RULES,
    check_hot_cold,
    check_robe,
    check_tt,
    cold_rows,
    hot_count,
    robe_blocks,
    tt_dims,
    tt_rows,
    tt_shapes,
)
from autoembed.errors import ConfigError
from autoembed.nn.draws import draw_tt
from autoembed.nn.hashing import hash_id_reference, hash_ids
from autoembed.nn.lookup import pool_rows
from autoembed.nn.storage import BASE_STORAGES, _Storage

__all__ = ["COMPRESSIONS", "robe_seed", "robe_positions", "tt_indices", "tt_lookup",
           "checked_hot_ids", "hot_cold_rows"]


def robe_seed(hash_seed: int, field: int) -> int:
    """Hash seed of field `field`: the splitmix64 output of (field, hash_seed), 63 bits."""
    return hash_id_reference(field, 1 << 63, hash_seed)


def robe_positions(
    idx: torch.Tensor, size: int, block: int, dim: int, seed: int
) -> torch.Tensor:
    """Array positions [..., dim] of the rows of ids `idx` (see `autoembed.compression`)."""
    blocks = robe_blocks(dim, block)
    keys = idx.unsqueeze(-1) * blocks + torch.arange(blocks, device=idx.device)
    start = hash_ids(keys, size, seed)  # [..., blocks]
    pos = torch.remainder(start.unsqueeze(-1) + torch.arange(block, device=idx.device), size)
    return pos.flatten(-2)[..., :dim]


def tt_indices(
    idx: torch.Tensor, factors: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(i1, i2, i3) of ids: i = i1 * v2 * v3 + i2 * v3 + i3."""
    _, v2, v3 = factors
    return (
        torch.div(idx, v2 * v3, rounding_mode="floor"),
        torch.remainder(torch.div(idx, v3, rounding_mode="floor"), v2),
        torch.remainder(idx, v3),
    )


def tt_lookup(
    idx: torch.Tensor,
    cores: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    row_factors: tuple[int, int, int],
    dim_factors: tuple[int, int, int],
    rank: int,
) -> torch.Tensor:
    """Rows [..., d1 d2 d3] of ids `idx` from cores in `tt_shapes`' layout: G0[i1] . G1[i2]
    . G2[i3], two batched matmuls."""
    d1, d2, d3 = dim_factors
    r = rank
    i1, i2, i3 = (i.reshape(-1) for i in tt_indices(idx, row_factors))
    n = i1.shape[0]
    g0 = F.embedding(i1, cores[0]).view(n, d1, r)
    g1 = F.embedding(i2, cores[1]).view(n, r, d2 * r)
    g2 = F.embedding(i3, cores[2]).view(n, r, d3)
    t = torch.bmm(g0, g1).view(n, d1 * d2, r)
    return torch.bmm(t, g2).view(*idx.shape, d1 * d2 * d3)


def checked_hot_ids(hot_ids: Any, vocab: int, size: int | None) -> torch.Tensor:
    """`hot_ids` as a 1-D int64 tensor, refused (ConfigError) unless integers, sorted,
    distinct, in [0, vocab) and, when `size` is given, that many."""
    given = torch.as_tensor(hot_ids)
    if given.dtype.is_floating_point or given.dtype.is_complex or given.dtype == torch.bool:
        raise ConfigError(f"hot ids: {given.dtype} values given; hot ids are integer ids "
                          "(int64), as hot_ids_from_counts gives them")
    ids = given.to(torch.int64).reshape(-1)
    if size is not None and ids.numel() != size:
        raise ConfigError(f"hot ids: {ids.numel()} given, the table was built for {size}; "
                          "give the hot set it was built with")
    if ids.numel() < 1:
        raise ConfigError("hot ids: none given; a hot/cold table needs at least 1")
    if not is_fake(ids) and not ids.is_meta:
        ok = bool((ids[1:] > ids[:-1]).all()) and int(ids[0]) >= 0
        if not ok or int(ids[-1]) >= vocab:
            raise ConfigError(f"hot ids must be distinct, sorted and in [0, {vocab}); sort and "
                              "deduplicate them (hot_ids_from_counts does)")
    return ids


def hot_cold_rows(idx: torch.Tensor, hot_ids: torch.Tensor, cold: int, seed: int) -> torch.Tensor:
    """Row of every non-negative id: p = searchsorted(hot_ids, id), the row p when
    hot_ids[p] == id (a hot id), else hot + hash_ids(id, cold, seed) (a cold id)."""
    hot = hot_ids.shape[0]
    pos = torch.searchsorted(hot_ids, idx).clamp(max=hot - 1)
    if cold == 0:
        return pos  # every id is hot
    return torch.where(hot_ids[pos] == idx, pos, hot + hash_ids(idx, cold, seed))


class _Computed(_Storage):
    """Rows computed per id (robe, tt) from parameters every lookup reads (dense gradients,
    nothing row-wise to pack): bags pool the computed rows."""

    one_row_per_id = False

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return pool_rows(self.rows(ids), offsets, mode, psw)


class _Robe(_Computed):
    why_not_packed = METHOD_RULES["robe"].why_serving

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *,
                 robe_size: int | float, robe_block: int = 8, hash_seed: int = 0) -> None:
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

    def _layout(self, size: int, block: int, dims: tuple[int, ...], seed: int,
                first_field: int = 0) -> None:
        """An array of `size` values read in blocks of `block` by fields of dims `dims`;
        field f hashes with `robe_seed(seed, first_field + f)`."""
        check_robe(size, block)
        self.size, self.block, self.dims = size, block, dims
        self.hash_seed = seed
        self.seeds = tuple(robe_seed(seed, first_field + f) for f in range(len(dims)))

    def positions(self, ids: torch.Tensor, field: int = 0) -> torch.Tensor:
        """Array positions [*ids.shape, D] of field `field`'s rows of `ids`."""
        return robe_positions(ids, self.size, self.block, self.dims[field], self.seeds[field])

    def rows(self, ids: torch.Tensor, field: int = 0) -> torch.Tensor:
        return self.weight[self.positions(ids, field)]


class _TT(_Computed):
    why_not_packed = METHOD_RULES["tt"].why_serving

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, tt_rank: int = 8) -> None:
        super().__init__(num, dim, factory)
        check_tt(tt_rank)
        self.rank, self.row_factors, self.dim_factors = tt_rank, tt_rows(num), tt_dims(dim)
        shapes = tt_shapes(num, dim, tt_rank)
        self.core0, self.core1, self.core2 = (
            nn.Parameter(torch.empty(shape, **factory)) for _, shape in shapes)

    def _draw(self, mean: float, std: float) -> None:
        """Cores whose products have entries of `mean` and `std` (`draws.draw_tt`; at the
        default (0, 1) every core N(0, r^(-2/3)))."""
        draw_tt((self.core0, self.core1, self.core2), self.dim_factors, self.rank, mean, std)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return tt_lookup(ids, (self.core0, self.core1, self.core2), self.row_factors,
                         self.dim_factors, self.rank)


class _HotCold(_Storage):
    hot_ids: torch.Tensor
    stored_rows = True  # an id reads one row of ``weight`` as it is

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, hot_share: float = 0.01,
                 hash_buckets: int | None = None, hash_seed: int = 0,
                 hot_ids: Any = None) -> None:
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

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any) -> None:
        """A loaded hot set is checked as a built one is (`checked_hot_ids`), and kept as
        the set `reset_parameters` restores."""
        loaded = state_dict.get(prefix + "hot_ids")
        if loaded is not None:
            checked_hot_ids(loaded, self.num, self.hot_ids.numel())
        super()._load_from_state_dict(state_dict, prefix, *args)
        if not is_fake(self.hot_ids) and not self.hot_ids.is_meta:
            self._hot_host = self.hot_ids.detach().cpu().clone()

    @property
    def hash_seed(self) -> int | None:  # type: ignore[override]
        """The cold ids' seed (None: every id is hot)."""
        return self.seed if self.cold else None

    def row_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Row of every non-negative id (`hot_cold_rows`)."""
        return hot_cold_rows(ids, self.hot_ids, self.cold, self.seed)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._lookup("weight", self.row_of(ids))

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return self._bag_of("weight", self.row_of(ids), offsets, mode, psw)


# Every compression of `autoembed.nn`'s layers, by name: the one registry (new compressions
# plug in here)
COMPRESSIONS: dict[str, type[_Storage]] = {**BASE_STORAGES, "robe": _Robe, "tt": _TT,
                                           "hot_cold": _HotCold}
