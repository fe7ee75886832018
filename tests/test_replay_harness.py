"""The replay harness (benchmarks/replay/harness.py) on the committed tiny table: the real
engine, sampler and scheduler run against the table's trials; the clock's accounts are checked
against the table's own records, and the run is cheap enough for CI."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))

from harness import Costs, Method, Replay  # noqa: E402
from table import Table  # noqa: E402

TINY = REPLAY / "tables" / "tiny.jsonl.gz"


@pytest.fixture(scope="module")
def tiny() -> Table:
    return Table.load(TINY)


def _total(table: Table, row: int, seed: int) -> float:
    return float(table.trials[(row, seed)]["cost"]["total_cpu_s"])


def test_full_fidelity_replay_charges_the_records_and_repeats_by_seed(tiny: Table) -> None:
    costs = Costs(per_trial_s=0.5, per_search_s=3.0)
    started = time.monotonic()
    runs = [Replay(tiny, seed=s, costs=costs, budget_s=120.0).run(Method("random-full"))
            for s in (0, 0, 1)]
    assert time.monotonic() - started < 45  # CI: well under a minute
    a, again, other = runs
    assert [(t.number, t.status, t.row, t.seed) for t in a.trials] == [
        (t.number, t.status, t.row, t.seed) for t in again.trials]
    assert [t.row for t in a.trials] != [t.row for t in other.trials]
    trained = [t for t in a.trials if t.status == "complete"]
    assert len(trained) >= 5
    for t in a.trials:
        if t.status == "complete":
            assert t.row is not None and t.seed is not None
            assert t.cost == pytest.approx(_total(tiny, t.row, t.seed))  # the record's cost
            assert t.quality == pytest.approx(tiny.trials[(t.row, t.seed)]["valid_quality"])
            assert tiny.rows[t.row]["fits"]
        elif t.status == "infeasible":
            assert t.end == t.start  # priced, never trained: free
    # every launched trial pays the fixed overhead; the clock adds up (workers=1)
    assert a.trial_s == pytest.approx(sum(t.cost for t in trained))
    assert a.overhead_s == pytest.approx(3.0 + 0.5 * len(trained))
    # decisions between trials add to the clock; those while a trial runs overlap it
    assert a.decision_s > 0
    assert a.trial_s + a.overhead_s <= a.clock_s <= a.trial_s + a.overhead_s + a.decision_s
    assert any(t.status == "infeasible" for t in a.trials), (
        "random proposals on the default space include over-budget ones (18% of a pilot)")


def test_the_schedule_stops_trials_at_a_rung_and_charges_them_up_to_it(tiny: Table) -> None:
    res = Replay(tiny, seed=0, budget_s=120.0).run(
        Method("random-asha", "random", schedule=True, rungs=(1 / 3,)))
    pruned = [t for t in res.trials if t.status == "pruned"]
    assert pruned, "the tiny table's trials differ enough that some stop at 1/3"
    for t in pruned:
        assert t.row is not None and t.seed is not None
        rec = tiny.trials[(t.row, t.seed)]
        max_steps = int(rec["max_steps"])
        # the rung of 1/3: the first search evaluation at or after a third of the steps
        rung = min(int(p["step"]) for p in rec["curve"]
                   if p.get("search") and int(p["step"]) >= max_steps / 3)
        assert t.steps == rung < max_steps
        assert t.cost < _total(tiny, t.row, t.seed)


def test_the_yardstick_normalises_quality_and_log_memory(tiny: Table) -> None:
    from compare import Yardstick

    stick = Yardstick(tiny)
    axis = tiny.header["memory_axis"]
    lo, hi = float(axis["low_bytes"]), float(axis["high_bytes"])
    q_lo, q_hi = stick.q_lo, stick.q_best
    # the best quality at the cheapest memory dominates the whole unit square
    assert stick.volume([(q_hi, lo)]) == pytest.approx(1.0)
    # half the quality span at the geometric middle of the memory axis: a quarter
    mid = (lo * hi) ** 0.5
    assert stick.volume([((q_lo + q_hi) / 2, mid)]) == pytest.approx(0.25)
    # two staircase points: 0.5 x 1 + 0.5 x 0.5 (by hand)
    assert stick.volume([((q_lo + q_hi) / 2, lo), (q_hi, mid)]) == pytest.approx(0.75)
    seed0 = [(float(r["valid_quality"]), tiny.rows[row]["estimate"]["allocated_peak"])
             for (row, s), r in tiny.trials.items() if s == 0]
    assert stick.volume(seed0) == pytest.approx(stick.reference)
