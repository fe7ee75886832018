"""A search whose `--pick` rule ranks by a metric no trial measured (max-throughput over a
loop of the user's that never calls `report`): its files are written with the default
pick, pareto.json's `picks` names no max-throughput member, and the command ends with one
line saying why (`driver._pick_rule`, as for a `trial:N` that is not one)."""

from __future__ import annotations

from types import SimpleNamespace

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig
from autoembed.pareto import DEFAULT_PICK, Pick
from autoembed.pipeline.driver import _pick_rule
from autoembed.pipeline.search_report import SearchReport
from autoembed.space import Objective
from autoembed.trial import TrialRow

OBJS = (Objective("quality", "maximize"), Objective("memory", "minimize"),
        Objective("throughput", "maximize"))


def _row(n: int, quality: float, memory: float, throughput: float | None) -> TrialRow:
    est = {"allocated_peak": int(memory), "device_total": int(memory)}
    return TrialRow(n, "complete", EmbeddingConfig(), est, metrics={
        "quality": quality, "memory": memory, "throughput": throughput})


def _plan(rule: str) -> SimpleNamespace:
    return SimpleNamespace(request=SimpleNamespace(pick=Pick(rule)), objectives=OBJS)


def test_max_throughput_with_none_measured_falls_back_and_says_so() -> None:
    rows = [_row(0, 0.9, 8e6, None), _row(1, 0.8, 2e6, None)]  # a Pareto pair
    rule, line = _pick_rule(rows, _plan("max-throughput"))
    assert rule == Pick(DEFAULT_PICK)
    assert line is not None and line.startswith("--pick 'max-throughput': no member")
    report = SearchReport.build(rows, OBJS, rule, Budget(10**9, "1GB"), "s")
    assert "max-throughput" not in report.picks
    assert report.picks["max-quality"] == 0 and report.picks["min-memory"] == 1
    # measured by one trial: the rule holds, and picks it
    rows[1] = _row(1, 0.8, 2e6, 5.0)
    assert _pick_rule(rows, _plan("max-throughput")) == (Pick("max-throughput"), None)
    assert SearchReport.build(rows, OBJS, Pick("max-throughput"), Budget(10**9, "1GB"),
                              "s").best.number == 1
