"""The Ray Tune trainable, one for every workload: runs one trial in a Ray worker with its
workload's runner (a module-level function, pickled by reference) on the plain-data payload,
reports every evaluation through `tune.report` (a scheduler may stop it) and one final
report with the TrialResult as JSON. It never opens a store. The trial's output goes to
`logs/trial-NNNN.log` (`trial_output`); a `sys.exit` in it is the trial's failure.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["train_trial", "PAYLOAD", "FINAL", "RESOURCES", "node_info"]

PAYLOAD = "autoembed"  # Tune config key holding the trial's plain-data payload
FINAL = "autoembed_final"  # result key marking the last report (value: TrialResult JSON)
RESOURCES = "resources"  # Tune config key: the custom Ray resources this trial asked for


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
    the trial ran on and its seconds so far (`CostClock`)."""
    from ray import tune

    from autoembed.pipeline.trial_output import trial_output
    from autoembed.pipeline.workload import CostClock, evaluation_report, failed_report

    cost = CostClock()
    payload = json.loads(tune_config[PAYLOAD])
    node: dict[str, Any] = {}
    stopped: list[SystemExit] = []  # Tune's stop: `tune.report` raised SystemExit(0)
    with trial_output(payload.get("log_dir"), payload.get("number")):
        try:
            node = node_info(dict(tune_config.get(RESOURCES) or {}))

            def channel(ev: Any) -> bool:
                try:
                    tune.report({**evaluation_report(ev), **cost.stamp(), **node})
                except SystemExit as e:  # the scheduler stopped the trial: Tune ends it
                    stopped.append(e)
                    raise
                return True

            final = {**run(payload, channel, where=f"Ray node {node['ray_node_ip']}",
                           **dict(runner_kwargs or {})), "node": node}
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the trial's failure, not a crash
            if stopped:  # Tune's own stop, not the user's sys.exit: let Tune end the trial
                raise
            where = f" (on Ray node {node['ray_node_ip']})" if node else ""
            final = {**failed_report(e, where), "traceback": traceback.format_exc(limit=8),
                     "node": node}
    tune.report({FINAL: json.dumps({**final, "cost": cost.stamp()}, default=str)})
