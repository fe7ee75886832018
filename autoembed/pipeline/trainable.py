"""The Ray Tune trainable: runs in a Ray worker, runs one trial with its workload's trial
runner, reports through Tune. One trainable for every workload.

It never opens the Optuna or MLflow stores (DESIGN.md: only the driver writes them): it gets
the payload as plain data in the Tune config and the workload's runner (a module-level
function Ray pickles by reference) and sends back every validation evaluation
(`tune.report`, which a scheduler may answer by stopping the trial) and one final report
carrying the whole TrialResult as JSON. A data file the runner needs travels once through
the object store (`data_file_blob` here, `local_data` on the node).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import traceback
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["train_trial", "PAYLOAD", "FINAL", "RESOURCES", "local_data", "node_info",
           "data_file_blob"]

PAYLOAD = "autoembed"  # Tune config key holding the trial's plain-data payload
FINAL = "autoembed_final"  # result key marking the last report (value: TrialResult JSON)
RESOURCES = "resources"  # Tune config key: the custom Ray resources this trial asked for


@lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """A file's digest, read once per (path, size, mtime) in this worker, not every trial."""
    del size, mtime_ns  # the cache key: a rewritten file is read again
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def data_file_blob(train_data: Mapping[str, Any]) -> dict[str, Any] | None:
    """A data file's bytes, to ship to the trials through Ray's object store (cluster nodes
    need not share a filesystem with the driver); None for built-in data, which every
    node generates from seeds or reads from its installed packages."""
    from autoembed.data.spec import DataSpec

    spec = DataSpec.from_dict(train_data, "trial data")
    if not spec.is_file:
        return None
    raw = Path(spec.name).read_bytes()
    return {"name": Path(spec.name).name, "sha256": hashlib.sha256(raw).hexdigest(),
            "bytes": raw}


def local_data(data: dict[str, Any], blob: dict[str, Any] | None,
               cache_dir: Path | None = None) -> dict[str, Any]:
    """The data spec with its file readable on this node: the driver's path when the file
    there has the shipped bytes (same machine or a shared filesystem), else a copy written
    from `blob` (the bytes shipped through Ray's object store) under `cache_dir`."""
    if blob is None:
        return data
    path = Path(str(data["name"]))
    try:
        st = path.stat()
        if path.is_file() and _sha256(str(path), st.st_size, st.st_mtime_ns) == blob["sha256"]:
            return data
    except OSError:
        pass
    root = cache_dir or Path(tempfile.gettempdir()) / "autoembed-data"
    copy = root / str(blob["sha256"]) / str(blob["name"])
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        part = copy.with_name(copy.name + ".part")
        part.write_bytes(blob["bytes"])
        part.replace(copy)  # atomic: two trials on one node never read half a file
    return {**data, "name": str(copy)}


def node_info(resources: dict[str, Any]) -> dict[str, Any]:
    """Where this trial ran: Ray node id and IP, and the custom resources it was given."""
    import ray

    ctx = ray.get_runtime_context()
    return {"ray_node_id": ctx.get_node_id(), "ray_node_ip": ray.util.get_node_ip_address(),
            "ray_resources": ",".join(f"{k}={v:g}" for k, v in sorted(resources.items()))}


def train_trial(tune_config: dict[str, Any], run: Callable[..., Mapping[str, Any]],
                runner_kwargs: Mapping[str, Any] | None = None) -> None:
    """Tune function trainable: `run(payload, channel, where=..., **runner_kwargs)` on the
    payload (JSON) of the Tune config; every evaluation and the final report carry the node
    the trial ran on."""
    from ray import tune

    from autoembed.pipeline.executor import evaluation_report

    payload = json.loads(tune_config[PAYLOAD])
    node: dict[str, Any] = {}
    try:
        node = node_info(dict(tune_config.get(RESOURCES) or {}))

        def channel(ev: Any) -> bool:
            tune.report({**evaluation_report(ev), **node})
            return True  # the scheduler stops the trial through Tune, not through us

        final = {**run(payload, channel, where=f"Ray node {node['ray_node_ip']}",
                       **dict(runner_kwargs or {})), "node": node}
    except Exception as e:  # noqa: BLE001 - reported as the trial's failure, not a crash
        final = {"status": "failed", "result": None,
                 "error": f"{type(e).__name__}: {e}" + (
                     f" (on Ray node {node['ray_node_ip']})" if node else ""),
                 "traceback": traceback.format_exc(limit=8), "node": node}
    tune.report({FINAL: json.dumps(final, default=str)})
