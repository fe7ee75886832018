"""Trial faults without Ray: the injection hook through the real runner, and the OOM
calibration rule in the engine (outcomes fabricated, so these run in seconds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from autoembed.budget import Budget
from autoembed.config import config_from_dict
from autoembed.errors import ConfigError
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.faults import fault_hook, parse_faults
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.pipeline.recorder import CalibrationSink, Recorder
from autoembed.pipeline.study import make_sampler, open_storage
from autoembed.runner import Evaluation, RunSettings, TrialResult, run_trial
from autoembed.space import load_space
from autoembed.trace import estimate

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 800_000_000
LIMIT = Budget(BUDGET, "800MB")  # the engine's budget
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    return space, build_workload(spec, stand_in)


def test_parse_faults() -> None:
    assert parse_faults("1:raise, 3:oom,4:kill,2:nan") == {1: "raise", 2: "nan", 3: "oom",
                                                           4: "kill"}
    assert parse_faults("") == {}
    for bad in ("oom", "0:oom", "x:oom", "1:segfault", "1:"):
        with pytest.raises(ConfigError, match="is not N:KIND"):
            parse_faults(bad)


@pytest.mark.parametrize(("kind", "status", "needle"), [
    ("raise", "failed", "RuntimeError: injected fault"),
    ("nan", "diverged", "loss became nan at step 2"),
    ("oom", "oom", "OutOfMemoryError: CUDA out of memory"),
    (None, "complete", None),
])
def test_injected_faults_come_back_as_the_trial_status(
        tiny: Any, kind: str | None, status: str, needle: str | None) -> None:
    space, workload = tiny
    cfg = workload.trained(space.base_config())
    res = run_trial(cfg, workload.train_dataset,
                    RunSettings(max_steps=4, eval_every=4, eval_batches=1, test_batches=1,
                                warmup_steps=0, measure_latency=False),
                    on_step=fault_hook(kind))
    assert res.status == status
    assert res.error == needle if needle is None else needle in (res.error or "")


def _engine(tmp_path: Path, tiny: Any, trials: int, seed: int) -> tuple[SearchEngine, Any]:
    space, workload = tiny
    study = optuna.create_study(study_name="oom", storage=open_storage(tmp_path),
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", seed))
    run = {"max_steps": 60, "eval_every": 20}
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run=run), budget=LIMIT,
        objectives=OBJ, trials=trials),
        recorder=Recorder([CalibrationSink(tmp_path / "calibration.json")]))
    return eng, study


def _final(train_config: dict[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
    res = TrialResult(status=status, config=config_from_dict(train_config),
                      test_quality=0.7 if status == "complete" else None, throughput=1000.0,
                      curve=(Evaluation(20, 100, 0.7, {"auc": 0.7}, 0.1),), error=error)
    return {"status": status, "result": json.loads(json.dumps(res.to_dict()))}


def test_an_oom_makes_proposals_at_or_above_its_size_infeasible(tmp_path: Path,
                                                                tiny: Any) -> None:
    eng, study = _engine(tmp_path, tiny, trials=12, seed=3)
    oom = None
    while (p := eng.propose()) is not None:
        size = estimate(p.config).device_total  # recomputed here, not read from the engine
        if oom is None and size >= BUDGET // 3:
            oom = (p.number, size)
            eng.finish(p.number, _final(dict(p.payload["config"]), "oom",
                                        "OutOfMemoryError: CUDA out of memory"))
        else:
            assert oom is None or size < oom[1], "a proposal at/above the OOM size trained"
            eng.finish(p.number, _final(dict(p.payload["config"]), "complete"))
    assert oom is not None, "seed 3 proposes a config over a third of the budget"
    number, ceiling = oom
    later = [r for r in eng.rows.values() if r.number > number]
    blocked = [r for r in later if ceiling <= estimate(r.config).device_total <= BUDGET]
    assert blocked, "seed 3 proposes in-budget configs above the OOM size afterwards"
    for r in blocked:
        assert r.status == "infeasible" and f"trial {number} that ran out of memory" in (
            r.reason or "")
        assert study.trials[r.number].state == TrialState.COMPLETE
        assert study.trials[r.number].constraints["memory"] > 0
    row = eng.rows[number]
    assert row.status == "oom" and row.metrics["oom_predicted_bytes"] == ceiling
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["ceiling_bytes"] == ceiling and cal["ceiling_trial"] == number
    assert cal["oom"] == [{"trial": number, "predicted_device_total": ceiling,
                           "failed_bytes": ceiling, "measured": False,
                           "failed_over_predicted": 1.0, "error": row.reason}]
    # a resumed engine rebuilds the rule from the study's rows
    eng2 = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(tiny[0], tiny[1], run={}), budget=LIMIT,
        objectives=OBJ, trials=1))
    assert eng2.oom_ceiling() == (ceiling, number)
