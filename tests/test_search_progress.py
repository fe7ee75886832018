"""What a search prints while it runs, as a log or `tee` shows it (not a terminal): one
whole line per finished trial, never broken at the console's width."""

from __future__ import annotations

import io

from rich.console import Console

from autoembed.config import EmbeddingConfig
from autoembed.pipeline.engine import SearchStatus
from autoembed.pipeline.render import SearchProgress
from autoembed.trial import TrialRow


def status(row: TrialRow) -> SearchStatus:
    return SearchStatus(trained=3, target=20, running=0, complete=2, infeasible=1, pruned=0,
                        failed=1, front=2, best_quality=0.8, elapsed_s=12.0, last=row)


def test_progress_lines_stay_whole_in_a_log() -> None:
    buf = io.StringIO()
    con = Console(file=buf, width=60, force_terminal=False)  # a pipe, 60 columns
    done = TrialRow(3, "complete", EmbeddingConfig(), {"device_total": 7 * 10**9}, {},
                    metrics={"quality": 0.81234, "memory": 2.5e9, "throughput": 130913.0})
    failed = TrialRow(4, "failed", EmbeddingConfig(), {}, {},
                      reason="RuntimeError: [bold]not markup[/bold] in a very long message "
                             "that goes on past the width of the console")
    with SearchProgress(con) as prog:
        prog.update(status(done))
        prog.update(status(failed))
        prog.note("resumed study 's': nothing was left running; kept the 2 trials it had "
                  "recorded (2 complete)")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].endswith("130,913 samples/s") and "trial 3 complete" in lines[0]
    assert "[bold]not markup[/bold]" in lines[1]  # shown as the trial's text, not styled


def test_a_repeatable_search_repeats_its_trials_and_pick(tmp_path) -> None:
    """The same seed, twice: the same trials in the same order, the same figures but for
    wall-clock ones, the same pick (`--repeatable`: one worker, and nothing timed steers)."""
    from pathlib import Path

    from autoembed.pipeline import search
    from autoembed.tracking import NullTracker

    tiny = Path(__file__).resolve().parents[1] / "search_spaces" / "tiny.yaml"

    def run(name: str) -> tuple[list[tuple], int]:
        res = search("800MB", tiny, trials=11, seed=7, study=name, runs_dir=tmp_path / name,
                     executor="local", repeatable=True, tracker=NullTracker())
        rows = [(r.number, r.status, tuple(sorted(r.params.items())),
                 r.metrics.get("quality"), r.metrics.get("memory"))
                for r in sorted(res.rows, key=lambda r: r.number)]
        return rows, res.best.number

    first, again = run("a"), run("b")
    assert first == again
    assert len(first[0]) >= 11  # past the 8 random start-up proposals: TPE's too


def test_the_summary_says_when_the_pick_does_not_clearly_beat_the_baseline() -> None:
    from types import SimpleNamespace

    from autoembed.baselines import Baseline
    from autoembed.pipeline.render import comparison
    from autoembed.selection import NoiseMeasure

    base = Baseline("logistic regression", "auc", 0.7842, 0.7822, 1.0, 45.0, 9186)
    noise = NoiseMeasure(0.0031, "auc", 0.7858, 16, 20480, (10240, 10240))

    def lines(valid: float, base: Baseline = base) -> list[str]:
        best = SimpleNamespace(number=16, metrics={"quality": valid, "test_quality": 0.7814})
        return comparison(SimpleNamespace(best=best, rows=[],
                                          extra={"baseline": base, "noise": noise}))

    # 0.7858 - 0.7842 = +0.0016 < 0.0031: said, with both figures
    said = lines(0.7858)
    assert len(said) == 3 and "by +0.0016" in said[2] and "(0.0031)" in said[2]
    assert "-0.0008 test" in said[0]
    assert len(lines(0.7874)) == 2  # + 0.0032: over one standard error, clear
    assert "below the baseline on validation (-0.0042)" in lines(0.7800)[2]  # said too
    other = Baseline("majority", "accuracy", 0.5, 0.5, 1.0, 1.0, 1)
    assert len(lines(0.7858, other)) == 2  # another metric: no comparison
