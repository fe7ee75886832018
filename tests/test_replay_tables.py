"""The replay tables' generator and file format (benchmarks/replay): a torn write loses one
record, the curve's cadence, the order trials are trained in, the hook's extra evaluations
leave a search trial unchanged, and the committed tiny table holds what its format says."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

REPLAY = Path(__file__).resolve().parents[1] / "benchmarks" / "replay"
sys.path.insert(0, str(REPLAY))
sys.path.insert(0, str(REPLAY.parent))

from table import Table, append_record, read_records, repair  # noqa: E402


def test_a_torn_last_record_is_dropped_and_the_file_repaired(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    written = [{"kind": "table", "name": "x"}, {"kind": "row", "row": 0, "v": 1.5},
               {"kind": "trial", "row": 0, "seed": 0, "curve": [1, 2, 3]}]
    for r in written[:2]:
        append_record(path, r)
    whole = path.stat().st_size
    append_record(path, written[2])
    data = path.read_bytes()
    cut = whole + (len(data) - whole) // 2
    path.write_bytes(data[:cut])  # a writer killed halfway through the last gzip member
    records, torn = read_records(path)
    assert torn and records == written[:2]
    assert repair(path) == written[:2]
    assert read_records(path) == (written[:2], False)
    append_record(path, written[2])  # the resumed writer appends after the repair
    assert read_records(path) == (written, False)
    with gzip.open(path, "rt") as f:  # plain gzip tools read it as one JSON-lines text
        assert len(f.read().splitlines()) == 3


def test_a_record_of_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind"):
        append_record(tmp_path / "t.jsonl.gz", {"kind": "curve"})


@pytest.mark.parametrize(("search_every", "fine"), [
    (50, 10),  # 50's largest divisor at most 50/3 = 16 is 10, at least 8: on the grid
    (12, 4),
    (13, 4),  # 13 is prime: a third of it, and the search's steps added beside
    (47, 15),
    (2, 1),
])
def test_fine_cadence(search_every: int, fine: int) -> None:
    from generate import fine_every

    assert fine_every(search_every) == fine


def test_trials_are_ordered_in_passes_with_the_seeded_rows_spread() -> None:
    from generate import tasks

    rows = {0: {"source": "start", "fits": True}, 1: {"source": "start", "fits": False}}
    rows.update({i: {"source": "sample", "fits": i % 5 != 0} for i in range(2, 14)})
    t = Table({"kind": "table"}, rows=rows)
    # fitting: 0 (start), then samples 2,3,4,6,7,8,9,11,12,13; 4 seeded of these 10: the
    # ones at positions int(k * 2.5) = 0, 2, 5, 7: rows 2, 4, 8, 11 (and the start point)
    order = tasks(t, seeded=4, chunk=5)
    assert order == [
        (0, 0), (2, 0), (3, 0), (4, 0), (6, 0),
        (0, 1), (0, 2), (2, 1), (2, 2), (4, 1), (4, 2),
        (7, 0), (8, 0), (9, 0), (11, 0), (12, 0),
        (8, 1), (8, 2), (11, 1), (11, 2),
        (13, 0),
    ]


def test_quality_at_a_fraction_is_the_last_evaluation_at_or_before_it() -> None:
    from summary import quality_at

    trial = {"max_steps": 90, "curve": [
        {"step": 10, "quality": 0.6, "loop_cpu_s": 1.0},
        {"step": 30, "quality": 0.7, "loop_cpu_s": 2.0},
        {"step": 90, "quality": 0.8, "loop_cpu_s": 5.0}]}
    assert quality_at(trial, 1 / 27) is None  # 3.3 steps: before the first evaluation
    assert quality_at(trial, 1 / 9) == (0.6, 1.0)  # 10 steps: that evaluation
    assert quality_at(trial, 1 / 3) == (0.7, 2.0)  # 30
    assert quality_at(trial, 2 / 3) == (0.7, 2.0)  # 60: still the one at 30
    assert quality_at(trial, 1.0) == (0.8, 5.0)
    trial["curve"][1]["quality"] = 0.5  # under fit_to_data the best so far counts
    assert quality_at(trial, 1 / 3, best=True) == (0.6, 2.0)
    assert quality_at(trial, 1 / 3) == (0.5, 2.0)


def test_the_hooks_extra_evaluations_leave_the_search_trial_unchanged(tmp_path: Path) -> None:
    """A table row's curve at the search's cadence, its best evaluation and its test
    quality are those of the same trial run without the hook (the search's trial)."""
    from dataclasses import replace

    from generate import Pricer, Workload, run_one, trained_config

    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.request import SearchRequest
    from autoembed.runner import RunSettings, run_trial
    from autoembed.space import builtin_space_path, load_space

    space = load_space(builtin_space_path("tiny"))
    space = replace(space, run={**space.run, "max_steps": 24, "eval_every": 12,
                                "eval_batches": 2, "test_batches": 2})
    req = SearchRequest.parse("800MB", space=space, study="t", runs_dir=tmp_path,
                              device="cpu", seed=0, workers=1)
    w = Workload("tiny", SearchPlan.build(req, {}))
    row = {**Pricer(w).sampled(), "row": 0}
    rec = run_one(w, row, seed=1)
    plain = run_trial(trained_config(w, row, 1), w.dataset, RunSettings(**w.settings()))
    assert rec["status"] == plain.status == "complete"
    steps = [p["step"] for p in rec["curve"]]
    assert steps == [4, 8, 12, 16, 20, 24]  # fine_every(12) = 4
    searched = [(p["step"], p["quality"]) for p in rec["curve"] if p["search"]]
    assert searched == [(e.step, e.quality) for e in plain.curve] == [
        (12, plain.curve[0].quality), (24, plain.curve[1].quality)]
    assert rec["test_quality"] == plain.test_quality
    assert rec["curve"][-1]["test_quality"] == plain.test_quality  # the last weights'
    assert all(p["valid_cpu_s"] >= 0 and p["test_cpu_s"] > 0 for p in rec["curve"])
    cost = rec["cost"]
    assert 0 < cost["steps_cpu_s"] < cost["total_cpu_s"]
    assert cost["extra_cpu_s"] > 0


def test_the_tiny_table_holds_what_its_format_says() -> None:
    t = Table.load(REPLAY / "tables" / "tiny.jsonl.gz")
    h = t.header
    assert h["workload"] == "default" and h["budget_bytes"] == 8 * 10**9
    for r in t.rows.values():
        fits = r["estimate"] is not None and r["estimate"]["device_total"] <= h["budget_bytes"]
        assert r["fits"] == fits
    assert {r for r, _ in t.trials} == {i for i, r in t.rows.items() if r["fits"]}
    assert any(len(t.seeds(r)) == 3 for r in t.rows)
    for tr in t.trials.values():
        curve = tr["curve"]
        steps = [p["step"] for p in curve]
        assert steps == sorted(set(steps)) and steps[-1] == tr["max_steps"] == tr["steps"]
        wanted = set(range(tr["fine_every"], tr["max_steps"] + 1, tr["fine_every"]))
        wanted |= set(range(tr["search_eval_every"], tr["max_steps"] + 1,
                            tr["search_eval_every"]))
        assert set(steps) == wanted
        assert [p["step"] for p in curve if p["search"]] == sorted(
            range(tr["search_eval_every"], tr["max_steps"] + 1, tr["search_eval_every"]))
        # the runner's test (its own code path, on the weights of its chosen evaluation) is
        # the hook's at that step
        at = {p["step"]: p for p in curve}[tr["best_step"]]
        assert tr["test_quality"] == at["test_quality"] and tr["valid_quality"] == at["quality"]
        loops = [p["loop_cpu_s"] for p in curve]
        assert loops == sorted(loops)


def test_a_proposal_snaps_to_the_nearest_trained_row() -> None:
    import math

    from table import Snapper

    t = Table.load(REPLAY / "tables" / "tiny.jsonl.gz")
    snap = Snapper(t, seed=0)
    assert snap.rows == sorted(r for r, s in t.trials if s == 0)
    for r in snap.rows:  # a trained row's own params are at distance 0 from it
        assert snap.nearest(t.rows[r]["params"]) == (r, 0.0)
    # default.yaml: lr in [0.002, 0.05] log, dim/8 in [1, 16] log, batch_size a choice
    a = {"dim/8": 2, "lr": 0.005, "batch_size": 256, "tt_rank": 4}
    b = {"dim/8": 4, "lr": 0.01, "batch_size": 512, "hash_buckets": 100000}
    want = math.sqrt((math.log(2) / math.log(16)) ** 2
                     + (math.log(2) / math.log(0.05 / 0.002)) ** 2 + 1.0)
    assert snap.distance(a, b) == pytest.approx(want)
    row = snap.rows[-1]  # a proposal next to a row, off the grid of rows
    near = {**t.rows[row]["params"], "lr": t.rows[row]["params"]["lr"] * 1.01}
    got, dist = snap.nearest(near)
    assert got == row and 0 < dist < 0.01


def test_nearest_is_the_row_of_least_distance() -> None:
    """`nearest` (every row at once) against `distance` row by row, on proposals that mix
    params of different rows (conditional params present in some rows only)."""
    import random

    from table import Snapper

    t = Table.load(REPLAY / "tables" / "tiny.jsonl.gz")
    snap = Snapper(t, seed=0)
    rng = random.Random(7)
    for _ in range(50):
        a, b = (t.rows[r]["params"] for r in rng.sample(snap.rows, 2))
        names = sorted(set(a) | set(b))
        prop = {n: (a if n in a and (n not in b or rng.random() < 0.5) else b)[n]
                for n in names}
        want = min((snap.distance(prop, snap.params[r]), r) for r in snap.rows)
        row, dist = snap.nearest(prop)
        assert snap.distance(prop, snap.params[row]) == pytest.approx(want[0])
        assert dist == pytest.approx(want[0])


def _clicks_csv(path: Path, n: int = 600) -> None:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(3)
    user, item, day = rng.integers(0, 120, n), rng.integers(0, 30, n), rng.integers(0, 7, n)
    logit = 1.2 * np.sin(user) + 0.8 * np.cos(item) + 0.3 * (day - 3)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"user": user, "item": item, "day": day, "y": y}).to_csv(path, index=False)


def test_a_table_made_from_a_csv_is_named_by_content_and_replays_from_that_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """generate.py --data FILE makes a table of a CSV it has never seen (the options a
    search takes, `--space auto`); its header names the data by sha256, not by path;
    compare.py replays it given the same file and options, with two simulated workers, and
    refuses other bytes."""
    import hashlib
    import json

    import compare
    import generate

    csv = tmp_path / "mine" / "clicks.csv"
    _clicks_csv(csv)
    tables = tmp_path / "tables"
    opts = ["--data", str(csv), "--label", "y", "--categorical", "user,item", "day"]
    assert generate.main([*opts, "--configs", "2", "--seeded", "0", "--pilot", "20",
                          "--out", str(tables)]) == 0
    digest = hashlib.sha256(csv.read_bytes()).hexdigest()
    name = f"data-{digest[:12]}"
    t = Table.load(tables / f"{name}.jsonl.gz")
    h = t.header
    assert h["name"] == h["workload"] == name and h["space"] == "auto"
    assert h["data"] == f"sha256:{digest}"
    assert h["data_identity"] == {"kind": "file", "sha256": digest, "suffix": ".csv",
                                  "options": {"label": "y",
                                              "categorical": ["user", "item", "day"]}}
    assert str(tmp_path) not in json.dumps(h)  # no path of the data (nor of anything here)
    assert h["baseline"] is not None and h["target"] == h["baseline"]["valid"]
    sampled = [r for r in t.rows.values() if r["source"] == "sample" and r["fits"]]
    assert len(sampled) == 2
    assert {r for r, s in t.trials if s == 0} == {i for i, r in t.rows.items() if r["fits"]}

    # 60 median trials: 20 s of compute, 8.6 of it the per-search charge, so each replay
    # trains about 10 trials (a first decision of up to 11 CPU s still trains one); at the
    # default (320) ehvi-front decided for 37 CPU s over 100 repeats of the table's rows
    monkeypatch.setattr(compare, "BUDGET_TRIALS", 60)
    assert compare.main([*opts, "--tables-dir", str(tables), "--seeds", "1",
                         "--methods", "random-full", "ehvi-front", "--workers", "2"]) == 0
    recs = compare._records(tables / f"replays-{name}.jsonl.gz")
    assert sorted((r["method"], r["workers"]) for r in recs) == [
        ("ehvi-front", 2), ("random-full", 2)]
    assert all(r["table"] == name and r["trials"] > 0 for r in recs)
    text = (tables / f"replays-{name}.md").read_text()
    assert "oracle (the least compute" in text
    assert "## Workers (start points off)" in text and "| ehvi-front | 2 | 1 |" in text

    other = tmp_path / "other.csv"  # a row more: other bytes, no table of them
    other.write_bytes(csv.read_bytes() + b"1,2,3,0\n")
    capsys.readouterr()
    assert compare.main(["--data", str(other), *opts[2:], "--tables-dir", str(tables)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no table of these data" in err
    assert compare.main(["--tables", name, "--tables-dir", str(tables), "--seeds", "1",
                         "--methods", "random-full", "--jsonl", str(tmp_path / "x.jsonl.gz")]
                        ) == 2  # a table of a file, replayed without it
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "give it with --data FILE" in err
    assert not (tmp_path / "x.jsonl.gz").exists()


def test_generate_refuses_bad_data_options_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import generate

    with pytest.raises(SystemExit) as bad:  # a file's options without the file
        generate.main(["--label", "y", "--out", str(tmp_path)])
    assert bad.value.code == 2
    capsys.readouterr()
    assert generate.main(["--data", str(tmp_path / "nope.csv"), "--label", "y",
                          "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("generate.py: ") and "\n" not in err and "nope.csv" in err
    assert not list(tmp_path.glob("*.jsonl.gz"))  # no table half-made
