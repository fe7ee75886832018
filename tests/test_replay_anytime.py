"""The anytime pick report (benchmarks/replay/anytime.py) on hand-made replay records: the
means and intervals by hand, a search that picked nothing at the baseline's score, the best
peer chosen over every box, the figure written."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))
sys.path.insert(0, str(REPLAY.parent))


def _rec(method: str, seed: int, box: float, test: float | None) -> dict[str, Any]:
    return {"table": "t", "method": method, "seed": seed, "box_s": box, "complete": 4,
            "pick_test": test, "pick": None if test is None else {"test": test},
            "baseline_test": 0.70, "commit": "abc", "load": [1.0, 1.0, 1.0]}


def test_the_report_averages_picks_per_box_and_names_the_best_peer(tmp_path: Path) -> None:
    import anytime

    recs = [_rec("ehvi-front", 0, 60, 0.72), _rec("ehvi-front", 1, 60, 0.68),
            _rec("ehvi-front", 0, 120, 0.74), _rec("ehvi-front", 1, 120, None),
            _rec("random-full", 0, 60, 0.71), _rec("random-full", 1, 60, 0.71),
            # optuna-tpe is better at 60 s, optuna-gp over both boxes: the best peer
            _rec("optuna-tpe", 0, 60, 0.75), _rec("optuna-tpe", 0, 120, 0.69),
            _rec("optuna-gp", 0, 60, 0.73), _rec("optuna-gp", 0, 120, 0.73)]
    text = anytime.report(recs, "x.png")
    assert "best peer here: optuna-gp" in text
    # ehvi at 60 s: mean 0.70, sd 0.02 * sqrt(2), half-width t(0.975, 1) * 0.02 with
    # t = 12.7062; one of two at or above 0.70 (0.68 is not)
    row = next(line for line in text.splitlines() if line.startswith("| ehvi-front |"))
    assert "0.7000 ± 0.2541 (1/2 ≥ base, 4 trials)" in row
    # at 120 s the search that picked nothing counts at the baseline: (0.74 + 0.70) / 2
    assert "0.7200 ± 0.2541 (2/2 ≥ base" in row
    assert "| random-full | 0.7100 ± 0.0000 (2/2 ≥ base, 4 trials) | — |" in text
    assert text.index("| ehvi-front |") < text.index("| random-full |") < text.index(
        "| optuna-gp |")
    mean, half = anytime.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 / math.sqrt(3))  # t(0.975, 2)
    out = tmp_path / "f.png"
    anytime.figure(recs, out)
    assert out.stat().st_size > 1000


def test_anytime_refuses_a_table_without_a_baseline_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    import anytime

    with pytest.raises(SystemExit) as bad:
        anytime.main(["--tables", "tiny", "--seeds", "1"])
    assert bad.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--tables tiny: no baseline in the table" in err
