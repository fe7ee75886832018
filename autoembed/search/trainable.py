"""The Ray Tune trainable: runs in a Ray worker, trains one config, reports through Tune.

It never opens the Optuna or MLflow stores (DESIGN.md: only the driver writes them): it gets
plain data in the Tune config and sends back every validation evaluation (`tune.report`,
which a scheduler may answer by stopping the trial) and one final report carrying the whole
TrialResult as JSON.
"""

from __future__ import annotations

import json
import traceback
from functools import lru_cache
from typing import Any

__all__ = ["train_trial", "PAYLOAD", "FINAL"]

PAYLOAD = "autoembed"  # Tune config key holding the trial's plain-data payload
FINAL = "autoembed_final"  # result key marking the last report (value: TrialResult JSON)


@lru_cache(maxsize=2)
def _dataset(spec_json: str) -> Any:
    """Load once per worker process (Tune reuses actors between trials)."""
    from autoembed.data import load_dataset
    from autoembed.data.spec import DataSpec

    return load_dataset(DataSpec.from_dict(json.loads(spec_json), "trial data"))


def train_trial(tune_config: dict[str, Any]) -> None:
    """Tune function trainable. Payload (JSON): number, config (dict), data (DataSpec dict),
    settings (RunSettings fields), fault (an injected fault, see search.faults, or None)."""
    from ray import tune

    from autoembed.config import config_from_dict
    from autoembed.runner import Evaluation, RunSettings, run_trial

    payload = json.loads(tune_config[PAYLOAD])
    try:
        config = config_from_dict(payload["config"], f"trial {payload['number']}")
        settings = RunSettings(**payload["settings"])
        dataset = _dataset(json.dumps(payload["data"], sort_keys=True))

        def report(ev: Evaluation) -> bool:
            tune.report({"quality": float(ev.quality), "step": ev.step, "samples": ev.samples,
                         "elapsed_s": ev.elapsed_s})
            return True  # the scheduler stops the trial through Tune, not through us

        from autoembed.search.faults import fault_hook

        result = run_trial(config, dataset, settings, report,
                           on_step=fault_hook(payload.get("fault")))
        final = {"status": result.status, "result": result.to_dict(), "error": None}
    except Exception as e:  # noqa: BLE001 - reported as the trial's failure, not a crash
        final = {"status": "failed", "result": None,
                 "error": f"{type(e).__name__}: {e}",
                 "traceback": traceback.format_exc(limit=8)}
    tune.report({FINAL: json.dumps(final, default=str)})
