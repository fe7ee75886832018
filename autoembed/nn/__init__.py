"""Drop-in embedding layers with autoembed's compressions: `Embedding` and `EmbeddingBag` take
torch's call signatures (`input`, `offsets`, `per_sample_weights`, `padding_idx`, bag modes)
and store the table as the compression says:

* ``none``: ``weight`` [V, D] (exactly torch's layer);
* ``hash``: ``weight`` [min(V, hash_buckets), D]; ids hashed (`autoembed.nn.hashing.hash_ids`)
  when V > hash_buckets;
* ``qr``: ``q_weight`` [ceil(V / m), Dq] and ``r_weight`` [m, Dq], rows combined by
  ``mult`` / ``add`` / ``concat`` (Dq = D / 2 for concat); bags pool each part first, as
  DLRM's QREmbeddingBag;
* ``mixed_dim``: ``weight`` [V, d] and ``proj`` (Linear d -> D, no bias);
* ``robe``, ``tt``, ``hot_cold``: `autoembed.nn.methods`.

Serving: `autoembed.quantize(model, "int8" | "int4")` packs each layer's stored weights
(not mixed_dim's projection) into the built-in tables' row format, dequantized on lookup.
Placement: ``placement="host_cached"`` (compression none or hash) keeps the whole table and
its optimizer state in host memory and ``cache_rows`` rows on the device (``cache_policy``
lru / lfu, ``table_optimizer`` sgd / adagrad / rowwise_adagrad / sparse_adam, ``dynamic_rows``):
the store is `autoembed.nn.host_cache.HostCache`, the built-in models' cache too, and
``cache_weight`` [cache_rows, D] (sparse gradients) is its one parameter. A training forward
needs the table bound to its optimizer, whose state then moves with the rows:
`autoembed.build_optimizer(model, config)` binds it (a plain ``opt.step()`` loop then trains
it exactly as a device table); with an optimizer of your own, ``layer.store.bind_optimizer(opt)``
(an optimizer of another kind is a ConfigError). ``state_dict`` holds the full table (the
cache is flushed first). Not quantized by `autoembed.quantize` (its rows live on the host).

`full_weight()` decodes the whole [V, D] table (a tied output layer reads it each forward);
for a compressed layer the attribute ``weight`` is that decoded table, so code that reads
``embedding.weight`` sees a V x D tensor, never the compressed storage. New compressions
plug in through `COMPRESSIONS` (name -> storage class).

The storages are the one implementation of each compression: the built-in models' plain
(none / hash / shared / mixed_dim, and the wide part), QR, robe, tt and hot/cold tables
(`autoembed.models`) subclass them and add only their pooling, so a weight has the same name
in both (the names `config.param_specs` gives). The hash and mixed_dim weights were once
named ``bucket_weight`` and ``small_weight``: state_dicts saved under those names (and
their ``_packed`` serving rows) still load.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autoembed.errors import ConfigError
from autoembed.nn.hashing import hash_ids, qr_indices
from autoembed.nn.rowformat import unpack_rows

__all__ = ["Embedding", "EmbeddingBag", "COMPRESSIONS", "PackedWeights"]

LAYER_COMPRESSIONS = ("none", "hash", "qr", "mixed_dim", "robe", "tt", "hot_cold")


class PackedWeights(nn.Module):
    """Weights that int8/int4 serving (`autoembed.quantize`) replaces by packed rows: the one
    implementation the built-in tables and the `autoembed.nn` layers' storages share."""

    quantizable = True  # int8/int4 serving packs this module's weights into rows

    def __init__(self) -> None:
        super().__init__()
        # weight name -> (bits, dim, dtype) for weights replaced by packed uint8 rows
        self.packed: dict[str, tuple[int, int, torch.dtype]] = {}

    def pack_weight(
        self, name: str, packed: torch.Tensor, bits: int, *, dim: int, dtype: torch.dtype
    ) -> None:
        """Replace weight `name` by packed rows (buffer `<name>_packed`) that dequantize to
        [*, dim] in `dtype`."""
        self._parameters.pop(name, None)
        self.packed = {**self.packed, name: (bits, dim, dtype)}
        self.register_buffer(f"{name}_packed", packed)

    def unpacked(self, name: str, idx: torch.Tensor) -> torch.Tensor:
        """Rows `idx` of packed weight `name`, dequantized: [*idx.shape, dim]."""
        bits, dim, dtype = self.packed[name]
        return unpack_rows(getattr(self, f"{name}_packed")[idx], dim, bits, dtype)


class _Storage(PackedWeights):
    """How a table's rows are stored: `rows(ids)` -> [*ids.shape, D]; `bag(...)` pooled.
    Serving (`autoembed.quantize(model, "int8" | "int4")`) replaces each weight by packed
    rows (`PackedWeights`), dequantized as they are read.

    One class per compression holds its layout and its id -> row math; the built-in models'
    tables (`autoembed.models`: `PlainTable`, `QRTable`, `RobeTable`, `TTTable`,
    `HotColdTable`) subclass these and add only their pooling. A subclass with its own
    initialisation sets `draws_init` False (its parameters are created empty, then its
    `reset_parameters`). `old_names` maps a weight's former names to its name."""

    draws_init = True  # _param draws torch's N(0, 1) rows
    pools_linearly = True  # the mean of a bag is its sum over its size
    # a weight's former name -> its name: state_dicts saved under the old names still load
    old_names: dict[str, str] = {}

    def __init__(self, num: int, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.num, self.dim, self.factory = num, dim, factory

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any) -> None:
        for old, new in self.old_names.items():
            for suffix in ("", "_packed"):  # the weight, or its serving rows
                key = prefix + old + suffix
                if key in state_dict and prefix + new + suffix not in state_dict:
                    state_dict[prefix + new + suffix] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _lookup(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` of weight `name` ([*ids.shape, D]), dequantized when packed."""
        if name not in self.packed:
            return F.embedding(ids, getattr(self, name))
        return self.unpacked(name, ids)

    def _bag_of(self, name: str, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
                psw: torch.Tensor | None) -> torch.Tensor:
        """Bags of weight `name`'s rows; packed: the looked-up rows dequantized, then pooled."""
        if name not in self.packed:
            return F.embedding_bag(ids, getattr(self, name), offsets, mode=mode,
                                   per_sample_weights=psw)
        rows = self._lookup(name, ids.reshape(-1))
        at = torch.arange(ids.numel(), device=ids.device).view(ids.shape)
        return F.embedding_bag(at, rows, offsets, mode=mode, per_sample_weights=psw)

    def _param(self, rows: int, dim: int) -> nn.Parameter:
        w = nn.Parameter(torch.empty(rows, dim, **self.factory))
        if self.draws_init and not w.is_meta:
            nn.init.normal_(w)
        return w

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, 1) rows, as torch.nn.Embedding initialises its weight."""
        for p in self.parameters(recurse=False):
            nn.init.normal_(p)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def full(self) -> torch.Tensor:
        # where it lives now (after materialize); packed: its buffers
        device = next(iter([*self.parameters(), *self.buffers()])).device
        return self.rows(torch.arange(self.num, device=device))


class _Plain(_Storage):
    """One stored table ``weight`` [rows, d]: a row is ``weight[map(id)]``, then ``proj``
    (Linear d -> D, no bias) when d differs from D. Ids index rows as they are unless
    `buckets` is set (hash: `hash_ids` into that many rows).

    Compression none is this storage as it is; `_Hash` and `_MixedDim` set it up from their
    settings; the built-in models' `PlainTable` (none / hash / shared / mixed_dim, and the
    wide part) is this storage too."""

    buckets: int | None  # ids hashed into this many rows; None: an id is its row
    seed: int  # the hash seed
    proj: nn.Linear | None  # set by _plain (a class default would shadow the module)

    def __init__(self, num: int, dim: int, factory: dict[str, Any], weight: Any = None,
                 **_: Any) -> None:
        super().__init__(num, dim, factory)
        self._plain(num, dim, weight=weight)

    def _plain(self, rows: int, small_dim: int, buckets: int | None = None, seed: int = 0, *,
               weight: Any = None, proj: bool = False) -> None:
        """``weight`` [rows, small_dim] (drawn when `draws_init`; `weight` given: that one),
        then with `proj` ``proj`` (Linear small_dim -> D, no bias; torch's init draw)."""
        self.buckets, self.seed = buckets, seed
        self.weight = weight if weight is not None else self._param(rows, small_dim)
        self.proj = (nn.Linear(small_dim, self.dim, bias=False, **self.factory) if proj
                     else None)

    def _map(self, ids: torch.Tensor) -> torch.Tensor:
        """The row of each non-negative id."""
        if self.buckets is None:
            return ids
        return hash_ids(ids, self.buckets, self.seed)

    def _project(self, rows: torch.Tensor) -> torch.Tensor:
        """Stored rows (or bags of them) [..., d] -> [..., D]."""
        return rows if self.proj is None else self.proj(rows)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._project(self._lookup("weight", self._map(ids)))

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        return self._project(self._bag_of("weight", self._map(ids), offsets, mode, psw))

    def full(self) -> torch.Tensor:
        if self.packed or self.buckets is not None:
            return _Storage.full(self)
        return self._project(self.weight)


def hash_layout(num: int, hash_buckets: int | None) -> tuple[int, int | None]:
    """(rows, buckets) of a hashed table of `num` ids: min(num, hash_buckets) rows, ids
    hashed into `buckets` rows only when num > hash_buckets (else None: an id is its row)."""
    if not hash_buckets or hash_buckets < 1:
        raise ConfigError(f"compression hash needs hash_buckets >= 1, got {hash_buckets!r}")
    return min(num, hash_buckets), (hash_buckets if num > hash_buckets else None)


class _Hash(_Plain):
    """``weight`` [min(V, hash_buckets), D]; ids hashed when V > hash_buckets."""

    old_names = {"bucket_weight": "weight"}

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, hash_buckets: int | None,
                 hash_seed: int = 0, **_: Any) -> None:
        _Storage.__init__(self, num, dim, factory)
        rows, buckets = hash_layout(num, hash_buckets)
        self._plain(rows, dim, buckets, hash_seed)

    def full(self) -> torch.Tensor:
        return _Storage.full(self)  # decoded row by row, hashed or not


class _QR(_Storage):
    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, qr_collisions: int = 4,
                 qr_operation: str = "mult", **_: Any) -> None:
        super().__init__(num, dim, factory)
        if qr_operation == "concat" and dim % 2:
            raise ConfigError(f"qr_operation concat needs an even dim, got {dim}")
        self.m, self.op = max(1, int(qr_collisions)), qr_operation
        dq = dim // 2 if qr_operation == "concat" else dim
        self.q_weight = self._param(math.ceil(num / self.m), dq)
        self.r_weight = self._param(self.m, dq)

    @property
    def pools_linearly(self) -> bool:  # type: ignore[override]
        """mult: a bag's q * r is not linear in its rows, so a mean is no scaled sum."""
        return self.op != "mult"

    def _combine(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """A row (or pooled bag) from its quotient and remainder parts."""
        if self.op == "mult":
            return q * r
        if self.op == "add":
            return q + r
        return torch.cat([q, r], dim=-1)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        qi, ri = qr_indices(ids, self.m)
        return self._combine(self._lookup("q_weight", qi), self._lookup("r_weight", ri))

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        qi, ri = qr_indices(ids, self.m)
        q = self._bag_of("q_weight", qi, offsets, mode, psw)
        r = self._bag_of("r_weight", ri, offsets, mode, psw)
        return self._combine(q, r)


class _MixedDim(_Plain):
    """``weight`` [V, small_dim] and ``proj`` (Linear small_dim -> D, no bias)."""

    old_names = {"small_weight": "weight"}

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, small_dim: int,
                 **_: Any) -> None:
        _Storage.__init__(self, num, dim, factory)
        self._plain(num, small_dim, proj=True)


# compression name -> storage class (robe / tt / hot_cold: `autoembed.nn.methods`, below)
COMPRESSIONS: dict[str, type[_Storage]] = {
    "none": _Plain, "hash": _Hash, "qr": _QR, "mixed_dim": _MixedDim,
}


def _storage(num: int, dim: int, compression: str, factory: dict[str, Any],
             **settings: Any) -> _Storage:
    cls = COMPRESSIONS.get(compression)
    if cls is None:
        raise ConfigError(f"compression '{compression}' is not one an autoembed layer takes; "
                          f"use one of {', '.join(COMPRESSIONS)}")
    return cls(num, dim, factory, **settings)


class _Layer(nn.Module):
    """What Embedding and EmbeddingBag share: storage, decoded weight, padding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None,
                 compression: str, device: Any, dtype: Any, settings: dict[str, Any]) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.compression = compression
        factory = {"device": device, "dtype": dtype}
        self.placement = settings.pop("placement", "device")
        self.sparse = self.placement == "host_cached"  # cache_weight: sparse gradients
        if self.placement == "host_cached":
            from autoembed.nn.host_cache import layer_storage

            self.store: Any = layer_storage(num_embeddings, embedding_dim, compression, factory,
                                            **settings)
        elif self.placement != "device":
            raise ConfigError(f"placement '{self.placement}': use device or host_cached")
        else:
            self.store = _storage(num_embeddings, embedding_dim, compression, factory,
                                  **settings)

    def __getattr__(self, name: str) -> Any:
        if name == "weight":  # torch's attribute: the decoded [V, D] table
            store: Any = super().__getattr__("store")
            return store.full()
        return super().__getattr__(name)

    def full_weight(self) -> torch.Tensor:
        """The whole table decoded to [V, D] (a tied output layer's weight)."""
        return self.store.full()

    def _pad_mask(self, ids: torch.Tensor) -> torch.Tensor | None:
        return None if self.padding_idx is None else (ids != self.padding_idx)

    def extra_repr(self) -> str:
        where = "" if self.placement == "device" else f", placement={self.placement}"
        return (f"{self.num_embeddings}, {self.embedding_dim}, "
                f"compression={self.compression}{where}")


class Embedding(_Layer):
    """torch.nn.Embedding's call (`input` -> [*input.shape, D]) over a compressed table.
    `padding_idx` rows read as zeros (and get no gradient); other torch options
    (max_norm, scale_grad_by_freq, sparse) are not taken."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 *, compression: str = "none", placement: str = "device", device: Any = None,
                 dtype: Any = None, **settings: Any) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, compression, device, dtype,
                         {**settings, "placement": placement})

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's name
        out = self.store.rows(input)
        mask = self._pad_mask(input)
        return out if mask is None else out * mask.unsqueeze(-1).to(out.dtype)


class EmbeddingBag(_Layer):
    """torch.nn.EmbeddingBag's call: `input` 2-D [B, L] (one bag a row) or 1-D with
    `offsets`, `per_sample_weights` (mode sum), modes sum / mean / max (max: uncompressed
    only). `padding_idx` entries are left out of each bag."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean",
                 padding_idx: int | None = None, *, compression: str = "none",
                 placement: str = "device", device: Any = None, dtype: Any = None,
                 **settings: Any) -> None:
        if mode not in ("sum", "mean", "max"):
            raise ConfigError(f"mode '{mode}': use sum, mean or max")
        if mode == "max" and compression not in ("none", "hash"):
            raise ConfigError(f"mode 'max' with compression '{compression}': the max of "
                              "combined parts is not the max of rows; use sum or mean")
        if mode == "max" and placement == "host_cached":
            raise ConfigError("mode 'max' with placement host_cached: the cache takes sparse "
                              "gradients, which torch's max bags do not give; use sum or mean")
        super().__init__(num_embeddings, embedding_dim, padding_idx, compression, device, dtype,
                         {**settings, "placement": placement})
        self.mode = mode

    def forward(self, input: torch.Tensor, offsets: torch.Tensor | None = None,  # noqa: A002
                per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
        mask = self._pad_mask(input)
        if mask is None:
            return self.store.bag(input, offsets, self.mode, per_sample_weights)
        # padding: a zero weight in a sum; for the mean, divide by the real count
        w = mask.to(self.full_dtype())
        if per_sample_weights is not None:
            w = w * per_sample_weights
        if self.mode == "max":
            raise ConfigError("EmbeddingBag mode max with padding_idx is not supported here")
        if not self.store.pools_linearly and self.mode == "mean":
            return self._mean_of_parts(input, offsets, w, mask)
        total = self.store.bag(input, offsets, "sum", w)
        if self.mode == "sum":
            return total
        return total / self._counts(mask, offsets, total.dtype)

    @staticmethod
    def _counts(mask: torch.Tensor, offsets: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
        """Each bag's number of ids other than padding, at least 1: [bags, 1]."""
        ones = mask.to(dtype)
        if offsets is None:
            count = ones.sum(dim=-1, keepdim=True)
        else:
            count = F.embedding_bag(torch.arange(ones.numel(), device=ones.device),
                                    ones.unsqueeze(1), offsets, mode="sum")
        return count.clamp(min=1)

    def _mean_of_parts(self, input: torch.Tensor, offsets: torch.Tensor | None,  # noqa: A002
                       w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The mean bag of a storage that combines parts after pooling (qr mult): each
        part's mean (weights over the bag's real count), then the combination."""
        count = self._counts(mask, offsets, w.dtype)
        if offsets is not None:  # each id's bag
            at = torch.arange(input.numel(), device=input.device)
            count = count[torch.bucketize(at, offsets, right=True) - 1].squeeze(1)
        return self.store.bag(input, offsets, "sum", w / count)

    def full_dtype(self) -> torch.dtype:
        """The dtype the stored rows are read in (packed rows: the one they dequantize to)."""
        store = self.store
        if store.packed:
            return next(iter(store.packed.values()))[2]
        return next(store.parameters()).dtype


from autoembed.nn.methods import METHOD_STORAGES  # noqa: E402 - they subclass _Storage

COMPRESSIONS.update(METHOD_STORAGES)
