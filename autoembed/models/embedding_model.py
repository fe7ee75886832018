"""`build_model(config)`: the embedding model whose parameters are exactly `param_specs(config)`.

Layout (names as `named_parameters` yields them, in `param_specs` order):
``tables.<field>.weight`` (or ``q_weight`` / ``r_weight`` under QR, plus ``proj.weight`` for
a table whose dim is not the config's `dim`; ``tables.shared.weight`` under sharing; under
`robe_shared` the first robe table's ``weight`` is the one array, the same Parameter in every
robe table, so named once), then, with
`wide`, ``wide.<field>.weight`` (per-id logit weights added to the tower's output), then
``tower.<i>.weight`` / ``tower.<i>.bias``. Every parameter has the precision policy's
`param_dtype`. See `autoembed.models.embedding` for the lookups.

Each table follows its own settings (`autoembed.config.resolved_tables`): compression, sizes,
dim and table optimizer (which decides whether its gradients are sparse). A dotted field name
(``encoder.tok_emb``) is a module path: the table sits in nested ModuleDicts, so its weight
is ``tables.encoder.tok_emb.weight``; `EmbeddingModel.table(name)` finds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from autoembed.batch import Batch
from autoembed.compression import METHODS, cold_rows, hot_count
from autoembed.config import (
    EmbeddingConfig,
    TableSettings,
    as_config,
    cache_rows,
    check_model_rules,
    param_specs,
    precision_policy,
    resolved_tables,
    tower_input_width,
)
from autoembed.errors import ConfigError, DataError, UnsupportedError
from autoembed.models.checkpointing import checkpointed
from autoembed.models.embedding import LookupSpec, PlainTable, QRTable, TableModule, WideTable
from autoembed.models.hot_cold import HotColdTable
from autoembed.models.robe import RobeTable
from autoembed.models.tower import build_tower, interact, run_tower
from autoembed.models.tt import TTTable

__all__ = ["EmbeddingModel", "as_device", "build_model", "check_buildable", "loss_fn",
           "torch_dtype"]

def torch_dtype(name: str) -> torch.dtype:
    """torch dtype of a PrecisionPolicy dtype name ("float32", "float16", "bfloat16")."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"'{name}' is not a torch dtype")
    return dtype


def as_device(device: torch.device | str) -> torch.device:
    """`device` as a torch.device; a ConfigError naming it when torch does not know it, or
    reads its index as another (torch keeps an index in 8 bits: cuda:4096 is cuda:0)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"device {device!r} is not a torch device; use e.g. cpu, cuda or cuda:1"
        ) from None
    index = typed_index(device)
    if index is not None and dev.index != index:
        raise ConfigError(f"device {device!r}: torch reads its index as {dev.index}; give the "
                          "index of a GPU present (e.g. cuda:0)")
    return dev


def typed_index(device: torch.device | str) -> int | None:
    """The index of `device` as written ("cuda:4096": 4096); None without one."""
    if isinstance(device, torch.device):
        return device.index
    _, _, tail = str(device).strip().partition(":")
    return int(tail) if tail.isdigit() else None


def check_buildable(config: EmbeddingConfig) -> None:
    """Reject, with a ConfigError naming the value and the fix, what `config.validate` lets
    through but the model or its optimizers cannot do (`config.check_model_rules`, which
    estimate reads too, and a table name a torch module cannot take)."""
    check_model_rules(config)
    reserved = nn.ModuleDict()
    for i, ts in enumerate(resolved_tables(config)):
        for part in ts.name.split("."):
            if hasattr(reserved, part):
                raise ConfigError(
                    f"config key 'tables[{i}].name' = {ts.name!r}: '{part}' is a ModuleDict "
                    "attribute and cannot name a torch module; rename the field"
                )


def _lookup_spec(config: EmbeddingConfig, sparse: bool) -> LookupSpec:
    return LookupSpec(config.pooling, sparse, config.task == "text", config.checkpointing)


def _field_table(
    config: EmbeddingConfig, ts: TableSettings, device: torch.device, dtype: torch.dtype,
    arrays: dict[tuple[str, ...], nn.Parameter],
) -> TableModule:
    """One field's table; `arrays` holds the shared robe arrays built so far (by group)."""
    spec = _lookup_spec(config, ts.sparse)
    if config.placement == "host_cached":
        return _host_cached_table(config, ts, spec, device, dtype)
    if ts.compression in METHODS:
        return _method_table(config, ts, spec, device, dtype, arrays)
    if ts.qr:
        return QRTable(ts.vocab_size, ts.qr_collisions, ts.dim, ts.qr_operation, spec,
                       out_dim=config.dim, device=device, dtype=dtype)
    # none, hash (ids hashed when V > buckets), mixed_dim, qr with V <= m: one weight,
    # projected to the config's dim when the table's dim differs
    rows, buckets = ts.hashed
    return PlainTable(rows, ts.dim, config.dim, spec, buckets=buckets, seed=ts.hash_seed,
                      vocab=ts.vocab_size, device=device, dtype=dtype)


def _method_table(
    config: EmbeddingConfig,
    ts: TableSettings,
    spec: LookupSpec,
    device: torch.device,
    dtype: torch.dtype,
    arrays: dict[tuple[str, ...], nn.Parameter],
) -> TableModule:
    """A robe / tt / hot_cold table. Under robe_shared the group's first table makes the
    array (kept in `arrays`), the rest read it. The hot set starts as ids 0..hot-1 (the hot
    set of unscrambled Zipf data); `HotColdTable.set_hot_ids` installs the data's."""
    out, seed = config.dim, ts.hash_seed
    if ts.compression == "robe":
        table = RobeTable(ts.robe_size, ts.robe_block, (ts.dim,), spec, seed=seed, out_dim=out,
                          device=device, dtype=dtype, first_field=ts.robe_field,
                          weight=arrays.get(ts.robe_group))
        if ts.robe_group:
            arrays[ts.robe_group] = table.weight
        return table
    if ts.compression == "tt":
        return TTTable(ts.vocab_size, ts.dim, ts.tt_rank, spec, out_dim=out, device=device,
                       dtype=dtype)
    assert ts.cold_buckets is not None  # validated
    hot = hot_count(ts.vocab_size, ts.hot_share)
    cold = cold_rows(ts.vocab_size, ts.hot_share, ts.cold_buckets)
    return HotColdTable(ts.vocab_size, ts.dim, torch.arange(hot, device=device), cold, spec,
                        seed=seed, out_dim=out, device=device, dtype=dtype)


def _host_cached_table(
    config: EmbeddingConfig,
    ts: TableSettings,
    spec: LookupSpec,
    device: torch.device,
    dtype: torch.dtype,
) -> TableModule:
    from autoembed.models.host_cached_table import HostCachedTable

    rows, buckets = ts.hashed
    return HostCachedTable(
        rows, ts.dim, cache_rows(config, ts), config.cache_policy, ts.table_optimizer, spec,
        buckets=buckets, seed=ts.hash_seed, dynamic_rows=config.dynamic_rows,
        device=device, dtype=dtype,
    )


def _wide_table(
    config: EmbeddingConfig, ts: TableSettings, out: int, device: torch.device,
    dtype: torch.dtype,
) -> WideTable:
    """One field's wide part: ids map to rows as in the deep table under hash compression,
    one row per id otherwise (`config.param_specs` fixes the shapes)."""
    rows, buckets = ts.hashed
    spec = _lookup_spec(config, ts.sparse)
    return WideTable(rows, out, out, spec, buckets=buckets, seed=ts.hash_seed,
                     vocab=ts.vocab_size, device=device, dtype=dtype)


def _nested(modules: dict[str, nn.Module]) -> nn.ModuleDict:
    """A ModuleDict holding each module at its dotted path ('a.b' -> root['a']['b'])."""
    root = nn.ModuleDict()
    for path, module in modules.items():
        *outer, last = path.split(".")
        node = root
        for part in outer:
            if part not in node:
                node[part] = nn.ModuleDict()
            child = node[part]
            assert isinstance(child, nn.ModuleDict)
            node = child
        node[last] = module
    return root


def _at(root: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        assert isinstance(root, nn.ModuleDict)
        root = root[part]
    return root


class EmbeddingModel(nn.Module):
    """Tables -> pooled [B, D] per field -> interaction -> tower -> logits; with `wide`, plus
    the sum of the fields' pooled wide weights (wide & deep, Cheng et al., 2016).

    forward(batch or features) returns ctr logits [B] (one per sample) or text logits
    [B, num_classes], in the parameters' dtype (or the autocast dtype under amp).
    """

    def __init__(self, config: EmbeddingConfig, device: torch.device | str = "cpu") -> None:
        super().__init__()
        if not config.is_resolved:
            config = config.resolve()
        self.config = config
        dev = torch.device(device)
        dtype = torch_dtype(precision_policy(config.precision).param_dtype)
        settings = resolved_tables(config)
        self.fields = tuple(ts.name for ts in settings)
        self.shared = config.compression == "shared"
        tables: dict[str, nn.Module] = {}
        if self.shared:
            rows = max(t.vocab_size for t in config.tables)
            spec = _lookup_spec(config, config.sparse_tables)
            tables["shared"] = PlainTable(
                rows, config.dim, config.dim, spec, device=dev, dtype=dtype
            )
        else:
            arrays: dict[tuple[str, ...], nn.Parameter] = {}
            for ts in settings:
                tables[ts.name] = _field_table(config, ts, dev, dtype, arrays)
        self.tables = _nested(tables)
        out = 1 if config.task == "ctr" else config.num_classes
        self.wide = (
            _nested({ts.name: _wide_table(config, ts, out, dev, dtype) for ts in settings})
            if config.wide
            else None
        )
        self.tower = build_tower(
            tower_input_width(config), config.dense_layers, out, device=dev, dtype=dtype
        )

    def table(self, name: str) -> nn.Module:
        """The table module of field `name` (a dotted name is a module path)."""
        return _at(self.tables, name)

    def embed(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The tower's input: pooled fields after the interaction."""
        ids = []
        for name in self.fields:
            field_ids = features.get(name)
            if field_ids is None:
                have = ", ".join(sorted(features)) or "none"
                raise DataError(
                    f"batch has no feature '{name}' (has {have}); "
                    "the data must yield one [B, L] id tensor per config table"
                )
            ids.append(field_ids)
        if self.shared:
            # one lookup over all fields: one (sparse) gradient for the shared table
            shared = self.tables["shared"]
            assert isinstance(shared, PlainTable)
            pooled = shared.forward_many(ids)
        else:
            pooled = [self.table(n)(i) for n, i in zip(self.fields, ids, strict=True)]
        if self.config.task == "text":  # each table a text field; several are concatenated
            return pooled[0] if len(pooled) == 1 else interact(pooled, "concat")
        return interact(pooled, self.config.interaction)

    def forward(self, batch: Batch | Mapping[str, torch.Tensor]) -> torch.Tensor:
        features = batch.features if isinstance(batch, Batch) else batch
        x = self.embed(features)
        logits = (checkpointed(run_tower, self.tower, x) if self.config.checkpointing
                  else run_tower(self.tower, x))
        if self.wide is not None:
            for name in self.fields:
                logits = logits + _at(self.wide, name)(features[name])
        return logits.squeeze(-1) if self.config.task == "ctr" else logits


def _check_layout(model: nn.Module, config: EmbeddingConfig) -> None:
    """The built parameters must be param_specs(config), name for name (a bug otherwise)."""
    dtype = torch_dtype(precision_policy(config.precision).param_dtype)
    got = [(n, tuple(p.shape), p.dtype) for n, p in model.named_parameters()]
    want = [(s.name, s.shape, dtype) for s in param_specs(config)]
    if got != want:
        raise RuntimeError(f"model layout differs from param_specs: built {got}, specs {want}")


def build_model(config: EmbeddingConfig | Mapping[str, object] | str | os.PathLike[str],
                device: torch.device | str = "cpu") -> EmbeddingModel:
    """Build the model for `config` (a config, a dict of its keys, or a config file's path:
    `config.as_config`) on `device`, seeded by `config.seed`.

    Works under `FakeTensorMode` (no memory for the tables): only shape-driven control flow
    and ordinary init ops (`normal_`, Linear's `kaiming_uniform_`).
    """
    config = as_config(config)
    if not config.is_resolved:
        config = config.resolve()
    check_buildable(config)
    dev = as_device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedError(f"device '{dev}': CUDA is not available here; use device cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    # seed only the generators the build uses, and restore them afterwards
    with torch.random.fork_rng(devices=[dev.index] if dev.type == "cuda" else []):
        torch.default_generator.manual_seed(config.seed)
        if dev.type == "cuda":
            with torch.cuda.device(dev):
                torch.cuda.manual_seed(config.seed)
        model = EmbeddingModel(config, dev)
    _check_layout(model, config)
    return model


def loss_fn(config: EmbeddingConfig) -> nn.Module:
    """BCE-with-logits for ctr (labels float {0, 1}), cross-entropy for text (class ids)."""
    return nn.BCEWithLogitsLoss() if config.task == "ctr" else nn.CrossEntropyLoss()
