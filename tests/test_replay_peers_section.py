"""compare.py's "default against the peers" section: for each table and target, the peer
with the lowest mean ratio to random-full and who is ahead, from hand-made records."""

from __future__ import annotations

import sys
from pathlib import Path

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))
sys.path.insert(0, str(REPLAY.parent))

import compare  # noqa: E402


def rec(table: str, method: str, seed: int, hv95: float, best: float) -> dict[str, object]:
    return {"table": table, "method": method, "seed": seed, "budget_s": 100.0,
            "hv95": hv95, "best": best, "start_points": False}


def test_the_best_peer_per_target_is_named_and_the_tables_ahead_counted() -> None:
    recs = []
    for s in range(4):  # ratios by hand: default 0.5 / 2.0; dehb 0.8 / 1.5; flaml-bs 0.9 / 0.5
        recs += [rec("t", "random-full", s, 100.0, 10.0), rec("t", "ehvi-front", s, 50.0, 20.0),
                 rec("t", "dehb", s, 80.0, 15.0), rec("t", "flaml-bs", s, 90.0, 5.0),
                 rec("u", "random-full", s, 100.0, 10.0), rec("u", "ehvi-front", s, 10.0, 1.0),
                 rec("u", "dehb", s, 20.0, 2.0)]
    text = "\n".join(compare._against_peers(recs))
    assert "ahead on both targets on 1 of 2 tables" in text
    rows = set(text.splitlines())
    assert ("| t | hv95 | 0.50 [0.50, 0.50] | dehb (4 seeds) | 0.80 [0.80, 0.80] "
            "| ehvi-front |") in rows
    assert ("| t | best | 2.00 [2.00, 2.00] | flaml-bs (4 seeds) | 0.50 [0.50, 0.50] "
            "| flaml-bs |") in rows
    assert ("| u | best | 0.10 [0.10, 0.10] | dehb (4 seeds) | 0.20 [0.20, 0.20] "
            "| ehvi-front |") in rows
