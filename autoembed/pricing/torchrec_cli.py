"""`autoembed estimate --model ... --example ... --world-size N`: a TorchRec model priced per
rank on TorchRec's plan, TorchRec's own storage estimate beside each rank (cli.py calls
`sharded_for_cli`, then `render_ranks` or prints `ranks_json`)."""

from __future__ import annotations

import importlib
from dataclasses import fields
from pathlib import Path
from typing import Any

from autoembed.errors import ConfigError

__all__ = ["sharded_for_cli", "render_ranks", "ranks_json", "load_tables", "DIFFERENCES"]

# why autoembed's rank figure and TorchRec's storage estimate differ (each systematic term)
DIFFERENCES = (
    "TorchRec's figure is storage for its shards only: no dense part (it reserves a share of "
    "memory for that instead), no step transients beyond its per-shard input/output terms",
    "TorchRec counts optimizer state only when the table's parameter carries "
    "_optimizer_classes (apply_optimizer_in_backward, as autoembed.torchrec.apply sets it); "
    "with the optimizer given through the sharder's fused_params it counts parameters only",
    "TorchRec's input/output terms are per shard (pooled outputs and ids at its own sizes); "
    "autoembed prices the ids each rank receives, the lookup output and its gradient",
)


def load_tables(path: Path | None) -> list[dict[str, Any]]:
    """TorchRec table settings from a YAML/JSON file: a list of settings, or a mapping
    ``tables:`` (a list, or name -> settings)."""
    if path is None:
        return []
    from autoembed.config import safe_load_yaml

    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--tables '{path}': cannot be read ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})") from None
    data = safe_load_yaml(text, f"--tables '{path}'", "table settings file")
    if isinstance(data, dict) and "tables" in data:
        data = data["tables"]
    from autoembed.torchrec.settings import table_settings

    return [t.as_dict() for t in table_settings(data)]


def sharded_for_cli(model: str | None, example: str | None, tables: Path | None, *,
                    world_size: int, plan_device: str, device_memory: int | None,
                    host_memory: int | None, optimizer: str | None,
                    budget: int | None) -> Any:
    """The `ShardedEstimate` the command prints (budget: each rank's device memory)."""
    from autoembed.pricing.user_model_cli import _example
    from autoembed.torchrec.lib import require
    from autoembed.torchrec.settings import RankTopology
    from autoembed.torchrec.sharded import estimate_sharded
    from autoembed.torchrec.unsharded import batch_of
    from autoembed.user.model.load import load_object

    # RankTopology's rules, said as the options' ("--world-size = 0: ...")
    rules = {f.name: f.metadata["rule"] for f in fields(RankTopology) if "rule" in f.metadata}
    rules["world_size"].check_argument("--world-size", world_size)
    rules["compute_device"].check_argument("--plan-device", plan_device)
    if model is None or example is None:
        raise ConfigError("--world-size prices a TorchRec model per rank: give --model "
                          "pkg.module:factory and --example pkg.module:name")
    require()
    factory = load_object(model, "--model")
    ex = _example(example, None)
    topo = RankTopology(world_size=world_size, batch_size=batch_of(ex),
                        compute_device=plan_device,
                        hbm=budget or device_memory or 80 * 10**9,
                        ddr=host_memory or 512 * 10**9)
    # the loss: the --model module's `loss(output, example)` when it has one
    loss = getattr(importlib.import_module(model.partition(":")[0]), "loss", None)
    return estimate_sharded(factory, ex, topo, load_tables(tables), loss=loss,
                            dense_optimizer=optimizer or "adagrad")


def ranks_json(est: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {"world_size": est.topology.world_size, "compute_device":
            est.topology.compute_device, "ranks": [asdict(r) for r in est.ranks],
            "plan": [{"name": t.name, "sharding_type": t.sharding_type,
                      "compute_kernel": t.compute_kernel, "optimizer": t.optimizer,
                      "ranks": sorted({s.rank for s in t.shards})} for t in est.plan],
            "differences": list(DIFFERENCES)}


def render_ranks(est: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from autoembed.budget import format_bytes

    con = Console(highlight=False)
    if not con.is_terminal:
        con.width = max(con.width, 140)
    dev = est.topology.compute_device
    t = Table(title=f"Per rank ({est.topology.world_size} ranks, {dev} plan, batch "
                    f"{est.topology.batch_size} per rank)")
    cols = ("rank", "tables", "shards", "optimizer state", "cache", "replicated", "dense part",
            "sparse transients", "allocated peak", "device total", "host (UVM)",
            "TorchRec storage", "autoembed - TorchRec")
    for col in cols:
        t.add_column(col, justify="left" if col == "rank" else "right")
    for r in est.ranks:
        theirs = r.torchrec_hbm + r.torchrec_ddr if dev == "cpu" else r.torchrec_hbm
        t.add_row(str(r.rank), str(len(set(r.tables))), *(format_bytes(b) for b in (
            r.table_bytes, r.optimizer_state, r.cache_bytes, r.replicated_bytes, r.dense_peak,
            r.sparse_transient, r.allocated_peak, r.device_total, r.host_bytes, theirs)),
            ("+" if r.device_total >= theirs else "-")
            + format_bytes(abs(r.device_total - theirs)))
    con.print(t)
    for line in (*est.notes, *DIFFERENCES):
        con.print(f"note: {line}")
