"""`EmbeddingConfig`: the one frozen, serialisable object that fully determines a model and
its training step. It is what the search proposes, the memory model prices, `export` writes
and `train` reads.

Pure Python (no torch, no YAML at import) so the memory model and the GPU scripts can use it
with torch alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from autoembed.compression import (
    HOT_SHARE_RULE,
    METHODS,
    TT_RANK_RULE,
    check_method,
    check_robe,
    hot_cold_shapes,
    robe_shapes,
    tt_shapes,
)
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import (
    CountOrShare,
    Flag,
    Integer,
    Interval,
    OneOf,
    Rule,
    config_error,
    field_rule,
    plain,
)

__all__ = [
    "TASKS",
    "COMPRESSIONS",
    "QR_OPERATIONS",
    "PRECISIONS",
    "SERVING",
    "OPTIMIZERS",
    "TABLE_ONLY_OPTIMIZERS",
    "DENSE_OPTIMIZERS",
    "FIELD_RULES",
    "TABLE_RULES",
    "FIELD_FLAGS",
    "FIELD_ALIASES",
    "check_fields",
    "optimizer_alias",
    "SPARSE_GRAD_OPTIMIZERS",
    "POOLINGS",
    "INTERACTIONS",
    "PLACEMENTS",
    "CACHE_POLICIES",
    "HOST_CACHE_OPTIMIZERS",
    "TABLE_COMPRESSIONS",
    "TABLE_OVERRIDES",
    "TableConfig",
    "TableSettings",
    "resolved_tables",
    "table_settings",
    "buckets_of",
    "with_data_tables",
    "map_bucket_counts",
    "collisions_of",
    "EmbeddingConfig",
    "ParamSpec",
    "PrecisionPolicy",
    "precision_policy",
    "param_specs",
    "method_shapes",
    "cache_rows",
    "storage_rows",
    "WIDE_PREFIX",
    "load_config",
    "as_config",
    "save_config",
    "config_from_dict",
    "parse_config_text",
    "safe_load_yaml",
]

TASKS = ("ctr", "text")
COMPRESSIONS = ("none", "hash", "qr", "mixed_dim", "shared", "robe", "tt", "hot_cold")
QR_OPERATIONS = ("mult", "add", "concat")
PRECISIONS = ("fp32", "fp16", "bf16", "fp16_master", "bf16_master", "amp_fp16", "amp_bf16")
SERVING = ("none", "int8", "int4")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "adagrad", "rowwise_adagrad", "sparse_adam")
# Optimizers that only make sense for embedding rows (they need sparse, row-indexed gradients).
TABLE_ONLY_OPTIMIZERS = ("rowwise_adagrad", "sparse_adam")
DENSE_OPTIMIZERS = tuple(o for o in OPTIMIZERS if o not in TABLE_ONLY_OPTIMIZERS)
# Table optimizers that take sparse gradients (torch.optim.SGD without momentum and Adagrad
# accept them; rowwise_adagrad and sparse_adam require them). Tables under any other
# optimizer get dense V x D gradients.
SPARSE_GRAD_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "sparse_adam")
# idf: each token weighs its inverse document frequency on the train split (scikit-learn's
# smooth idf, ln((1 + n) / (1 + df)) + 1; padding and OOV weigh 0), and the bag is the
# weighted mean: TF-IDF weighting for text tables without compression (`models.idf`).
POOLINGS = ("mean", "sum", "naive", "idf")
INTERACTIONS = ("concat", "dot")
# Placement (issue 9): `device` keeps whole tables on the GPU; `host_cached` keeps each full
# table and its optimizer state in host memory and a cache of `cache_load_factor` of its rows
# (FBGEMM's UVM caching, TorchRec's cache load factor) on the device.
PLACEMENTS = ("device", "host_cached")
CACHE_POLICIES = ("lru", "lfu")
# Table optimizers under which a row not looked up in a step does not change, so a row held on
# the host between its lookups trains exactly as on the device. Dense-gradient optimizers
# (momentum, adam, adamw) move every row every step and are refused.
HOST_CACHE_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "sparse_adam")
HOST_CACHE_COMPRESSIONS = ("none", "hash")
# fp16 cannot represent 1e-8 (smallest subnormal is 6e-8): Adam's default eps rounds to 0 and
# rows a step does not touch become 0/0 = NaN (REFERENCES.md, low precision pitfalls).
FP16_MIN_ADAM_EPS = 1e-4


_fail = config_error  # "config key 'X' = V: rule", the one message shape


# Compressions a single table may carry (`shared` is one table for all fields: config-wide).
TABLE_COMPRESSIONS = ("none", "hash", "qr", "mixed_dim", "robe", "tt", "hot_cold")


def _table_name(key: str, name: Any) -> None:
    """A table name: a module path, dot-separated identifiers-like parts (`encoder.tok_emb`)."""
    if not isinstance(name, str) or not name:
        raise _fail(key, name, "must be a non-empty string")
    if any(not part for part in name.split(".")):
        raise _fail(key, name, "a module path needs a name between every two dots, e.g. "
                    "encoder.tok_emb")


@dataclass(frozen=True)
class TableConfig:
    """One categorical feature's embedding table.

    `pooling_factor` is the average number of ids per sample for this field (1 for one-hot,
    more for multi-hot bags); for the text task the sequence length is `seq_len`.
    `frequency` is the share of this field's lookups that go to its average row, used by
    mixed_dim (None: uniform, 1 / vocab_size). `name` may be a module path (`encoder.tok_emb`).

    Per-table settings (None: the config's value of the same key):
    `dim` (a table narrower or wider than the config's `dim` is projected to it by a bias-free
    Linear; under mixed_dim, resolution writes the dims left None), `compression` (none, hash,
    qr or mixed_dim), `hash_buckets` and `qr_collisions` (an int: a count; a float in (0, 1):
    a share of this table's rows -- hash keeps ceil(share x rows) buckets, qr a quotient table
    of at most share x rows, i.e. ceil(1 / share) collisions), `qr_operation` and
    `table_optimizer`; `robe_size`, `tt_rank` and `hot_share` (`autoembed.compression`).
    See `resolved_tables`.
    """

    name: str
    vocab_size: int = field(metadata=field_rule(Integer(1)))
    pooling_factor: float = field(default=1.0, metadata=field_rule(Interval(0.0, 1e9, True)))
    dim: int | None = field(default=None, metadata=field_rule(Integer(1)))
    frequency: float | None = field(default=None, metadata=field_rule(Interval(0.0, 1.0, True)))
    compression: str | None = field(default=None, metadata=field_rule(OneOf(TABLE_COMPRESSIONS)))
    hash_buckets: int | float | None = field(default=None, metadata=field_rule(CountOrShare(1)))
    qr_collisions: int | float | None = field(default=None,
                                              metadata=field_rule(CountOrShare(2)))
    qr_operation: str | None = field(default=None, metadata=field_rule(OneOf(QR_OPERATIONS)))
    table_optimizer: str | None = field(default=None, metadata=field_rule(OneOf(OPTIMIZERS)))

    robe_size: int | float | None = field(default=None,
                                          metadata=field_rule(CountOrShare(1)))
    tt_rank: int | None = field(default=None, metadata=field_rule(TT_RANK_RULE))
    hot_share: float | None = field(default=None, metadata=field_rule(HOT_SHARE_RULE))
    def validate(self, where: str) -> None:
        _table_name(f"{where}.name", self.name)
        check_fields(self, where)

    @property
    def overrides(self) -> dict[str, Any]:
        """The per-table settings this table sets (key -> value)."""
        return {k: getattr(self, k) for k in TABLE_OVERRIDES if getattr(self, k) is not None}


# TableConfig keys that override the config's key of the same name.
TABLE_OVERRIDES = ("compression", "hash_buckets", "qr_collisions", "qr_operation",
                   "table_optimizer", "robe_size", "tt_rank", "hot_share")


@dataclass(frozen=True)
class TableSettings:
    """One table with every setting resolved (`resolved_tables`): what the model builds and
    the memory model prices. `hash_buckets` is the bucket count under hash (None otherwise);
    `qr_collisions` the count m; `lookups` the ids a sample reads (seq_len for text)."""

    name: str
    vocab_size: int
    pooling_factor: float
    dim: int
    compression: str
    hash_buckets: int | None
    hash_seed: int
    qr_collisions: int
    qr_operation: str
    table_optimizer: str
    frequency: float | None
    lookups: float
    # robe / tt / hot_cold (`autoembed.compression`): the array's values (a count), its block,
    # the TT rank, the hot share and the cold buckets (hash_buckets resolved; None if unset)
    robe_size: int = 1
    robe_block: int = 1
    # robe under robe_shared: the tables (names, config order) reading this table's array,
    # and this table's index among them (its hash field, `nn.methods.robe_seed`); else ()
    robe_group: tuple[str, ...] = ()
    robe_field: int = 0
    tt_rank: int = 1
    hot_share: float = 1.0
    cold_buckets: int | None = None

    @property
    def sparse(self) -> bool:
        """Whether this table's gradients are sparse (one row per lookup): robe and tt
        tables get dense gradients whatever the optimizer (`compression.METHOD_RULES`)."""
        if self.compression in ("robe", "tt"):
            return False
        return self.table_optimizer in SPARSE_GRAD_OPTIMIZERS

    @property
    def hashed(self) -> tuple[int, int | None]:
        """(rows, buckets): under hash a table larger than its buckets hashes its ids into
        that many rows; otherwise one row per id (buckets None)."""
        v = self.vocab_size
        if self.hash_buckets is not None and v > self.hash_buckets:
            return self.hash_buckets, self.hash_buckets
        return v, None

    @property
    def qr(self) -> bool:
        """Whether the table is stored as quotient and remainder tables (V > m)."""
        return self.compression == "qr" and self.vocab_size > self.qr_collisions


def with_data_tables(
    config: EmbeddingConfig, data_tables: tuple[TableConfig, ...]
) -> tuple[TableConfig, ...]:
    """The data's tables (sizes, bags, frequencies) with the config's per-table `dim` and
    settings carried over by name. A config table with settings the data has no table for
    is a ConfigError: its settings would be silently lost."""
    own = {t.name: t for t in config.tables}
    have = {t.name for t in data_tables}
    for i, t in enumerate(config.tables):
        if t.overrides and t.name not in have:
            raise _fail(f"tables[{i}].name", t.name,
                        f"has per-table settings but the data has no such table (it has: "
                        f"{', '.join(sorted(have))}); use one of those names")
    out = []
    for t in data_tables:
        mine = own.get(t.name)
        if mine is not None:
            t = replace(t, dim=mine.dim, **mine.overrides)
        else:
            t = replace(t, dim=None)
        out.append(t)
    return tuple(out)


def map_bucket_counts(config: EmbeddingConfig, fn: Callable[[int], int]) -> EmbeddingConfig:
    """`config` with `fn` applied to every hash-bucket count (the config's and each table's);
    shares of rows are left as they are (they follow the rows)."""
    def f(v: int | float | None) -> int | float | None:
        return fn(v) if isinstance(v, int) else v

    tables = tuple(replace(t, hash_buckets=f(t.hash_buckets)) for t in config.tables)
    return replace(config, hash_buckets=f(config.hash_buckets), tables=tables)


def buckets_of(value: int | float, rows: int) -> int:
    """Hash buckets of a `hash_buckets` value: a count as is, a share as ceil(share x rows)."""
    if isinstance(value, float):
        return max(1, math.ceil(value * rows - 1e-9))
    return value


def collisions_of(value: int | float) -> int:
    """QR collisions m of a `qr_collisions` value: a count as is, a share s as ceil(1 / s)
    (the quotient table then holds at most s of the rows)."""
    if isinstance(value, float):
        return max(2, math.ceil(1.0 / value - 1e-9))
    return value


def resolved_tables(config: EmbeddingConfig) -> tuple[TableSettings, ...]:
    """Every table's settings, each table's own value winning over the config's.

    Under `compression: shared` (one table for all fields) the tables carry the config's
    settings. Mixed-dim dims come from `config.resolve()` (call it first for real dims).
    Computed once per (frozen) config: the analytic estimate reads it several times."""
    cached: tuple[TableSettings, ...] | None = config.__dict__.get("_resolved_tables")
    if cached is None:
        cached = tuple(table_settings(config, t) for t in config.tables)
        object.__setattr__(config, "_resolved_tables", cached)
    return cached


def table_settings(config: EmbeddingConfig, t: TableConfig | TableSettings) -> TableSettings:
    """One table's resolved settings (`resolved_tables`); a TableSettings passes through."""
    if isinstance(t, TableSettings):
        return t
    comp = t.compression or config.compression
    hb = t.hash_buckets if t.hash_buckets is not None else config.hash_buckets
    qc = t.qr_collisions if t.qr_collisions is not None else config.qr_collisions
    dim = t.dim if t.dim is not None else config.dim
    robe = t.robe_size if t.robe_size is not None else config.robe_size
    values, group = t.vocab_size * dim, _robe_group(config) if comp == "robe" else ()
    if group:  # robe_shared: one array for the group, sized once from the config's robe_size
        robe = config.robe_size
        values = sum(_values(config, g) for g in config.tables if g.name in group)
    return TableSettings(
        name=t.name,
        vocab_size=t.vocab_size,
        pooling_factor=t.pooling_factor,
        dim=dim,
        compression=comp,
        hash_buckets=buckets_of(hb, t.vocab_size) if comp == "hash" and hb is not None else None,
        hash_seed=config.hash_seed,
        qr_collisions=collisions_of(qc),
        qr_operation=t.qr_operation or config.qr_operation,
        table_optimizer=t.table_optimizer or config.table_optimizer,
        frequency=t.frequency,
        lookups=config.lookups_per_sample(t),
        # a share of the values (the table's, or its group's): at least one block; a count
        # as given (checked)
        robe_size=(max(config.robe_block, buckets_of(robe, values))
                   if isinstance(robe, float) else robe),
        robe_block=config.robe_block,
        robe_group=group,
        robe_field=group.index(t.name) if group else 0,
        tt_rank=t.tt_rank if t.tt_rank is not None else config.tt_rank,
        hot_share=t.hot_share if t.hot_share is not None else config.hot_share,
        cold_buckets=buckets_of(hb, t.vocab_size) if hb is not None else None,
    )


def _robe_group(config: EmbeddingConfig) -> tuple[str, ...]:
    """Under `robe_shared`: the names of the robe tables, in config order (they read one
    array; a table's index here is its hash field). Otherwise ()."""
    if not config.robe_shared:
        return ()
    return tuple(t.name for t in config.tables if (t.compression or config.compression) == "robe")


def _values(config: EmbeddingConfig, t: TableConfig) -> int:
    """V x D of a table (its own dim, else the config's)."""
    return t.vocab_size * (t.dim if t.dim is not None else config.dim)


@dataclass(frozen=True)
class EmbeddingConfig:
    """Everything that determines the model, its training step and its memory."""

    task: str = field(default="ctr", metadata=field_rule(OneOf(TASKS)))
    tables: tuple[TableConfig, ...] = (TableConfig("f0", 1_000_000),)
    dim: int = field(default=64, metadata=field_rule(Integer(1)))
    num_classes: int = field(default=2, metadata=field_rule(Integer(2)))
    seq_len: int = field(default=1, metadata=field_rule(Integer(1), flag="seq"))
    pooling: str = field(default="mean", metadata=field_rule(OneOf(POOLINGS)))
    interaction: str = field(default="concat", metadata=field_rule(OneOf(INTERACTIONS)))
    dense_layers: tuple[int, ...] = (64,)
    # compression
    compression: str = field(default="none", metadata=field_rule(OneOf(COMPRESSIONS)))
    # a count, or a share of each table's rows
    hash_buckets: int | float | None = field(default=None, metadata=field_rule(CountOrShare(1)))
    hash_seed: int = field(default=0, metadata=field_rule(Integer(0)))
    qr_collisions: int | float = field(default=4, metadata=field_rule(CountOrShare(2)))
    qr_operation: str = field(default="mult", metadata=field_rule(OneOf(QR_OPERATIONS)))
    mixed_dim_alpha: float = field(default=0.3, metadata=field_rule(Interval(0.0, 1.0)))
    mixed_dim_min: int = field(default=4, metadata=field_rule(Integer(1)))
    # robe / tt / hot_cold (`autoembed.compression`): robe's array per table (a count of
    # values, or a share of the table's V x D values) and its block length; the TT rank; the
    # share of each table's ids that are hot (the cold ones hash into `hash_buckets` rows).
    # robe_shared: every robe table reads ONE array (the paper's ROBE-Z) of robe_size values
    # (a share: of the robe tables' V x D values together), each table hashing with its own seed
    robe_size: int | float = field(default=0.1, metadata=field_rule(CountOrShare(1)))
    robe_block: int = field(default=8, metadata=field_rule(Integer(1)))
    robe_shared: bool = field(default=False, metadata=field_rule(Flag()))
    tt_rank: int = field(default=8, metadata=field_rule(TT_RANK_RULE))
    hot_share: float = field(default=0.01, metadata=field_rule(HOT_SHARE_RULE))
    # precision
    precision: str = field(default="fp32", metadata=field_rule(OneOf(PRECISIONS)))
    serving: str = field(default="none", metadata=field_rule(OneOf(SERVING)))
    # optimisation
    table_optimizer: str = field(default="adam", metadata=field_rule(OneOf(OPTIMIZERS)))
    dense_optimizer: str = field(default="adam", metadata=field_rule(OneOf(
        DENSE_OPTIMIZERS, f"must be one of {', '.join(DENSE_OPTIMIZERS)} (rowwise_adagrad and "
        "sparse_adam are sparse, row-wise optimizers for tables only)")))
    lr: float = field(default=1e-3, metadata=field_rule(Interval(0.0, 100.0, True)))
    dense_lr: float | None = field(default=None, metadata=field_rule(Interval(0.0, 100.0, True)))
    adam_eps: float | None = field(default=None, metadata=field_rule(Interval(0.0, 1.0, True)))
    momentum: float = field(default=0.9, metadata=field_rule(Interval(0.0, 1.0)))
    weight_decay: float = field(default=0.0, metadata=field_rule(Interval(0.0, 1.0)))
    warmup_steps: int = field(default=0, metadata=field_rule(Integer(0)))
    checkpointing: bool = field(default=False, metadata=field_rule(Flag()))
    batch_size: int = field(default=256, metadata=field_rule(Integer(1), flag="batch"))
    grad_accum_steps: int = field(default=1, metadata=field_rule(Integer(1), flag="grad_accum"))
    seed: int = field(default=0, metadata=field_rule(Integer(0)))
    # wide & deep: per-id weights (one per output) summed into the logits beside the tower
    wide: bool = field(default=False, metadata=field_rule(Flag()))
    # placement (issue 9): see PLACEMENTS; docs/host_cache.md has the formulas
    placement: str = field(default="device", metadata=field_rule(OneOf(PLACEMENTS)))
    cache_load_factor: float = field(default=0.2,
                                     metadata=field_rule(Interval(0.0, 1.0, True)))
    cache_policy: str = field(default="lru", metadata=field_rule(OneOf(CACHE_POLICIES)))
    # host_cached: rows for ids >= vocab_size, given on first sight
    dynamic_rows: int = field(default=0, metadata=field_rule(Integer(0)))
    # data spec (name and parameters) and where vocabulary maps live; written by resolution
    data: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # ----------------------------------------------------------------- validation
    def validate(self) -> None:
        """Every field against its declared rule (`FIELD_RULES`), then the rules that tie
        fields together."""
        if not isinstance(self.tables, tuple) or not self.tables:
            raise _fail("tables", self.tables, "must list at least one table")
        names: set[str] = set()
        for i, t in enumerate(self.tables):
            if not isinstance(t, TableConfig):
                raise _fail(f"tables[{i}]", t, "must be a table mapping")
            t.validate(f"tables[{i}]")
            if t.name in names:
                raise _fail(f"tables[{i}].name", t.name, "table names must be unique")
            names.add(t.name)
        _check_nesting(self.tables)
        check_fields(self)
        if self.task != "text" and self.num_classes != 2:
            raise _fail("num_classes", self.num_classes, "the ctr task is binary: use 2")
        if not isinstance(self.dense_layers, tuple):
            raise _fail("dense_layers", self.dense_layers, "must be a list of layer widths")
        for i, w in enumerate(self.dense_layers):
            Integer(1).check(f"dense_layers[{i}]", w)
        self._validate_table_settings()
        if self.serving == "int4":
            for t in self.tables:
                d = t.dim if t.dim is not None else self.dim
                if d % 2:
                    raise _fail("dim", d, "int4 serving packs two values a byte: use an even dim")
        if (self.adam_eps is not None and self.precision == "fp16"
                and self.adam_eps < FP16_MIN_ADAM_EPS):
            raise _fail(
                "adam_eps",
                self.adam_eps,
                f"fp16 parameters need eps >= {FP16_MIN_ADAM_EPS} (1e-8 rounds to 0 in fp16 "
                "and untouched rows turn NaN); raise it or use fp16_master",
            )
        if self.data is not None and not isinstance(self.data, Mapping):
            raise _fail("data", self.data, "must be a data spec mapping, e.g. {name: mydata}")
        self._validate_placement()
        self._validate_idf()

    def _validate_idf(self) -> None:
        """pooling idf: one weight per row of an uncompressed table, on the device."""
        if self.pooling != "idf":
            return
        fix = "use pooling mean, or compression none and placement device"
        if self.placement != "device":
            raise _fail("pooling", "idf", f"weighs the rows of tables on the device, not "
                        f"placement {self.placement}; {fix}")
        if self.wide:
            raise _fail("pooling", "idf", "weighs the deep tables only; set wide false or "
                        "use pooling mean")
        for i, t in enumerate(self.tables):
            c = table_settings(self, t).compression
            if c not in ("none", "mixed_dim"):
                key = "compression" if t.compression is None else f"tables[{i}].compression"
                raise _fail(key, c, f"pooling idf weighs the rows of uncompressed tables; {fix}")

    def _validate_table_settings(self) -> None:
        """Compression rules, table by table, on each table's resolved settings."""
        if self.compression == "shared":
            if self.task != "ctr":
                raise _fail("compression", "shared", "sharing needs several fields: use task ctr")
            for i, t in enumerate(self.tables):
                own = {**t.overrides, **({"dim": t.dim} if t.dim not in (None, self.dim) else {})}
                if own:
                    k = next(iter(own))
                    raise _fail(f"tables[{i}].{k}", own[k], "compression shared builds one table "
                                "for every field; drop the per-table setting or use another "
                                "compression")
        qr_global = [t for t in self.tables
                     if (t.compression or self.compression) == "qr" and t.qr_collisions is None]
        if qr_global and isinstance(self.qr_collisions, int):
            largest = max(t.vocab_size for t in qr_global)
            if self.qr_collisions >= largest:
                raise _fail("qr_collisions", self.qr_collisions,
                            f"must be below the vocab size ({largest}) or QR compresses nothing")
        self._validate_robe_shared()
        for i, t in enumerate(self.tables):
            ts = table_settings(self, t)
            if ts.compression == "hash" and ts.hash_buckets is None:
                if t.compression is None:
                    raise _fail("hash_buckets", None, "compression 'hash' needs hash_buckets >= 1")
                raise _fail(f"tables[{i}].hash_buckets", None,
                            "compression 'hash' needs hash_buckets (a count, or a share of the "
                            "rows in (0, 1)) on the table or the config")
            if ts.compression in METHODS:
                self._validate_method(ts)
            if ts.compression != "qr":
                continue
            if isinstance(t.qr_collisions, int) and t.qr_collisions >= t.vocab_size:
                raise _fail(f"tables[{i}].qr_collisions", t.qr_collisions,
                            f"must be below the vocab size ({t.vocab_size}) or QR compresses "
                            "nothing")
            if ts.qr_operation == "concat" and ts.dim % 2:
                key = "dim" if t.dim is None else f"tables[{i}].dim"
                raise _fail(key, ts.dim, "qr_operation 'concat' needs an even dim (D/2 each)")

    def _validate_robe_shared(self) -> None:
        """robe_shared: at least one robe table; the array's one size and one optimizer."""
        group = _robe_group(self)
        if not self.robe_shared:
            return
        if not group:
            raise _fail("robe_shared", True, "no table uses compression robe; set compression "
                        "robe (on the config or the tables to share the array) or robe_shared "
                        "false")
        opts = {t.table_optimizer or self.table_optimizer for t in self.tables if t.name in group}
        for i, t in enumerate(self.tables):
            if t.name not in group:
                continue
            if t.robe_size is not None:
                raise _fail(f"tables[{i}].robe_size", t.robe_size, "tables sharing one robe "
                            "array (robe_shared) take the config's robe_size; drop the "
                            "per-table value or set robe_shared false")
            if t.table_optimizer is not None and len(opts) > 1:
                raise _fail(f"tables[{i}].table_optimizer", t.table_optimizer, "tables sharing "
                            "one robe array (robe_shared) are stepped by one optimizer; give "
                            "them the same table_optimizer or set robe_shared false")

    def _validate_method(self, ts: TableSettings) -> None:
        """robe / tt / hot_cold: their parameters, and the optimizer and serving they take."""
        if ts.compression == "robe":
            check_robe(ts.robe_size, ts.robe_block)
        if ts.compression == "hot_cold" and ts.cold_buckets is None:
            raise _fail("hash_buckets", None, "compression 'hot_cold' hashes its cold ids into "
                        "hash_buckets rows: set hash_buckets (a count, or a share of the rows)")
        check_method(ts.compression, ts.table_optimizer, self.serving)

    def _validate_placement(self) -> None:
        if self.placement != "host_cached":
            if self.dynamic_rows:
                raise _fail("dynamic_rows", self.dynamic_rows,
                            "dynamic vocabularies need placement host_cached; set it or use 0")
            return
        if self.wide:
            raise _fail("wide", self.wide,
                        "placement host_cached does not cache wide tables; set wide false or "
                        "placement device")
        for i, ts in enumerate(resolved_tables(self)):
            key = f"tables[{i}]." if self.tables[i].overrides or self.tables[i].dim else ""
            if ts.compression not in HOST_CACHE_COMPRESSIONS:
                k = f"{key}compression" if self.tables[i].compression else "compression"
                raise _fail(k, ts.compression,
                            "placement host_cached caches plain or hashed tables; use compression "
                            "none or hash, or placement device")
            if ts.table_optimizer not in HOST_CACHE_OPTIMIZERS:
                k = f"{key}table_optimizer" if self.tables[i].table_optimizer else "table_optimizer"
                raise _fail(k, ts.table_optimizer,
                            "placement host_cached needs an optimizer that leaves rows outside the "
                            f"batch unchanged: use {', '.join(HOST_CACHE_OPTIMIZERS)}")
            if ts.dim != self.dim:
                raise _fail(f"tables[{i}].dim", ts.dim, "placement host_cached keeps every table "
                            f"at the config's dim ({self.dim}); drop the table's dim")
        if precision_policy(self.precision).master:
            raise _fail("precision", self.precision,
                        "placement host_cached does not cache fp32 master rows; use fp32, fp16, "
                        "bf16 or amp_*")
        if self.serving != "none":
            raise _fail("serving", self.serving,
                        "placement host_cached serves the fp32/half table as trained; use none")
        if self.grad_accum_steps != 1:
            raise _fail("grad_accum_steps", self.grad_accum_steps,
                        "placement host_cached steps after every micro-batch; use 1")
        if self.dynamic_rows and any(ts.compression != "none" for ts in resolved_tables(self)):
            raise _fail("dynamic_rows", self.dynamic_rows,
                        "dynamic rows extend an unhashed table; use compression none or 0")
        for t in self.tables:
            per_batch = self.batch_size * math.ceil(self.lookups_per_sample(t))
            need = min(storage_rows(self, t), per_batch)
            have = cache_rows(self, t)
            if have < need:
                raise _fail("cache_load_factor", self.cache_load_factor,
                            f"table '{t.name}' caches {have} rows but one batch can look up {need} "
                            f"distinct rows; raise cache_load_factor to >= "
                            f"{need / storage_rows(self, t):.4g} or lower batch_size")

    # ----------------------------------------------------------------- derived values
    @property
    def effective_adam_eps(self) -> float:
        """Adam eps: the user's, else 1e-8, raised to 1e-4 for fp16 parameters."""
        if self.adam_eps is not None:
            return self.adam_eps
        return FP16_MIN_ADAM_EPS if self.precision == "fp16" else 1e-8

    @property
    def effective_dense_lr(self) -> float:
        return self.dense_lr if self.dense_lr is not None else self.lr

    @property
    def sparse_tables(self) -> bool:
        """Whether any table's gradients are sparse (one row per lookup) rather than dense."""
        return any(ts.sparse for ts in resolved_tables(self))

    def lookups_per_sample(self, table: TableConfig) -> float:
        return float(self.seq_len) if self.task == "text" else table.pooling_factor

    def table_dim(self, table: TableConfig) -> int:
        return table.dim if table.dim is not None else self.dim

    def _mixed(self, t: TableConfig) -> bool:
        return (t.compression or self.compression) == "mixed_dim"

    @property
    def is_resolved(self) -> bool:
        return all(t.dim is not None for t in self.tables if self._mixed(t))

    def resolve(self) -> EmbeddingConfig:
        """Write data-dependent values into the config (today: mixed-dim per-table dims).

        Mixed-dimension embeddings (Ginart et al., 2019; DLRM `md_solver` power rule): a table
        whose average row is looked up with probability p gets d = lambda * p**alpha, with
        lambda chosen so the most popular table (of all tables) gets the full `dim`; at least
        `mixed_dim_min`. Only mixed_dim tables without a dim of their own are written.
        """
        if self.is_resolved:
            return self
        pops = [t.frequency if t.frequency is not None else 1.0 / t.vocab_size for t in self.tables]
        top = max(pops)
        tables = []
        for t, p in zip(self.tables, pops, strict=True):
            if self._mixed(t) and t.dim is None:
                d = round(self.dim * (p / top) ** self.mixed_dim_alpha)
                t = replace(t, dim=max(min(self.dim, d), min(self.mixed_dim_min, self.dim)))
            tables.append(t)
        return replace(self, tables=tuple(tables))

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "tables":
                v = [
                    {
                        k.name: getattr(t, k.name)
                        for k in fields(t)
                        if getattr(t, k.name) is not None
                    }
                    for t in v
                ]
            elif f.name == "dense_layers":
                v = list(v)
            elif f.name == "data":
                v = plain(v) if v is not None else None
            out[f.name] = v
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def flat_params(self) -> dict[str, str]:
        """The config as flat key -> string pairs (MLflow params, CSV columns)."""
        d = self.to_dict()
        flat: dict[str, str] = {}
        for k, v in d.items():
            if k == "tables":
                for t in v:
                    for tk, tv in t.items():
                        if tk != "name":
                            flat[f"table.{t['name']}.{tk}"] = str(tv)
            elif k == "data":
                continue
            else:
                flat[k] = str(v)
        return flat


def _check_nesting(tables: tuple[TableConfig, ...]) -> None:
    """Dotted names are module paths, so no table may sit inside another ('a' and 'a.b')."""
    names = {t.name for t in tables}
    for i, t in enumerate(tables):
        parts = t.name.split(".")
        for k in range(1, len(parts)):
            outer = ".".join(parts[:k])
            if outer in names:
                raise _fail(f"tables[{i}].name", t.name, f"sits inside table '{outer}' (names "
                            "are module paths); rename one of them")


_TABLE_KEYS = {f.name for f in fields(TableConfig)}
_CONFIG_KEYS = {f.name for f in fields(EmbeddingConfig)}
# Each config field's (and table key's) declared rule: read by validation, the search-space
# loader and the CLI.
FIELD_RULES: dict[str, Rule] = {
    f.name: f.metadata["rule"] for f in fields(EmbeddingConfig) if "rule" in f.metadata
}
TABLE_RULES: dict[str, Rule] = {
    f.name: f.metadata["rule"] for f in fields(TableConfig) if "rule" in f.metadata
}
# CLI flag -> config field, where the flag is spelled otherwise (--batch: batch_size).
FIELD_FLAGS: dict[str, str] = {
    f.metadata["flag"]: f.name for f in fields(EmbeddingConfig) if "flag" in f.metadata
}


def check_fields(obj: Any, where: str = "") -> None:
    """Check every field of a config or table dataclass against its declared rule; a None
    value passes where the field's default is None."""
    prefix = f"{where}." if where else ""
    for f in fields(obj):
        rule = f.metadata.get("rule")
        value = getattr(obj, f.name)
        if rule is None or (value is None and f.default is None):
            continue
        rule.check(f"{prefix}{f.name}", value)


def optimizer_alias(name: str) -> dict[str, str]:
    """What `--optimizer NAME` sets: the table optimizer, and the dense optimizer too where
    NAME can train the tower (a table-only optimizer pairs with its dense relative)."""
    return {"table_optimizer": name,
            "dense_optimizer": {"rowwise_adagrad": "adagrad", "sparse_adam": "adam"}.get(
                name, name)}


# CLI flags that set several fields at once: flag -> the fields it sets for a value.
FIELD_ALIASES: dict[str, Callable[[Any], dict[str, Any]]] = {"optimizer": optimizer_alias}


def config_from_dict(raw: Mapping[str, Any], source: str = "config") -> EmbeddingConfig:
    """Build and validate a config from plain data; errors name the source, key and value."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping of config keys, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in _CONFIG_KEYS]
    if unknown:
        k = unknown[0]
        raise ConfigError(
            f"{source}: unknown key '{k}'{did_you_mean(k, sorted(_CONFIG_KEYS))}; "
            f"valid keys: {', '.join(sorted(_CONFIG_KEYS))}"
        )
    kw: dict[str, Any] = dict(raw)
    if "tables" in kw:
        tables = kw["tables"]
        if not isinstance(tables, list) or not tables:
            raise ConfigError(f"{source}: key 'tables' = {tables!r}: must be a non-empty list")
        built = []
        for i, t in enumerate(tables):
            if not isinstance(t, Mapping):
                raise ConfigError(f"{source}: key 'tables[{i}]' = {t!r}: must be a mapping")
            bad = [k for k in t if k not in _TABLE_KEYS]
            if bad:
                raise ConfigError(
                    f"{source}: unknown key 'tables[{i}].{bad[0]}'"
                    f"{did_you_mean(bad[0], sorted(_TABLE_KEYS))}; "
                    f"valid: {', '.join(sorted(_TABLE_KEYS))}"
                )
            if "name" not in t or "vocab_size" not in t:
                raise ConfigError(f"{source}: 'tables[{i}]' needs 'name' and 'vocab_size'")
            built.append(TableConfig(**t))
        kw["tables"] = tuple(built)
    if "dense_layers" in kw:
        dl = kw["dense_layers"]
        if not isinstance(dl, (list, tuple)):
            raise ConfigError(f"{source}: key 'dense_layers' = {dl!r}: must be a list of widths")
        kw["dense_layers"] = tuple(dl)
    try:
        return EmbeddingConfig(**kw)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    except TypeError as e:  # pragma: no cover - defensive: dataclass signature mismatch
        raise ConfigError(f"{source}: {e}") from None


def safe_load_yaml(text: str, source: str, kind: str = "config") -> Any:
    """`yaml.safe_load(text)`, with a syntax error or absurd nesting as a ConfigError naming
    `source` (and the line) and what a `kind` file should be."""
    import yaml  # lazy: keeps `import autoembed.config` torch- and yaml-free

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{source}:{where} is not valid YAML/JSON: {getattr(e, 'problem', e)}"
        ) from None
    except RecursionError:  # PyYAML's composer recurses once per nesting level
        raise ConfigError(f"{source}: nested too deeply to be a {kind}; a {kind} is a "
                          "mapping a few levels deep") from None


def parse_config_text(text: str, source: str) -> EmbeddingConfig:
    raw = safe_load_yaml(text, source)
    if isinstance(raw, Mapping) and "config" in raw and isinstance(raw["config"], Mapping):
        raw = raw["config"]  # exported files wrap the config with provenance
    try:
        return config_from_dict(raw, source)
    except RecursionError:
        raise ConfigError(f"{source}: a value is nested too deeply; a config is a mapping a "
                          "few levels deep") from None


def load_config(path: str | Path) -> EmbeddingConfig:
    """Read a YAML or JSON config file (exported or hand-written) and validate it."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"config file '{p}' does not exist; give the path of a YAML file"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file '{p}' cannot be read: {e}") from None
    return parse_config_text(text, str(p))


def as_config(value: Any, what: str = "config") -> EmbeddingConfig:
    """An EmbeddingConfig from the forms the public functions take: a config, a dict of its
    keys, or the path of a YAML/JSON config file; anything else is a ConfigError."""
    import os

    if isinstance(value, EmbeddingConfig):
        return value
    if isinstance(value, Mapping):
        return config_from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        return load_config(Path(value))
    raise ConfigError(f"{what} = {type(value).__name__}: give an EmbeddingConfig, a dict of "
                      "config keys, or the path of a config file such as best.yaml")


def save_config(
    config: EmbeddingConfig, path: str | Path, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write the config as YAML (or JSON when the suffix is .json), atomically."""
    import os
    import tempfile

    p = Path(path)
    body: dict[str, Any] = {"config": config.to_dict()}
    if extra:
        body.update(plain(extra))
    if p.suffix == ".json":
        text = json.dumps(body, indent=2)
    else:
        import yaml

        text = yaml.safe_dump(body, sort_keys=False)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, p)
    return p


# ===================================================================== precision and layout


@dataclass(frozen=True)
class PrecisionPolicy:
    """Exactly which tensors a training precision creates.

    param_bytes: bytes per element of every parameter (tables and tower) in the model.
    master: an fp32 master copy of every parameter exists; the optimizer steps the master,
        its state is fp32 and, during the step, each parameter has an fp32 gradient.
    autocast: the forward runs under torch.autocast in `autocast_dtype` (Linear layers and
        their weight casts in half precision; embedding lookups stay fp32).
    """

    name: str
    param_dtype: str
    param_bytes: int
    master: bool
    autocast_dtype: str | None

    @property
    def state_bytes(self) -> int:
        return 4 if self.master else self.param_bytes


_POLICIES = {
    "fp32": PrecisionPolicy("fp32", "float32", 4, False, None),
    "fp16": PrecisionPolicy("fp16", "float16", 2, False, None),
    "bf16": PrecisionPolicy("bf16", "bfloat16", 2, False, None),
    "fp16_master": PrecisionPolicy("fp16_master", "float16", 2, True, None),
    "bf16_master": PrecisionPolicy("bf16_master", "bfloat16", 2, True, None),
    "amp_fp16": PrecisionPolicy("amp_fp16", "float32", 4, False, "float16"),
    "amp_bf16": PrecisionPolicy("amp_bf16", "float32", 4, False, "bfloat16"),
}


def precision_policy(precision: str) -> PrecisionPolicy:
    FIELD_RULES["precision"].check("precision", precision)
    return _POLICIES[precision]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor the built model holds.

    kind: "table" (embedding rows) or "dense" (tower and projections). `optimizer` names the
    optimizer that steps it (its table's `table_optimizer`, or `dense_optimizer`). `table`
    names the field(s) it serves. `lookups_per_sample`: rows a sample reads from this tensor
    (sizes sparse gradients).
    """

    name: str
    shape: tuple[int, ...]
    kind: str
    table: str | None = None
    lookups_per_sample: float = 0.0
    optimizer: str = ""
    dense_gradient: bool = False  # robe / tt: dense whatever the optimizer

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def sparse(self) -> bool:
        """Whether this tensor's gradient is sparse (a table under a sparse optimizer)."""
        return (self.kind == "table" and self.optimizer in SPARSE_GRAD_OPTIMIZERS
                and not self.dense_gradient)


def storage_rows(config: EmbeddingConfig, t: TableConfig | TableSettings) -> int:
    """Rows of a host_cached table's full (host) copy: the stored rows plus dynamic rows."""
    return table_settings(config, t).hashed[0] + config.dynamic_rows


def cache_rows(config: EmbeddingConfig, t: TableConfig | TableSettings) -> int:
    """Device cache rows of a host_cached table: ceil(cache_load_factor x storage rows)."""
    rows = storage_rows(config, t)
    return max(1, min(rows, math.ceil(config.cache_load_factor * rows - 1e-9)))


def _table_storage(config: EmbeddingConfig, ts: TableSettings) -> list[ParamSpec]:
    """Embedding tensors of one field under its own compression; a table whose dim is not the
    config's adds its projection `proj.weight` [dim, d] (dense)."""
    look, v, d, opt = ts.lookups, ts.vocab_size, ts.dim, ts.table_optimizer
    base = f"tables.{ts.name}"
    if config.placement == "host_cached":  # the device holds only the cache
        shape = (cache_rows(config, ts), d)
        return [ParamSpec(f"{base}.cache_weight", shape, "table", ts.name, look, opt)]
    if ts.robe_group:  # robe_shared: the first table of the group holds the one array
        specs = [] if ts.robe_field else [ParamSpec(
            f"{base}.weight", (ts.robe_size,), "table", ",".join(ts.robe_group),
            sum(config.lookups_per_sample(t) for t in config.tables if t.name in ts.robe_group),
            opt, True)]
    elif ts.compression in METHODS:
        specs = [
            ParamSpec(f"{base}.{name}", shape, "table", ts.name, look, opt, not ts.sparse)
            for name, shape in method_shapes(ts)
        ]
    elif ts.qr:
        m = ts.qr_collisions
        dq = d // 2 if ts.qr_operation == "concat" else d
        specs = [
            ParamSpec(f"{base}.q_weight", (-(-v // m), dq), "table", ts.name, look, opt),
            ParamSpec(f"{base}.r_weight", (m, dq), "table", ts.name, look, opt),
        ]
    else:
        specs = [ParamSpec(f"{base}.weight", (ts.hashed[0], d), "table", ts.name, look, opt)]
    if d != config.dim:
        specs.append(ParamSpec(f"{base}.proj.weight", (config.dim, d), "dense", ts.name, 0.0,
                               config.dense_optimizer))
    return specs


def method_shapes(ts: TableSettings) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The tensors (name, shape) of a robe / tt / hot_cold table (`autoembed.compression`)."""
    if ts.compression == "robe":
        return robe_shapes(ts.robe_size)
    if ts.compression == "tt":
        return tt_shapes(ts.vocab_size, ts.dim, ts.tt_rank)
    assert ts.cold_buckets is not None  # validated: hot_cold needs hash_buckets
    return hot_cold_shapes(ts.vocab_size, ts.dim, ts.hot_share, ts.cold_buckets)


# Name prefix of the wide part's tensors; they are tables (table optimizer, sparse gradients)
# but serve unquantized: a 1-value int8 row is 16 B against 4 B in fp32 (16 B row alignment).
WIDE_PREFIX = "wide."


def _wide_storage(ts: TableSettings, out: int) -> ParamSpec:
    """The wide part of one field: one row of `out` weights per id (per hash bucket under
    hash compression; every other compression keeps one row per id)."""
    return ParamSpec(f"{WIDE_PREFIX}{ts.name}.weight", (ts.hashed[0], out), "table", ts.name,
                     ts.lookups, ts.table_optimizer)


def tower_input_width(config: EmbeddingConfig) -> int:
    f = len(config.tables)
    if config.task == "text" or config.interaction == "concat":
        return f * config.dim
    # dot: pairwise dot products of the F pooled embeddings plus their mean (DLRM-style)
    return f * (f - 1) // 2 + config.dim


def param_specs(config: EmbeddingConfig) -> tuple[ParamSpec, ...]:
    """Every parameter tensor of `build_model(config)`, in order: the shared layout contract
    between the model builder and the memory model (they must agree byte for byte)."""
    if not config.is_resolved:
        config = config.resolve()
    specs: list[ParamSpec] = []
    tables = resolved_tables(config)
    if config.compression == "shared":
        v = max(t.vocab_size for t in config.tables)
        look = sum(ts.lookups for ts in tables)
        names = ",".join(t.name for t in config.tables)
        specs.append(ParamSpec("tables.shared.weight", (v, config.dim), "table", names, look,
                               config.table_optimizer))
    else:
        for ts in tables:
            specs.extend(_table_storage(config, ts))
    out = 1 if config.task == "ctr" else config.num_classes
    if config.wide:
        specs.extend(_wide_storage(ts, out) for ts in tables)
    width = tower_input_width(config)
    for i, h in enumerate((*config.dense_layers, out)):
        specs.append(ParamSpec(f"tower.{i}.weight", (h, width), "dense", None, 0.0,
                               config.dense_optimizer))
        specs.append(ParamSpec(f"tower.{i}.bias", (h,), "dense", None, 0.0,
                               config.dense_optimizer))
        width = h
    return tuple(specs)
