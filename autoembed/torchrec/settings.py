"""What autoembed may set on a TorchRec table, and the machine it is planned for: plain values,
no torch and no TorchRec (a search space and `export` read them without either installed).
Each per-table setting is one of TorchRec's own knobs, so a rewritten model stays an ordinary
TorchRec model that `DistributedModelParallel` shards (each knob and its values:
docs/torchrec.md, "Per-table settings"). compute_kernel: fused keeps the table on the device,
fused_uvm_caching in host memory reached through UVM (a `cache_load_factor` share of its rows
cached on the device), dense is a plain torch table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from autoembed.config import check_fields
from autoembed.errors import ConfigError, did_you_mean
from autoembed.rules import Integer, Interval, OneOf, field_rule

__all__ = ["TorchRecTable", "RankTopology", "OPTIMIZERS", "CPU_OPTIMIZERS", "DATA_TYPES",
           "COMPUTE_KERNELS", "SHARDING_TYPES", "INSTALL", "table_settings", "TABLE_KEYS",
           "TABLE_RULES", "TOPOLOGY_KEYS", "TOPOLOGY_RULES"]

# autoembed's name -> torchrec.distributed.embedding_types / fbgemm EmbOptimType member
OPTIMIZERS = {
    "sgd": "EXACT_SGD",
    "adagrad": "EXACT_ADAGRAD",
    "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
    "adam": "ADAM",
    "partial_rowwise_adam": "PARTIAL_ROWWISE_ADAM",
    "lamb": "LAMB",
}
# fbgemm-gpu-cpu 1.8.0's CPU table kernel: the others raise "not supported in CPU mode"
CPU_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")
DATA_TYPES = ("fp32", "fp16")
# EmbeddingComputeKernel values (torchrec.distributed.embedding_types)
COMPUTE_KERNELS = ("fused", "fused_uvm_caching", "dense")
# ShardingType values (torchrec.distributed.types)
SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise",
                  "data_parallel")
# what brings TorchRec in (scripts/setup.sh: the two-step install, pinned versions)
INSTALL = "AUTOEMBED_TORCHREC=1 bash scripts/setup.sh"


@dataclass(frozen=True)
class TorchRecTable:
    """One TorchRec table's settings; None keeps what the model (or the planner) has.
    `name` is ``module.path.table_name`` (the collection's path, then its table's name)."""

    name: str
    num_embeddings: int | None = field(default=None, metadata=field_rule(Integer(1)))
    embedding_dim: int | None = field(default=None, metadata=field_rule(Integer(1)))
    data_type: str | None = field(default=None, metadata=field_rule(OneOf(DATA_TYPES)))
    optimizer: str | None = field(default=None, metadata=field_rule(OneOf(tuple(OPTIMIZERS))))
    compute_kernel: str | None = field(default=None,
                                       metadata=field_rule(OneOf(COMPUTE_KERNELS)))
    cache_load_factor: float | None = field(default=None,
                                            metadata=field_rule(Interval(0.0, 1.0, True)))
    sharding_type: str | None = field(default=None, metadata=field_rule(OneOf(SHARDING_TYPES)))

    def __post_init__(self) -> None:
        where = f"torchrec table '{self.name}'"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"torchrec table name = {self.name!r}: give the table as "
                              "module.path.table_name")
        check_fields(self, where)
        if self.cache_load_factor is not None and self.compute_kernel != "fused_uvm_caching":
            raise ConfigError(f"{where}: cache_load_factor = {self.cache_load_factor} is the "
                              "share of rows UVM caching keeps on the device; set compute_kernel "
                              "fused_uvm_caching or drop cache_load_factor")
        if self.compute_kernel == "dense" and self.optimizer is not None:
            raise ConfigError(f"{where}: compute_kernel dense trains the table with your own "
                              f"torch optimizer, so optimizer = {self.optimizer!r} (FBGEMM's "
                              "fused optimizer) cannot apply; use compute_kernel fused")

    @property
    def table(self) -> str:
        """The table's own name (TorchRec's `EmbeddingBagConfig.name`)."""
        return self.name.rpartition(".")[2]

    @property
    def module(self) -> str:
        """The collection's module path ("" for a model that is the collection)."""
        return self.name.rpartition(".")[0]

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


def table_settings(entries: Any) -> tuple[TorchRecTable, ...]:
    """Settings from a list of dicts / `TorchRecTable`s, or a mapping name -> dict; an
    unknown key is a ConfigError naming it."""
    if isinstance(entries, Mapping):
        entries = [{"name": k, **dict(v)} for k, v in entries.items()]
    known = [f.name for f in fields(TorchRecTable)]
    out: list[TorchRecTable] = []
    for i, e in enumerate(entries or ()):
        if isinstance(e, TorchRecTable):
            out.append(e)
            continue
        if not isinstance(e, Mapping):
            raise ConfigError(f"torchrec tables[{i}] = {e!r}: give a mapping of settings "
                              f"({', '.join(known)})")
        for k in e:
            if k not in known:
                raise ConfigError(f"torchrec tables[{i}]: unknown key '{k}'"
                                  f"{did_you_mean(k, known)}; keys: {', '.join(known)}")
        out.append(TorchRecTable(**dict(e)))
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"torchrec table '{dup[0]}' is given twice; give each table once")
    return tuple(out)


@dataclass(frozen=True)
class RankTopology:
    """The machines a plan is for: `world_size` ranks (`local_world_size` per host), each with
    `hbm` device bytes and `ddr` host bytes, `batch_size` samples per rank per step, on
    `compute_device` "cuda" (a GPU plan) or "cpu" (DMP over gloo, a CPU plan)."""

    world_size: int = field(metadata=field_rule(Integer(1)))
    batch_size: int = field(metadata=field_rule(Integer(1)))
    hbm: int = field(default=80 * 10**9, metadata=field_rule(Integer(1)))
    ddr: int = field(default=512 * 10**9, metadata=field_rule(Integer(1)))
    compute_device: str = field(default="cuda", metadata=field_rule(OneOf(("cuda", "cpu"))))
    local_world_size: int | None = field(default=None, metadata=field_rule(Integer(1)))

    def __post_init__(self) -> None:
        check_fields(self, "topology")

    @property
    def per_host(self) -> int:
        return self.local_world_size or self.world_size


# A search space's per-table TorchRec keys (every setting but the name) and their rules, and
# the topology keys a space gives (`batch_size` is the example's: the KJT's stride)
TABLE_RULES: dict[str, Any] = {f.name: f.metadata["rule"] for f in fields(TorchRecTable)
                               if "rule" in f.metadata}
TABLE_KEYS = tuple(TABLE_RULES)
TOPOLOGY_RULES: dict[str, Any] = {f.name: f.metadata["rule"] for f in fields(RankTopology)
                                  if "rule" in f.metadata and f.name != "batch_size"}
TOPOLOGY_KEYS = tuple(TOPOLOGY_RULES)
