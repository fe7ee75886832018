"""Write a pick as TorchRec code: `export_torchrec(model, tables, topology, path)`.

The file needs TorchRec alone (not autoembed); what it holds and how it runs: docs/torchrec.md,
"Export". Beside that page's names it defines ``train_step(coll, path)``, one step of a
collection (built on the CPU) on ``random_ids(path)``, which ``--train`` runs for each.
"""

from __future__ import annotations

import inspect
import pprint
from pathlib import Path
from typing import Any

from torch import nn

from autoembed.torchrec.model import apply, collections, table_infos
from autoembed.torchrec.planner import plan_model
from autoembed.torchrec.settings import RankTopology, table_settings

__all__ = ["export_torchrec", "torchrec_code", "render"]

_TEMPLATE = '''"""TorchRec tables and plan constraints exported by autoembed (a search's pick).

Run it to build the collections on the meta device and print TorchRec's plan for the
topology it was priced on; import it to rebuild and plan your own model:

    import {module}
    {module}.seed_generators()              # SEED, as the trial seeded before its build
    model = {module}.rewrite(my_model())    # the collections below, in place
    plan = {module}.plan(model)             # TorchRec's planner under CONSTRAINTS
    {module}.seed_generators()              # before your loop, as the trial seeded its train
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingCollection
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.types import CacheParams
from torchrec.modules.embedding_configs import (
    DataType,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType
)
from torchrec.optim import LAMB, PartialRowWiseAdam, RowWiseAdagrad
from torch.distributed.optim import _apply_optimizer_in_backward
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

# collection path -> its tables (pooled: EmbeddingBagCollection)
COLLECTIONS = {collections}
POOLED = {pooled}
# collection path -> feature -> rows its ids are taken modulo
HASHED = {hashed}
# table name -> (fused optimizer class, lr)
OPTIMIZERS = {optimizers}
CONSTRAINTS = {constraints}
TOPOLOGY = {topology}
SEED = {seed}  # the trial's: random, numpy and torch are seeded with it


def seed_generators(seed: int = SEED) -> None:
    """Seed python's random, numpy's global generator and torch's with `seed`, as the
    trial did before it built its model and again before its train."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


{hashed_ids}


def collection(path: str, device: str = "meta") -> nn.Module:
    """The collection at `path`, with each table's fused optimizer attached."""
    tables = COLLECTIONS[path]
    if POOLED[path]:
        coll = EmbeddingBagCollection(tables=tables, device=torch.device(device))
        bags = coll.embedding_bags
    else:
        coll = EmbeddingCollection(tables=tables, device=torch.device(device))
        bags = coll.embeddings
    for t in tables:
        if t.name in OPTIMIZERS:
            cls, lr = OPTIMIZERS[t.name]
            _apply_optimizer_in_backward(cls, [bags[t.name].weight], {{"lr": lr}})
    return HashedIds(coll, HASHED[path]) if HASHED.get(path) else coll


def rewrite(model: nn.Module, device: str = "meta") -> nn.Module:
    """Put every collection into `model` (built by your code) at its path; returns the model
    (the collection itself when the path is "")."""
    for path in COLLECTIONS:
        new = collection(path, device)
        if not path:
            return new
        parent, _, attr = path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, new)
    return model


def sharders():
    return [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]


def plan(module: nn.Module, world_size: int = TOPOLOGY["world_size"],
         batch_size: int = TOPOLOGY["batch_size"],
         compute_device: str = TOPOLOGY["compute_device"], hbm: int = TOPOLOGY["hbm"],
         ddr: int = TOPOLOGY["ddr"]):
    """TorchRec's ShardingPlan for `module` under CONSTRAINTS."""
    topology = Topology(world_size=world_size, compute_device=compute_device, hbm_cap=hbm,
                        ddr_cap=ddr, local_world_size=TOPOLOGY["local_world_size"] or world_size)
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=batch_size,
                                       constraints=CONSTRAINTS)
    return planner.plan(module, sharders())


def random_ids(path: str, batch_size: int = 8, seed: int = SEED) -> KeyedJaggedTensor:
    """One id per sample for each feature of the collection at `path`, drawn below its
    table's rows."""
    g = torch.Generator().manual_seed(seed)
    keys, ids = [], []
    for t in COLLECTIONS[path]:
        for f in t.feature_names:
            keys.append(f)
            ids.append(torch.randint(0, t.num_embeddings, (batch_size,), generator=g))
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.cat(ids),
        lengths=torch.ones(len(keys) * batch_size, dtype=torch.int64))


def train_step(coll: nn.Module, path: str, batch_size: int = 8, seed: int = SEED) -> float:
    """One training step of `coll` (`collection(path, "cpu")`) on `random_ids`: the loss
    is the mean square of what it looks up; each table's fused optimizer steps inside the
    backward. Returns the loss."""
    out = coll(random_ids(path, batch_size, seed))
    looked = [out.values()] if POOLED[path] else [j.values() for j in out.values()]
    loss = sum(v.float().square().mean() for v in looked)
    loss.backward()
    return float(loss.detach())


if __name__ == "__main__":
    import sys

    holder = nn.ModuleDict({{f"c{{i}}": collection(p) for i, p in enumerate(COLLECTIONS)}})
    print(plan(holder))
    if "--train" in sys.argv[1:]:  # one step of each collection on the CPU (allocates it)
        seed_generators()  # the tables' initial weights from the trial's seed
        for path in COLLECTIONS:
            coll = collection(path, "cpu")
            before = {{k: v.clone() for k, v in coll.state_dict().items()}}
            loss = train_step(coll, path)
            moved = sum(not torch.equal(before[k], v) for k, v in coll.state_dict().items())
            print(f"trained {{path or 'the model'}} one step: loss {{loss:.6g}}, "
                  f"{{moved}} of {{len(before)}} tables updated")
'''

_OPT_CLASSES = {"sgd": "torch.optim.SGD", "adagrad": "torch.optim.Adagrad",
                "rowwise_adagrad": "RowWiseAdagrad", "adam": "torch.optim.Adam",
                "partial_rowwise_adam": "PartialRowWiseAdam", "lamb": "LAMB"}


def _config_src(cfg: Any, pooled: bool) -> str:
    kind = "EmbeddingBagConfig" if pooled else "EmbeddingConfig"
    extra = f", pooling=PoolingType.{cfg.pooling.name}" if pooled else ""
    return (f"{kind}(name={cfg.name!r}, num_embeddings={int(cfg.num_embeddings)}, "
            f"embedding_dim={int(cfg.embedding_dim)}, data_type=DataType."
            f"{cfg.data_type.name}, feature_names={list(cfg.feature_names)!r}{extra})")


def render(model: nn.Module, planned: Any, topology: RankTopology, lr: float,
           module_name: str = "torchrec_pick", seed: int = 0) -> str:
    """The file's text for a rewritten `model` and its plan (`plan.PlannedTable`s);
    `seed`: the trial's, the file's SEED (`seed_generators()` seeds with it)."""
    from autoembed.torchrec.model import HashedIds

    colls: dict[str, list[str]] = {}
    pooled: dict[str, bool] = {}
    hashed: dict[str, dict[str, int]] = {}
    for path, _ in collections(model):
        configs = [t for t in table_infos(model) if t.path == path]
        colls[path] = [_config_src(t.config, t.pooled) for t in configs]
        pooled[path] = bool(configs and configs[0].pooled)
        holder = model if not path else model.get_submodule(path)
        hashed[path] = dict(holder.rows) if isinstance(holder, HashedIds) else {}
    opts = {t.table: f"({_OPT_CLASSES[t.optimizer]}, {lr!r})" for t in planned if t.optimizer}
    cons = {}
    for t in planned:
        cache = (f", cache_params=CacheParams(load_factor={t.cache_load_factor!r})"
                 if t.cache_load_factor is not None else "")
        cons[t.table] = (f"ParameterConstraints(sharding_types=[{t.sharding_type!r}], "
                         f"compute_kernels=[{t.compute_kernel!r}]{cache})")

    def block(d: dict[str, Any], fmt: Any) -> str:
        if not d:
            return "{}"
        return "{\n" + "".join(f"    {k!r}: {fmt(v)},\n" for k, v in d.items()) + "}"

    topo = {"world_size": topology.world_size, "batch_size": topology.batch_size,
            "compute_device": topology.compute_device, "hbm": topology.hbm,
            "ddr": topology.ddr, "local_world_size": topology.local_world_size}
    return _TEMPLATE.format(
        module=module_name, hashed_ids=inspect.getsource(HashedIds).rstrip(),
        collections=block(colls, lambda v: "[\n" + "".join(f"        {c},\n" for c in v)
                          + "    ]"),
        pooled=block(pooled, repr), hashed=block(hashed, repr),
        optimizers=block(opts, str), constraints=block(cons, str),
        topology=pprint.pformat(topo, sort_dicts=False), seed=int(seed))


def export_torchrec(model: nn.Module | Any, tables: Any, topology: RankTopology,
                    path: str | Path, *, lr: float = 0.01, seed: int = 0) -> Path:
    """Rewrite `model` (or its factory's model) by `tables`, plan it on `topology`, and write
    the pick as TorchRec code to `path` (a .py file), its SEED `seed`; returns the path."""
    out = Path(path)
    out.write_text(torchrec_code(model, tables, topology, out.stem, lr=lr, seed=seed))
    return out


def torchrec_code(model: nn.Module | Any, tables: Any, topology: RankTopology,
                  module_name: str, *, lr: float = 0.01, seed: int = 0) -> str:
    """`export_torchrec`'s text, nothing written: `model` rewritten by `tables` and planned
    on `topology`, as the module `module_name` (its SEED `seed`)."""
    from autoembed.torchrec.unsharded import build_model

    items = table_settings(tables)
    built = apply(build_model(model), items, lr=lr, compute_device=topology.compute_device)
    _, planned = plan_model(built, topology, items)
    return render(built, planned, topology, lr, module_name, seed)
