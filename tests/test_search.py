"""End-to-end searches on tiny.yaml with real Ray Tune trials (one Ray for the module; the
SIGKILL test's driver starts its own). Expectations are recomputed independently from the
files a search writes: estimates, a brute-force front, Tune's own trial directories."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoembed.cli import main
from autoembed.config import config_from_dict, load_config
from autoembed.pipeline.records import ATTR
from autoembed.trace import estimate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "search_spaces" / "tiny.yaml")
BUDGET = "800MB"
BUDGET_BYTES = 800_000_000


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    from autoembed.pipeline.ray_tune import ray_session

    with ray_session(None, 2, None):  # as a search starts it: without Ray's idle helpers
        yield


@pytest.fixture(scope="module")
def main_run(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One search through the CLI (in this process, on the module's Ray)."""
    runs = tmp_path_factory.mktemp("runs")
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["search", "--budget", BUDGET, "--space", TINY, "--trials", "5",
                   "--study", "main", "--runs-dir", str(runs), "--tracking-uri", "none",
                   "--seed", "1", "--json"])
    out = buf.getvalue()
    return {"rc": rc, "json": json.loads(out.strip().splitlines()[-1]), "dir": runs / "main",
            "runs": runs}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def brute_front(rows: list[dict[str, str]]) -> set[int]:
    """Complete feasible trials that no other such trial beats on (quality max, memory min,
    throughput max): written independently of autoembed.pareto."""
    ok = [r for r in rows if r["status"] == "complete" and float(r["overshoot"]) <= 0]
    pts = {int(r["trial"]): (float(r["quality"]), -float(r["memory"]), float(r["throughput"]))
           for r in ok}
    front = set()
    for n, p in pts.items():
        if not any(all(b >= a for a, b in zip(p, q, strict=True)) and q != p
                   for m, q in pts.items() if m != n):
            front.add(n)
    return front


def tune_trial_numbers(study_dir: Path) -> list[int]:
    """The Optuna trial number of every trial Tune started (its own params.json files)."""
    out = []
    for params in study_dir.glob("ray/*/*/params.json"):
        out.append(int(json.loads(params.read_text())["number"]))
    return sorted(out)


def test_search_writes_a_front_that_fits(main_run: dict[str, Any]) -> None:
    assert main_run["rc"] == 0
    d: Path = main_run["dir"]
    pareto = json.loads((d / "pareto.json").read_text())
    assert pareto["budget_bytes"] == BUDGET_BYTES
    assert [o["name"] for o in pareto["objectives"]] == ["quality", "memory", "throughput"]
    members = pareto["members"]
    assert members
    for m in members:
        cfg = config_from_dict(m["config"])
        # every member fits by an estimate recomputed here, from its exported config
        assert estimate(cfg).device_total == m["device_total"] <= BUDGET_BYTES
        assert cfg.tables[0].vocab_size == 2_000_000  # priced at full size
    rows = read_csv(d / "trials.csv")
    assert {m["trial"] for m in members} == brute_front(rows)
    assert pareto["best"] in {m["trial"] for m in members}
    assert main_run["json"]["best"] == pareto["best"]
    assert (d / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = load_config(d / "best.yaml")
    member = next(m for m in members if m["trial"] == pareto["best"])
    assert best.to_dict() == config_from_dict(member["config"]).to_dict()
    assert best.data is not None and best.data["name"] == "synthetic-ctr"


def test_infeasible_proposals_never_started_a_trainable(main_run: dict[str, Any]) -> None:
    d: Path = main_run["dir"]
    rows = read_csv(d / "trials.csv")
    infeasible = {int(r["trial"]) for r in rows if r["status"] == "infeasible"}
    trained = {int(r["trial"]) for r in rows if r["status"] not in ("infeasible",)}
    started = tune_trial_numbers(d)
    assert infeasible, "seed 1 on tiny.yaml at 800MB proposes over-budget configs"
    assert len(started) == 5 == len(trained)
    assert set(started) == trained and not infeasible & set(started)
    for r in rows:
        if r["status"] == "infeasible":
            assert int(r["estimate_device_total"]) > BUDGET_BYTES


def test_existing_study_is_refused_without_resume(main_run: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    before = len(read_csv(main_run["dir"] / "trials.csv"))
    rc = main(["search", "--budget", BUDGET, "--space", TINY, "--study", "main",
               "--runs-dir", str(main_run["runs"]), "--tracking-uri", "none"])
    err = capsys.readouterr().err
    assert rc == 2 and "already exists" in err and "--resume" in err
    assert len(err.strip().splitlines()) == 1
    assert len(read_csv(main_run["dir"] / "trials.csv")) == before


def test_early_stopped_trials_are_pruned_and_off_the_front(
        ray_cluster: None, tmp_path: Path) -> None:
    import yaml

    from autoembed.pipeline import search
    from autoembed.tracking import NullTracker

    space = yaml.safe_load(Path(TINY).read_text())
    # all the same size; a learning rate that trains and one that does not
    space["params"] = {"lr": {"choices": [0.05, 0.00001]}}
    space["base"] = {**space["base"], "dim": 16, "compression": "hash",
                     "hash_buckets": 20000, "table_optimizer": "adam", "batch_size": 256}
    space["run"] = {**space["run"], "max_steps": 60, "eval_every": 10}
    del space["base"]["lr"]
    p = tmp_path / "lr.yaml"
    p.write_text(yaml.safe_dump(space))
    res = search("1GB", p, trials=6, objectives="quality,memory", sampler="random", seed=2,
                 runs_dir=tmp_path / "runs", study="es", tracker=NullTracker(),
                 early_stop=True)
    pruned = [r for r in res.rows if r.status == "pruned"]
    assert pruned, "a lr=1e-5 trial after a good one cannot reach the front"
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    assert not {r.number for r in pruned} & {m["trial"] for m in pareto["members"]}
    import optuna

    study = optuna.load_study(study_name="es", storage=f"sqlite:///{tmp_path / 'runs'}/optuna.db")
    for r in pruned:
        assert study.trials[r.number].state == optuna.trial.TrialState.PRUNED
    # the space holds two configs: each trains once, then the search ends (never a repeat)
    assert len(tune_trial_numbers(res.out_dir)) == 2
    assert res.stop_reason == "every fitting config tried: 2"


def _complete_in_db(db: Path) -> list[tuple[int, str]]:
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(
            "SELECT t.number, a.value_json FROM trials t JOIN trial_user_attributes a "
            "ON a.trial_id = t.trial_id WHERE t.state = 'COMPLETE' AND a.key = 'autoembed'"
        ).fetchall()
    except sqlite3.Error:
        return []
    finally:
        con.close()


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the session the driver led (its Ray processes included)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_resume_after_sigkill_keeps_every_completed_trial_once(
        ray_cluster: None, tmp_path: Path) -> None:
    """A multi-fidelity search's driver SIGKILLed, resumed through the Python API. The same
    for a full-fidelity search (through the CLI, MLflow on) is
    test_search_resilience.py::test_sigkilled_driver_resumes_with_every_trial_once."""
    import optuna

    from autoembed.pipeline import search
    from autoembed.tracking import NullTracker

    runs = tmp_path / "runs"
    db = runs / "optuna.db"
    log = (tmp_path / "driver.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoembed", "search", "--budget", BUDGET, "--space", TINY,
         "--trials", "4", "--study", "kill", "--runs-dir", str(runs), "--tracking-uri", "none",
         "--seed", "1", "--multi-fidelity"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = [n for n, v in _complete_in_db(db) if '"status": "complete"' in v]
            if done or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "driver.log").read_text()[-2000:]
        assert done, "no trial completed in time"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        _kill_session(proc.pid)
        log.close()
    storage = f"sqlite:///{db}"
    before = optuna.load_study(study_name="kill", storage=storage).trials
    complete_before = {t.number: t.values for t in before
                       if t.state == optuna.trial.TrialState.COMPLETE}
    running_before = {t.number for t in before if t.state == optuna.trial.TrialState.RUNNING}
    notes: list[str] = []
    res = search(BUDGET, study="kill", resume=True, runs_dir=runs, tracker=NullTracker(),
                 on_recovered=notes.append)
    # the dead driver's lock is taken over, then what was recovered is said, then the
    # trials' time limit and where their output goes
    assert len(notes) == 4 and f"from pid {proc.pid}" in notes[0]
    assert "resumed study 'kill'" in notes[1]
    assert notes[2].startswith("trial time limit: ") and "trial-NNNN.log" in notes[3]
    resumed = optuna.load_study(study_name="kill", storage=storage)
    # the resume ran the search the killed driver was asked for (its stored plan)
    assert resumed.user_attrs[ATTR]["multi_fidelity"] is True
    after = resumed.trials
    by_number = {t.number: t for t in after}
    for n, values in complete_before.items():  # nothing completed is lost or changed
        assert by_number[n].state == optuna.trial.TrialState.COMPLETE
        assert by_number[n].values == values
    rows = {r.number: r for r in res.rows}
    for n in running_before:  # interrupted; re-queued once if it had been proposed
        assert rows[n].status == "interrupted" and rows[n].interrupted
        # A kill right after Optuna's ask leaves a trial with no params: nothing to retry,
        # the sampler proposes afresh.
        retries = 1 if by_number[n].params else 0
        assert sum(1 for r in rows.values() if r.retry_of == n) == retries
    assert not any(r.retry_of in complete_before for r in rows.values())  # nothing repeated
    assert sum(1 for r in rows.values() if r.counted) == 4  # what the killed run asked
    pareto = json.loads((res.out_dir / "pareto.json").read_text())
    assert pareto["recovered"] and len(set(pareto["members"][0]) & {"trial", "config"}) == 2
    csv_rows = read_csv(res.out_dir / "trials.csv")
    assert len(csv_rows) == len({r["trial"] for r in csv_rows}) == len(after) - sum(
        1 for t in after if t.state == optuna.trial.TrialState.WAITING)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--space", "/nonexistent/space.yaml"], "does not exist"),
        (["--space", "BADYAML"], "is not valid YAML"),
        (["--budget", "8XB"], "is not a size"),
        (["--trials", "0"], "--trials 0"),
        (["--objectives", "quality,acuracy"], "unknown objective 'acuracy'"),
        (["--data", "movielen"], "unknown data name 'movielen'"),
        (["--space", "auto"], "--space auto derives the space from your data: give --data"),
        (["--space", "auto", "--data", "synthetic-text"], "'synthetic-text' is synthetic"),
        (["--sampler", "cmaes"], "sampler 'cmaes'"),
        (["--pick", "best"], "pick 'best'"),
        (["--study", "../escape"], "study name '../escape'"),
        (["--resume", "--study", "nothere"], "no study 'nothere' in sqlite:"),
        (["--resume", "--study", "nothere"], "; drop --resume to start it"),
        (["--ray-address", "127.0.0.1:1"], "nothing answers there"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("params: {dim: [1, 2\n")
    opts = {"--budget": BUDGET, "--space": TINY, "--study": "bad",
            "--runs-dir": str(tmp_path / "runs"), "--tracking-uri": "none"}
    flags = []
    it = iter(str(bad) if a == "BADYAML" else a for a in args)
    for a in it:
        if a == "--resume":
            flags.append(a)
        else:
            opts[a] = next(it)
    argv = ["search", *flags, *(x for kv in opts.items() for x in kv)]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert needle in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert not list((tmp_path / "runs").glob("*/pareto.json"))
    db = tmp_path / "runs" / "optuna.db"
    if db.exists():
        con = sqlite3.connect(db)
        assert con.execute("SELECT count(*) FROM studies").fetchone()[0] == 0
        con.close()


def test_nothing_fits_exits_3_with_the_smallest_estimate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["search", "--budget", "571MB", "--space", TINY, "--study", "small",
               "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "nothing in the search space" in err and "raise --budget to at least" in err
    assert "dim=8" in err and "compression=hash" in err
    assert not (tmp_path / "small").exists()
