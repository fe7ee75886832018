"""Every trial's cost is counted (issue 25): completed, stopped early, crashed and never
trained alike, against seconds scripted on a fake clock (the sampler's ask, the pricing,
the trial's build, steps and evaluations), so each expected figure is a sum done by hand."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest

from autoembed.budget import Budget
from autoembed.config import config_from_dict
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.executor import InProcessExecutor, TrialChannel
from autoembed.pipeline.priced_data import build_priced_data, data_spec_for
from autoembed.pipeline.study import make_sampler, open_storage
from autoembed.pipeline.workload import CostClock, final_report
from autoembed.space import load_space
from autoembed.trial import COST_COLUMNS, Evaluation, TrialResult, csv_header, encode_csv_row

ROOT = Path(__file__).resolve().parents[1]
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]
ASK, PRICE, BUILD = 0.25, 0.5, 1.0  # seconds of the sampler, the pricing, a trial's build
STEP, EVAL = 2.5, 0.5  # seconds of 20 optimizer steps, of one evaluation
CPU_BUILD, CPU_SEGMENT = 0.5, 2.0  # CPU seconds of the build, of 20 steps + an evaluation


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class TimedWorkload:
    """The built-in workload, its pricing costing PRICE seconds of `clock`."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self._inner, self._clock = inner, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def price(self, values: Mapping[str, Any]) -> Any:
        self._clock.t += PRICE
        return self._inner.price(values)


class FakePlan:
    device, threads = "cpu", 1


def scripted_trial(wall: Clock, cpu: Clock, crash: int) -> Any:
    """A trial runner: a build, then 3 segments of 20 steps and an evaluation, reporting
    each; the `crash`-th trial it runs (from 1) raises after its first segment."""
    runs = [0]

    def run(payload: Mapping[str, Any], channel: TrialChannel) -> dict[str, Any]:
        runs[0] += 1
        wall.t += BUILD
        cpu.t += CPU_BUILD
        curve = []
        for k, step in enumerate((20, 40, 60), 1):
            wall.t += STEP + EVAL
            cpu.t += CPU_SEGMENT
            ev = Evaluation(step, step * 8, 0.5, {"auc": 0.5}, k * (STEP + EVAL), k * STEP)
            curve.append(ev)
            channel.report(ev)
            if runs[0] == crash:
                raise RuntimeError("worker lost")
        cfg = config_from_dict(dict(payload["config"]))
        result = TrialResult("complete", cfg, test_quality=0.5, valid_quality=0.5,
                             throughput=100.0, curve=tuple(curve), steps=60,
                             train_seconds=3 * STEP, wall_seconds=BUILD + 3 * (STEP + EVAL))
        return json.loads(json.dumps(final_report(result), default=str))

    return run


def tiny_study(tmp_path: Path) -> tuple[Any, Any]:
    """tiny.yaml's workload (60 steps, an evaluation every 20) and a new study of it."""
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    workload = BuiltinWorkload.of(space, build_priced_data(spec, stand_in),
                                  run={"max_steps": 60, "eval_every": 20})
    study = optuna.create_study(study_name="s", storage=open_storage(tmp_path),
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 1))
    return workload, study


def test_every_trial_carries_its_seconds(tmp_path: Path, monkeypatch: Any) -> None:
    wall, cpu = Clock(), Clock()
    workload, study = tiny_study(tmp_path)
    ask = study.ask

    def timed_ask(*a: Any, **kw: Any) -> Any:
        wall.t += ASK
        return ask(*a, **kw)

    monkeypatch.setattr(study, "ask", timed_ask)
    launched: list[int] = []
    # the early-stop rule is not under test: the second trial "cannot reach the front" at
    # step 40
    monkeypatch.setattr("autoembed.pipeline.engine.cannot_reach_front",
                        lambda prog, front, obj: prog.step >= 40 and len(launched) == 2)
    engine = SearchEngine(study, SearchSettings(
        workload=TimedWorkload(workload, wall),  # type: ignore[arg-type]
        budget=Budget(800_000_000, "800MB"), objectives=OBJ, trials=4, early_stop=True),
        clock=wall)
    propose = engine.propose
    monkeypatch.setattr(engine, "propose",
                        lambda: (p := propose()) and (launched.append(p.number) or p))
    InProcessExecutor(scripted_trial(wall, cpu, crash=3),
                      cost_clock=lambda: CostClock(wall, cpu)).run(engine, FakePlan())  # type: ignore[arg-type]

    rows = engine.rows
    assert [rows[n].status for n in launched] == ["complete", "pruned", "failed", "complete"]
    infeasible = [r for r in rows.values() if r.status == "infeasible"]
    assert infeasible, "seed 1 proposes over-budget configs in tiny.yaml at 800MB"
    for r in infeasible:  # priced, never trained: its ask and pricing only
        assert r.metrics["ask_seconds"] == pytest.approx(ASK)
        assert r.metrics["pricing_seconds"] == pytest.approx(PRICE)
        assert r.metrics["overhead_seconds"] == pytest.approx(ASK + PRICE)
    segments = {"complete": 3, "pruned": 2, "failed": 1}  # segments run before it ended
    for n in launched:
        m, k = rows[n].metrics, segments[rows[n].status]
        assert m["ask_seconds"] == pytest.approx(ASK)
        assert m["pricing_seconds"] == pytest.approx(PRICE)
        assert m["train_seconds"] == pytest.approx(k * STEP)
        assert m["wall_seconds"] == pytest.approx(BUILD + k * (STEP + EVAL))
        assert m["cpu_seconds"] == pytest.approx(CPU_BUILD + k * CPU_SEGMENT)
        # from the ask to its end: ask, pricing, build, evaluations (the steps are not)
        assert m["overhead_seconds"] == pytest.approx(ASK + PRICE + BUILD + k * EVAL)
    # trials.csv carries them, the pruned trial's too
    pruned = rows[launched[1]]
    header = csv_header([])
    cells = dict(zip(header, encode_csv_row(pruned, False, []), strict=True))
    assert {c: float(cells[c]) for c in COST_COLUMNS} == pytest.approx({
        "train_seconds": 2 * STEP, "wall_seconds": BUILD + 2 * (STEP + EVAL),
        "cpu_seconds": CPU_BUILD + 2 * CPU_SEGMENT, "ask_seconds": ASK,
        "pricing_seconds": PRICE, "overhead_seconds": ASK + PRICE + BUILD + 2 * EVAL})


def test_the_ray_trainable_stamps_every_report(monkeypatch: Any) -> None:
    """On Ray, each `tune.report` carries the trial's seconds so far (a trial Tune stops
    costs its last one) and the final report its totals; Tune itself is not started."""
    import ray.tune

    from autoembed.pipeline import trainable

    wall, cpu = Clock(), Clock()
    reports: list[dict[str, Any]] = []
    monkeypatch.setattr(ray.tune, "report", lambda r: reports.append(dict(r)))
    monkeypatch.setattr(trainable, "node_info", lambda res: {"ray_node_ip": "10.0.0.1",
                                                             "ray_node_id": "n1"})
    monkeypatch.setattr("autoembed.pipeline.workload.CostClock",
                        lambda: CostClock(wall, cpu))

    def run(payload: Mapping[str, Any], channel: Any, **kw: Any) -> dict[str, Any]:
        wall.t += BUILD
        cpu.t += CPU_BUILD
        for k in (1, 2):
            wall.t += STEP + EVAL
            cpu.t += CPU_SEGMENT
            channel(Evaluation(20 * k, 160 * k, 0.5, {}, k * (STEP + EVAL), k * STEP))
        return {"status": "complete", "result": {"done": True}}

    trainable.train_trial({trainable.PAYLOAD: json.dumps({"number": 0})}, run)
    *evaluations, final = reports
    assert [(e["step"], e["train_s"], e["wall_s"], e["cpu_s"]) for e in evaluations] == [
        (20 * k, pytest.approx(k * STEP), pytest.approx(BUILD + k * (STEP + EVAL)),
         pytest.approx(CPU_BUILD + k * CPU_SEGMENT)) for k in (1, 2)]
    assert all(e["ray_node_ip"] == "10.0.0.1" for e in evaluations)
    cost = json.loads(final[trainable.FINAL])["cost"]
    assert cost == pytest.approx({"wall_s": BUILD + 2 * (STEP + EVAL),
                                  "cpu_s": CPU_BUILD + 2 * CPU_SEGMENT})


def test_a_timed_out_trial_costs_the_seconds_it_ran(tmp_path: Path) -> None:
    """A trial its executor ends past its limit (Ray: its worker killed, no final report)
    costs the seconds from its start to its end, those after its last report as training;
    what it returned, were it anything, is not its result."""
    wall = Clock()
    workload, study = tiny_study(tmp_path)
    engine = SearchEngine(study, SearchSettings(
        workload=workload, budget=Budget(800_000_000, "800MB"), objectives=OBJ, trials=2),
        clock=wall)
    for fake in (False, True):
        p = engine.propose()
        assert p is not None
        wall.t += 1.0  # the executor starts it a second after its ask
        engine.trial_started(p.number)
        wall.t += 0.5
        engine.observe(p.number, {"quality": 0.5, "step": 20, "train_s": 0.25, "wall_s": 0.5})
        wall.t += 2.5  # then nothing until its limit passes
        engine.time_out(p.number)
        result = TrialResult("complete", config_from_dict(dict(p.payload["config"])),
                             valid_quality=0.99, steps=60, wall_seconds=0.0)
        engine.finish(p.number, final_report(result) if fake else None)
        row = engine.rows[p.number]
        assert row.status == "timeout" and not engine.front()
        m = row.metrics
        assert m["wall_seconds"] == pytest.approx(3.0)
        assert m["train_seconds"] == pytest.approx(0.25 + 2.5)
        assert m["overhead_seconds"] == pytest.approx(4.0 - 2.75)  # from the ask, less that
