"""What an Executor runs for one feasible proposal of a user search, on any node.

The payload is plain data (it crosses Ray as JSON): the trial number, the recorded functions
(`FunctionRef`s: the code is found by name, never pickled), the params and the priced
embedding config. `run_payload` resolves the functions, checks once per process that this
node's copy of their modules is the recorded one (`ship.check_node`), builds and applies the
model, runs the user's loop with the stop channel and returns the final report
(`{"status", "result", "error"}`, what the engine's `finish` reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.user.functions import FunctionRef
from autoembed.user.report import Channel, Report
from autoembed.user.run import ROLES, UserCode, run_user_trial
from autoembed.user.ship import check_node

__all__ = ["make_payload", "run_payload"]

_CHECKED: set[tuple[str, str]] = set()  # (module, source hash) checked in this process


def make_payload(number: int, refs: Mapping[str, FunctionRef], params: Mapping[str, Any],
                 config: EmbeddingConfig, *, metrics: tuple[str, ...] = (),
                 target: float | None = None, device: str = "cpu") -> dict[str, Any]:
    return {"number": number, "functions": {r: refs[r].to_dict() for r in ROLES},
            "params": dict(params), "config": config.to_dict(), "metrics": list(metrics),
            "target": target, "device": device}


def run_payload(payload: Mapping[str, Any], channel: Channel | None = None,
                node: str = "this node") -> dict[str, Any]:
    """Run one trial of the payload (see the module docstring)."""
    import autoembed

    refs = {r: FunctionRef.from_dict(payload["functions"][r]) for r in ROLES}
    fresh = [ref for ref in refs.values() if (ref.module, ref.source_hash) not in _CHECKED]
    check_node(fresh, node)
    _CHECKED.update((ref.module, ref.source_hash) for ref in fresh)
    code = UserCode.resolve(*(refs[r].spec for r in ROLES))
    params = payload["params"]
    config = config_from_dict(payload["config"], f"trial {payload['number']} config")

    def model() -> Any:
        built = code.build(params)
        applied = autoembed.apply(built, config)
        return built if applied is None else applied

    result = run_user_trial(code, model, params, config,
                            Report(payload.get("metrics") or (), channel),
                            target=payload.get("target"), device=payload.get("device", "cpu"))
    return {"status": result.status, "result": result.to_dict(), "error": result.error}


def tune_trainable(tune_config: dict[str, Any]) -> None:
    """The Ray Tune function trainable of a user search: the payload from the searcher's
    Tune config, each evaluation through `tune.report` (the scheduler's STOP ends the
    trainable), then one final report, as the built-in trainable does."""
    import json
    import traceback

    from ray import tune

    from autoembed.pipeline.trainable import FINAL, PAYLOAD, RESOURCES, node_info
    from autoembed.trial import Evaluation

    payload = json.loads(tune_config[PAYLOAD])["config"]
    node: dict[str, Any] = {}
    try:
        node = node_info(dict(tune_config.get(RESOURCES) or {}))

        def channel(ev: Evaluation) -> bool:
            tune.report({"quality": float(ev.quality), "step": ev.step, "samples": ev.samples,
                         "elapsed_s": ev.elapsed_s, **node})
            return True

        final = {**run_payload(payload, channel, f"Ray node {node['ray_node_ip']}"),
                 "node": node}
    except Exception as e:  # noqa: BLE001 - reported as the trial's failure, not a crash
        final = {"status": "failed", "result": None, "error": f"{type(e).__name__}: {e}",
                 "traceback": traceback.format_exc(limit=8), "node": node}
    tune.report({FINAL: json.dumps(final, default=str)})
