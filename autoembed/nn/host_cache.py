"""The host-resident table with a device cache (placement `host_cached`), shared by the
`autoembed.nn` layers' host-cached storage and the built-in models' `HostCachedTable`.

As FBGEMM's UVM-cached tables: the host holds ``host_weight`` [R, D] and every row's
optimizer state, the device ``cache_weight`` [C, D] (the only nn.Parameter) and the cached
rows' state; a lookup first makes every row of the batch resident, evicting the policy's
victim (LRU / LFU) outside the batch. What lives where, one step, what training is exact
under and what is refused: docs/host_cache.md. Under fake tensors (a traced estimate) the
slot remap is skipped, and host tensors, created under `host_allocations`, are left out of
device memory.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import astuple, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.optim import Optimizer

from autoembed.errors import ConfigError, DataError
from autoembed.memory.types import host_allocations
from autoembed.nn.dynamic_ids import DynamicIds
from autoembed.nn.hashing import hash_ids
from autoembed.nn.lookup import sparse_bag_weights
from autoembed.nn.storage import PackedWeights

__all__ = ["HostCache", "CacheStats", "ROW_STATE", "EMPTY", "host_cached_tables", "layer_storage",
           "bind_host_cached", "CachedStorage", "host_allocations"]

# Per-row optimizer state tensors moved with a row: name in the torch optimizer's state ->
# per-element (True: [rows, D]) or per-row (False: [rows]) (torch.optim.Adagrad `sum`,
# SparseAdam `exp_avg`/`exp_avg_sq`, models/optim.RowWiseAdagrad `sum`; SGD keeps none).
ROW_STATE: dict[str, tuple[tuple[str, bool], ...]] = {
    "sgd": (),
    "adagrad": (("sum", True),),
    "rowwise_adagrad": (("sum", False),),
    "sparse_adam": (("exp_avg", True), ("exp_avg_sq", True)),
}
EMPTY = -1
# table optimizer name -> the torch optimizer class that steps it (models.optim.make_optimizer)
_OPTIMIZER_KIND = {"sgd": "SGD", "adagrad": "Adagrad", "rowwise_adagrad": "RowWiseAdagrad",
                   "sparse_adam": "SparseAdam"}


@dataclass(frozen=True)
class CacheStats:
    """Counts since the table was built (or `reset_stats`). Distinct rows per batch count
    once: `hits + misses` = the sum over batches of distinct rows looked up."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes_to_device: int = 0
    bytes_to_host: int = 0
    uncached_reads: int = 0  # rows read around the cache by an oversize no-grad batch
    batches: int = 0  # forward calls
    seconds: float = 0.0  # wall time making rows resident (lookups, eviction, copies)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else math.nan

    def __add__(self, other: CacheStats) -> CacheStats:
        """Field by field (`seconds`, the last field, as a float)."""
        *counts, seconds = (x + y for x, y in zip(astuple(self), astuple(other), strict=True))
        return CacheStats(*map(int, counts), seconds=seconds)  # type: ignore[misc]


class HostCache(PackedWeights):
    """A [rows, dim] table held on the host with a `cache_rows`-row cache on `device`: the
    table of an `autoembed.nn` layer with placement host_cached (`CachedStorage`: torch's
    calls, `lookup` / `lookup_bag`) and, subclassed with pooling, the built-in models'
    (`autoembed.models.host_cached_table.HostCachedTable`).

    rows = known rows (`vocab`) + `dynamic_rows` (ids >= vocab, `DynamicIds`); `buckets`
    hashes ids first (compression hash). `optimizer` names the table optimizer whose per-row
    state moves with the rows (ROW_STATE); `state_dtype` its dtype for per-element state.
    `pad_row`: a row that starts at zero (a text table's padding row), or None.
    """

    quantizable = False  # serving packs device weights; this table's rows live on the host
    why_not_packed = "placement host_cached serves the table as trained (its rows live on the host)"

    def __init__(
        self,
        vocab: int,
        dim: int,
        cache_rows: int,
        policy: str,
        optimizer: str,
        *,
        buckets: int | None = None,
        seed: int = 0,
        dynamic_rows: int = 0,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        init_std: float | None = None,
        pad_row: int | None = None,
        init_mean: float = 0.0,
    ) -> None:
        super().__init__()
        if policy not in ("lru", "lfu"):
            raise ValueError(f"cache policy '{policy}' is not lru or lfu")
        if optimizer not in ROW_STATE:
            raise ValueError(
                f"optimizer '{optimizer}' cannot be host-cached; use one of {list(ROW_STATE)}"
            )
        dev = torch.device(device)
        self.buckets = buckets
        self.seed = seed
        self.policy = policy
        self.optimizer_name = optimizer
        self.known_rows = vocab
        self.pad_row = pad_row
        # N(init_mean, init_std^2) rows; default std 1/sqrt(dim), PlainTable's (the nn
        # layers: the layer's init moments, torch's (0, 1) by default)
        self.init_std = 1.0 / math.sqrt(dim) if init_std is None else init_std
        self.init_mean = init_mean
        rows = vocab + dynamic_rows
        pin = dev.type == "cuda"
        with host_allocations():  # not device memory: a traced estimate leaves it out
            host = torch.empty((rows, dim), dtype=dtype, device="cpu")
            self.host_weight = _pinned(host, pin)
            self.host_state: dict[str, torch.Tensor] = {
                name: _pinned(_zeros_state(rows, dim, per_elem, dtype), pin)
                for name, per_elem in ROW_STATE[optimizer]
            }
            self.slot_of_row = _pinned(torch.full((rows,), EMPTY, dtype=torch.int64,
                                                  device="cpu"), pin)
            self.use_count = _pinned(torch.zeros(rows, dtype=torch.int64, device="cpu"), pin)
            self.dynamic = DynamicIds(vocab, dynamic_rows, seed) if dynamic_rows else None
            self._draw_host()
        # --- device: the cache
        self.cache_weight = nn.Parameter(torch.zeros((cache_rows, dim), device=dev, dtype=dtype))
        self.cache_state: dict[str, torch.Tensor] = {
            name: _zeros_state(cache_rows, dim, per_elem, dtype).to(dev)
            for name, per_elem in ROW_STATE[optimizer]
        }
        self.slot_row = torch.full((cache_rows,), EMPTY, dtype=torch.int64, device=dev)
        self.slot_last = torch.zeros(cache_rows, dtype=torch.int64, device=dev)
        self.slot_count = torch.zeros(cache_rows, dtype=torch.int64, device=dev)
        self.clock = 0
        self.stats = CacheStats()  # training forwards (grad enabled)
        self.eval_stats = CacheStats()  # no-grad forwards (evaluation, serving)
        self._tmp_weight: torch.Tensor | None = None
        self._bound: weakref.ref[Optimizer] | None = None  # by bind_optimizer

    @torch.no_grad()
    def _draw_host(self) -> None:
        """The full table's initial rows: N(init_mean, init_std^2) (PlainTable's draw at its
        default; dynamic rows from their own generator); a text table's pad row zero."""
        host, vocab = self.host_weight, self.known_rows
        host[:vocab].normal_(self.init_mean, self.init_std)
        if host.shape[0] > vocab:  # own stream: the known rows and the tower keep the draws
            g = torch.Generator().manual_seed(self.seed + 1)
            host[vocab:] = torch.randn((host.shape[0] - vocab, host.shape[1]), generator=g,
                                       device="cpu").mul_(self.init_std).add_(
                                           self.init_mean).to(host.dtype)
        if self.pad_row is not None:
            host[self.pad_row].zero_()

    # ----------------------------------------------------------------- structure
    @property
    def cache_rows(self) -> int:
        return int(self.cache_weight.shape[0])

    @property
    def rows(self) -> int:
        return int(self.host_weight.shape[0])

    def row_bytes(self) -> int:
        """Bytes one row moves with: its weight and its optimizer state."""
        w = self.host_weight
        return w.shape[1] * w.element_size() + sum(
            t[0].numel() * t.element_size() for t in self.host_state.values()
        )

    def host_tensors(self) -> dict[str, torch.Tensor]:
        out = {"host_weight": self.host_weight, "slot_of_row": self.slot_of_row,
               "use_count": self.use_count}
        out.update({f"host_{k}": v for k, v in self.host_state.items()})
        if self.dynamic is not None:
            out["dynamic_owner"] = self.dynamic.owner
        return out

    def device_bookkeeping(self) -> dict[str, torch.Tensor]:
        return {"slot_row": self.slot_row, "slot_last": self.slot_last,
                "slot_count": self.slot_count}

    def host_bytes(self) -> int:
        """Bytes of the host tensors (exact: `memory.cache_model` prices the same)."""
        return sum(t.numel() * t.element_size() for t in self.host_tensors().values())

    def bind_optimizer(self, optimizer: Optimizer) -> None:
        """Make `optimizer`'s state for `cache_weight` the cache's state tensors (the rows move
        with their state); creates it as the optimizer would on its first step. An optimizer
        of another kind than the table's `optimizer` is a ConfigError: its state would stay
        with the cache slots when their rows change."""
        kind = _OPTIMIZER_KIND[self.optimizer_name]
        if type(optimizer).__name__ != kind or getattr(optimizer, "defaults", {}).get(
                "momentum", 0.0):
            raise ConfigError(
                f"a host_cached table built for optimizer '{self.optimizer_name}' cannot be "
                f"stepped by {type(optimizer).__name__}: its state would not move with the "
                f"rows; step it with {kind}{' without momentum' if kind == 'SGD' else ''} "
                "(autoembed.build_optimizer makes it)")
        st = optimizer.state[self.cache_weight]
        if self.optimizer_name == "sparse_adam" and "step" not in st:
            st["step"] = 0
        st.update(self.cache_state)
        stray = [k for k, v in st.items()
                 if isinstance(v, torch.Tensor) and v.dim() > 0 and k not in self.cache_state]
        if stray:  # a torch version with other state names: the rows would lose that state
            raise RuntimeError(f"{type(optimizer).__name__} keeps per-row state {stray} that "
                               "the host cache does not move; update ROW_STATE")
        self._bound = weakref.ref(optimizer)

    def reset_stats(self) -> None:
        self.stats = CacheStats()
        self.eval_stats = CacheStats()

    def _count(self, s: CacheStats, training: bool) -> None:
        if training:
            self.stats = self.stats + s
        else:
            self.eval_stats = self.eval_stats + s

    # ----------------------------------------------------------------- the cache
    @torch.no_grad()
    def _write_back(self, slots: torch.Tensor) -> torch.Tensor:
        """Copy the rows held in `slots` (weight and state) to the host; returns the rows."""
        rows = self.slot_row[slots].cpu()
        self.host_weight[rows] = self.cache_weight[slots].to("cpu", self.host_weight.dtype)
        for k, t in self.cache_state.items():
            self.host_state[k][rows] = t[slots].cpu()
        return rows

    @torch.no_grad()
    def _fill(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        dev = self.cache_weight.device
        self.cache_weight[slots] = self.host_weight[rows].to(dev, non_blocking=True)
        for k, t in self.cache_state.items():
            t[slots] = self.host_state[k][rows].to(dev, non_blocking=True)
        self.slot_row[slots] = rows.to(dev)
        self.slot_of_row[rows] = slots.cpu()

    def _victims(self, needed: int, keep: torch.Tensor) -> torch.Tensor:
        """`needed` slots outside `keep` (bool [C]): empty ones first (lowest index), then by
        the policy (LRU: oldest `slot_last`; LFU: fewest `slot_count`, then oldest); ties go
        to the lowest slot. O(C) per call (top-k and k-th value, no sort of the cache)."""
        c = self.cache_rows
        idx = torch.arange(c, device=self.cache_weight.device)
        empty = self.slot_row == EMPTY
        never = torch.iinfo(torch.int64).max
        # LRU order as one unique key: empties (negative) first, then (last use, slot)
        lru = (self.slot_last + 1) * c + idx
        lru = torch.where(empty, idx - c, lru).masked_fill_(keep, never)
        if self.policy == "lru":
            return torch.topk(lru, needed, largest=False, sorted=True).indices
        count = torch.where(empty, -1, self.slot_count).masked_fill_(keep, never)
        kth = torch.kthvalue(count, needed).values
        below = (count < kth).nonzero().squeeze(1)  # all of these go
        at = (count == kth).nonzero().squeeze(1)  # the rest by LRU among the tied
        rest = needed - below.numel()
        pick = at[torch.topk(lru[at], rest, largest=False, sorted=True).indices]
        return torch.cat((below, pick))

    @torch.no_grad()
    def resident_slots(self, rows: torch.Tensor, training: bool = True) -> torch.Tensor:
        """Make `rows` (1-D int64 host tensor) resident; return their slots (same shape).
        `training`: count in `stats` (else `eval_stats`)."""
        t0 = time.perf_counter()
        uniq, inverse, counts = torch.unique(rows, return_inverse=True, return_counts=True)
        if uniq.numel() > self.cache_rows:
            raise DataError(
                f"a batch looks up {uniq.numel()} distinct rows of a host_cached table whose "
                f"cache holds {self.cache_rows}; train with batches no larger than the config's "
                "batch_size, or raise cache_load_factor"
            )
        self.clock += 1
        self.use_count.index_add_(0, uniq, counts)
        slots = self.slot_of_row[uniq].clone()
        miss = slots < 0
        n_miss = int(miss.sum())
        dev = self.cache_weight.device
        evicted = 0
        if n_miss:
            keep = torch.zeros(self.cache_rows, dtype=torch.bool, device=dev)
            keep[slots[~miss].to(dev)] = True
            victims = self._victims(n_miss, keep)
            occupied = victims[self.slot_row[victims] != EMPTY]
            evicted = int(occupied.numel())
            if evicted:
                self.slot_of_row[self._write_back(occupied)] = EMPTY
            self._fill(victims, uniq[miss])
            slots[miss] = victims.cpu()
        slots_dev = slots.to(dev)
        self.slot_last[slots_dev] = self.clock
        self.slot_count[slots_dev] = self.use_count[uniq].to(dev)
        rb = self.row_bytes()
        out = slots[inverse]
        if dev.type == "cuda":
            torch.cuda.current_stream(dev).synchronize()  # the copies are part of the cost
        self._count(CacheStats(
            lookups=int(rows.numel()), hits=int(uniq.numel()) - n_miss, misses=n_miss,
            evictions=evicted, bytes_to_device=n_miss * rb, bytes_to_host=evicted * rb,
            batches=1, seconds=time.perf_counter() - t0,
        ), training)
        return out

    @torch.no_grad()
    def read_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Current values of `rows` (host copy, overlaid by the cache where cached) without
        changing the cache."""
        out = self.host_weight[rows].to(self.cache_weight.device)
        slots = self.slot_of_row[rows]
        hit = slots >= 0
        if bool(hit.any()):
            out[hit.to(out.device)] = self.cache_weight[slots[hit].to(out.device)]
        return out

    @torch.no_grad()
    def flush(self) -> None:
        """Write every cached row (weight and state) back to the host; the cache stays valid.
        Under fake tensors (a traced estimate) no row is cached: nothing to write."""
        if is_fake(self.slot_row):
            return
        held = (self.slot_row != EMPTY).nonzero().squeeze(1)
        if held.numel():
            self._write_back(held)

    def full_weight(self) -> torch.Tensor:
        """The whole table's current values (a host tensor)."""
        self.flush()
        return self.host_weight

    @torch.no_grad()
    def fold_rare(self, min_count: int) -> list[int]:
        """Free the dynamic rows used fewer than `min_count` times: their ids fold into the hash
        fallback, the rows (weights re-initialised to 0, state to 0, counts to 0) go back to
        the free list. Returns the ids that lost their rows."""
        if self.dynamic is None:
            return []
        base = self.known_rows
        counts = self.use_count[base:]
        held = self.dynamic.owner != EMPTY
        rare = (held & (counts < min_count)).nonzero().squeeze(1) + base
        if rare.numel() == 0:
            return []
        slots = self.slot_of_row[rare]
        cached = slots[slots >= 0].to(self.cache_weight.device)
        if cached.numel():  # drop them from the cache without writing back
            self.slot_row[cached] = EMPTY
            self.slot_last[cached] = 0
            self.slot_count[cached] = 0
        self.slot_of_row[rare] = EMPTY
        self.host_weight[rare] = 0
        for t in self.host_state.values():
            t[rare] = 0
        self.use_count[rare] = 0
        return self.dynamic.release(rare)

    @property
    def hash_seed(self) -> int | None:
        """The seed that hashes ids into the table's rows (None: ids are not hashed)."""
        return self.seed if self.buckets is not None else None

    # ----------------------------------------------------------------- checkpoints
    def _saved(self) -> dict[str, torch.Tensor]:
        """What a checkpoint holds beyond `cache_weight`: the host table, its state and
        counts, and the cache's bookkeeping (the cached rows' state is flushed to the host
        copy first, so it is restored from there)."""
        out = {f"host.{k}": v for k, v in self.host_tensors().items()}
        out.update({f"cache.{k}": v for k, v in self.device_bookkeeping().items()})
        out["cache.clock"] = torch.tensor(self.clock)
        return out

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        self.flush()
        for k, v in self._saved().items():
            destination[prefix + k] = v if keep_vars else v.detach()

    @torch.no_grad()
    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        missing: list[str] = args[2] if len(args) > 2 else []
        for k, v in self._saved().items():
            got = state_dict.pop(prefix + k, None)
            if got is None:
                missing.append(prefix + k)
            elif k == "cache.clock":
                self.clock = int(got)
            else:
                v.copy_(got)
        super()._load_from_state_dict(state_dict, prefix, *args)
        if self.dynamic is not None:
            self.dynamic.load_owner(self.dynamic.owner)
        held = (self.slot_row != EMPTY).nonzero().squeeze(1)
        rows = self.slot_row[held].cpu()
        for k, t in self.cache_state.items():  # the cached rows' state, from the host copy
            t[held] = self.host_state[k][rows].to(t.device)

    # ----------------------------------------------------------------- lookups
    def _host_rows(self, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Table rows of ids `idx` (hashed, then dynamic ids mapped; where `valid`), on the
        host; an id outside the table is a DataError."""
        if self.buckets is not None:
            idx = hash_ids(idx, self.buckets, self.seed)
        idx = idx.cpu()
        if self.dynamic is not None:
            idx = torch.where(valid, self.dynamic.map(idx.clamp(min=0)), idx)
        top = int(idx[valid].max()) if bool(valid.any()) else -1
        if top >= self.rows:
            raise DataError(
                f"id {top} is outside the table's {self.rows} rows; size the vocabulary to the "
                "data, or give placement host_cached dynamic_rows for ids never seen before"
            )
        return idx

    def _resident(self, rows: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(None, slots) of host `rows` made resident; a no-grad batch with more distinct rows
        than the cache: (their values read around it, index into those) instead."""
        if torch.is_grad_enabled() or int(torch.unique(rows).numel()) <= self.cache_rows:
            return None, self.resident_slots(rows, training=torch.is_grad_enabled())
        uniq, inverse = torch.unique(rows, return_inverse=True)
        self._count(CacheStats(lookups=int(rows.numel()), uncached_reads=int(uniq.numel())),
                    training=False)
        return self.read_rows(uniq), inverse

    # ----------------------------------------------- an autoembed.nn layer's storage
    # torch's calls (`autoembed.nn.Embedding(..., placement="host_cached")`): ids of any
    # shape, every id a lookup; cache_weight takes sparse gradients.
    def _weight_and_index(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, index): weight[index] are the rows of `ids`. A training lookup needs the
        table bound to its optimizer. Under fake tensors (a traced estimate) the cache is
        read with the ids as they are: the slot remap is data-dependent, and the device
        side is priced as a cache_rows-row table, as `trace.traced` prices it."""
        if self.training and torch.is_grad_enabled() and self.cache_weight.requires_grad:
            self._check_bound()
        if is_fake(self.cache_weight):
            return self.cache_weight, ids
        flat = ids.reshape(-1)
        rows = self._host_rows(flat, torch.ones(flat.shape, dtype=torch.bool))
        read, got = self._resident(rows)
        w = self.cache_weight if read is None else read
        return w, got.view(ids.shape).to(w.device)

    def _check_bound(self) -> None:
        """The optimizer bound still steps `cache_weight` (else a ConfigError); if its state
        was replaced since (`opt.load_state_dict`), bind it again: the cache's own state,
        restored with the module's state_dict, is the one that moves with the rows."""
        opt = self._bound() if self._bound is not None else None
        if opt is None or not _steps(opt, self.cache_weight):
            raise ConfigError(
                "a host_cached table trains only bound to its optimizer (its state moves with "
                "the rows); build the optimizer with autoembed.build_optimizer(model, config), "
                f"or call <layer>.store.bind_optimizer(opt) with a "
                f"{_OPTIMIZER_KIND[self.optimizer_name]}")
        st = opt.state.get(self.cache_weight, {})
        if any(st.get(k) is not t for k, t in self.cache_state.items()):
            self.bind_optimizer(opt)

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """[*ids.shape, D]: torch.nn.Embedding's lookup through the cache."""
        w, idx = self._weight_and_index(ids)
        return F.embedding(idx, w, sparse=True)

    def lookup_bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
                   psw: torch.Tensor | None) -> torch.Tensor:
        """torch.nn.EmbeddingBag's pooling through the cache."""
        w, idx = self._weight_and_index(ids)
        return F.embedding_bag(idx, w, offsets, mode=mode, sparse=True,
                               per_sample_weights=sparse_bag_weights(psw, idx, True))

    @torch.no_grad()
    def load_full(self, weight: torch.Tensor) -> None:
        """Start from `weight` [n <= rows, D] (e.g. the table it replaces): the first n host
        rows take its values, the optimizer state is zero, the cache is emptied."""
        with host_allocations():
            w = weight.detach().to("cpu", self.host_weight.dtype)
            self.host_weight[:w.shape[0]].copy_(w)
        self._empty_cache()

    @torch.no_grad()
    def _empty_cache(self) -> None:
        """No row cached, no row used, all optimizer state zero."""
        with host_allocations():
            for t in self.host_state.values():
                t.zero_()
            self.slot_of_row.fill_(EMPTY)
            self.use_count.zero_()
        self.slot_row.fill_(EMPTY)
        self.slot_last.zero_()
        self.slot_count.zero_()
        self.cache_weight.zero_()
        for t in self.cache_state.values():
            t.zero_()
        self.clock = 0

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """A fresh table (new draws, zero state, empty cache): `autoembed.materialize`."""
        with host_allocations():
            self._draw_host()
        self._empty_cache()

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        """`.to()`, `.cuda()`, `.half()`, `to_empty`: the device side follows `fn`; the host
        side stays on the host and takes the dtype `fn` gives."""
        super()._apply(fn, recurse)
        self.follow(fn)
        return self

    def follow(self, fn: Any) -> None:
        """Apply `fn` (a `Module._apply` function) to the tensors outside parameters and
        buffers, as `_apply` does: the cache's state and slots follow it; the host tensors
        stay on the host in the dtype it gives."""
        was_meta = self.slot_row.is_meta
        dev = self.cache_weight.device
        for name, t in self.device_bookkeeping().items():
            setattr(self, name, fn(t))
        # per-row state (rowwise_adagrad) stays fp32, as the host copy
        self.cache_state = {k: fn(t) if t.dim() > 1 else fn(t).to(t.dtype)
                            for k, t in self.cache_state.items()}
        dtype = fn(torch.empty(0, dtype=self.host_weight.dtype)).dtype
        pin = dev.type == "cuda"
        with host_allocations():
            self.host_weight = _pinned(self.host_weight.to(dtype), pin)
            self.host_state = {k: _pinned(t.to(t.dtype if t.dim() == 1 else dtype), pin)
                               for k, t in self.host_state.items()}
        if was_meta and not self.slot_row.is_meta:
            self._empty_cache()  # to_empty from the meta device: no values yet, start empty


def layer_storage(num: int, dim: int, compression: str, factory: dict[str, Any], *,
                  cache_rows: int | None = None, cache_policy: str = "lru",
                  table_optimizer: str = "rowwise_adagrad", dynamic_rows: int = 0,
                  hash_buckets: int | None = None, hash_seed: int = 0,
                  **rest: Any) -> CachedStorage:
    """The host-cached storage of an `autoembed.nn` layer of `num` ids: compression none (one
    row per id, plus `dynamic_rows`) or hash (min(num, hash_buckets) rows, ids hashed as the
    layer's hash storage hashes them); `cache_rows` of them on `factory`'s device; rows start
    N(0, 1) as torch's nn.Embedding (other `init` moments: `CachedStorage.start`). Bad
    settings are one-line ConfigErrors."""
    if rest:
        raise ConfigError(f"placement host_cached does not take {', '.join(sorted(rest))}; "
                          "give cache_rows, cache_policy, table_optimizer, dynamic_rows")
    if compression not in ("none", "hash"):
        raise ConfigError(f"compression '{compression}' with placement host_cached: the cache "
                          "holds plain or hashed rows; use compression none or hash")
    from autoembed.config import CACHE_POLICIES
    from autoembed.nn.storage import hash_layout

    buckets = hash_layout(num, hash_buckets)[1] if compression == "hash" else None
    if dynamic_rows < 0 or (dynamic_rows and buckets is not None):
        raise ConfigError(f"dynamic_rows = {dynamic_rows}: rows for new ids extend an unhashed "
                          "table; give 0, or compression none")
    rows = (buckets or num) + dynamic_rows
    if not isinstance(cache_rows, int) or not 1 <= cache_rows <= rows:
        raise ConfigError(f"cache_rows = {cache_rows!r}: the cache holds 1 to {rows} of the "
                          f"table's {rows} rows; give an int in that range")
    if cache_policy not in CACHE_POLICIES:
        raise ConfigError(f"cache_policy = {cache_policy!r}: use {' or '.join(CACHE_POLICIES)}")
    if table_optimizer not in ROW_STATE:
        raise ConfigError(f"table_optimizer = {table_optimizer!r} cannot step a host_cached "
                          "table (a row not looked up must not change); use one of "
                          f"{', '.join(ROW_STATE)}")
    dtype = factory.get("dtype") or torch.get_default_dtype()
    return CachedStorage(HostCache(
        buckets or num, dim, cache_rows, cache_policy, table_optimizer, buckets=buckets,
        seed=hash_seed, dynamic_rows=dynamic_rows,
        device=factory.get("device") or torch.empty(0).device, dtype=dtype, init_std=1.0), num)


class CachedStorage(nn.Module):
    """The storage of an `autoembed.nn` layer with placement host_cached: torch's calls
    (`rows`, `bag`, `full`, as the layers' other storages) over a `HostCache`."""

    quantizable = False  # see HostCache
    # what the layer asks of a storage (`autoembed.nn._Storage`): a lookup reads one row
    # (sparse), bags are pools of rows; rows move, so max_norm has no stored row to renormalise
    pools_linearly = True
    one_row_per_id = True
    stored_rows = False

    def __init__(self, table: HostCache, num: int) -> None:
        super().__init__()
        self.table, self.num = table, num  # num: the layer's ids (the table's rows unhashed)
        self.packed: dict[str, Any] = {}  # never packed

    @property
    def identity(self) -> bool:
        """Id i reads table row i (compression none)."""
        return self.table.buckets is None

    @property
    def hash_seed(self) -> int | None:
        return self.table.hash_seed

    @property
    def takes_new_ids(self) -> bool:
        """Ids beyond the table's get rows of their own (dynamic_rows)."""
        return self.table.dynamic is not None

    def start(self, init: Any) -> None:
        """The host rows start N(mean, std^2), `init` = (mean, std) (drawn again only when
        it differs from the draw they hold)."""
        table = self.table
        mean, std = float(init[0]), float(init[1])
        if (mean, std) != (table.init_mean, table.init_std):
            table.init_mean, table.init_std = mean, std
            with host_allocations():
                table._draw_host()

    @property
    def takes_init_fn(self) -> bool:
        """A torch init function is matched in mean and std (the rows live on the host)."""
        return False

    @torch.no_grad()
    def zero_row(self, row: int) -> None:
        """Row `row` starts, and restarts after `reset_parameters`, at zero (torch's padding
        row)."""
        self.table.pad_row = row
        with host_allocations():
            self.table.host_weight[row].zero_()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table.lookup(ids)

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return self.table.lookup_bag(ids, offsets, mode, psw)

    def full(self) -> torch.Tensor:
        """The [V, D] table of ids 0..V-1, current (host rows, the cache flushed into them):
        a hashed id reads its bucket's row; rows held for new ids (dynamic_rows) are left
        out."""
        table = self.table
        host = table.full_weight()
        if table.buckets is None:
            return host[:table.known_rows]
        return host[hash_ids(torch.arange(self.num), table.buckets, table.seed)]

    def first_row(self) -> torch.Tensor:
        """Row 0 of the host rows ([1, D]), as `full()` reads them: their dtype, device and
        grad are the table's, read without decoding (nor flushing) the table."""
        return self.table.host_weight[:1]

    def bind_optimizer(self, optimizer: Optimizer) -> None:
        """`HostCache.bind_optimizer`: for an optimizer built by hand."""
        self.table.bind_optimizer(optimizer)


def bind_host_cached(model: nn.Module, optimizers: Any) -> None:
    """Bind each host-cached table of `model` to the optimizer (of `optimizers`) that steps
    its `cache_weight`; one that none steps, or whose optimizer cannot move its state, is a
    ConfigError."""
    for name, table in host_cached_tables(model):
        opt = next((o for o in optimizers if _steps(o, table.cache_weight)), None)
        if opt is None:
            raise ConfigError(f"host_cached table '{name}': no optimizer steps its cache_weight; "
                              "give it to one (autoembed.build_optimizer does)")
        table.bind_optimizer(opt)


def _steps(optimizer: Optimizer, param: torch.Tensor) -> bool:
    """Whether `optimizer` steps `param` (one of its groups holds it)."""
    return any(p is param for g in optimizer.param_groups for p in g["params"])


def _zeros_state(rows: int, dim: int, per_elem: bool, dtype: torch.dtype) -> torch.Tensor:
    # per-element state has the parameter dtype (torch.optim: zeros_like / full_like(p));
    # RowWiseAdagrad's per-row sum is fp32
    cpu = torch.device("cpu")
    return torch.zeros((rows, dim), dtype=dtype, device=cpu) if per_elem else torch.zeros(
        rows, device=cpu)


def _pinned(t: torch.Tensor, pin: bool) -> torch.Tensor:
    return t.pin_memory() if pin else t


def host_cached_tables(model: nn.Module) -> list[tuple[str, HostCache]]:
    """(name, table) of every host-cached table in `model`."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, HostCache)]
