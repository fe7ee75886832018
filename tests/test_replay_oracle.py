"""The limit beside every replayed method (benchmarks/replay/oracle.py): the least compute
that reaches each target of compare.py's yardstick, against a hand-made table whose answer
is worked out by hand and against brute force over every subset; and compare.py's file of
replays (drop, merge), which the report reads."""

from __future__ import annotations

import itertools
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))
sys.path.insert(0, str(REPLAY.parent))

from harness import Costs  # noqa: E402
from oracle import Point, chain_volume, cheapest_set, least_max_cost  # noqa: E402
from table import Table  # noqa: E402

from autoembed.pareto import hypervolume  # noqa: E402

# (allocated_peak, seed-0 validation quality, seed-0 CPU s) per row; the memory axis runs
# 1e3..1e6 bytes on log10, so goodness g = (6 - log10 m) / 3; quality 0.5..1.0 -> q = 2 (x - 0.5)
ROWS = {
    0: (1e3, 0.5, 1.0),        # g 1,   q 0    (the worst: adds no volume)
    1: (1e3, 0.9, 10.0),       # g 1,   q 0.8
    2: (10**4.5, 1.0, 2.0),    # g 1/2, q 1    (the best)
    3: (1e4, 0.95, 3.0),       # g 2/3, q 0.9
    4: (1e5, 0.995, 0.5),      # g 1/3, q 0.99 (dominated by row 2; within noise of the best)
}
SEED1 = {0: 0.51, 1: 0.91, 3: 0.94}  # |seed 0 - seed 1| = 0.01 each: the noise unit


def _trial(row: int, seed: int, quality: float, cpu: float) -> dict[str, Any]:
    return {"kind": "trial", "row": row, "seed": seed, "status": "complete",
            "valid_quality": quality, "cost": {"total_cpu_s": cpu, "total_wall_s": 2 * cpu}}


def _hand_made() -> Table:
    header = {"kind": "table", "name": "hand", "budget_bytes": 10**6,
              "memory_axis": {"low_bytes": 1000, "high_bytes": 10**6}}
    rows = {r: {"kind": "row", "row": r, "estimate": {"allocated_peak": m}}
            for r, (m, _, _) in ROWS.items()}
    trials = {(r, 0): _trial(r, 0, q, c) for r, (_, q, c) in ROWS.items()}
    # seed-1 records, cheaper and better: the oracle reads seed 0 only
    trials.update({(r, 1): _trial(r, 1, q, 0.01) for r, q in SEED1.items()})
    return Table(header, rows, trials)


def test_the_oracle_of_a_hand_made_table_is_the_cheapest_set_by_hand() -> None:
    from compare import Yardstick

    stick = Yardstick(_hand_made())
    # reference front rows 1, 3, 2: 0.8 (1 - 2/3) + 0.9 (2/3 - 1/2) + 1.0 (1/2) = 11/12
    assert stick.reference == pytest.approx(11 / 12)
    assert stick.noise == pytest.approx(0.01)
    got = stick.oracle(_hand_made(), Costs(per_trial_s=0.0, per_search_s=0.0))
    # hv90 (>= 0.825): rows 1 + 4 give 0.8 (1 - 1/3) + 0.99 (1/3) = 0.8633 for 10.5 s;
    # rows 1 + 3 give 0.8667 for 13, rows 1 + 2 0.9 for 12: the cheapest is 1 + 4
    assert got["hv90"] == {"compute_s": pytest.approx(10.5), "rows": [1, 4]}
    # hv95 (>= 0.8708): 1 + 3 (0.8667) and 1 + 4 (0.8633) fall short; 1 + 2 (0.9) for 12
    # beats 1 + 3 + 4 (0.8967) for 13.5
    assert got["hv95"] == {"compute_s": pytest.approx(12.0), "rows": [1, 2]}
    # hv99 (>= 0.9075): only the whole front 1 + 3 + 2 (11/12) reaches it
    assert got["hv99"] == {"compute_s": pytest.approx(15.0), "rows": [1, 2, 3]}
    # best: within 0.01 of 1.0 are rows 2 (2 s) and 4 (0.5 s)
    assert got["best"] == {"compute_s": pytest.approx(0.5), "rows": [4]}
    # the fixed charges: once per search, once per row trained
    charged = stick.oracle(_hand_made(), Costs(per_trial_s=0.6, per_search_s=8.6))
    assert charged["hv95"]["compute_s"] == pytest.approx(8.6 + 12.0 + 2 * 0.6)
    assert charged["best"]["compute_s"] == pytest.approx(8.6 + 0.5 + 0.6)
    wall = stick.oracle(_hand_made(), Costs(per_trial_s=0.0, per_search_s=0.0, basis="wall"))
    assert wall["hv95"]["compute_s"] == pytest.approx(24.0)


def _volume(points: list[Point]) -> float:
    return hypervolume([(p.q, p.g) for p in points], [0.0, 0.0], ["maximize", "maximize"])


def test_the_cheapest_set_is_the_brute_force_optimum() -> None:
    """Against every subset of small random point sets, volumes from autoembed.pareto."""
    rng = random.Random(5)
    for _ in range(30):
        pts = [Point(i, rng.random(), rng.random(), rng.choice([0.5, 1.0, 2.0, 3.0]) *
                     rng.random()) for i in range(9)]
        assert chain_volume([p for p in pts if not any(
            o.g >= p.g and o.q >= p.q and o is not p for o in pts)]) == pytest.approx(
            _volume(pts))
        target = rng.uniform(0.3, 1.0) * _volume(pts)
        want = min((sum(p.cost for p in sub), sub)
                   for k in range(1, len(pts) + 1) for sub in itertools.combinations(pts, k)
                   if _volume(list(sub)) >= target)
        got = cheapest_set(pts, target)
        assert got is not None and got[0] == pytest.approx(want[0])
        chosen = [p for p in pts if p.row in got[1]]
        assert _volume(chosen) >= target - 1e-12
        assert math.isclose(sum(p.cost for p in chosen), got[0])
    assert cheapest_set([Point(0, 0.5, 0.5, 1.0)], 0.3) is None


def test_the_wall_clock_limit_of_a_hand_made_table_by_hand() -> None:
    """With unlimited workers a set reaches its target when its costliest row ends: every
    hv target of the hand-made table needs row 1 (10 s; the others reach 0.65 < 0.825
    without it), so each limit is the per-search charge, the per-trial charge and 10 s;
    hv99's fewest rows (1, 2, 3) handed over costliest first end no later than row 1;
    best is row 4 (0.5 s)."""
    from compare import Yardstick

    stick = Yardstick(_hand_made())
    costs = Costs(per_trial_s=0.6, per_search_s=8.6, per_trial_worker_s=0.225)
    wall = stick.wall_oracle(_hand_made(), costs)
    for k in ("hv90", "hv95", "hv99"):
        assert wall[k]["wall_s"] == pytest.approx(8.6 + 0.6 + 10.0)
        assert wall[k]["max_row_s"] == pytest.approx(10.0)
    assert wall["hv99"]["rows"] == [1, 2, 3]
    # the driver hands over row 1 (0.375 s), then 3, then 2: row 1 ends last at
    # 8.6 + 0.375 + 0.225 + 10
    assert wall["hv99"]["schedule_s"] == pytest.approx(19.2)
    assert len(wall["hv90"]["rows"]) == 2 and 1 in wall["hv90"]["rows"]
    assert wall["best"] == {"wall_s": pytest.approx(8.6 + 0.6 + 0.5), "max_row_s": 0.5,
                            "rows": [4], "schedule_s": pytest.approx(8.6 + 0.6 + 0.5)}


def test_the_wall_clock_limit_takes_the_set_whose_costliest_row_is_cheapest() -> None:
    """Two cheap rows that together reach 0.75 (2 s at most) beat the one row that reaches
    it alone at less compute (2.5 s against 3): the compute oracle and the wall-clock one
    pick different sets."""
    a, b, c = Point(0, 1.0, 0.5, 1.0), Point(1, 0.5, 1.0, 2.0), Point(2, 1.0, 1.0, 2.5)
    assert cheapest_set([a, b, c], 0.75) == (2.5, (2,))
    assert least_max_cost([a, b, c], 0.75) == (2.0, (0, 1))
    assert least_max_cost([a, b, c], 0.9) == (2.5, (2,))
    assert least_max_cost([a, b], 0.9) is None


def test_the_wall_clock_limit_is_the_brute_force_optimum() -> None:
    """Against every subset of small random point sets: the least costliest row of a set
    reaching the target, and the fewest rows no costlier reaching it."""
    rng = random.Random(7)
    for _ in range(30):
        pts = [Point(i, rng.random(), rng.random(), rng.choice([0.5, 1.0, 2.0, 3.0]) *
                     rng.random()) for i in range(8)]
        target = rng.uniform(0.3, 1.0) * _volume(pts)
        subsets = [sub for k in range(1, len(pts) + 1)
                   for sub in itertools.combinations(pts, k) if _volume(list(sub)) >= target]
        least = min(max(p.cost for p in sub) for sub in subsets)
        fewest = min(len(sub) for sub in subsets if max(p.cost for p in sub) <= least)
        got = least_max_cost(pts, target)
        assert got is not None and got[0] == pytest.approx(least)
        assert len(got[1]) == fewest
        chosen = [p for p in pts if p.row in got[1]]
        assert _volume(chosen) >= target - 1e-12 and max(p.cost for p in chosen) == got[0]


def test_drop_takes_out_only_the_named_replays_and_merge_replaces_by_key(
        tmp_path: Path) -> None:
    """compare.drop: the replays of the named methods, tables, worker counts and start
    points leave the file, the others stay; compare.merge: another process's replays come
    in, one of the same (table, method, seed, start points, workers) replacing the held."""
    from _common import append_jsonl, read_jsonl
    from compare import drop, merge

    def rec(method: str, seed: int, workers: int, sp: bool = False, v: int = 0
            ) -> dict[str, Any]:
        return {"table": "t", "method": method, "seed": seed, "workers": workers,
                "start_points": sp, "v": v}

    main = tmp_path / "main.jsonl.gz"
    held = [rec("ehvi-front", 0, 1), rec("ehvi-front", 0, 8), rec("ehvi-front", 0, 1, True),
            rec("random-full", 0, 1), {**rec("ehvi-front", 1, 1), "table": "u"}]
    for r in held:
        append_jsonl(main, r)
    assert drop(main, ["t"], ["ehvi-front"], [1], False) == 1
    assert read_jsonl(main) == held[1:]
    other = tmp_path / "other.jsonl.gz"
    append_jsonl(other, rec("random-full", 0, 1, v=1))  # replaces the held one
    append_jsonl(other, rec("random-full", 1, 1, v=1))  # new
    assert merge(main, [other]) == 2
    got = read_jsonl(main)
    assert got == [held[1], held[2], rec("random-full", 0, 1, v=1), held[4],
                   rec("random-full", 1, 1, v=1)]
