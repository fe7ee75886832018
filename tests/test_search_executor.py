"""The in-process Executor: it streams evaluations to the engine and delivers the engine's
stop decision to the running trial as StopTrial; and a whole search runs through it
without Ray (request, plan, engine, recorder, report)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from autoembed.pipeline.executor import InProcessExecutor, StopTrial, TrialChannel
from autoembed.pipeline.workload import CostClock
from autoembed.trial import Evaluation

ROOT = Path(__file__).resolve().parents[1]


class FakeEngine:
    """Two proposals; the engine says stop to trial 0 at step 20, never to trial 1."""

    def __init__(self) -> None:
        self.proposals = [0, 1]
        self.observed: list[tuple[int, int]] = []
        self.finished: dict[int, Any] = {}

    def propose(self) -> Any:
        if not self.proposals:
            return None
        n = self.proposals.pop(0)
        return type("P", (), {"number": n, "payload": {"n": n}})()

    def observe(self, number: int, report: Mapping[str, Any]) -> bool:
        self.observed.append((number, int(report["step"])))
        return number == 0 and int(report["step"]) >= 20

    def finish(self, number: int, final: Any, error: str | None = None) -> None:
        self.finished[number] = final

    def trial_started(self, number: int) -> None:
        pass

    def remaining(self, number: int) -> float | None:
        return None  # no time limit

    def overdue(self) -> list[int]:
        return []

    def time_out(self, number: int) -> None:
        raise AssertionError("no trial runs past a limit here")


class FakePlan:
    device, threads = "cpu", 1


ZERO = {"wall_s": 0.0, "cpu_s": 0.0}


def ZeroClock() -> CostClock:  # noqa: N802 - stands for the class
    """A trial clock that never moves (these trials cost nothing)."""
    return CostClock(lambda: 0.0, lambda: 0.0)


def test_stop_reaches_the_running_loop_as_stop_trial() -> None:
    seen: dict[int, list[int]] = {}

    def user_loop(payload: Mapping[str, Any], channel: TrialChannel) -> dict[str, Any]:
        n = int(payload["number"])
        for step in (10, 20, 30, 40):
            seen.setdefault(n, []).append(step)
            channel.report(Evaluation(step, step * 8, 0.5, {}, 0.01 * step))
        return {"status": "complete", "result": {"done": n}}

    engine = FakeEngine()
    InProcessExecutor(user_loop, cost_clock=ZeroClock).run(engine, FakePlan())  # type: ignore[arg-type]
    assert seen == {0: [10, 20], 1: [10, 20, 30, 40]}  # trial 0 never ran step 30
    assert engine.observed == [(0, 10), (0, 20), (1, 10), (1, 20), (1, 30), (1, 40)]
    # a stopped trial ends with no final report, as on Ray Tune; the other with its own
    assert engine.finished == {0: None, 1: {"status": "complete", "result": {"done": 1},
                                            "cost": ZERO}}


def test_a_loop_that_swallows_the_stop_is_still_stopped_and_errors_fail() -> None:
    def stubborn(payload: Mapping[str, Any], channel: TrialChannel) -> dict[str, Any]:
        if payload["number"] == 1:
            raise ValueError("bad batch")
        try:
            channel.report({"quality": 0.1, "step": 20})
        except StopTrial:
            pass
        return {"status": "complete", "result": {}}

    engine = FakeEngine()
    InProcessExecutor(stubborn, cost_clock=ZeroClock).run(engine, FakePlan())  # type: ignore[arg-type]
    assert engine.finished[0] is None
    assert engine.finished[1] == {"status": "failed", "result": None,
                                  "error": "ValueError: bad batch", "cost": ZERO}


def test_a_whole_search_in_process(tmp_path: Path) -> None:
    from autoembed.pipeline import search
    from autoembed.tracking import NullTracker

    res = search(800_000_000, str(ROOT / "search_spaces" / "tiny.yaml"), trials=2,
                 runs_dir=tmp_path / "runs", study="inproc", tracker=NullTracker(),
                 early_stop=False, executor=InProcessExecutor())
    trained = [r for r in res.rows if r.counted]
    assert len(trained) == 2 and res.count("complete") >= 1
    assert all(r.result is not None and r.result.steps == 60 for r in trained
               if r.status == "complete")
    body = json.loads((res.out_dir / "pareto.json").read_text())
    assert body["best"] == res.best.number and body["counts"]["complete"] == len(
        [r for r in res.rows if r.status == "complete"])
    # every member's validation scores reached the driver: the within-noise test is paired
    noise = body["noise"]
    if len(body["members"]) > 1:
        assert noise["kind"] == "paired" and len(noise["paired"]) == len(body["members"]) - 1
    else:
        assert noise["kind"] == "unpaired" and noise["unpaired_reason"] == "a single candidate"
    assert {p.name for p in res.out_dir.iterdir()} >= {"trials.csv", "pareto.json",
                                                        "best.yaml", "pareto.png"}
    with pytest.raises(Exception, match="already exists"):
        search(800_000_000, "tiny", trials=1, runs_dir=tmp_path / "runs", study="inproc",
               tracker=NullTracker(), executor=InProcessExecutor())


def test_a_resumed_study_picks_by_the_same_paired_rule(tmp_path: Path) -> None:
    """Each completed trial's validation scores are stored with it: a resume (here one that
    trains nothing more) measures the within-noise pick on the same rows, paired, as the
    search did, and picks the same trial."""
    from autoembed.pipeline import search
    from autoembed.pipeline.study import open_storage
    from autoembed.tracking import NullTracker

    kw = {"runs_dir": tmp_path / "runs", "study": "paired", "tracker": NullTracker(),
          "early_stop": False, "executor": InProcessExecutor()}
    first = search(800_000_000, str(ROOT / "search_spaces" / "tiny.yaml"), trials=2,
                   sampler="random", seed=3, **kw)
    said = json.loads((first.out_dir / "pareto.json").read_text())["noise"]
    assert said["kind"] == "paired" or said["unpaired_reason"] == "a single candidate"
    res = search(800_000_000, None, resume=True, **kw)
    again = json.loads((res.out_dir / "pareto.json").read_text())["noise"]
    assert again == said and res.best.number == first.best.number
    import optuna

    trials = optuna.load_study(study_name="paired", storage=open_storage(tmp_path / "runs"))
    assert all("autoembed.valid_scores.0" in t.user_attrs for t in trials.trials
               if t.number in {r.number for r in res.rows if r.status == "complete"})


def test_a_study_written_by_the_previous_version_resumes_and_exports(tmp_path: Path) -> None:
    """Study attributes and a trial row as the version before the trial codec stored them
    (the test figure under the result's `quality`; no data/eval seconds): resumed, counted,
    reported and exported."""
    import optuna

    from autoembed.config import load_config
    from autoembed.export import export_config
    from autoembed.pipeline import search
    from autoembed.pipeline.priced_data import build_priced_data as build_workload
    from autoembed.pipeline.priced_data import data_spec_for
    from autoembed.pipeline.records import ATTR
    from autoembed.pipeline.study import open_storage
    from autoembed.space import load_space
    from autoembed.trace import estimate
    from autoembed.tracking import NullTracker
    from autoembed.trial import TrialResult

    runs = tmp_path / "runs"
    path = ROOT / "search_spaces" / "tiny.yaml"
    space = load_space(path)
    spec, stand_in = data_spec_for(space)
    workload = build_workload(spec, stand_in)
    storage = open_storage(runs)
    study = optuna.create_study(study_name="old", storage=storage,
                                directions=["maximize", "minimize", "maximize"])
    study.set_user_attr(ATTR, {
        "budget_bytes": 800_000_000, "budget": "800000000", "space_source": str(path),
        "space_text": space.text, "objectives": ["quality", "memory", "throughput"],
        "sampler": "random", "seed": 0, "data": spec.to_dict(),
        "train_data": workload.train_spec.to_dict(), "trials": 2, "early_stop": False,
        "workers": 1, "device": "cpu", "threads": 1, "finished": False,
        "created": "2026-11-01T10:00:00"})
    values = {"dim": 8, "compression": "none", "table_optimizer": "sgd", "batch_size": 256}
    priced = workload.priced(space.config_for(values))
    est = estimate(priced).to_dict()
    result = TrialResult("complete", workload.trained(space.config_for(values)),
                         test_quality=0.655, valid_quality=0.7, steps=60,
                         throughput=1000.0).to_dict()
    result["quality"] = result.pop("test_quality")  # the earlier name of the test figure
    del result["data_seconds"], result["eval_seconds"]
    row = {"status": "complete", "config": priced.to_dict(), "estimate": est,
           "params": values, "metrics": {"quality": 0.7, "test_quality": 0.655,
                                         "memory": float(est["device_total"]),
                                         "throughput": 1000.0},
           "result": result, "reason": None, "ray_trial_id": "old_0", "overshoot": -0.5}
    study.add_trial(optuna.trial.create_trial(
        values=[0.7, float(est["device_total"]), 1000.0], user_attrs={ATTR: row},
        system_attrs={"constraints": [-0.5, 0.0]}))

    res = search(800_000_000, None, study="old", resume=True, runs_dir=runs,
                 tracker=NullTracker(), executor=InProcessExecutor())
    old = next(r for r in res.rows if r.number == 0)
    assert old.result is not None and old.result.test_quality == 0.655
    assert old.result.objective_quality == 0.7 and old.status == "complete"
    assert len([r for r in res.rows if r.counted]) == 2  # the old trial counts: one more ran
    # stored without a memory basis: its memory objective stays device_total, old and new
    new = next(r for r in res.rows if r.counted and r.number != 0)
    assert new.status == "complete" and new.metrics["memory"] == float(new.device_total)
    out = export_config("old", tmp_path / "t0.yaml", pick="trial:0", runs_dir=runs,
                        tracking_uri="none")
    assert load_config(out.path).dim == 8 and out.trial == 0
