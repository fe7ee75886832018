"""The parameter layout: `param_specs(config)` lists every parameter tensor `build_model`
creates and the memory model prices (name, shape, table or dense, its optimizer), so the two
agree byte for byte. Pure Python."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoembed.compression import METHODS, hot_cold_shapes, robe_shapes, tt_shapes
from autoembed.config.choices import SPARSE_GRAD_OPTIMIZERS
from autoembed.config.tables import TableSettings
from autoembed.config.value import EmbeddingConfig, cache_rows, resolved_tables

__all__ = ["ParamSpec", "param_specs", "method_shapes", "tower_input_width", "WIDE_PREFIX"]


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
