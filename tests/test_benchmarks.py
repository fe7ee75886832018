"""Smoke and unit tests of the benchmark scripts' core functions (not timed assertions)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_stage_timer_attributes_time_to_the_innermost_stage() -> None:
    from overhead import StageTimer

    clock = FakeClock()
    timer = StageTimer(clock=clock)

    def pricing() -> None:
        clock.t += 2.0

    price = timer.wrap("pricing", pricing)

    def ask_and_price() -> int:
        clock.t += 1.0  # Optuna's own work before pricing
        price()
        clock.t += 0.5  # and after
        return 7

    ask = timer.wrap("optuna", ask_and_price, "propose")
    assert ask() == 7
    price()  # a call outside any other stage
    assert timer.totals["optuna"] == pytest.approx(1.5)
    assert timer.totals["pricing"] == pytest.approx(4.0)
    # inclusive times per call: propose spanned 3.5 s, returned 7
    (propose,) = [c for c in timer.calls if c[1] == "propose"]
    assert propose[3] - propose[2] == pytest.approx(3.5) and propose[5] == 7
