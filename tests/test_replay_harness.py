"""The replay harness (benchmarks/replay/harness.py) on the committed tiny table: the real
engine, sampler and scheduler run against the table's trials; the clock's accounts are checked
against the table's own records, and the run is cheap enough for CI."""

from __future__ import annotations

import statistics
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
    # the same proposals, rows and seeds; where the budget cuts the search off may move by
    # a trial (the clock charges the engine's measured thread time)
    n = min(len(a.trials), len(again.trials))
    assert abs(len(a.trials) - len(again.trials)) <= 1 and n >= 5
    assert [(t.number, t.status, t.row, t.seed) for t in a.trials[:n]] == [
        (t.number, t.status, t.row, t.seed) for t in again.trials[:n]]
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


def test_a_live_searchs_trials_csv_is_charged_on_both_clocks(tiny: Table) -> None:
    """live.py: trials.csv rows in trial order, charged on the replay's clock (CPU seconds,
    ask and pricing, the fixed charges) and on the driver's wall clock; targets counted in
    completed trials."""
    from compare import Yardstick
    from live import _times, _trials_to, clocks

    stick = Yardstick(tiny)
    axis = tiny.header["memory_axis"]
    best, cheap = stick.q_best, float(axis["low_bytes"])

    def row(n: int, status: str, q: float | None, cpu: float) -> dict[str, str]:
        return {"trial": str(n), "status": status, "quality": "" if q is None else str(q),
                "memory": "" if q is None else str(cheap), "cpu_seconds": str(cpu),
                "ask_seconds": "0.5", "pricing_seconds": "0.25", "train_seconds": str(cpu),
                "overhead_seconds": "1"}

    rows = [row(0, "infeasible", None, 0.0), row(1, "complete", stick.q_lo, 2.0),
            row(2, "pruned", None, 1.0), row(3, "complete", best, 4.0)]
    logs = clocks(rows, startup_s=10.0)
    c = Costs()
    # by hand: 0.75 decision each; a trained trial adds its CPU seconds and the per-trial charge
    want = [c.per_search_s + 0.75, c.per_search_s + 1.5 + 2.0 + c.per_trial_s]
    want += [want[1] + 0.75 + 1.0 + c.per_trial_s]
    want += [want[2] + 0.75 + 4.0 + c.per_trial_s]
    assert [t.end for t in logs["replay_clock"]] == pytest.approx(want)
    # wall: start-up, then ask + pricing + train + overhead of each row
    assert [t.end for t in logs["wall"]] == pytest.approx([11.75, 15.5, 18.25, 24.0])
    times = _times(stick, logs["replay_clock"])
    # the best quality at the cheapest memory is the whole reference: every target at trial 3
    assert times["hv95"] == pytest.approx(want[3]) and times["best"] == pytest.approx(want[3])
    assert _trials_to(times["curve"], times, "hv95") == 2  # the second completed trial


def test_live_ratios_pair_seeds_and_count_a_short_search_at_its_last_trial() -> None:
    """live.py `ratios`: a live method's compute to a target over live random search's, a
    ratio of the means over the seeds both hold; a search short of the target counts at
    its last trial (`total_s`); a seed only one side holds is left out."""
    from live import ratios

    def rec(method: str, seed: int, hv95: float | None, total: float) -> dict[str, object]:
        return {"table": "no-such-table", "method": method, "seed": seed, "rows": 10,
                "start_points": False, "hv90_s": None, "hv95_s": hv95, "hv99_s": None,
                "best_s": None, "total_s": total}

    recs = [rec("ehvi-front", 0, 10.0, 50.0), rec("ehvi-front", 1, 20.0, 50.0),
            rec("ehvi-front", 2, 1.0, 50.0), rec("random-full", 0, 40.0, 90.0),
            rec("random-full", 1, None, 60.0)]
    lines = ratios(recs)
    hv95 = next(line for line in lines if line.startswith("| hv95 |"))
    # by hand: (10 + 20) / (40 + 60); one search short of it; no replay of this table
    assert hv95.startswith("| hv95 | 0.30 [") and hv95.endswith("| n/a | 1 |")
    assert any("Paired seeds 0, 1:" in line for line in lines)


def test_the_ehvi_sampler_prices_through_the_engine_and_stays_in_budget(tiny: Table) -> None:
    """The engine binds the `ehvi` sampler to its pricing: on the tiny table (start-up 5,
    then the model) a replay runs to its budget and no trained trial is over it. 60 s: the
    per-search charge, then about 15 trials of some 3.5 s (record, per-trial charge and
    decisions); at 400 s, 111 trials took 39 CPU s, mostly the model's forests."""
    result = Replay(tiny, seed=0, budget_s=60.0).run(Method("ehvi", "ehvi", front_rule=True))
    trained = [t for t in result.trials if t.status in ("complete", "pruned")]
    assert len(trained) > 8  # past the start-up: the model proposed
    budget = int(tiny.header["budget_bytes"])
    for t in trained:
        assert t.row is not None
        assert tiny.rows[t.row]["estimate"]["device_total"] <= budget


def test_a_table_without_an_optimizer_drops_its_rows_and_its_choice(tiny: Table) -> None:
    lean = tiny.without("table_optimizer", "rowwise_adagrad")
    assert lean.header["name"] == "tiny without rowwise_adagrad"
    # tiny holds one rowwise_adagrad row (row 5) among its 9
    assert sorted(lean.rows) == [r for r in sorted(tiny.rows) if r != 5]
    assert all(row != 5 for row, _ in lean.trials)
    assert len(lean.trials) == len(tiny.trials) - len(tiny.seeds(5))
    choices = next(p.choices for p in lean.space().params if p.name == "table_optimizer")
    assert list(choices) == ["adam", "adagrad", "sgd"]
    assert Table.named(REPLAY / "tables", "tiny without rowwise_adagrad").rows == lean.rows
    with pytest.raises(ValueError, match="no choice 'lion'"):
        tiny.without("table_optimizer", "lion")


def test_with_n_workers_the_clock_is_wall_and_compute_is_every_workers(tiny: Table) -> None:
    """At each trial's end its `compute` is every worker's charge so far: the trials ended,
    the running ones up to then, the fixed charges (by hand from the log) and the decisions
    (at most all of them); with 4 workers the wall-clock runs well under the compute."""
    costs = Costs(per_trial_s=0.5, per_search_s=3.0)
    result = Replay(tiny, seed=0, workers=4, costs=costs, budget_s=120.0).run(
        Method("random-full"))
    trained = [t for t in result.trials if t.status in ("complete", "pruned")]
    assert len(trained) > 8
    for t in trained:
        at = t.end
        done = sum(u.cost for u in trained if u.end <= at)
        w = costs.worker_s  # the worker spends its part of the per-trial charge first
        running = sum(min(max(0.0, at - u.start - w), u.cost) for u in trained
                      if u.start < at < u.end)
        fixed = costs.per_search_s + costs.per_trial_s * sum(u.start <= at for u in trained)
        assert 0.0 <= t.compute - (done + running + fixed) <= result.decision_s + 1e-9
    total = max(t.compute for t in result.trials)
    assert total == pytest.approx(costs.per_search_s + sum(
        t.cost + costs.per_trial_s for t in trained) + result.decision_s)
    assert result.clock_s < 0.5 * total


def test_a_trial_holds_its_worker_for_its_seconds_and_a_freed_worker_is_asked_at_once(
        tiny: Table) -> None:
    """Three simulated workers: never more than three trials in flight (a worker is free
    once the driver has taken its trial's end); a trial runs its record's seconds from its
    start; the k-th trial starts once k - 2 trials have ended, and no later than that end
    plus the per-trial charge and the driver's decisions (it does not wait for others)."""
    costs = Costs(per_trial_s=0.5, per_search_s=3.0)
    res = Replay(tiny, seed=2, workers=3, costs=costs, budget_s=150.0).run(
        Method("random-full"))
    trained = sorted((t for t in res.trials if t.status == "complete"), key=lambda t: t.start)
    assert len(trained) > 12
    ends = sorted(t.end for t in trained)
    for k, t in enumerate(trained):
        assert t.end >= t.start + _total(tiny, t.row, t.seed) - 1e-9  # type: ignore[arg-type]
        assert sum(u.start <= t.start < u.end for u in trained) <= 3
        if k >= 3:
            freed = ends[k - 3]  # the (k - 2)-th end frees the worker trial k takes
            assert freed <= t.start <= freed + costs.per_trial_s + res.decision_s + 1e-9


def test_compute_counts_a_running_trial_at_most_its_seconds_when_the_driver_lags(
        tiny: Table) -> None:
    """A per-trial charge far above the trials' seconds keeps the driver busy past the
    running trials' ends: a trial the driver has not reached yet counts its own seconds,
    not the wall-clock since its start (by hand from the log)."""
    costs = Costs(per_trial_s=20.0, per_search_s=3.0, per_trial_worker_s=0.0)
    res = Replay(tiny, seed=0, workers=4, costs=costs, budget_s=600.0).run(
        Method("random-full"))
    trained = [t for t in res.trials if t.status == "complete"]
    assert len(trained) > 8
    lagged = 0
    for t in trained:
        at = t.end
        done = sum(u.cost for u in trained if u.end <= at)
        running = [u for u in trained if u.start < at < u.end]
        lagged += any(at - u.start > u.cost for u in running)
        held = sum(min(at - u.start, u.cost) for u in running)
        fixed = costs.per_search_s + costs.per_trial_s * sum(u.start <= at for u in trained)
        assert 0.0 <= t.compute - (done + held + fixed) <= res.decision_s + 1e-9
    assert lagged, "the driver reached some trial's end only after another's had passed"


def test_the_workers_part_of_the_per_trial_charge_runs_in_parallel_the_drivers_does_not(
        tiny: Table) -> None:
    """Four workers, a per-trial charge of 5 s: on the driver (MLflow, Optuna storage) it is
    paid one trial after another, so the wall-clock holds 5 s per trial launched; on the
    workers (Ray's start of a trial) four at once, in well under half that wall-clock."""
    runs = {w: Replay(tiny, seed=3, workers=4, budget_s=150.0, costs=Costs(
        per_trial_s=5.0, per_search_s=3.0, per_trial_worker_s=w)).run(Method("random-full"))
        for w in (0.0, 5.0)}
    on_driver = runs[0.0]
    launched = sum(t.status == "complete" for t in on_driver.trials)
    assert on_driver.clock_s >= 3.0 + 5.0 * launched
    assert runs[5.0].clock_s < 0.5 * on_driver.clock_s
    for res in runs.values():  # the same compute either way
        assert 150.0 <= max(t.compute for t in res.trials)


def test_with_n_workers_the_budget_caps_the_compute_not_the_wall_clock(tiny: Table) -> None:
    """Four workers at a budget of 90 s: the search stops starting trials once 90 s of
    compute are charged (the four in flight then run out), so it spends what one worker
    would, in about a quarter of the wall-clock."""
    costs = Costs(per_trial_s=0.5, per_search_s=3.0)
    res = Replay(tiny, seed=1, workers=4, costs=costs, budget_s=90.0).run(
        Method("random-full"))
    trained = [t for t in res.trials if t.status == "complete"]
    spent = max(t.compute for t in res.trials)
    longest = max(t.cost for t in trained) + costs.per_trial_s
    assert 90.0 <= spent <= 90.0 + 4 * longest + res.decision_s
    assert res.clock_s < 0.5 * spent


def test_compare_replays_at_several_worker_counts_beside_the_oracle(
        tiny: Table, tmp_path: Path) -> None:
    import compare

    out = tmp_path / "replays.jsonl.gz"
    assert compare.main(["--tables", "tiny", "--seeds", "2", "--methods", "random-full",
                         "--workers", "1", "4", "--budget-trials", "20",
                         "--jsonl", str(out)]) == 0
    recs = compare._records(out)
    assert sorted((r["workers"], r["seed"]) for r in recs) == [(1, 0), (1, 1), (4, 0), (4, 1)]
    median = statistics.median(float(r["cost"]["total_cpu_s"]) for r in tiny.trials.values())
    for r in recs:
        assert r["budget_s"] == pytest.approx(20 * median)  # 20 median trials of the table
        assert r["hv95"] is not None and r["compute_hv95"] is not None
        assert r["compute_hv95"] <= r["compute_s"]
        if r["workers"] == 4:  # four at once: the target sooner on the clock than in compute
            assert r["hv95"] < r["compute_hv95"]
    text = compare.report(out)
    assert "## Workers (start points off)" in text
    lines = [line for line in text.splitlines() if line.startswith("| random-full | 4 | 2 |")]
    assert len(lines) == 1
    assert "oracle (the least compute" in text
    for bad_args in (["--workers", "0"], ["--budget-trials", "0"]):
        with pytest.raises(SystemExit) as bad:
            compare.main(["--tables", "tiny", *bad_args, "--jsonl", str(out)])
        assert bad.value.code == 2


def test_optunas_gp_and_tpe_peers_replay_with_the_budget_as_their_constraint(
        tiny: Table) -> None:
    """compare.py's `optuna-gp` and `optuna-tpe` (peers.optuna_sampler) on the tiny table:
    past their 10 random start-up trials, nothing trained over the budget; GPSampler's
    model ran on the search's three objectives and on the two constraints the engine sets
    on every told trial (memory overshoot, runs): constrained multi-objective."""
    import compare

    built = {}
    for name, budget in (("optuna-gp", 45.0), ("optuna-tpe", 60.0)):
        method = compare.METHODS[name]

        def keep(seed: int, workload: object, make=method.sampler, name=name) -> object:
            built[name] = make(seed, workload)  # type: ignore[operator]
            return built[name]

        res = Replay(tiny, seed=0, budget_s=budget).run(Method(name, keep))
        trained = [t for t in res.trials if t.status == "complete"]
        assert len(res.trials) > 10  # past the 10 random start-up trials (decisions are charged:
        # a loaded machine leaves GP's budget 11-13 trials)
        for t in trained:
            assert t.row is not None
            assert tiny.rows[t.row]["estimate"]["device_total"] <= tiny.header["budget_bytes"]
    gp = built["optuna-gp"]
    assert len(gp._gprs_cache_list) == 3  # quality, memory, throughput
    assert len(gp._constraints_gprs_cache_list) == 2  # memory, runs
    assert "optuna-gp" in compare.PEER_METHODS and "optuna-tpe" in compare.PEER_METHODS


def test_botorch_peer_sees_only_the_constraints_that_vary() -> None:
    """`optuna-botorch` hands qNEHVI the constraint columns with a spread: the engine's
    `runs` constraint is 0 on every trial that ran (BoTorch's standardization breaks on it)."""
    import peers
    import torch

    seen = []
    call = peers._varying_constraints(lambda x, obj, con, b, p: seen.append(con) or "ok")
    x, obj, bounds = torch.zeros(3, 2), torch.zeros(3, 3), torch.zeros(2, 2)
    con = torch.tensor([[-1.0, 0.0], [2.0, 0.0], [-0.5, 0.0]])  # memory overshoot, runs
    assert call(x, obj, con, bounds, None) == "ok"
    assert torch.equal(seen[-1], con[:, :1])
    call(x, obj, torch.zeros(3, 2), bounds, None)
    assert seen[-1] is None
    call(x, obj, None, bounds, None)
    assert seen[-1] is None
