"""`build_model(config)`: the embedding model whose parameters are exactly `param_specs(config)`.

Layout (names as `named_parameters` yields them, in `param_specs` order):
``tables.<field>.weight`` (or ``q_weight`` / ``r_weight`` under QR, plus ``proj.weight`` for
a mixed-dim table narrower than `dim`; ``tables.shared.weight`` under sharing), then, with
`wide`, ``wide.<field>.weight`` (per-id logit weights added to the tower's output), then
``tower.<i>.weight`` / ``tower.<i>.bias``. Every parameter has the precision policy's
`param_dtype`. See `autoembed.models.embedding` for the lookups.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from autoembed.batch import Batch
from autoembed.config import (
    WIDE_PREFIX,
    EmbeddingConfig,
    TableConfig,
    cache_rows,
    param_specs,
    precision_policy,
    tower_input_width,
)
from autoembed.errors import ConfigError, DataError, UnsupportedError
from autoembed.models.embedding import LookupSpec, PlainTable, QRTable, TableModule, WideTable
from autoembed.models.tower import build_tower, interact, run_tower

__all__ = [
    "EmbeddingModel",
    "as_device",
    "build_model",
    "check_buildable",
    "loss_fn",
    "torch_dtype",
]

# torch's optimizers that take sparse gradients but cannot decay them (torch 2.13): Adagrad
# raises "weight_decay option is not compatible with sparse gradients", SGD raises
# "add(sparse, dense) is not supported", SparseAdam has no weight_decay argument.
_NO_SPARSE_DECAY = ("sgd", "adagrad", "sparse_adam")


def torch_dtype(name: str) -> torch.dtype:
    """torch dtype of a PrecisionPolicy dtype name ("float32", "float16", "bfloat16")."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"'{name}' is not a torch dtype")
    return dtype


def as_device(device: torch.device | str) -> torch.device:
    """`device` as a torch.device; a ConfigError naming it when torch does not know it."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"device {device!r} is not a torch device; use e.g. cpu, cuda or cuda:1"
        ) from None


def check_buildable(config: EmbeddingConfig) -> None:
    """Reject, with a ConfigError naming the value and the fix, what `config.validate` lets
    through but the model or its optimizers cannot do."""
    for t in config.tables:
        if "." in t.name or hasattr(nn.ModuleDict(), t.name):
            raise ConfigError(
                f"config key 'tables[].name' = {t.name!r}: a table name becomes a torch module "
                "name, which cannot contain '.' or be a ModuleDict attribute; rename the field"
            )
    if config.weight_decay > 0 and config.table_optimizer in _NO_SPARSE_DECAY:
        raise ConfigError(
            f"config key 'weight_decay' = {config.weight_decay!r}: table_optimizer "
            f"'{config.table_optimizer}' takes sparse gradients and cannot apply weight decay; "
            "set weight_decay 0, or use table_optimizer rowwise_adagrad, adam, adamw or momentum"
        )
    if config.serving == "int4":
        for s in param_specs(config):
            if s.kind == "table" and not s.name.startswith(WIDE_PREFIX) and s.shape[1] % 2:
                raise ConfigError(
                    f"config key 'dim' = {config.dim}: serving int4 packs two values a byte but "
                    f"'{s.name}' has {s.shape[1]} columns (qr concat stores dim/2); use a dim "
                    "divisible by 4, serving int8, or another qr_operation"
                )


def _hashed_rows(config: EmbeddingConfig, t: TableConfig) -> tuple[int, int | None]:
    """(rows, buckets) of a table's ids: under hash compression a table larger than
    `hash_buckets` hashes its ids into that many rows; otherwise one row per id (None)."""
    v = t.vocab_size
    if config.compression != "hash":
        return v, None
    assert config.hash_buckets is not None
    if v > config.hash_buckets:
        return config.hash_buckets, config.hash_buckets
    return v, None


def _field_table(
    config: EmbeddingConfig,
    t: TableConfig,
    spec: LookupSpec,
    device: torch.device,
    dtype: torch.dtype,
) -> TableModule:
    v, d = t.vocab_size, config.table_dim(t)
    if config.placement == "host_cached":
        return _host_cached_table(config, t, spec, device, dtype)
    if config.compression == "hash":
        rows, buckets = _hashed_rows(config, t)
        return PlainTable(
            rows, d, d, spec, buckets=buckets, seed=config.hash_seed, device=device, dtype=dtype
        )
    if config.compression == "qr" and v > config.qr_collisions:
        m, op = config.qr_collisions, config.qr_operation
        return QRTable(v, m, d, op, spec, device=device, dtype=dtype)
    # none, mixed_dim (projects d -> dim when narrower), qr with V <= m (a plain table)
    return PlainTable(v, d, config.dim, spec, device=device, dtype=dtype)


def _host_cached_table(
    config: EmbeddingConfig,
    t: TableConfig,
    spec: LookupSpec,
    device: torch.device,
    dtype: torch.dtype,
) -> TableModule:
    from autoembed.models.host_cache import HostCachedTable

    rows, buckets = _hashed_rows(config, t)
    return HostCachedTable(
        rows, config.table_dim(t), cache_rows(config, t), config.cache_policy,
        config.table_optimizer, spec,
        buckets=buckets, seed=config.hash_seed, dynamic_rows=config.dynamic_rows,
        device=device, dtype=dtype,
    )


def _wide_table(
    config: EmbeddingConfig,
    t: TableConfig,
    out: int,
    spec: LookupSpec,
    device: torch.device,
    dtype: torch.dtype,
) -> WideTable:
    """One field's wide part: ids map to rows as in the deep table under hash compression,
    one row per id otherwise (`config.param_specs` fixes the shapes)."""
    rows, buckets = _hashed_rows(config, t)
    return WideTable(
        rows, out, spec, buckets=buckets, seed=config.hash_seed, device=device, dtype=dtype
    )


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
        spec = LookupSpec(
            config.pooling, config.sparse_tables, config.task == "text", config.checkpointing
        )
        self.fields = tuple(t.name for t in config.tables)
        self.shared = config.compression == "shared"
        tables: dict[str, nn.Module] = {}
        if self.shared:
            rows = max(t.vocab_size for t in config.tables)
            tables["shared"] = PlainTable(
                rows, config.dim, config.dim, spec, device=dev, dtype=dtype
            )
        else:
            for t in config.tables:
                tables[t.name] = _field_table(config, t, spec, dev, dtype)
        self.tables = nn.ModuleDict(tables)
        out = 1 if config.task == "ctr" else config.num_classes
        self.wide = (
            nn.ModuleDict(
                {t.name: _wide_table(config, t, out, spec, dev, dtype) for t in config.tables}
            )
            if config.wide
            else None
        )
        self.tower = build_tower(
            tower_input_width(config), config.dense_layers, out, device=dev, dtype=dtype
        )

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
            pooled = [self.tables[n](i) for n, i in zip(self.fields, ids, strict=True)]
        if self.config.task == "text":
            return pooled[0]
        return interact(pooled, self.config.interaction)

    def forward(self, batch: Batch | Mapping[str, torch.Tensor]) -> torch.Tensor:
        features = batch.features if isinstance(batch, Batch) else batch
        x = self.embed(features)
        if self.config.checkpointing and torch.is_grad_enabled():
            logits: torch.Tensor = checkpoint(run_tower, self.tower, x, use_reentrant=False)
        else:
            logits = run_tower(self.tower, x)
        if self.wide is not None:
            for name, table in self.wide.items():
                logits = logits + table(features[name])
        return logits.squeeze(-1) if self.config.task == "ctr" else logits


def _check_layout(model: nn.Module, config: EmbeddingConfig) -> None:
    """The built parameters must be param_specs(config), name for name (a bug otherwise)."""
    dtype = torch_dtype(precision_policy(config.precision).param_dtype)
    got = [(n, tuple(p.shape), p.dtype) for n, p in model.named_parameters()]
    want = [(s.name, s.shape, dtype) for s in param_specs(config)]
    if got != want:
        raise RuntimeError(f"model layout differs from param_specs: built {got}, specs {want}")


def build_model(config: EmbeddingConfig, device: torch.device | str = "cpu") -> EmbeddingModel:
    """Build the model for `config` on `device`, seeded by `config.seed`.

    Works under `FakeTensorMode` (no memory for the tables): only shape-driven control flow
    and ordinary init ops (`normal_`, Linear's `kaiming_uniform_`).
    """
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
