"""Price every rank of a TorchRec plan: `estimate_sharded(model, example, topology, tables)`
(what each part holds, and how it was checked against DMP: docs/torchrec.md).

The plan is TorchRec's (`plan.plan_model`). Each rank's step is priced in three parts, with
the contract's figure names: the table shards and optimizer state by formula (FBGEMM's
storages), the dense part traced (`estimate_model` with every table shrunk to one row), and
the sparse step's transients by formula (`_transients`); the step peak is the larger of the
dense peak with the saved ids and the dense part's resident bytes with the sparse peak
(`_step_peak`). Beside each rank: TorchRec's own storage estimate for the same plan (the
planner's `Shard.storage` on that rank), with the optimizer given the same way (`apply`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from autoembed.errors import ConfigError
from autoembed.memory.types import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    MemoryEstimate,
    round_block,
)
from autoembed.torchrec.model import HashedIds, _rebuild, _set, apply, collections, table_infos
from autoembed.torchrec.planner import PlannedTable, plan_model
from autoembed.torchrec.settings import RankTopology, table_settings
from autoembed.torchrec.unsharded import batch_of, build_model, estimate_unsharded, example_ids

__all__ = ["RankEstimate", "ShardedEstimate", "estimate_sharded", "OPTIMIZER_STATE",
           "shard_bytes", "CACHE_ASSOC"]

DTYPE_BYTES = {"fp32": 4, "fp16": 2}
# (fp32 values per weight, fp32 values per row) of FBGEMM's optimizer state
OPTIMIZER_STATE = {None: (0, 0), "sgd": (0, 0), "adagrad": (1, 0), "rowwise_adagrad": (0, 1),
                   "adam": (2, 0), "partial_rowwise_adam": (1, 1), "lamb": (2, 0)}
CACHE_ASSOC = 32  # FBGEMM's UVM cache: 32-way set-associative
INDEX_BYTES = 8  # KJT values (int64 ids)
# CUDA backward of FBGEMM's TBE per id: linear indices, sorted copy (int64 each), infos and
# sorted infos (int32 each), run-length and offsets (int32 each) -- unvalidated on a GPU
CUDA_BACKWARD_PER_ID = 8 + 8 + 4 + 4 + 4 + 4


def shard_bytes(rows: int, cols: int, data_type: str, optimizer: str | None) -> tuple[int, int]:
    """(weight bytes, optimizer-state bytes) of one shard in FBGEMM's table kernel."""
    per_weight, per_row = OPTIMIZER_STATE[optimizer]
    return rows * cols * DTYPE_BYTES[data_type], 4 * (rows * cols * per_weight + rows * per_row)


@dataclass(frozen=True)
class RankEstimate:
    """One rank's figures (bytes). `device_total` is checked against the rank's device
    memory; `host_bytes` (UVM tables) against its host memory."""

    rank: int
    table_bytes: int  # shards' weights on the device
    optimizer_state: int  # their fused optimizer's state on the device
    cache_bytes: int  # UVM caches (rows + slot state)
    replicated_bytes: int  # data_parallel tables: weight, gradient, dense optimizer state
    host_bytes: int  # UVM tables and their state (host memory)
    dense_peak: int  # the dense part's traced peak (its parameters, gradients, state, ...)
    sparse_transient: int  # input ids, lookup output (or its gradient), backward buffers
    allocated_peak: int
    reserved_peak: int
    overhead: int
    device_total: int
    torchrec_hbm: int  # TorchRec's storage estimate for this rank's shards
    torchrec_ddr: int
    tables: tuple[str, ...] = ()

    @property
    def persistent(self) -> int:
        """Shards and optimizer state: what FBGEMM's kernels hold after DMP init."""
        return self.table_bytes + self.optimizer_state + self.cache_bytes

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "tables": list(self.tables), "persistent": self.persistent}


@dataclass(frozen=True)
class ShardedEstimate:
    ranks: tuple[RankEstimate, ...]
    plan: tuple[PlannedTable, ...]
    topology: RankTopology
    dense: Any  # the dense part's MemoryEstimate
    notes: tuple[str, ...] = field(default=())

    def largest(self) -> RankEstimate:
        """The rank that needs the most device memory (the lowest such rank)."""
        return max(self.ranks, key=lambda r: (r.device_total, -r.rank))

    def memory_estimate(self) -> MemoryEstimate:
        """The plan as one `MemoryEstimate` (what a search judges and stores): the largest
        rank's figures, the dense part's categories beside its tables, shards and state,
        every rank's share in `per_gpu` (`gpus` = the world size, `sharding` "torchrec"),
        and the UVM tables' host bytes of the rank that holds the most. Its categories:
        `parameters` the dense part's with the rank's shards, UVM caches and data_parallel
        tables (their gradient and state included), `optimizer_state` the dense part's with
        the shards' fused state, `temporaries` the dense part's with the sparse step's."""
        from dataclasses import replace

        from autoembed.memory.types import GpuShare, TableMemory

        top, d = self.largest(), self.dense
        tables = tuple(TableMemory(t.name, t.rows, t.dim, *_whole(t)) for t in self.plan)
        return replace(
            d, method="torchrec-sharded", parameters=d.parameters + top.table_bytes
            + top.cache_bytes + top.replicated_bytes,
            optimizer_state=d.optimizer_state + top.optimizer_state,
            temporaries=d.temporaries + top.sparse_transient,
            allocated_peak=top.allocated_peak, reserved_peak=top.reserved_peak,
            overhead=top.overhead, device_total=top.device_total, serving_bytes=sum(
                t.serving_bytes for t in tables), tables=tables, budget=None,
            gpus=self.topology.world_size, sharding="torchrec", per_gpu=tuple(
                GpuShare(r.rank, r.tables, r.allocated_peak, r.device_total)
                for r in self.ranks),
            notes=(*self.notes, f"the figures of rank {top.rank}, the largest of "
                   f"{self.topology.world_size}"),
            host_bytes=max(r.host_bytes for r in self.ranks), modules=())

    def check_fits(self) -> None:
        """ConfigError naming the first rank over its device or host memory, by how much."""
        for r in self.ranks:
            over = r.device_total - self.topology.hbm
            if over > 0:
                raise ConfigError(f"the plan does not fit rank {r.rank}: it needs "
                                  f"{r.device_total} B of device memory, {over} B more than "
                                  f"its {self.topology.hbm} B; add ranks, shrink the tables "
                                  "or cache them (fused_uvm_caching)")
            over = r.host_bytes - self.topology.ddr
            if over > 0:
                raise ConfigError(f"the plan does not fit rank {r.rank}: its UVM tables need "
                                  f"{r.host_bytes} B of host memory, {over} B more than its "
                                  f"{self.topology.ddr} B")


def _whole(t: PlannedTable) -> tuple[int, int, int, int]:
    """(parameters, gradients, optimizer state, serving bytes) of a whole planned table."""
    w, st = shard_bytes(t.rows, t.dim, t.data_type, t.optimizer)
    return w, 0, st, w


@contextmanager
def _shrunk(model: nn.Module) -> Iterator[nn.Module]:
    """The model with each collection's tables at one row on the CPU (restored after)."""
    from dataclasses import replace

    swapped: list[tuple[str, Any]] = []
    for path, coll in collections(model):
        small = _rebuild(coll, [replace(c, num_embeddings=1) for c in
                                (getattr(coll, "embedding_bag_configs", None)
                                 or coll.embedding_configs)()], device="cpu")
        hashed = path and isinstance(model.get_submodule(path), HashedIds)
        inner = path + ".collection" if hashed else path
        model = _set(model, inner, small)
        swapped.append((inner, coll))
    try:
        yield model
    finally:
        for inner, holder in swapped:
            model = _set(model, inner, holder)


@dataclass(frozen=True)
class _Sparse:
    """The sparse part's bytes on one rank: `saved` (the ids and lengths it received, which
    the fused backward keeps from the forward to the backward), `lookup` (its shards' lookup
    output for the world's batch, fp32; in the backward its gradient), `backward` (on CUDA,
    FBGEMM's sort buffers)."""

    saved: int = 0
    lookup: int = 0
    backward: int = 0

    @property
    def peak(self) -> int:
        """What it holds at once: the saved ids, the lookup output (or its gradient) and
        the pooled output it becomes (or that output's gradient) on the way, the backward's
        buffers."""
        return self.saved + 2 * self.lookup + self.backward


def _transients(plan: tuple[PlannedTable, ...], rank: int, world: int, batch: int,
                ids: dict[str, int], cuda: bool) -> _Sparse:
    """The sparse part of the step on `rank`: ids received from every rank for its shards'
    features (a row-wise shard: the share of them in its rows, ids taken as uniform) and
    their lengths, the shards' lookup output for the world's batch (fp32), and on CUDA the
    backward's sort buffers."""
    saved = lookup = backward = 0
    for t in plan:
        for s in t.shards:
            if s.rank != rank:
                continue
            senders = 1 if t.sharding_type == "data_parallel" else world
            n = sum(ids.get(f, 0) for f in t.features) * senders
            if t.sharding_type in ("row_wise", "table_row_wise"):  # ids bucketized by row
                n = math.ceil(n * s.rows / t.rows)  # (uniform ids: a shard's share of rows)
            lengths = len(t.features) * batch * senders * INDEX_BYTES
            out = batch * senders * s.cols * len(t.features) * 4 if t.pooled \
                else n * s.cols * 4
            saved += round_block(n * INDEX_BYTES) + round_block(lengths)
            lookup += round_block(out)
            if cuda:
                backward += round_block(n * CUDA_BACKWARD_PER_ID)
    return _Sparse(saved, lookup, backward)


def _step_peak(dense: Any, sparse: _Sparse, reserved: bool = False) -> int:
    """The step's bytes above the tables: the dense part's traced peak with the saved ids
    beside it, or -- when the sparse part runs (the forward's lookups and output exchange,
    the backward's gradient exchange and fused update, both outside the dense part's
    activations) -- what the dense part keeps all step (its parameters, gradients and
    state) with the sparse part's peak."""
    resident = dense.parameters + dense.gradients + dense.optimizer_state
    top = dense.reserved_peak if reserved else dense.allocated_peak
    return max(top + sparse.saved, resident + sparse.peak)


# values per weight of the dense optimizer's state (a data_parallel table's optimizer)
DENSE_STATE = {"sgd": 0, "momentum": 1, "adagrad": 1, "adam": 2, "adamw": 2}
# the dense part's precision: its weights as built, no autocast (what a rank's loop is held
# to: `user.rank_guard`); its optimizer is priced without weight decay
DENSE_PRECISION = "fp32"


def _rank_estimate(rank: int, plan: tuple[PlannedTable, ...], topo: RankTopology,
                   dense: Any, ids: dict[str, int], batch: int,
                   dense_optimizer: str) -> RankEstimate:
    tables = state = cache = host = replicated = tr_hbm = tr_ddr = 0
    names = []
    for t in plan:
        for s in t.shards:
            if s.rank != rank:
                continue
            names.append(t.name)
            tr_hbm += s.torchrec_hbm
            tr_ddr += s.torchrec_ddr
            w, st = shard_bytes(s.rows, s.cols, t.data_type, t.optimizer)
            if t.compute_kernel == "dense":  # DDP: its gradient, the dense optimizer's state
                state_b = s.rows * s.cols * 4 * DENSE_STATE.get(dense_optimizer, 2)
                replicated += round_block(w) * 2 + round_block(state_b)
            elif t.compute_kernel == "fused_uvm_caching":
                slots = CACHE_ASSOC * max(1, math.ceil((t.cache_load_factor or 0.2) * s.rows
                                                       / CACHE_ASSOC))
                cache += slots * s.cols * DTYPE_BYTES[t.data_type] + slots * 2 * 8
                host += w + st
            else:
                tables += w
                state += st
    cuda = topo.compute_device == "cuda"
    sparse = _transients(plan, rank, topo.world_size, batch, ids, cuda)
    held = tables + state + cache + replicated
    allocated = held + _step_peak(dense, sparse)
    reserved = held + _step_peak(dense, sparse, reserved=True)
    overhead = CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES if cuda else 0
    return RankEstimate(rank=rank, table_bytes=tables, optimizer_state=state,
                        cache_bytes=cache, replicated_bytes=replicated, host_bytes=host,
                        dense_peak=dense.allocated_peak,
                        sparse_transient=sparse.peak, allocated_peak=allocated,
                        reserved_peak=reserved, overhead=overhead,
                        device_total=reserved + overhead, torchrec_hbm=tr_hbm,
                        torchrec_ddr=tr_ddr, tables=tuple(names))


def estimate_sharded(model: nn.Module | Callable[[], nn.Module], example: Any,
                     topology: RankTopology, tables: Any = (), *, loss: Any = None,
                     dense_optimizer: str = "adagrad", lr: float = 0.01) -> ShardedEstimate:
    """Each rank's figures for `model` (rewritten by `tables`, `apply`) planned on
    `topology`; `example` is one rank's batch (its KJT's stride is the batch per rank)."""
    items = table_settings(tables)
    built = apply(build_model(model), items, lr=lr, compute_device=topology.compute_device)
    if not table_infos(built):
        raise ConfigError(f"model {type(built).__name__} has no EmbeddingBagCollection or "
                          "EmbeddingCollection; autoembed's TorchRec path prices their tables")
    _, planned = plan_model(built, topology, items)
    batch = batch_of(example)
    if batch != topology.batch_size:
        raise ConfigError(f"topology.batch_size = {topology.batch_size}, but the example's "
                          f"KJT holds {batch} samples; give the batch of one rank")
    with _shrunk(built) as small:
        dense = estimate_unsharded(small, example, loss=loss, optimizer=dense_optimizer,
                                   precision=DENSE_PRECISION)
    ids = dict(example_ids(example))
    ranks = tuple(_rank_estimate(r, planned, topology, dense, ids, batch,
                                 dense_optimizer) for r in range(topology.world_size))
    notes = ("tables, optimizer state and UVM caches by formula per shard (FBGEMM's fused "
             "kernel); the dense part traced with one-row tables; sparse transients by "
             "formula",)
    return ShardedEstimate(ranks=ranks, plan=planned, topology=topology, dense=dense,
                           notes=notes)
