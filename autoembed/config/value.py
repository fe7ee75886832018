"""`EmbeddingConfig`: the one frozen, serialisable object that fully determines a model and
its training step; checked whole when it is made (each field against its declared rule, then
the rules that tie fields together), and each table's settings resolved (`resolved_tables`).
Pure Python."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from autoembed.compression import HOT_SHARE_RULE, METHODS, TT_RANK_RULE, check_method, check_robe
from autoembed.config.choices import (
    CACHE_POLICIES,
    COMPRESSIONS,
    DENSE_OPTIMIZERS,
    FP16_MIN_ADAM_EPS,
    HOST_CACHE_COMPRESSIONS,
    HOST_CACHE_OPTIMIZERS,
    INTERACTIONS,
    OPTIMIZERS,
    PLACEMENTS,
    POOLINGS,
    QR_OPERATIONS,
    SERVING,
    TASKS,
)
from autoembed.config.precision import PRECISION_RULE, precision_policy
from autoembed.config.tables import TableConfig, TableSettings, buckets_of, collisions_of
from autoembed.rules import (
    CountOrShare,
    Each,
    Flag,
    Integer,
    Interval,
    Is,
    OneOf,
    Rule,
    check_fields,
    config_error,
    field_rule,
    plain,
)

__all__ = ["EmbeddingConfig", "resolved_tables", "table_settings", "with_data_tables",
           "names_tables", "map_bucket_counts", "storage_rows", "cache_rows", "nested_name",
           "model_key"]

_fail = config_error  # "config key 'X' = V: rule", the one message shape


# The rules of the fields no search ranges over (so not in their metadata: FIELD_RULES).
_SHAPES: dict[str, Rule] = {
    "tables": Each(Is(TableConfig, "a table"), "a list of tables, at least one", filled=True,
                   seq=(tuple,)),
    "dense_layers": Each(Integer(1), "a list of layer widths (integers >= 1)", seq=(tuple,)),
    "data": Is(Mapping, "a data spec mapping, e.g. {name: mydata}"),
}


def _qr_collisions(rows: int) -> Rule:
    """QR's m against the table's rows (the largest's, for the config's own m)."""
    return Is(lambda m: m < rows, f"below the vocab size ({rows}) or QR compresses nothing")


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


# Config keys the model reads only through its resolved tables (`table_settings`), and
# mixed-dim's, which only `resolve` reads (it writes the tables' dims)
_READ_AS_TABLES = ("hash_buckets", "qr_collisions", "qr_operation", "robe_size", "tt_rank",
                   "hot_share", "mixed_dim_alpha", "mixed_dim_min")
# A resolved table's settings that only its compression reads (`models.embedding_model`,
# `config.layout`): under any other, they build nothing
_METHOD_SETTINGS = {"qr": ("qr_collisions", "qr_operation"),
                    "robe": ("robe_size", "robe_group", "robe_field"),
                    "tt": ("tt_rank",), "hot_cold": ("hot_share", "cold_buckets")}
_ANY_METHOD = {k for keys in _METHOD_SETTINGS.values() for k in keys}


def model_key(config: EmbeddingConfig) -> tuple[Any, ...]:
    """What the model and its training read of `config` (hashable; equal: one model, trained
    alike): its resolved tables (`resolved_tables` of `config.resolve()`), each without the
    settings its compression does not read (`_METHOD_SETTINGS`), and every other key but
    those read only through the tables (`_READ_AS_TABLES`). So a hash_buckets share and the
    counts it comes to, a qr_collisions share and its ceil(1 / share), two mixed_dim_alphas
    that round to the same dims, a tt_rank under hash are one model; `data` (the spec, not
    compared) is not part of it."""
    c = config.resolve()
    rest = tuple((f.name, getattr(c, f.name)) for f in fields(c)
                 if f.compare and f.name != "tables" and f.name not in _READ_AS_TABLES)
    tables = tuple(
        tuple((f.name, getattr(ts, f.name)) for f in fields(ts)
              if f.name not in _ANY_METHOD or f.name in _METHOD_SETTINGS.get(ts.compression, ()))
        for ts in resolved_tables(c))
    return rest, tables


def _robe_group(config: EmbeddingConfig) -> tuple[str, ...]:
    """Under `robe_shared`: the names of the robe tables, in config order (they read one
    array; a table's index here is its hash field). Otherwise ()."""
    if not config.robe_shared:
        return ()
    return tuple(t.name for t in config.tables if (t.compression or config.compression) == "robe")


def _values(config: EmbeddingConfig, t: TableConfig) -> int:
    """V x D of a table (its own dim, else the config's)."""
    return t.vocab_size * (t.dim if t.dim is not None else config.dim)


# A config's tables before any are named: one 1M-row table, which data (`resolve_for_data`)
# replaces by its own
_PLACEHOLDER_TABLES = (TableConfig("f0", 1_000_000),)


def names_tables(config: EmbeddingConfig) -> bool:
    """Whether `config` names its tables (False: the placeholder, which data replaces)."""
    return config.tables != _PLACEHOLDER_TABLES


@dataclass(frozen=True)
class EmbeddingConfig:
    """Everything that determines the model, its training step and its memory."""

    task: str = field(default="ctr", metadata=field_rule(OneOf(TASKS)))
    tables: tuple[TableConfig, ...] = _PLACEHOLDER_TABLES
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
    # robe / tt / hot_cold (`autoembed.compression`; each key: docs/config_keys.yaml)
    robe_size: int | float = field(default=0.1, metadata=field_rule(CountOrShare(1)))
    robe_block: int = field(default=8, metadata=field_rule(Integer(1)))
    robe_shared: bool = field(default=False, metadata=field_rule(Flag()))
    tt_rank: int = field(default=8, metadata=field_rule(TT_RANK_RULE))
    hot_share: float = field(default=0.01, metadata=field_rule(HOT_SHARE_RULE))
    # precision
    precision: str = field(default="fp32", metadata=field_rule(PRECISION_RULE))
    serving: str = field(default="none", metadata=field_rule(OneOf(SERVING)))
    # optimisation
    table_optimizer: str = field(default="adam", metadata=field_rule(OneOf(OPTIMIZERS)))
    dense_optimizer: str = field(default="adam", metadata=field_rule(OneOf(
        DENSE_OPTIMIZERS, "(rowwise_adagrad and sparse_adam are sparse, row-wise optimizers "
        "for tables only)")))
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
    # placement: see PLACEMENTS; docs/host_cache.md has the formulas
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
        for key, rule in _SHAPES.items():
            if getattr(self, key) is not None:
                rule.check(key, getattr(self, key))
        check_fields(self)
        names: set[str] = set()
        for i, t in enumerate(self.tables):
            t.validate(f"tables[{i}]")
            if t.name in names:
                raise _fail(f"tables[{i}].name", t.name, "table names must be unique")
            names.add(t.name)
        _check_nesting(self.tables)
        if self.task != "text" and self.num_classes != 2:
            raise _fail("num_classes", self.num_classes, "the ctr task is binary: use 2")
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
            _qr_collisions(largest).check("qr_collisions", self.qr_collisions)
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
            if isinstance(t.qr_collisions, int):
                _qr_collisions(t.vocab_size).check(f"tables[{i}].qr_collisions", t.qr_collisions)
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


def nested_name(names: Sequence[str]) -> tuple[int, str] | None:
    """(index, outer) of the first name that sits inside another ('a.b' inside 'a': dotted
    table names are module paths, so no table may), else None."""
    known = set(names)
    for i, name in enumerate(names):
        parts = name.split(".")
        outer = next((".".join(parts[:k]) for k in range(1, len(parts))
                      if ".".join(parts[:k]) in known), None)
        if outer is not None:
            return i, outer
    return None


def _check_nesting(tables: tuple[TableConfig, ...]) -> None:
    """Dotted names are module paths, so no table may sit inside another ('a' and 'a.b')."""
    found = nested_name([t.name for t in tables])
    if found is not None:
        i, outer = found
        raise _fail(f"tables[{i}].name", tables[i].name, f"sits inside table '{outer}' (names "
                    "are module paths); rename one of them")


def storage_rows(config: EmbeddingConfig, t: TableConfig | TableSettings) -> int:
    """Rows of a host_cached table's full (host) copy: the stored rows plus dynamic rows."""
    return table_settings(config, t).hashed[0] + config.dynamic_rows


def cache_rows(config: EmbeddingConfig, t: TableConfig | TableSettings) -> int:
    """Device cache rows of a host_cached table: ceil(cache_load_factor x storage rows)."""
    rows = storage_rows(config, t)
    return max(1, min(rows, math.ceil(config.cache_load_factor * rows - 1e-9)))
