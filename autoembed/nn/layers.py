"""`autoembed.nn.Embedding` and `EmbeddingBag`: torch's layers (their constructor arguments in
torch's order, their calls) over a compressed storage (`autoembed.nn`). Which of torch's
options each compression and placement honours or refuses (a ConfigError when the layer is
built), how rows start and what ``init`` takes: docs/apply.md. Rows are drawn by
`autoembed.nn.draws`; ids are checked as torch checks them (`autoembed.nn.lookup.check_ids`).
"""

from __future__ import annotations

import inspect
from typing import Any, NoReturn

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from autoembed.errors import ConfigError, DataError, did_you_mean
from autoembed.nn.decoded import lazy
from autoembed.nn.draws import init_moments
from autoembed.nn.lookup import ID_DTYPES, bag_index, by_frequency, check_ids, pool_rows
from autoembed.nn.methods import COMPRESSIONS
from autoembed.nn.seed_record import SeedRecorded

__all__ = ["Embedding", "EmbeddingBag", "MODES", "TORCH_OPTIONS", "storage_settings"]

MODES = ("sum", "mean", "max")
PLACEMENTS = ("device", "host_cached")
# torch's constructor options beyond the sizes, device and dtype
TORCH_OPTIONS = ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse",
                 "mode", "include_last_offset", "_weight", "_freeze")


def storage_settings(compression: str) -> tuple[str, ...]:
    """The settings a compression's storage takes (its keyword-only arguments)."""
    params = inspect.signature(COMPRESSIONS[compression].__init__).parameters.values()
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def _storage(num: int, dim: int, compression: str, factory: dict[str, Any],
             settings: dict[str, Any]) -> Any:
    if compression not in COMPRESSIONS:
        raise ConfigError(f"compression '{compression}' is not one an autoembed layer takes"
                          f"{did_you_mean(compression, COMPRESSIONS)}; use one of "
                          f"{', '.join(COMPRESSIONS)}")
    takes = storage_settings(compression)
    unknown = sorted(set(settings) - set(takes))
    if unknown:
        hint = did_you_mean(unknown[0], (*takes, *TORCH_OPTIONS))
        raise ConfigError(f"compression {compression} does not take '{unknown[0]}'{hint}; it "
                          f"takes {', '.join(takes) or 'no settings'}")
    return COMPRESSIONS[compression](num, dim, factory, **settings)


class _Layer(SeedRecorded):
    """What Embedding and EmbeddingBag share: the storage, torch's options, padding, the
    decoded weight, the hash seed recorded in the state_dict (`SeedRecorded`)."""

    seed_noun = "layer"

    def __init__(self, num_embeddings: int, embedding_dim: int, options: dict[str, Any],
                 compression: str, placement: str, factory: dict[str, Any],
                 settings: dict[str, Any], init: Any) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.compression, self.placement = compression, placement
        self.padding_idx = self._padding(options["padding_idx"])
        self.max_norm, self.norm_type = options["max_norm"], options["norm_type"]
        self.scale_grad_by_freq = bool(options["scale_grad_by_freq"])
        self.sparse = bool(options["sparse"]) or placement == "host_cached"
        if placement == "host_cached":
            from autoembed.nn.host_cache import layer_storage

            self.store: Any = layer_storage(num_embeddings, embedding_dim, compression, factory,
                                            **settings)
        elif placement != "device":
            raise ConfigError(f"placement '{placement}'{did_you_mean(placement, PLACEMENTS)}: "
                              f"use {' or '.join(PLACEMENTS)}")
        else:
            self.store = _storage(num_embeddings, embedding_dim, compression, factory, settings)
        self._take_options(bool(options["sparse"]), options["_weight"], options["_freeze"],
                           init)

    def _padding(self, padding_idx: int | None) -> int | None:
        n = self.num_embeddings
        if padding_idx is None:
            return None
        if not -n <= padding_idx < n:
            raise ConfigError(f"padding_idx = {padding_idx}: must be within [-{n}, {n}) for "
                              f"{n} ids")
        return padding_idx + n if padding_idx < 0 else padding_idx

    def _refuse(self, option: str, value: Any, why: str) -> NoReturn:
        raise ConfigError(f"{option} = {value!r} with {why}")

    def _take_options(self, sparse: bool, weight: torch.Tensor | None, freeze: bool,
                      init: Any) -> None:
        """Give the storage the options it honours; refuse the others; draw the rows."""
        store, where = self.store, self._where()
        if self.max_norm is not None:
            if self.placement != "device" or not store.stored_rows:
                self._refuse("max_norm", self.max_norm, f"{where}: its rows are computed, "
                             "projected or cached, so there is no stored row to renormalise; "
                             "use compression none, hash or hot_cold on the device")
            store.max_norm, store.norm_type = float(self.max_norm), float(self.norm_type)
        if sparse and self.scale_grad_by_freq:  # torch: "not supported with sparse gradients"
            self._refuse("scale_grad_by_freq", True, "sparse=True: torch scales no sparse "
                         "gradient by frequency; drop one of them")
        if sparse and self.placement == "device":
            if not store.one_row_per_id:
                self._refuse("sparse", True, f"{where}: its gradient is not one row of one "
                             "table per id; use sparse=False (a dense optimizer)")
            store.sparse = True
        if weight is not None:
            if init is not None:
                self._refuse("init", init, "_weight given: the given table is where the rows "
                             "start; give one of them")
            self._take_weight(weight)
        else:
            store.start(init if callable(init) and store.takes_init_fn else init_moments(
                init, self.num_embeddings, self.embedding_dim, self.padding_idx))
            if self.padding_idx is not None and store.identity:
                store.zero_row(self.padding_idx)  # torch's padding row starts at zero
        if freeze:
            store.requires_grad_(False)

    def _take_weight(self, weight: torch.Tensor) -> None:
        """torch's `_weight`: the table itself, for compression none on the device."""
        if self.compression != "none" or self.placement != "device":
            self._refuse("_weight", tuple(weight.shape), f"{self._where()}: a given table is "
                         "stored as it is only by compression none; start a compressed table "
                         "from a trained one with autoembed.apply(..., from_trained=True)")
        if tuple(weight.shape) != (self.num_embeddings, self.embedding_dim):
            raise ConfigError(f"_weight of shape {tuple(weight.shape)}: the table is "
                              f"({self.num_embeddings}, {self.embedding_dim})")
        self.store.weight = nn.Parameter(weight)

    def _where(self) -> str:
        return (f"compression {self.compression}" if self.placement == "device"
                else f"placement {self.placement}")

    def __getattr__(self, name: str) -> Any:
        if name == "weight":  # torch's attribute: the [V, D] table
            return self._weight()
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "weight":
            super().__setattr__(name, value)
        elif self._stored_table():
            self.store.weight = value  # torch's: the parameter replaced
        else:
            raise ConfigError(f"{self._label()}.weight = ...: the layer holds no [V, D] "
                              "parameter to replace (its rows are stored compressed, packed or "
                              "on the host); set the rows before autoembed.apply "
                              "(from_trained=True fits the table to them)")

    def _stored_table(self) -> bool:
        """The storage's ``weight`` is the [V, D] table as it is (compression none, or hash
        with no more ids than buckets, on the device, not packed for serving)."""
        store: Any = super().__getattr__("store")
        return bool(store.takes_init_fn) and not store.packed

    def _weight(self) -> torch.Tensor:
        """torch's ``weight``: the stored table itself where it is one (`_stored_table`:
        writes into it land, as torch's); else the table as `full_weight()` decodes it when
        an op first reads its values, its shape, dtype, device and requires_grad read without
        decoding (`LazyTable`, which refuses writes). Decoded at once under torch.compile,
        which traces no such subclass, and where a row decodes to a subclass already, as
        under fake tensors."""
        store: Any = super().__getattr__("store")
        if self._stored_table():
            return store.weight
        held = next(iter([*store.parameters(), *store.buffers()]), None)
        fake = torch.compiler.is_compiling() or is_fake(held)
        row = None if fake else store.first_row()
        if type(row) is not torch.Tensor:
            return self.full_weight()
        return lazy(self.full_weight, row, (self.num_embeddings, self.embedding_dim),
                    self._label())

    @property
    def hash_seed(self) -> int | None:  # type: ignore[override]
        """The seed that maps ids to the stored rows (hash, robe, hot_cold's cold ids); None
        where none does. Saved as ``<prefix>hash_seed`` (`SeedRecorded`)."""
        return self.store.hash_seed

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any) -> None:
        """A state_dict saved before `autoembed.apply` holds the table as torch's
        ``<prefix>weight``: a stored table (`_stored_table`) loads it as its own weight; any
        other refuses it in one line (left out, the rows would stay as they were, silently
        under strict=False). Rows saved under another hash_seed are refused (`SeedRecorded`)."""
        key = prefix + "weight"
        if key in state_dict and not any(k.startswith(prefix + "store.") for k in state_dict):
            if not self._stored_table():
                shape = tuple(getattr(state_dict[key], "shape", ()))
                raise ConfigError(f"{self._label()}: the state_dict's '{key}' {shape} is the "
                                  "table before autoembed.apply, which this layer does not "
                                  "store as it is; load it into the model before apply "
                                  "(from_trained=True fits a compressed table to it)")
            state_dict[prefix + "store.weight"] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def _seed_label(self) -> str:
        return self._label()

    def _seed_fix(self, was: int) -> str:
        return (f"apply the config with hash_seed {was} (an autoembed.nn layer: build it with "
                f"hash_seed={was})")

    def _label(self) -> str:
        """The layer as its messages name it: Embedding(1000, 8, compression hash)."""
        return (f"{type(self).__name__}({self.num_embeddings}, {self.embedding_dim}, "
                f"{self._where()})")

    def full_weight(self) -> torch.Tensor:
        """The whole table decoded to [V, D] (a tied output layer's weight): row i is what
        the lookup of id i reads, so the padding row is zeros where its stored row is shared
        with other ids (not `store.identity`), and F.embedding over it (a tied head) gives
        the layer's forward; no gradient reaches the shared row through it."""
        full = self.store.full()
        if self.padding_idx is None or self.store.identity:
            return full
        full[self.padding_idx] = 0  # a new tensor (rows looked up): zeroed in place, no copy
        return full

    def _check(self, ids: torch.Tensor) -> None:
        # a host_cached table with dynamic rows gives new ids (>= num_embeddings) rows
        below = None if getattr(self.store, "takes_new_ids", False) else self.num_embeddings
        check_ids(ids, below, f"{type(self).__name__}({self.num_embeddings}, "
                  f"{self.embedding_dim})")

    def extra_repr(self) -> str:
        parts = [f"{self.num_embeddings}, {self.embedding_dim}"]
        for name in ("padding_idx", "max_norm"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)}")
        parts.extend(f"{name}=True" for name in ("scale_grad_by_freq", "sparse")
                     if getattr(self, name))
        parts.append(f"compression={self.compression}")
        if self.placement != "device":
            parts.append(f"placement={self.placement}")
        return ", ".join(parts)


class Embedding(_Layer):
    """torch.nn.Embedding (`input` -> [*input.shape, D]) over a compressed table; torch's
    options as the module docstring says. Rows start with N(0, 1) entries under every
    compression (the composed rows), or as ``init`` says: a (mean, std) pair or a torch
    init function."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: torch.Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None, *, compression: str = "none", placement: str = "device",
                 init: Any = None, **settings: Any) -> None:
        options = {"padding_idx": padding_idx, "max_norm": max_norm, "norm_type": norm_type,
                   "scale_grad_by_freq": scale_grad_by_freq, "sparse": sparse,
                   "_weight": _weight, "_freeze": _freeze}
        super().__init__(num_embeddings, embedding_dim, options, compression, placement,
                         {"device": device, "dtype": dtype}, settings, init)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's name
        self._check(input)
        out = self.store.rows(input)
        if self.scale_grad_by_freq:
            out = by_frequency(out, input)
        if self.padding_idx is None:
            return out
        keep = (input != self.padding_idx).unsqueeze(-1)
        if self.store.identity:  # torch: the padding row as it is, without a gradient
            return torch.where(keep, out, out.detach())
        return out * keep.to(out.dtype)


class EmbeddingBag(_Layer):
    """torch.nn.EmbeddingBag (`input` 2-D [B, L], one bag a row, or 1-D with `offsets`;
    `per_sample_weights` in mode sum) over a compressed table; torch's options as the module
    docstring says. Rows start as `Embedding`'s (N(0, 1) entries, or as ``init`` says)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: torch.Tensor | None = None,
                 include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None, *, compression: str = "none",
                 placement: str = "device", init: Any = None, **settings: Any) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode '{mode}'{did_you_mean(mode, MODES)}: use sum, mean or max")
        options = {"padding_idx": padding_idx, "max_norm": max_norm, "norm_type": norm_type,
                   "scale_grad_by_freq": scale_grad_by_freq, "sparse": sparse,
                   "_weight": _weight, "_freeze": False}
        super().__init__(num_embeddings, embedding_dim, options, compression, placement,
                         {"device": device, "dtype": dtype}, settings, init)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)
        if mode == "max" and self.sparse:
            why = ("placement host_cached: the cache takes sparse gradients" if
                   placement == "host_cached" else "sparse=True: sparse gradients")
            raise ConfigError(f"mode 'max' with {why}, which torch's max bags do not give; use "
                              "sum or mean")
        if mode == "max" and self.scale_grad_by_freq:  # torch refuses it at the forward
            self._refuse("scale_grad_by_freq", True, "mode 'max': torch scales no max bag's "
                         "gradient by frequency; drop one of them")
        if (mode == "max" or self.scale_grad_by_freq) and not self.store.pools_linearly:
            option = "mode" if mode == "max" else "scale_grad_by_freq"
            self._refuse(option, getattr(self, option), f"{self._where()} (qr_operation mult): "
                         "its bags pool the parts before combining them, so a bag has no "
                         "per-id rows; use qr_operation add or concat")

    def forward(self, input: torch.Tensor, offsets: torch.Tensor | None = None,  # noqa: A002
                per_sample_weights: torch.Tensor | None = None) -> torch.Tensor:
        offsets, keep = self._bags(input, offsets, per_sample_weights)
        if self.scale_grad_by_freq or (self.mode == "max" and (
                keep is not None or not self.store.stored_rows)):
            rows = self.store.rows(input)
            if self.scale_grad_by_freq:
                rows = by_frequency(rows, input)
            return pool_rows(rows, offsets, self.mode, per_sample_weights, keep)
        if keep is None:
            return self.store.bag(input, offsets, self.mode, per_sample_weights)
        return self._kept(input, offsets, per_sample_weights, keep)

    def _bags(self, input: torch.Tensor, offsets: torch.Tensor | None,  # noqa: A002
              psw: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Check a call as torch does; (offsets without the last one, the entries that count:
        None when all do, else False for padding and for entries after the last offset)."""
        self._check(input)
        if psw is not None and (self.mode != "sum" or psw.shape != input.shape):
            raise DataError(f"per_sample_weights of shape {tuple(psw.shape)} with mode "
                            f"{self.mode}: torch takes them in mode sum, one per id "
                            f"({tuple(input.shape)})")
        keep = None if self.padding_idx is None else input != self.padding_idx
        if input.dim() == 2 and offsets is None:
            return None, keep
        if input.dim() != 1 or offsets is None or offsets.dim() != 1 or (
                offsets.dtype not in ID_DTYPES):
            raise DataError(f"{type(self).__name__}: input of shape {tuple(input.shape)} with "
                            f"offsets {None if offsets is None else tuple(offsets.shape)}: give "
                            "2-D input without offsets, or 1-D input with 1-D integer offsets")
        if self.include_last_offset:  # the last offset ends the last bag
            inside = torch.arange(input.numel(), device=input.device) < offsets[-1]
            keep = inside if keep is None else keep & inside
            offsets = offsets[:-1]
        return offsets, keep

    def _kept(self, input: torch.Tensor, offsets: torch.Tensor | None,  # noqa: A002
              psw: torch.Tensor | None, keep: torch.Tensor) -> torch.Tensor:
        """Sum or mean bags of the entries `keep` marks: weight 0 for the others, and a mean
        divided by the kept count (qr mult: each part's mean, then their product)."""
        w = keep.to(self.full_dtype())
        if psw is not None:
            w = w * psw
        count = pool_rows(keep.to(w.dtype).unsqueeze(-1), offsets, "sum", None).clamp(min=1)
        if self.mode == "mean" and not self.store.pools_linearly:
            each = count if offsets is None else count.squeeze(1)[bag_index(input.numel(),
                                                                            offsets)]
            return self.store.bag(input, offsets, "sum", w / each)
        total = self.store.bag(input, offsets, "sum", w)
        return total if self.mode == "sum" else total / count

    def full_dtype(self) -> torch.dtype:
        """The dtype the stored rows are read in (packed rows: the one they dequantize to)."""
        store = self.store
        if store.packed:
            return next(iter(store.packed.values()))[2]
        return next(store.parameters()).dtype
