"""A model holding TorchRec collections, as autoembed sees it: its tables (`tables`), and the
rewrite of a table's TorchRec knobs (`apply`), which returns an ordinary TorchRec model.

Names: a table is ``module.path.table_name`` -- the collection's module path, then its
`EmbeddingBagConfig.name`; a model that is itself a collection has tables named by their own
names. Fewer rows (``num_embeddings`` below the table's): `HashedIds` (docs/torchrec.md,
"Fewer rows"), which runs before the sharded collection's input distribution, so every rank
sees the same hashed ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from autoembed.errors import ConfigError, did_you_mean
from autoembed.torchrec.lib import collection_types, require
from autoembed.torchrec.settings import CPU_OPTIMIZERS, TorchRecTable, table_settings

__all__ = ["collections", "tables", "apply", "HashedIds", "table_configs", "optimizer_class",
           "constraints", "TableInfo"]


class HashedIds(nn.Module):
    """Ids of the features in `rows` taken modulo their table's rows, then the collection.
    Holds no parameters: `collection`'s tables keep their names and DMP shards it."""

    def __init__(self, collection: nn.Module, rows: Mapping[str, int]) -> None:
        super().__init__()
        self.collection = collection
        self.rows = dict(rows)  # feature name -> the table's rows

    def forward(self, features: Any) -> Any:
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

        keys = features.keys()
        big = torch.iinfo(torch.int64).max
        mods = torch.tensor([self.rows.get(k, big) for k in keys], dtype=torch.int64,
                            device=features.values().device)
        per_key = features.lengths().view(len(keys), -1).sum(dim=1)
        values = features.values()
        mod = torch.repeat_interleave(mods, per_key, output_size=values.numel())
        hashed = torch.remainder(values, mod.to(values.dtype))
        return self.collection(KeyedJaggedTensor(
            keys=keys, values=hashed, weights=features.weights_or_none(),
            lengths=features.lengths(), offsets=features._offsets, stride=features.stride(),
            length_per_key=features._length_per_key, offset_per_key=features._offset_per_key))


class TableInfo:
    """One table of a collection: its name, config, the collection's path and kind."""

    def __init__(self, path: str, collection: Any, config: Any) -> None:
        self.path = path
        self.collection = collection
        self.config = config
        self.name = f"{path}.{config.name}" if path else config.name
        self.pooled = hasattr(collection, "embedding_bag_configs")

    @property
    def weight(self) -> torch.Tensor:
        bags = self.collection.embedding_bags if self.pooled else self.collection.embeddings
        return bags[self.config.name].weight


def collections(model: nn.Module) -> list[tuple[str, Any]]:
    """(path, collection) of every EmbeddingBagCollection / EmbeddingCollection; the path of
    one inside `HashedIds` is the wrapper's (the table names do not change with hashing)."""
    require()
    types = collection_types()
    return [(_public_path(model, path), m) for path, m in model.named_modules()
            if isinstance(m, types)]


def _public_path(model: nn.Module, path: str) -> str:
    """A collection's path, with a `HashedIds` wrapper's ``.collection`` taken off."""
    parent, _, attr = path.rpartition(".")
    holder = model.get_submodule(parent) if parent else model
    return parent if attr == "collection" and isinstance(holder, HashedIds) else path


def _configs(collection: Any) -> list[Any]:
    get = getattr(collection, "embedding_bag_configs", None) or collection.embedding_configs
    return list(get())


def table_infos(model: nn.Module) -> list[TableInfo]:
    """Every table of every collection, in module order."""
    return [TableInfo(path, c, cfg) for path, c in collections(model) for cfg in _configs(c)]


def tables(model: nn.Module) -> tuple[Any, ...]:
    """The model's TorchRec tables as config table entries (`TableConfig`: name =
    ``module.path.table_name``, vocab_size = num_embeddings, dim = embedding_dim)."""
    from autoembed.config import TableConfig

    infos = table_infos(model)
    if not infos:
        raise ConfigError(f"model {type(model).__name__} has no EmbeddingBagCollection or "
                          "EmbeddingCollection; autoembed's TorchRec path rewrites their tables")
    return tuple(TableConfig(name=t.name, vocab_size=int(t.config.num_embeddings),
                             dim=int(t.config.embedding_dim)) for t in infos)


def _by_name(model: nn.Module, settings: Iterable[TorchRecTable]) -> dict[str, TableInfo]:
    infos = {t.name: t for t in table_infos(model)}
    if not infos:
        tables(model)  # raises: no collection
    for s in settings:
        if s.name not in infos:
            hint = did_you_mean(s.name, infos) or f"; its tables: {', '.join(infos)}"
            raise ConfigError(f"torchrec table '{s.name}': the model has no such table{hint}")
    return infos


def optimizer_class(name: str) -> type:
    """The optimizer class TorchRec maps to FBGEMM's fused `EmbOptimType` for `name`."""
    from torchrec import optim as trec_optim

    classes = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad,
               "rowwise_adagrad": trec_optim.RowWiseAdagrad, "adam": torch.optim.Adam,
               "partial_rowwise_adam": trec_optim.PartialRowWiseAdam, "lamb": trec_optim.LAMB}
    return classes[name]


def _new_config(cfg: Any, s: TorchRecTable) -> Any:
    from torchrec.modules.embedding_configs import DataType

    kw: dict[str, Any] = {}
    if s.num_embeddings is not None:
        kw["num_embeddings"] = s.num_embeddings
    if s.embedding_dim is not None:
        kw["embedding_dim"] = s.embedding_dim
    if s.data_type is not None:
        kw["data_type"] = DataType.FP16 if s.data_type == "fp16" else DataType.FP32
    return replace(cfg, **kw) if kw else cfg


def _rebuild(collection: Any, new: list[Any], device: Any = None) -> nn.Module:
    """A collection of the same kind over `new` configs, on `device` or the old one's (meta
    stays meta; real weights start from TorchRec's own init)."""
    from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

    device = device or next(iter(collection.parameters())).device
    if isinstance(collection, EmbeddingBagCollection):
        return EmbeddingBagCollection(tables=new, is_weighted=collection.is_weighted(),
                                      device=device)
    assert isinstance(collection, EmbeddingCollection)
    return EmbeddingCollection(tables=new, device=device,
                               need_indices=collection.need_indices())


def _set(model: nn.Module, path: str, module: nn.Module) -> nn.Module:
    if not path:
        return module
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)
    return model


def apply(model: nn.Module, settings: Any, *, lr: float = 0.01,
          compute_device: str = "cpu") -> nn.Module:
    """Rewrite the TorchRec tables `settings` name (`TorchRecTable`s, or dicts of them) in
    place; returns the model (a new object only when the model is itself a collection).
    Rows, dim and data type rebuild the table's collection (`EmbeddingBagConfig` fields; a
    rebuilt table starts from TorchRec's init); fewer rows add `HashedIds`; the optimizer is
    attached per table with `apply_optimizer_in_backward` (FBGEMM's fused optimizer under
    DMP, at `lr`). `compute_device` "cpu": an optimizer the CPU table kernel refuses is a
    ConfigError. Kernels and sharding types are the plan's (`constraints`)."""
    from torch.distributed.optim import _apply_optimizer_in_backward

    items = table_settings(settings)
    infos = _by_name(model, items)
    given = {s.name: s for s in items}
    for s in items:
        if compute_device == "cpu" and s.optimizer and s.optimizer not in CPU_OPTIMIZERS:
            raise ConfigError(f"torchrec table '{s.name}': optimizer {s.optimizer!r} is not "
                              "supported by FBGEMM's CPU table kernel (fbgemm-gpu-cpu 1.8.0 "
                              f"takes {', '.join(CPU_OPTIMIZERS)}); choose one of those, or "
                              "plan for compute_device cuda")
    for path, coll in collections(model):
        mine = [t for t in infos.values() if t.path == path]
        new = [_new_config(t.config, given[t.name]) if t.name in given else t.config
               for t in mine]
        if any(n is not t.config for n, t in zip(new, mine, strict=True)):
            old_rows = {t.config.name: t.config.num_embeddings for t in mine}
            rebuilt = _rebuild(coll, new)
            hashed = {f: c.num_embeddings for c in new for f in c.feature_names
                      if c.num_embeddings < old_rows[c.name]}
            wrapper = _wrapper_of(model, path)
            if wrapper is not None:  # already hashed: widen its map
                hashed = {**wrapper.rows, **hashed}
                wrapper.collection = rebuilt
                wrapper.rows = hashed
            else:
                model = _set(model, path, HashedIds(rebuilt, hashed) if hashed else rebuilt)
    for info in table_infos(model):
        opt = given[info.name].optimizer if info.name in given else None
        if opt is not None:
            _apply_optimizer_in_backward(optimizer_class(opt), [info.weight], {"lr": lr})
    return model


def _wrapper_of(model: nn.Module, path: str) -> HashedIds | None:
    m = model if not path else model.get_submodule(path)
    return m if isinstance(m, HashedIds) else None


def table_configs(model: nn.Module) -> list[Any]:
    """Every table's `EmbeddingBagConfig` / `EmbeddingConfig` (as the model holds them now)."""
    return [t.config for t in table_infos(model)]


def constraints(settings: Any, model: nn.Module | None = None) -> dict[str, Any]:
    """TorchRec `ParameterConstraints` for the planner, keyed by table name: the sharding type
    and compute kernel each table is given (a single choice), UVM caching's load factor."""
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheParams

    items = table_settings(settings)
    if model is not None:
        _by_name(model, items)
    out: dict[str, Any] = {}
    for s in items:
        if s.sharding_type is None and s.compute_kernel is None:
            continue
        if s.table in out:
            raise ConfigError(f"torchrec table '{s.name}': TorchRec's planner keys constraints "
                              f"by table name, and another collection has a table "
                              f"'{s.table}'; give the tables distinct names")
        kw: dict[str, Any] = {}
        if s.sharding_type is not None:
            kw["sharding_types"] = [s.sharding_type]
        if s.compute_kernel is not None:
            kw["compute_kernels"] = [s.compute_kernel]
        if s.cache_load_factor is not None:
            kw["cache_params"] = CacheParams(load_factor=s.cache_load_factor)
        out[s.table] = ParameterConstraints(**kw)
    return out
