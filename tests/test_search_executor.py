"""The in-process Executor: it streams evaluations to the engine and delivers the engine's
stop decision to the running trial as StopTrial; and a whole search runs through it
without Ray (request, plan, engine, recorder, report)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from autoembed.search.executor import InProcessExecutor, StopTrial, TrialChannel
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
        return type("P", (), {"number": n, "train_config": {"n": n}})()

    def observe(self, number: int, report: Mapping[str, Any]) -> bool:
        self.observed.append((number, int(report["step"])))
        return number == 0 and int(report["step"]) >= 20

    def finish(self, number: int, final: Any, error: str | None = None) -> None:
        self.finished[number] = final


class FakePlan:
    workload = type("W", (), {"train_spec": type("S", (), {"to_dict": lambda self: {}})()})()

    def run_settings(self) -> dict[str, Any]:
        return {"max_steps": 40}


def test_stop_reaches_the_running_loop_as_stop_trial() -> None:
    seen: dict[int, list[int]] = {}

    def user_loop(payload: Mapping[str, Any], channel: TrialChannel) -> dict[str, Any]:
        n = int(payload["number"])
        for step in (10, 20, 30, 40):
            seen.setdefault(n, []).append(step)
            channel.report(Evaluation(step, step * 8, 0.5, {}, 0.01 * step))
        return {"status": "complete", "result": {"done": n}}

    engine = FakeEngine()
    InProcessExecutor(user_loop).run(engine, FakePlan())  # type: ignore[arg-type]
    assert seen == {0: [10, 20], 1: [10, 20, 30, 40]}  # trial 0 never ran step 30
    assert engine.observed == [(0, 10), (0, 20), (1, 10), (1, 20), (1, 30), (1, 40)]
    # a stopped trial ends with no final report, as on Ray Tune; the other with its own
    assert engine.finished == {0: None, 1: {"status": "complete", "result": {"done": 1}}}


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
    InProcessExecutor(stubborn).run(engine, FakePlan())  # type: ignore[arg-type]
    assert engine.finished[0] is None
    assert engine.finished[1] == {"status": "failed", "result": None,
                                  "error": "ValueError: bad batch"}


def test_a_whole_search_in_process(tmp_path: Path) -> None:
    from autoembed.search import search
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
    assert {p.name for p in res.out_dir.iterdir()} >= {"trials.csv", "pareto.json",
                                                        "best.yaml", "pareto.png"}
    with pytest.raises(Exception, match="already exists"):
        search(800_000_000, "tiny", trials=1, runs_dir=tmp_path / "runs", study="inproc",
               tracker=NullTracker(), executor=InProcessExecutor())
