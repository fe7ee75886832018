"""variant_replays.py's report: each series of replays set beside its own baselines, every
method the records hold shown, and the pick rules' results file written whole from its
records alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))
sys.path.insert(0, str(REPLAY.parent))

import variant_replays  # noqa: E402
from _common import write_jsonl  # noqa: E402

RESULTS = REPLAY.parent / "results"


def rec(method: str, seed: int, hv95: float, best: float, series: str | None) -> dict:
    """A one-worker replay record of table t as time_box.py --front wrote them (no compute_*
    nor workers: the report reads both shapes)."""
    r = {"table": "t", "method": method, "seed": seed, "budget_s": 500.0, "hv95": hv95,
         "best": best, "start_points": False, "commit": f"c-{series}", "load": [1.0, 1, 1]}
    return r if series is None else {**r, "series": series}


def records() -> list[dict]:
    out = []
    for s in (0, 1):
        out += [rec("random-full", s, 200.0, 100.0, "a"), rec("ehvi-front", s, 40.0, 50.0, "a"),
                rec("ehvi-zz-front", s, 80.0, 25.0, "a"),
                rec("random-full", s, 200.0, 400.0, "b"), rec("ehvi-front", s, 100.0, 100.0, "b"),
                rec("ehvi-yy-front", s, 50.0, 40.0, None)]  # added later, without a series
    return out


def test_each_series_is_set_beside_its_own_baselines_and_every_method_is_shown(
        tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    write_jsonl(path, records())
    lines = variant_replays.report(path).splitlines()
    # series a: 80/200, 25/100 against random-full; 80/40, 25/50 against ehvi-front
    zz = ("| ehvi-zz-front | 1 | 2 | 2/2 | 80 | 25 | 80 | 25 | 0.40 [0.40, 0.40] "
          "| 0.25 [0.25, 0.25] | 2.00 [2.00, 2.00] | 0.50 [0.50, 0.50] |")
    # no series of its own: beside series b (the last that holds them): 50/200, 40/400;
    # 50/100, 40/100
    yy = ("| ehvi-yy-front | 1 | 2 | 2/2 | 50 | 40 | 50 | 40 | 0.25 [0.25, 0.25] "
          "| 0.10 [0.10, 0.10] | 0.50 [0.50, 0.50] | 0.40 [0.40, 0.40] |")
    assert zz in lines and yy in lines
    assert lines.index("## t") < lines.index(yy) < lines.index("### a") < lines.index(zz) \
        < lines.index("### b")
    # series b's ehvi-front against its own random-full: 100/200, 100/400
    assert ("| ehvi-front | 1 | 2 | 2/2 | 100 | 100 | 100 | 100 | 0.50 [0.50, 0.50] "
            "| 0.25 [0.25, 0.25] | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] |") \
        in lines[lines.index("### b"):]


def test_the_rules_file_is_written_whole_from_the_records_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, again = tmp_path / "r.jsonl.gz", tmp_path / "again.jsonl.gz"
    write_jsonl(path, records())
    write_jsonl(again, records()[::-1])  # the same records in another order
    md, md2 = tmp_path / "r.md", tmp_path / "again.md"
    md.write_text("an older file\n")
    assert variant_replays.main(["--report", "--jsonl", str(path), "--md", str(md)]) == 0
    assert variant_replays.main(["--report", "--jsonl", str(again), "--md", str(md2)]) == 0
    text = md.read_text()
    assert md2.read_bytes() == md.read_bytes()
    assert text.startswith("# Pick rules in `ehvi`") and "an older file" not in text
    assert "| a | c-a | 6 | ehvi-front, ehvi-zz-front, random-full | 1.0-1.0 |" in text
    assert "| — | c-None | 2 | ehvi-yy-front | 1.0-1.0 |" in text
    assert capsys.readouterr().out == ""  # written, not printed
    # a file of replays that is not there: one line, exit 2, the results file untouched
    missing = tmp_path / "none.jsonl.gz"
    assert variant_replays.main(["--report", "--jsonl", str(missing), "--md", str(md)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(missing) in err
    assert md.read_text() == text


def test_the_committed_pick_rules_file_is_what_its_records_write() -> None:
    jsonl = RESULTS / "ehvi_pick_rules_replay.jsonl.gz"
    assert variant_replays.rules_md(jsonl) == (RESULTS / "ehvi_pick_rules_replay.md").read_text()


def test_time_box_front_alone_is_refused_naming_where_the_quality_turns_went(
        capsys: pytest.CaptureFixture[str]) -> None:
    import time_box

    with pytest.raises(SystemExit) as stop:
        time_box.main(["--front", "--report"])
    assert stop.value.code == 2 and "ehvi_pick_rules_replay" in capsys.readouterr().err
    assert not (RESULTS / "search_efficiency_quality_turns.md").exists()


def test_a_run_names_its_series_in_each_record_and_leaves_the_harness_as_it_was(
        tmp_path: Path) -> None:
    import compare
    import harness
    from _common import read_jsonl

    path = tmp_path / "r.jsonl.gz"
    before = (harness.ReplayExecutor, compare.Yardstick.__init__, compare.append_jsonl)
    assert variant_replays.main(["--tables", "tiny", "--methods", "random-full", "--seeds", "1",
                                 "--series", "s1", "--jsonl", str(path)]) == 0
    [got] = read_jsonl(path)
    assert (got["table"], got["method"], got["series"]) == ("tiny", "random-full", "s1")
    assert (harness.ReplayExecutor, compare.Yardstick.__init__, compare.append_jsonl) == before
    assert "### s1" in variant_replays.report(path).splitlines()
