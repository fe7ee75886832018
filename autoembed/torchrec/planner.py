"""TorchRec's sharding plan for a model on a topology: its own planner
(`EmbeddingShardingPlanner`), constrained by the tables' settings (a sharding type and compute
kernel given fix the planner's choice; the rest it picks), with the optimizer it reads from
each table's parameter (`apply_optimizer_in_backward`, as `autoembed.torchrec.apply` sets it).

`PlannedShard` / `PlannedTable` are the plan as plain values: per table its sharding type,
kernel, optimizer, data type, and each shard's rank, rows and columns, with TorchRec's own
storage estimate for that shard (`Storage.hbm` / `.ddr`) beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from autoembed.errors import ConfigError, first_line
from autoembed.torchrec.model import constraints, table_infos
from autoembed.torchrec.settings import RankTopology, table_settings

__all__ = ["PlannedShard", "PlannedTable", "plan_model", "sharders", "torchrec_topology",
           "CPU_SHARDING_TYPES", "NoPlanError"]

# what EmbeddingBagCollectionSharder offers for compute_device "cpu" (row-wise needs CUDA)
CPU_SHARDING_TYPES = ("data_parallel", "table_wise", "column_wise", "table_column_wise")


class NoPlanError(ConfigError):
    """TorchRec's planner found no plan (most often: the tables do not fit the topology's
    memory by its own estimate). A search records such a proposal as failed, with this
    line, and goes on."""


@dataclass(frozen=True)
class PlannedShard:
    rank: int
    rows: int
    cols: int
    row_offset: int
    col_offset: int
    torchrec_hbm: int  # TorchRec's storage estimate for this shard (bytes)
    torchrec_ddr: int


@dataclass(frozen=True)
class PlannedTable:
    name: str  # module.path.table_name
    table: str  # the EmbeddingBagConfig name
    rows: int
    dim: int
    data_type: str  # fp32 / fp16
    optimizer: str | None  # autoembed's name of the fused optimizer (None: dense kernel)
    sharding_type: str
    compute_kernel: str
    cache_load_factor: float | None
    features: tuple[str, ...]
    pooled: bool
    shards: tuple[PlannedShard, ...] = field(default=())


def torchrec_topology(topo: RankTopology) -> Any:
    from torchrec.distributed.planner import Topology

    return Topology(world_size=topo.world_size, compute_device=topo.compute_device,
                    hbm_cap=topo.hbm, ddr_cap=topo.ddr, local_world_size=topo.per_host)


def sharders() -> list[Any]:
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    return [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]


def _optimizer_name(weight: Any) -> str | None:
    from autoembed.torchrec.model import optimizer_class
    from autoembed.torchrec.settings import OPTIMIZERS

    classes = getattr(weight, "_optimizer_classes", None) or []
    for name in OPTIMIZERS:
        if classes and classes[0] is optimizer_class(name):
            return name
    return None


def plan_model(model: nn.Module, topo: RankTopology, settings: Any = (),
               pg: Any = None) -> tuple[Any, tuple[PlannedTable, ...]]:
    """(TorchRec's ShardingPlan, the plan as `PlannedTable`s). With `pg` (a process group)
    rank 0 plans and broadcasts (`collective_plan`), so every rank shards alike."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    items = table_settings(settings)
    if topo.compute_device == "cpu":
        for s in items:
            if s.sharding_type is not None and s.sharding_type not in CPU_SHARDING_TYPES:
                raise ConfigError(f"torchrec table '{s.name}': sharding_type "
                                  f"{s.sharding_type!r} needs CUDA (a CPU plan offers "
                                  f"{', '.join(CPU_SHARDING_TYPES)})")
            if s.compute_kernel == "fused_uvm_caching":
                raise ConfigError(f"torchrec table '{s.name}': compute_kernel "
                                  "fused_uvm_caching needs CUDA (UVM); use fused on a CPU plan")
    planner = EmbeddingShardingPlanner(topology=torchrec_topology(topo),
                                       batch_size=topo.batch_size,
                                       constraints=constraints(items, model))
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the planner logs its own advice to the root logger
    try:
        plan = (planner.collective_plan(model, sharders(), pg) if pg is not None
                else planner.plan(model, sharders()))
    except Exception as e:  # noqa: BLE001 - the planner's own words, one line
        raise NoPlanError(f"TorchRec's planner found no plan for {topo.world_size} rank(s) "
                          f"of {topo.hbm} B device and {topo.ddr} B host memory: "
                          f"{first_line(e)}") from None
    finally:
        logging.disable(before)
    return plan, _planned(model, planner)


def _planned(model: nn.Module, planner: Any) -> tuple[PlannedTable, ...]:
    infos = {t.config.name: t for t in table_infos(model)}
    settings_of = {so.name: so for so in (planner._best_plan or [])}
    out = []
    for name, info in infos.items():
        so = settings_of.get(name)
        if so is None:
            continue
        cache = so.cache_params.load_factor if so.cache_params is not None else None
        shards = tuple(PlannedShard(
            rank=int(s.rank), rows=int(s.size[0]), cols=int(s.size[1]),
            row_offset=int(s.offset[0]), col_offset=int(s.offset[1]),
            torchrec_hbm=int(s.storage.hbm), torchrec_ddr=int(s.storage.ddr))
            for s in so.shards)
        kernel = so.compute_kernel
        cfg = info.config
        out.append(PlannedTable(
            name=info.name, table=name, rows=int(cfg.num_embeddings),
            dim=int(cfg.embedding_dim), data_type=str(cfg.data_type.name).lower(),
            optimizer=_optimizer_name(info.weight), sharding_type=so.sharding_type,
            compute_kernel=kernel,
            cache_load_factor=cache if kernel == "fused_uvm_caching" else None,
            features=tuple(cfg.feature_names), pooled=info.pooled, shards=shards))
    return tuple(out)
