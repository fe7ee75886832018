"""The search pipeline's stages, each alone: Feasibility's rules, the Recorder and its sinks,
SearchReport (no Optuna, no Ray, no MLflow: hand-made estimates, rows and fakes)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from autoembed.budget import Budget, MemoryBudget
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.memory.types import MemoryEstimate
from autoembed.pareto import Pick
from autoembed.pipeline.feasibility import (
    OOM_VIOLATION,
    Feasibility,
    Verdict,
    budget_rule,
    host_budget_rule,
    oom_ceiling,
    oom_ceiling_rule,
)
from autoembed.pipeline.plan import NothingFitsError
from autoembed.pipeline.recorder import ATTR, CalibrationSink, Recorder, TrackerSink
from autoembed.pipeline.search_report import SearchFailedError, SearchReport
from autoembed.space import Objective
from autoembed.trial import TrialRow

GB = 10**9
CFG = EmbeddingConfig(task="ctr", tables=(TableConfig("a", 100),), dim=8)


def est(device_total: int, host_bytes: int = 0) -> MemoryEstimate:
    z = 0
    return MemoryEstimate("analytic", z, z, z, z, z, z, z, z, device_total, z, (),
                          host_bytes=host_bytes)


# ===================================================================== Feasibility


def test_budget_rule_overshoot_is_relative() -> None:
    rule = budget_rule(Budget(8 * GB, "8GB"))
    assert rule(est(6 * GB)) == Verdict(True, -0.25)
    v = rule(est(10 * GB))
    assert not v.fits and v.overshoot == pytest.approx(0.25)
    assert v.reason == ("device_total 10,000,000,000 B exceeds the budget 8,000,000,000 B "
                        "by 25.0%")


def test_rules_in_order_first_violation_decides() -> None:
    ceiling: list[tuple[int, int] | None] = [None]
    f = Feasibility.for_search(MemoryBudget(Budget(8 * GB, "8GB"), Budget(2 * GB, "2GB")),
                               lambda: ceiling[0])
    assert f.judge(est(4 * GB)) == Verdict(True, -0.5)  # all fit: the budget's slack
    # over the device budget and the host budget: the budget (first rule) is the reason
    v = f.judge(est(9 * GB, host_bytes=3 * GB))
    assert v.overshoot == pytest.approx(0.125) and "exceeds the budget" in (v.reason or "")
    # fits the budget, over the host budget
    v = f.judge(est(4 * GB, host_bytes=3 * GB))
    assert v.overshoot == pytest.approx(0.5) and "host budget" in (v.reason or "")
    # an OOM at 5 GB predicted: 5 GB and above are refused, read anew at each judgement
    ceiling[0] = (5 * GB, 3)
    v = f.judge(est(6 * GB))
    assert v.overshoot == pytest.approx(0.2 + OOM_VIOLATION)
    assert "trial 3 that ran out of memory" in (v.reason or "")
    assert f.judge(est(5 * GB)).overshoot == pytest.approx(OOM_VIOLATION)  # at: refused
    assert f.judge(est(5 * GB - 1)).fits


def test_no_host_budget_no_host_rule_and_a_rule_is_one_line() -> None:
    f = Feasibility.for_search(MemoryBudget(Budget(8 * GB, "8GB")), lambda: None)
    assert f.judge(est(GB, host_bytes=10**15)).fits
    even = Feasibility((*f.rules, lambda e: Verdict(e.device_total % 2 == 0, 0.0, "odd")))
    assert even.judge(est(GB + 1)) == Verdict(False, 0.0, "odd")
    assert host_budget_rule(Budget(100, "100"))(est(1, host_bytes=150)).overshoot == \
        pytest.approx(0.5)
    assert oom_ceiling_rule(lambda: None)(est(10**18)).fits


def row(n: int, status: str, device_total: int = 0, **kw: Any) -> TrialRow:
    return TrialRow(n, status, CFG, {"device_total": device_total}, **kw)


def test_oom_ceiling_is_the_smallest_oom() -> None:
    rows = [row(0, "oom", 9), row(1, "complete", 2), row(2, "oom", 7), row(3, "oom", 0)]
    assert oom_ceiling(rows) == (7, 2)
    assert oom_ceiling(rows[1:2]) is None


# ===================================================================== Recorder


class FakeTrial:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.attrs: dict[str, Any] = {}

    def set_user_attr(self, key: str, value: Any) -> None:
        self.attrs[key] = value
        self.log.append("attr")


class FakeTracker:
    def __init__(self, recorded: set[int] | None = None) -> None:
        self.calls: list[list[int]] = []
        self._recorded = recorded

    def trials(self, records: list[TrialRow]) -> None:
        self.calls.append([r.number for r in records])

    def trial(self, record: TrialRow) -> None:
        raise AssertionError("the sink writes in batches")

    def recorded(self) -> set[int] | None:
        return self._recorded


def test_attributes_before_tell_then_the_sinks() -> None:
    log: list[str] = []
    tracker = FakeTracker()
    rec = Recorder([TrackerSink(tracker, flush_rows=1, background=False)])
    trial = FakeTrial(log)
    rec.record(row(5, "complete", 10), trial, lambda: log.append("tell"))
    assert log == ["attr", "tell"] and trial.attrs[ATTR]["status"] == "complete"
    assert tracker.calls == [[5]]
    rec.record(row(6, "running"), FakeTrial(log))  # a running row stays in Optuna
    assert tracker.calls == [[5]]


@pytest.mark.parametrize("background", [False, True])
def test_tracker_sink_batches_and_flushes(background: bool) -> None:
    tracker = FakeTracker()
    sink = TrackerSink(tracker, flush_rows=3, background=background)
    for n in range(4):
        sink.record(row(n, "infeasible"))
    if not background:
        assert tracker.calls == [[0, 1, 2]]  # one write of three rows; trial 3 waits
    sink.flush()
    sink.flush()  # nothing left: no empty write
    assert tracker.calls == [[0, 1, 2], [3]]


class SlowTracker(FakeTracker):
    """Its batch write waits for `go`; `fail` makes it raise."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(recorded=set())
        self.go = threading.Event()
        self.fail = fail

    def trials(self, records: list[TrialRow]) -> None:
        assert self.go.wait(10)
        if self.fail:
            raise RuntimeError("store gone")
        super().trials(records)
        self._recorded = (self._recorded or set()) | {r.number for r in records}


def test_a_full_batch_is_written_behind_and_flush_waits_for_it() -> None:
    tracker = SlowTracker()
    sink = TrackerSink(tracker, flush_rows=2)
    sink.record(row(0, "complete"))
    sink.record(row(1, "complete"))  # returns while the write waits
    sink.record(row(2, "complete"))
    assert tracker.calls == []
    tracker.go.set()
    sink.flush()
    assert tracker.calls == [[0, 1], [2]]  # in order, nothing twice
    # a batch in flight counts as recorded for catch_up: written once
    tracker.go.clear()
    sink.record(row(3, "complete"))
    sink.record(row(4, "complete"))
    threading.Timer(0.05, tracker.go.set).start()
    sink.catch_up([row(n, "complete") for n in range(5)])
    assert tracker.calls == [[0, 1], [2], [3, 4]]


def test_a_failed_write_behind_is_raised_on_the_next_flush() -> None:
    tracker = SlowTracker(fail=True)
    sink = TrackerSink(tracker, flush_rows=1)
    tracker.go.set()
    sink.record(row(0, "complete"))
    with pytest.raises(RuntimeError, match="store gone"):
        sink.flush()
    sink.flush()  # raised once


def test_resume_re_records_what_the_tracker_lacks() -> None:
    tracker = FakeTracker(recorded={0, 2})  # a SIGKILL lost the buffered rows 1 and 3
    rec = Recorder([TrackerSink(tracker)])
    rec.catch_up([row(3, "complete"), row(0, "complete"), row(1, "infeasible"),
                  row(2, "pruned"), row(4, "running")])
    assert tracker.calls == [[1, 3]]
    Recorder([TrackerSink(FakeTracker(recorded=None))]).catch_up([row(1, "complete")])
    # Ctrl-C: rows still buffered are written once, with those the tracker lacks
    sink = TrackerSink(tracker := FakeTracker(recorded={0}), flush_rows=10)
    sink.record(row(1, "complete"))
    sink.catch_up([row(0, "complete"), row(1, "complete"), row(2, "failed")])
    assert tracker.calls == [[1, 2]]


def test_calibration_sink_writes_each_oom_and_the_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    sink = CalibrationSink(path)
    sink.record(row(1, "complete", 100))
    assert not path.exists()
    sink.record(row(2, "oom", 900, metrics={"oom_predicted_bytes": 900.0,
                                            "oom_failed_bytes": 1200.0}, reason="OOM"))
    sink.record(row(4, "oom", 700))
    body = json.loads(path.read_text())
    assert (body["ceiling_bytes"], body["ceiling_trial"]) == (700, 4)
    assert body["oom"][0] == {"trial": 2, "predicted_device_total": 900, "failed_bytes": 1200,
                              "measured": False, "failed_over_predicted": 1.3333,
                              "error": "OOM"}
    # a resumed search's sink learns the earlier OOMs and keeps them in the file
    again = CalibrationSink(path)
    again.catch_up([row(2, "oom", 900), row(4, "oom", 700)])
    again.record(row(6, "oom", 650))
    assert [e["trial"] for e in json.loads(path.read_text())["oom"]] == [2, 4, 6]


# ===================================================================== SearchReport


def scored(n: int, quality: float, memory: float, status: str = "complete",
           overshoot: float = -0.1) -> TrialRow:
    return TrialRow(n, status, CFG, {"device_total": int(memory)},
                    metrics={"quality": quality, "memory": memory}, overshoot=overshoot)


OBJS = (Objective("quality", "maximize"), Objective("memory", "minimize"))


def test_report_front_best_and_picks_by_hand(tmp_path: Path) -> None:
    rows = [scored(0, 0.70, 200), scored(1, 0.80, 900), scored(2, 0.65, 600),  # 2: dominated
            scored(3, 0.90, 2000, status="infeasible", overshoot=0.5),  # over budget
            scored(4, 0.75, 300), scored(5, 0.60, 100, status="pruned"),
            row(6, "running")]
    rep = SearchReport.build(rows, OBJS, Pick("max-quality"), Budget(1000, "1000"), "s",
                             "2 trials trained")
    assert [r.number for r in rep.rows] == [0, 1, 2, 3, 4, 5]  # running left out
    assert [r.number for r in rep.front] == [0, 1, 4]
    assert rep.best is not None and rep.best.number == 1
    assert rep.picks["max-quality"] == 1 and rep.picks["min-memory"] == 0
    # knee over the front normalised to [0, 1] (1 = best): t0 (0, 1), t1 (1, 0),
    # t4 (0.5, 600/700): squared distances to (1, 1): 1, 1, 0.27 -> trial 4
    assert rep.picks["knee"] == 4
    assert rep.count("complete") == 4 and rep.failure(tmp_path / "t.csv") is None
    off_front = SearchReport.build(rows, OBJS, Pick("trial", 2), Budget(1000, "1000"), "s")
    assert off_front.best is not None and off_front.best.number == 2  # feasible, off front
    body = rep.pareto_body({"sampler": "tpe", "members": "not this"})
    assert [m["trial"] for m in body["members"]] == [0, 1, 4] and body["sampler"] == "tpe"
    assert body["counts"]["infeasible"] == 1 and body["best"] == 1
    files = rep.write(tmp_path, {"trained_on": {"name": "x"}})
    assert set(files) == {"trials.csv", "pareto.png", "best.yaml", "pareto.json"}
    last = max(files.values(), key=lambda p: p.stat().st_mtime_ns)
    assert last.name == "pareto.json"
    # the quality axis: AUC / accuracy for autoembed's models, what the loop reports for
    # the user's (it said AUC / accuracy of any loop's quality)
    import matplotlib.pyplot as plt

    from autoembed.pipeline.outputs import pareto_figure

    for workload, says in (("builtin", "AUC / accuracy"), ("user", "what your loop reports")):
        fig = pareto_figure(rep.rows, rep.front, rep.best, rep.objective_pairs, "t",
                            labels=rep.plot_labels(workload))
        assert says in fig.axes[0].get_xlabel()
        plt.close(fig)


def test_the_within_noise_pick_keeps_to_the_floor() -> None:
    from autoembed.selection import NoiseMeasure

    # front 0 (0.70, 200), 4 (0.75, 300), 1 (0.80, 900); a slack of 0.2 lets all three in
    rows = [scored(0, 0.70, 200), scored(1, 0.80, 900), scored(4, 0.75, 300)]
    def noise(c: Any) -> NoiseMeasure:
        return NoiseMeasure(0.2, "auc", 0.80, 1, 1000, (500, 500))
    free = SearchReport.build(rows, OBJS, Pick("within-noise"), Budget(1000, "1000"), "s",
                              noise=noise)
    assert free.best is not None and free.best.number == 0  # the cheapest
    # the floor is cleared by the noise's slack: 0.54 + 0.2 = 0.74, 0 falls short: 4
    kept = SearchReport.build(rows, OBJS, Pick("within-noise"), Budget(1000, "1000"), "s",
                              noise=noise, floor=0.54)
    assert kept.best is not None and kept.best.number == 4
    # every rule keeps to it: min-memory is 4 (300) of the two that clear it, not 0 (200);
    # the knee over 1 (normalised (1, 0)) and 4 ((0, 1)) ties at distance 1: the lower, 1
    assert (kept.picks["within-noise"], kept.picks["min-memory"]) == (4, 4)
    assert (kept.picks["knee"], kept.picks["max-quality"]) == (1, 1)
    # 0.72 + 0.2: none clears it, the best (0.80) reaches 0.72: the best
    best = SearchReport.build(rows, OBJS, Pick("within-noise"), Budget(1000, "1000"), "s",
                              noise=noise, floor=0.72)
    assert best.best is not None and best.best.number == 1


def test_report_failures_name_why(tmp_path: Path) -> None:
    over = [scored(0, 0.9, 2000, status="infeasible", overshoot=1.0)]
    rep = SearchReport.build(over, OBJS, Pick("knee"), Budget(1000, "1000"), "s", "gave up")
    err = rep.failure(tmp_path / "trials.csv")
    assert isinstance(err, NothingFitsError) and "1 over budget; gave up" in str(err)
    assert set(rep.write(tmp_path, {})) == {"trials.csv"}  # nothing else without a front
    failed = [*over, row(1, "failed", reason="boom")]
    err = SearchReport.build(failed, OBJS, Pick("knee"), Budget(1000, "1000"), "s",
                             "1 trials trained").failure(tmp_path / "trials.csv")
    assert isinstance(err, SearchFailedError) and "e.g. boom" in str(err)
