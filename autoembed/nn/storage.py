"""The storages of `autoembed.nn`'s layers: each compression's parameters and its id -> row
math (`autoembed.nn` describes them; robe, tt and hot/cold are in `autoembed.nn.methods`)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autoembed.errors import ConfigError
from autoembed.nn.draws import call_init, draw_projected, mean_one_factors
from autoembed.nn.hashing import hash_ids, qr_indices
from autoembed.nn.lookup import sparse_bag_weights
from autoembed.nn.rowformat import unpack_rows

__all__ = ["PackedWeights", "hash_layout", "BASE_STORAGES"]


class PackedWeights(nn.Module):
    """Weights that int8/int4 serving (`autoembed.quantize`) replaces by packed rows: the one
    implementation the built-in tables and the `autoembed.nn` layers' storages share."""

    quantizable = True  # int8/int4 serving packs this module's weights into rows
    # why serving cannot pack this module ("": it can, or it is left as it is on purpose):
    # `autoembed.quantize` refuses a model holding one, naming it
    why_not_packed = ""

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
    `HotColdTable`) subclass these and add only their pooling. Parameters are created empty:
    an `autoembed.nn` layer draws them (`start`), so that the composed rows have the
    entries' mean and std `init_moments` (`autoembed.nn.draws`); a built-in table by its
    own `reset_parameters` (`draws_init` False). `old_names` maps a weight's former names to
    its name."""

    # the layer's storage: `start` and `reset_parameters` draw to `init_moments`, sub-modules
    # (mixed_dim's proj) included; False: a built-in table's own reset_parameters
    draws_init = True
    init_moments = (0.0, 1.0)  # mean and std of the composed rows' entries
    init_fn: Any = None  # a torch init function applied to the weight itself (`start`)
    pools_linearly = True  # a bag is the pool of its ids' rows (so its mean is sum / size)
    one_row_per_id = True  # a lookup reads one row of one weight (sparse gradients possible)
    stored_rows = False  # a row is a stored row as it is (max_norm renormalises it in place)
    identity = False  # id i reads stored row i (padding_idx is that row, as in torch)
    hash_seed: int | None = None  # the seed that maps ids to rows; None where none does
    # torch's options, set by the layer (`autoembed.nn.layers`) where the storage honours them
    sparse = False
    max_norm: float | None = None
    norm_type = 2.0
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
        """Rows `ids` of weight `name` ([*ids.shape, D]), dequantized when packed (serving
        packs rows renormalised to `max_norm`; the rounding can lift a row's norm past it, so
        a dequantized row is scaled back as torch scales a stored one)."""
        if name not in self.packed:
            return F.embedding(ids, getattr(self, name), max_norm=self.max_norm,
                               norm_type=self.norm_type, sparse=self.sparse)
        rows = self.unpacked(name, ids)
        if self.max_norm is None:
            return rows
        norm = rows.norm(p=self.norm_type, dim=-1, keepdim=True)
        return rows * (self.max_norm / (norm + 1e-7)).clamp(max=1.0)  # embedding_renorm_'s

    def _bag_of(self, name: str, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
                psw: torch.Tensor | None) -> torch.Tensor:
        """Bags of weight `name`'s rows; packed: the looked-up rows dequantized, then pooled."""
        if name not in self.packed:
            return F.embedding_bag(ids, getattr(self, name), offsets, mode=mode,
                                   per_sample_weights=sparse_bag_weights(psw, ids, self.sparse),
                                   max_norm=self.max_norm, norm_type=self.norm_type,
                                   sparse=self.sparse)
        rows = self._lookup(name, ids.reshape(-1))
        at = torch.arange(ids.numel(), device=ids.device).view(ids.shape)
        return F.embedding_bag(at, rows, offsets, mode=mode, per_sample_weights=psw)

    def _param(self, rows: int, dim: int) -> nn.Parameter:
        return nn.Parameter(torch.empty(rows, dim, **self.factory))

    def start(self, init: Any) -> None:
        """Set how the rows start and draw them (a meta storage: at `reset_parameters`):
        `init` (mean, std) of the composed rows' entries, or a torch init function for the
        weight itself (a storage whose weight is the [V, D] table: `takes_init_fn`)."""
        if callable(init):
            self.init_fn = init
        else:
            self.init_moments = (float(init[0]), float(init[1]))
        if not any(p.is_meta for p in self.parameters()):
            self.reset_parameters()

    @property
    def takes_init_fn(self) -> bool:
        """The weight is the [V, D] table itself (id i reads row i, as stored)."""
        return self.identity and self.stored_rows

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Draw the parameters: the composed rows' entries have `init_moments` (`_draw`)."""
        self._draw(*self.init_moments)

    def _draw(self, mean: float, std: float) -> None:
        """Rows read as stored (robe's array values, hot/cold rows): N(mean, std^2)."""
        for p in self.parameters(recurse=False):
            p.normal_(mean, std)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def bag(self, ids: torch.Tensor, offsets: torch.Tensor | None, mode: str,
            psw: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def full(self) -> torch.Tensor:
        """The decoded [V, D] table as stored: decoding renormalises no row (max_norm acts on
        the rows a lookup reads, as torch's)."""
        return self._as_stored(torch.arange(self.num, device=self._device()))

    def first_row(self) -> torch.Tensor:
        """Row 0 of `full()` ([1, D]), decoded alone: its dtype, device and grad are the
        table's, read without decoding the table."""
        return self._as_stored(torch.zeros(1, dtype=torch.long, device=self._device()))

    def _device(self) -> torch.device:
        """Where the weights live now (after materialize); packed: their buffers."""
        return next(iter([*self.parameters(), *self.buffers()])).device

    def _as_stored(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids`, max_norm renormalising none."""
        max_norm, self.max_norm = self.max_norm, None
        try:
            return self.rows(ids)
        finally:
            self.max_norm = max_norm


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
    pad_row: int | None = None  # a row kept at zero by reset_parameters (torch's padding)

    def __init__(self, num: int, dim: int, factory: dict[str, Any]) -> None:
        super().__init__(num, dim, factory)
        self._plain(num, dim)

    @property
    def identity(self) -> bool:  # type: ignore[override]
        return self.buckets is None

    @property
    def stored_rows(self) -> bool:  # type: ignore[override]
        return self.proj is None

    @property
    def hash_seed(self) -> int | None:  # type: ignore[override]
        return self.seed if self.buckets is not None else None

    @torch.no_grad()
    def zero_row(self, row: int) -> None:
        """Row `row` starts, and restarts after `reset_parameters`, at zero (torch's
        padding row)."""
        self.pad_row = row
        if not self.weight.is_meta:
            self.weight[row].zero_()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.pad_row is not None:
            self.weight[self.pad_row].zero_()

    def _draw(self, mean: float, std: float) -> None:
        """Stored rows N(mean, std^2), or the init function on the weight; projected rows:
        `draws.draw_projected`."""
        if self.proj is not None:
            draw_projected(self.weight, self.proj.weight, mean, std)
        elif self.init_fn is not None and self.takes_init_fn:
            call_init(self.init_fn, self.weight)
        else:
            self.weight.normal_(mean, std)

    def _plain(self, rows: int, small_dim: int, buckets: int | None = None, seed: int = 0, *,
               proj: bool = False) -> None:
        """``weight`` [rows, small_dim], then with `proj` ``proj`` (Linear small_dim -> D,
        no bias)."""
        self.buckets, self.seed = buckets, seed
        self.weight = self._param(rows, small_dim)
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
                 hash_seed: int = 0) -> None:
        _Storage.__init__(self, num, dim, factory)
        rows, buckets = hash_layout(num, hash_buckets)
        self._plain(rows, dim, buckets, hash_seed)

    def full(self) -> torch.Tensor:
        return _Storage.full(self)  # decoded row by row, hashed or not


class _QR(_Storage):
    one_row_per_id = False  # a quotient row and a remainder row

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, qr_collisions: int = 4,
                 qr_operation: str = "mult") -> None:
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

    def _draw(self, mean: float, std: float) -> None:
        """concat: both parts N(mean, std^2); add: each N(mean / 2, std^2 / 2); mult: q
        N(mean, s^2) times r N(1, tau^2) (`draws.mean_one_factors`)."""
        q, r = self.q_weight, self.r_weight
        if self.op == "concat":
            q.normal_(mean, std)
            r.normal_(mean, std)
        elif self.op == "add":
            q.normal_(mean / 2, std / math.sqrt(2.0))
            r.normal_(mean / 2, std / math.sqrt(2.0))
        else:
            s, tau = mean_one_factors(mean, std, 2)
            q.normal_(mean, s)
            r.normal_(1.0, tau)

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

    def __init__(self, num: int, dim: int, factory: dict[str, Any], *, small_dim: int) -> None:
        _Storage.__init__(self, num, dim, factory)
        self._plain(num, small_dim, proj=True)


# compression name -> storage class (robe / tt / hot_cold: `autoembed.nn.methods`)
BASE_STORAGES: dict[str, type[_Storage]] = {
    "none": _Plain, "hash": _Hash, "qr": _QR, "mixed_dim": _MixedDim,
}
