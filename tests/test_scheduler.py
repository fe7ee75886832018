"""MO-ASHA (`pipeline.scheduler`): rungs, ranks and tie-breaks against references written
here (brute-force non-dominated sorting, rectangle areas, scipy's Spearman), the rungs read
from the data, and the engine's decisions: recorded on the trial before they are acted on,
restored on a resume."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from scipy.stats import spearmanr

from autoembed.budget import Budget
from autoembed.config import config_from_dict
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.priced_data import build_priced_data, data_spec_for
from autoembed.pipeline.scheduler import (
    RUNGS_ATTR,
    AshaScheduler,
    RungPoint,
    _contributions,
    _front_ranks,
    rung_step,
    spearman,
)
from autoembed.pipeline.study import make_sampler, open_storage
from autoembed.runner import Evaluation, TrialResult
from autoembed.space import load_space

ROOT = Path(__file__).resolve().parents[1]
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]


def test_rung_step_is_the_first_evaluation_at_or_after_the_share() -> None:
    assert rung_step(1 / 3, (60, 20)) == 20
    assert rung_step(1 / 3, (200, 50)) == 100  # 66.7 -> the evaluation at 100
    assert rung_step(1 / 9, (200, 10)) == 30  # 22.2 -> 30
    assert rung_step(1 / 3, (40, 20)) == 20  # 13.3 -> 20
    assert rung_step(0.9, (40, 20)) is None  # 36 -> 40: the last evaluation, no decision


def _peel(points: list[tuple[float, ...]]) -> list[int]:
    """Front ranks by peeling (larger is better): the reference for `_front_ranks`."""
    ranks = [-1] * len(points)
    left = set(range(len(points)))
    r = 0
    while left:
        front = {i for i in left if not any(
            all(a >= b for a, b in zip(points[j], points[i], strict=True))
            and points[j] != points[i] for j in left)}
        for i in front:
            ranks[i] = r
        left -= front
        r += 1
    return ranks


def test_front_ranks_match_peeling() -> None:
    rng = random.Random(3)
    for _ in range(30):
        pts = [tuple(float(rng.randint(0, 5)) for _ in range(3)) for _ in range(12)]
        assert _front_ranks(np.array(pts)).tolist() == _peel(pts)


def test_contributions_are_what_leaving_each_point_out_loses() -> None:
    """Against the definition: HV of the front less HV without the point (3 objectives,
    random fronts with shared coordinates and twins)."""
    from autoembed.pareto import hypervolume

    gen = np.random.default_rng(5)
    for n in (1, 2, 7, 30):
        pts = np.round(gen.random((n, 3)), 1)  # shared coordinates on a coarse grid
        if n > 2:
            pts[1] = pts[0]
        ref, dirs = [-0.1] * 3, ["maximize"] * 3
        whole = hypervolume(pts.tolist(), ref, dirs)
        want = [whole - hypervolume(np.delete(pts, i, axis=0).tolist(), ref, dirs)
                for i in range(n)]
        assert _contributions(pts).tolist() == pytest.approx(want, abs=1e-12)


def test_contributions_are_exclusive_rectangle_areas() -> None:
    # a 2-D staircase, reference (-0.1, -0.1): each point's exclusive area by hand
    front = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    want = [(1.0 - 0.5) * (0.0 + 0.1), (0.5 - 0.0) * (0.5 - 0.0), (0.0 + 0.1) * (1.0 - 0.5)]
    assert _contributions(front).tolist() == pytest.approx(want)
    twins = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 2.0]])
    assert _contributions(twins)[:2].tolist() == [0.0, 0.0]


def test_spearman_matches_scipy() -> None:
    rng = random.Random(1)
    for _ in range(20):
        a = [float(rng.randint(0, 6)) for _ in range(15)]
        b = [x + rng.gauss(0, 2) for x in a]
        assert spearman(a, b) == pytest.approx(float(spearmanr(a, b).statistic))


def _point(n: int, q: float, mem: float, rung: float = 1 / 3) -> RungPoint:
    return RungPoint(n, rung, 20, {"quality": q, "memory": mem}, True)


def test_decision_keeps_the_top_third_by_rank_then_contribution() -> None:
    s = AshaScheduler(OBJ, rungs=(1 / 3,))
    first = s.decide(0, 1 / 3, 20, {"quality": 0.1, "memory": 9.0})
    assert first.go_on  # the first at a rung always goes on (the stopping variant)
    # a staircase: each mate on the first front (more quality for more memory)
    for n, (q, m) in enumerate([(0.9, 5.0), (0.8, 4.0), (0.7, 3.0), (0.6, 2.0), (0.5, 1.0)]):
        s.add(_point(n, q, m))
    # 6 at the rung with the newcomer: ceil(6/3) = 2 go on. Dominated by all: stop.
    assert not s.decide(9, 1 / 3, 20, {"quality": 0.4, "memory": 6.0}).go_on
    # best quality, most memory: on the first front with all five; normalised, its
    # exclusive box is 0.111 x 0.1 (quality 0.95 beyond 0.9, memory the worst), smaller
    # than every mate's (the next smallest, quality 0.9 at 5.0: 0.222 x 0.102) -> stop
    assert not s.decide(9, 1 / 3, 20, {"quality": 0.95, "memory": 6.0}).go_on
    # dominating every mate: first front alone, position 0
    assert s.decide(9, 1 / 3, 20, {"quality": 0.99, "memory": 0.5}).go_on
    # throughput unknown to the mates is left out (a repeatable search's points)
    assert s.decide(9, 1 / 3, 20, {"quality": 0.99, "memory": 0.5, "throughput": 1.0}).go_on
    # an objective unknown at a rung (latency): nothing stops
    lat = AshaScheduler([*OBJ, ("latency", "minimize")], rungs=(1 / 3,))
    lat.points = s.points
    assert lat.decide(9, 1 / 3, 20, {"quality": 0.4, "memory": 6.0}).go_on


def test_rungs_come_from_the_rank_agreement_of_finished_trials() -> None:
    s = AshaScheduler(OBJ)
    assert s.active() == (1 / 3,)  # nothing learnt: only the largest rung
    rng = random.Random(0)
    length = (270, 10)  # rungs at 90, 30, 10
    for n in range(12):
        final = rng.random()
        # the first evaluation is noise below every later one (unsettled at 1/27); from
        # the second on the curve rises to the final quality (settled at 1/9 and 1/3)
        curve = [(10, -1.0 - rng.random())] + [(step, final - 0.1 * (1 - step / 270))
                                               for step in range(20, 280, 10)]
        s.learn(n, curve, length, final)
    rho = s.agreement()
    assert rho[1 / 3] == rho[1 / 9] == pytest.approx(1.0) and rho[1 / 27] < s.settled_rho
    assert s.active() == (1 / 3, 1 / 9)
    assert s.due(30, length) == [1 / 9] and s.due(90, length) == [1 / 3]
    assert s.due(40, length) == []


@pytest.fixture(scope="module")
def tiny() -> Any:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    return space, build_priced_data(spec, stand_in)


def _engine(tmp_path: Path, tiny: Any, scheduler: AshaScheduler) -> tuple[SearchEngine, Any]:
    space, data = tiny
    study = optuna.create_study(study_name="s", storage=open_storage(tmp_path),
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 0), load_if_exists=True)
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, data, run={"max_steps": 60, "eval_every": 20}),
        budget=Budget(800_000_000, "800MB"), objectives=OBJ, trials=8, repeatable=True),
        scheduler=scheduler)
    return eng, study


def _final(p: Any, quality: float) -> dict[str, Any]:
    res = TrialResult(status="complete", config=config_from_dict(dict(p.payload["config"])),
                      test_quality=quality, valid_quality=quality, throughput=100.0, steps=60,
                      curve=(Evaluation(20, 100, quality - 0.1, {}, 0.1),
                             Evaluation(40, 200, quality - 0.05, {}, 0.2),
                             Evaluation(60, 300, quality, {}, 0.3)))
    return {"status": "complete", "result": json.loads(json.dumps(res.to_dict()))}


def _eval(q: float) -> dict[str, Any]:
    return {"quality": q, "step": 20, "samples": 100, "elapsed_s": 1.0}


def test_engine_records_each_rung_decision_before_acting_and_resumes_it(
        tmp_path: Path, tiny: Any) -> None:
    eng, study = _engine(tmp_path, tiny, AshaScheduler(OBJ, rungs=(1 / 3,)))
    a = eng.propose()
    assert a is not None and a.length == (60, 20)
    assert not eng.observe(a.number, _eval(0.9))  # first at the rung: goes on
    eng.finish(a.number, _final(a, 1.0))
    b = eng.propose()
    assert b is not None
    mem_b = eng._memory(b.estimate.to_dict())
    mem_a = eng.rows[a.number].metrics["memory"]
    stop = eng.observe(b.number, _eval(0.1))
    # 2 at the rung: ceil(2/3) = 1 goes on. b (quality 0.1 vs 0.9) is dominated by a
    # unless it is cheaper; then both are on the first front at opposite ends of the
    # normalised square, with equal contributions, and no mate beats b's: b goes on.
    assert stop == (mem_b >= mem_a)
    # recorded on the trial in the storage before the engine returned its decision
    raw = optuna.load_study(study_name="s", storage=open_storage(tmp_path)).trials[
        b.number].user_attrs[RUNGS_ATTR]
    assert [RungPoint.decode(b.number, p).go_on for p in raw] == [not stop]
    eng.finish(b.number, None if stop else _final(b, 0.2))
    if stop:
        row = eng.rows[b.number]
        assert row.status == "pruned" and "multi-fidelity" in str(row.reason)
    # a resume (a fresh engine on the same storage) rebuilds the rung from the study
    fresh = AshaScheduler(OBJ, rungs=(1 / 3,))
    _engine(tmp_path, tiny, fresh)
    got = fresh.points[1 / 3]
    assert set(got) == {a.number, b.number}
    assert got[b.number].go_on == (not stop)
    assert got[a.number].values["quality"] == pytest.approx(0.9)
    assert math.isclose(got[b.number].values["memory"], mem_b)
    assert a.number in fresh.finished  # the finished curve is learnt again


def test_multi_fidelity_is_asked_for_and_kept_by_a_resume() -> None:
    """Off by default; `multi_fidelity=True` turns it on, and a resume (the stored meta)
    keeps it without being asked again."""
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest

    plain = SearchPlan.build(SearchRequest.parse("1GB", "tiny", tracking_uri="none"), {})
    asked = SearchPlan.build(
        SearchRequest.parse("1GB", "tiny", tracking_uri="none", multi_fidelity=True), {})
    resumed = SearchPlan.build(
        SearchRequest.parse("1GB", "tiny", tracking_uri="none", study=asked.name,
                            resume=True), asked.meta())
    assert not plain.multi_fidelity
    assert asked.multi_fidelity and asked.meta()["multi_fidelity"] is True
    assert resumed.multi_fidelity


def test_a_twin_adds_nothing_exactly() -> None:
    gen = np.random.default_rng(9)
    for _ in range(20):
        pts = gen.random((6, 3))
        pts[3] = pts[0]
        got = _contributions(pts)
        assert got[0] == 0.0 and got[3] == 0.0
