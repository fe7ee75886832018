"""report(...) in the user's loop: throughput by a hand-driven clock, the stop channel,
unknown metrics and non-finite values."""

from __future__ import annotations

import math

import pytest

from autoembed.user.report import Diverged, Report, ReportError, TrialStopped


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_throughput_excludes_warmup_and_evaluating_blocks() -> None:
    clock = Clock()
    r = Report(clock=clock)
    r.start()
    clock.t = 10.0  # warm-up: 10 s for the first 100 samples
    r(step=1, samples=100, quality=0.5)
    clock.t = 14.0  # 4 s of training ...
    with r.evaluating():
        clock.t = 20.0  # ... and 6 s evaluating
    r(step=2, samples=500, quality=0.6)
    clock.t = 22.0
    with r.evaluating():
        with r.evaluating():  # nested blocks count once
            clock.t = 25.0
    r(step=3, samples=700, quality=0.7)
    # samples 100 -> 700 over (25 - 10) s wall minus (6 + 3) s evaluating = 6 s
    assert r.throughput == pytest.approx(600 / 6)
    assert r.eval_seconds == pytest.approx(9.0)
    assert [e.step for e in r.curve] == [1, 2, 3]
    assert r.curve[-1].elapsed_s == pytest.approx(25.0)


def test_single_report_counts_from_start_without_evaluation() -> None:
    clock = Clock()
    r = Report(clock=clock)
    r.start()
    clock.t = 8.0
    with r.evaluating():
        clock.t = 10.0
    r(step=40, samples=400, quality=0.5)
    assert r.throughput == pytest.approx(400 / 8)


def test_no_report_no_throughput() -> None:
    assert Report().throughput is None


def test_stop_channel_raises_trial_stopped_and_stays_stopped() -> None:
    seen = []

    def channel(ev):  # stop at the second evaluation
        seen.append(ev.quality)
        return len(seen) < 2

    r = Report(channel=channel)
    r(step=1, samples=10, quality=0.1)
    with pytest.raises(TrialStopped):
        r(step=2, samples=20, quality=0.2)
    assert r.ending is not None and r.ending.status == "pruned"
    with pytest.raises(TrialStopped):  # a loop that caught it and went on is stopped again
        r(step=3, samples=30, quality=0.3)
    assert seen == [0.1, 0.2]


def test_unknown_metric_names_it_and_the_known_ones() -> None:
    r = Report(metrics=("loss",))
    r(step=1, samples=1, quality=0.5, loss=0.3)
    assert r.curve[0].metrics == {"loss": 0.3}
    with pytest.raises(ReportError, match="unknown metric 'acuracy'; known: loss, quality"):
        r(step=2, samples=2, acuracy=0.5)
    assert r.ending is not None and r.ending.status == "failed"


def test_measured_metrics_are_refused() -> None:
    with pytest.raises(ReportError, match="'throughput' is measured by autoembed"):
        Report(metrics=("throughput",))(step=1, samples=1, throughput=5.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_quality_diverges(bad: float) -> None:
    r = Report(metrics=("loss",))
    with pytest.raises(Diverged):
        r(step=1, samples=1, quality=bad)
    assert r.ending is not None and r.ending.status == "diverged"
    r2 = Report(metrics=("loss",))
    with pytest.raises(Diverged, match="loss"):
        r2(step=1, samples=1, quality=0.5, loss=bad)


@pytest.mark.parametrize("kw", [{"step": -1, "samples": 1}, {"step": 1.5, "samples": 1},
                                {"step": 1, "samples": True}])
def test_bad_step_or_samples_fails(kw) -> None:
    with pytest.raises(ReportError, match="must be an integer >= 0"):
        Report()(quality=0.5, **kw)


def test_tensor_like_values_and_final() -> None:
    np = pytest.importorskip("numpy")
    r = Report(metrics=("loss",))
    r(step=1, samples=1, quality=np.float32(0.25))
    assert r.curve[0].quality == 0.25
    assert r.final({"quality": 0.75, "loss": 1}) == {"quality": 0.75, "loss": 1.0}
    assert r.final(0.5) == {"quality": 0.5}
    assert r.final(None) == {}
    with pytest.raises(ReportError, match="unknown metric 'auc'"):
        Report().final({"auc": 0.5})
    with pytest.raises(ReportError, match="must be a number"):
        Report().final("high")


def test_loss_is_reportable_without_declaring_it() -> None:
    """A loop's `report(loss=...)` needs no `metrics: [loss]` in the space (issue 42)."""
    r = Report()
    r(step=1, samples=4, quality=0.5, loss=0.25)
    assert r.curve[0].metrics == {"loss": 0.25}
    assert Report().final({"quality": 0.5, "loss": 1}) == {"quality": 0.5, "loss": 1.0}
    with pytest.raises(ReportError, match="unknown metric 'los'; known: loss, quality"):
        Report()(step=1, samples=4, los=0.3)
