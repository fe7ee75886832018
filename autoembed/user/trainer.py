"""One trial of a user search, on any node: the user workload's trial runner.

The payload is plain data (it crosses Ray as JSON): the trial number, the recorded functions
(`FunctionRef`s: the code is found by name, never pickled), the params and the priced
embedding config, and the placement the executor adds (device, threads). `run_payload`
resolves the functions (or takes them as they are in the searching process: `code`),
checks once per process that this node's copy of their modules is the recorded one
(`ship.check_node`), builds and applies the model as it was priced (`UserCode.model_for`),
runs the user's loop with the stop channel and returns the final report (`{"status",
"result", "error"}`, what the engine's `finish` reads).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.trial import Evaluation
from autoembed.user.functions import FunctionRef
from autoembed.user.report import Report
from autoembed.user.run import TRIAL_ROLES, UserCode, run_user_trial
from autoembed.user.ship import check_node

__all__ = ["make_payload", "run_payload", "checked_functions"]

_CHECKED: set[tuple[str, str]] = set()  # (module, source hash) checked in this process


def make_payload(refs: Mapping[str, FunctionRef], params: Mapping[str, Any],
                 config: EmbeddingConfig, *, metrics: tuple[str, ...] = (),
                 target: float | None = None) -> dict[str, Any]:
    """A trial's payload (the executor adds `number`, `device` and `threads`)."""
    return {"functions": {r: refs[r].to_dict() for r in TRIAL_ROLES if r in refs},
            "params": dict(params),
            "config": config.to_dict(), "metrics": list(metrics), "target": target}


def checked_functions(payload: Mapping[str, Any], where: str) -> dict[str, FunctionRef]:
    """The payload's recorded functions, their modules checked on this node once per
    process (`ship.check_node`: this node imports the copy the driver recorded)."""
    refs = {r: FunctionRef.from_dict(raw) for r, raw in payload["functions"].items()}
    fresh = [ref for ref in refs.values() if (ref.module, ref.source_hash) not in _CHECKED]
    check_node(fresh, where)
    _CHECKED.update((ref.module, ref.source_hash) for ref in fresh)
    return refs


def run_payload(payload: Mapping[str, Any], channel: Callable[[Evaluation], bool] | None = None,
                where: str = "this node", code: UserCode | None = None,
                **_: Any) -> dict[str, Any]:
    """Run one trial of the payload (see the module docstring)."""
    if code is None:
        refs = checked_functions(payload, where)
        code = UserCode.resolve(**{role: ref.spec for role, ref in refs.items()})
    threads = payload.get("threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    params = payload["params"]
    config = config_from_dict(payload["config"], f"trial {payload['number']} config")
    result = run_user_trial(code, params, config,
                            Report(payload.get("metrics") or (), channel),
                            target=payload.get("target"), device=payload.get("device", "cpu"),
                            as_written=bool(payload.get("as_written")),
                            priced_inputs=payload.get("priced_inputs"))
    return {"status": result.status, "result": result.to_dict(), "error": result.error}
