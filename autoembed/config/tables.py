"""`TableConfig` (one feature's table as a config states it) and `TableSettings` (the same
table with every setting resolved, `config.value.resolved_tables`). Pure Python."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from autoembed.compression import HOT_SHARE_RULE, TT_RANK_RULE
from autoembed.config.choices import (
    OPTIMIZERS,
    QR_OPERATIONS,
    SPARSE_GRAD_OPTIMIZERS,
    TABLE_COMPRESSIONS,
)
from autoembed.rules import CountOrShare, Integer, Interval, Is, OneOf, check_fields, field_rule

__all__ = ["TableConfig", "TableSettings", "TABLE_OVERRIDES", "buckets_of", "collisions_of"]

# A table name: a module path, dot-separated identifier-like parts (`encoder.tok_emb`).
_TABLE_NAME = Is(lambda n: isinstance(n, str) and all(n.split(".")),
                 "a module path, a name between every two dots (e.g. encoder.tok_emb)")


@dataclass(frozen=True)
class TableConfig:
    """One categorical feature's embedding table: its name, rows, ids per sample and
    the per-table settings (TABLE_OVERRIDES and `dim`; None: the config's value of the same
    key), each key as docs/config_keys.yaml says; `resolved_tables` resolves them."""

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
        _TABLE_NAME.check(f"{where}.name", self.name)
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
