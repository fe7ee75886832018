"""End to end on tiny.yaml: trial faults through Ray, a driver SIGKILLed and resumed, two
searches sharing one runs directory. Every check reads the stores back independently:
Optuna's SQLite file, trials.csv and MLflow's store, compared trial by trial; processes are
found by the session ids of the drivers these tests start (and only those are signalled)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from _user_code import BAG_MODEL

from autoembed.pipeline.records import ATTR
from autoembed.trace import estimate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "search_spaces" / "tiny.yaml")
BUDGET = "800MB"


# ------------------------------------------------------------------ reading the stores back


def read_csv(path: Path) -> dict[int, dict[str, str]]:
    with path.open(newline="") as fh:
        return {int(r["trial"]): r for r in csv.DictReader(fh)}


def optuna_rows(runs: Path, columns: str, study: str) -> list[tuple[Any, ...]]:
    """`columns` of the trials (t) of `study`, their 'autoembed' attribute (a) joined,
    straight from the SQLite file (read only)."""
    con = sqlite3.connect(f"file:{runs / 'optuna.db'}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(
            f"SELECT {columns} FROM trials t JOIN studies s ON "
            "s.study_id = t.study_id LEFT JOIN trial_user_attributes a ON a.trial_id = "
            "t.trial_id AND a.key = 'autoembed' WHERE s.study_name = ?", (study,)).fetchall()
    finally:
        con.close()


def optuna_trials(runs: Path, study: str) -> dict[int, tuple[str, dict[str, Any]]]:
    """trial number -> (Optuna state, autoembed row) straight from the SQLite file."""
    rows = optuna_rows(runs, "t.number, t.state, a.value_json", study)
    return {int(n): (str(st), json.loads(v) if v else {}) for n, st, v in rows}


def mlflow_trials(runs: Path, study: str) -> dict[int, list[dict[str, Any]]]:
    """trial number -> its active MLflow runs (tags and metrics)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name(study)
    assert exp is not None, f"no MLflow experiment {study}"
    out: dict[int, list[dict[str, Any]]] = {}
    token = None
    while True:
        page = client.search_runs([exp.experiment_id], "tags.trial != ''", max_results=500,
                                  page_token=token)
        for r in page:
            out.setdefault(int(r.data.tags["trial"]), []).append(
                {"tags": r.data.tags, "metrics": r.data.metrics})
        token = page.token
        if not token:
            return out


def integrity(db: Path) -> str:
    con = sqlite3.connect(db, timeout=30)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


def assert_stores_agree(runs: Path, study: str) -> dict[int, str]:
    """Optuna, trials.csv and MLflow hold the same trials with the same statuses, each once;
    returns number -> status."""
    trials = optuna_trials(runs, study)
    # a sampler's proposal of a config the study had tried is told FAIL and never priced or
    # trained: no row anywhere (never a repeat)
    repeats = {n for n, (state, row) in trials.items() if state == "FAIL" and not row}
    opt = {n: row["status"] for n, (state, row) in trials.items()
           if state != "WAITING" and n not in repeats}
    with (runs / study / "trials.csv").open(newline="") as fh:
        numbers = [int(r["trial"]) for r in csv.DictReader(fh)]
    assert len(numbers) == len(set(numbers)), f"a trial twice in trials.csv: {numbers}"
    csv_rows = read_csv(runs / study / "trials.csv")
    ml = mlflow_trials(runs, study)
    assert set(opt) == set(csv_rows) == set(ml), (sorted(opt), sorted(csv_rows), sorted(ml))
    for n, status in opt.items():
        assert len(ml[n]) == 1, f"trial {n} has {len(ml[n])} MLflow runs"
        assert csv_rows[n]["status"] == status == ml[n][0]["tags"]["status"], n
    return opt


# ------------------------------------------------------------------ processes



def assert_kept_after_resume(runs: Path, storage: str, complete_before: dict[int, Any]
                             ) -> tuple[dict[int, str], dict[int, Any], dict[int, Any]]:
    """Study 'kill' after its resume: the stores agree, and every trial complete before the
    kill is kept once, unchanged. Returns (statuses, Optuna trials, rows) by number."""
    import optuna

    statuses = assert_stores_agree(runs, "kill")
    after = {t.number: t for t in optuna.load_study(study_name="kill", storage=storage).trials}
    for n, values in complete_before.items():  # kept once, unchanged
        assert after[n].state == optuna.trial.TrialState.COMPLETE and after[n].values == values
    rows = {n: row for n, (_, row) in optuna_trials(runs, "kill").items()}
    return statuses, after, rows

def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes in session `sid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[3]) == sid:
            out.append(int(entry))
    return out


def kill_session(sid: int) -> None:
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def driver(args: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI",
                                                            "AUTOEMBED_FAULTS")}
    return subprocess.Popen([sys.executable, "-m", "autoembed", "search", *args],
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=cwd, env=env)


# ------------------------------------------------------------------ trial faults


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    from autoembed.pipeline.ray_tune import ray_session

    with ray_session(None, 2, None):  # as a search starts it: without Ray's idle helpers
        yield


def test_trial_faults_are_recorded_and_the_search_goes_on(
        ray_local: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoembed.pipeline import search

    runs = tmp_path / "runs"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("AUTOEMBED_FAULTS", "1:raise,2:nan,3:oom,4:kill")
    res = search(BUDGET, TINY, trials=6, study="faults", runs_dir=runs, seed=1,
                 sampler="random", early_stop=False)
    launched = sorted((r for r in res.rows if r.status != "infeasible"), key=lambda r: r.number)
    assert [r.status for r in launched] == ["failed", "diverged", "oom", "failed", "complete",
                                            "complete"]
    reasons = [r.reason or "" for r in launched]
    assert "RuntimeError: injected fault" in reasons[0]
    assert "loss became nan" in reasons[1]
    assert "OutOfMemoryError: CUDA out of memory" in reasons[2]
    assert "process failed" in reasons[3]
    statuses = assert_stores_agree(runs, "faults")
    csv_rows, ml = read_csv(runs / "faults" / "trials.csv"), mlflow_trials(runs, "faults")
    for r in launched[:4]:  # each error is recorded in trials.csv and on the MLflow run
        assert csv_rows[r.number]["reason"] == r.reason
        assert ml[r.number][0]["tags"]["reason"] == r.reason
    states = {n: s for n, (s, _) in optuna_trials(runs, "faults").items()}
    assert [states[r.number] for r in launched] == ["FAIL", "COMPLETE", "COMPLETE", "FAIL",
                                                    "COMPLETE", "COMPLETE"]
    # the OOM, priced independently here, is the calibration's ceiling ...
    oom = launched[2]
    size = estimate(oom.config).device_total
    cal = json.loads((runs / "faults" / "calibration.json").read_text())
    assert cal["ceiling_bytes"] == size and cal["oom"][0]["trial"] == oom.number
    assert mlflow_trials(runs, "faults")[oom.number][0]["metrics"]["oom_predicted_bytes"] == size
    # ... and nothing at or above it trained afterwards
    for r in res.rows:
        if r.number > oom.number and estimate(r.config).device_total >= size:
            assert statuses[r.number] == "infeasible", r.number
    assert res.best.status == "complete"


# ------------------------------------------------------------------ crash and resume


def _wait_for(cond: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "timed out: " + log.read_text()[-3000:]
        time.sleep(0.2)


def _some_done_one_running(runs: Path) -> bool:
    if not (runs / "optuna.db").exists():
        return False
    try:
        t = optuna_trials(runs, "kill")
    except sqlite3.Error:
        return False
    done = [n for n, (s, row) in t.items() if row.get("status") == "complete"]
    running = [n for n, (s, row) in t.items() if s == "RUNNING" and row.get("status") ==
               "running"]
    return bool(done) and bool(running)


def _settled_members(sid: int, quiet_s: float = 3.0, limit_s: float = 30.0) -> dict[int, str]:
    """Session members (pid -> command line) once no more have exited for `quiet_s`."""
    deadline = time.monotonic() + limit_s
    last, since = session_members(sid), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        now = session_members(sid)
        if now != last:
            last, since = now, time.monotonic()
    out = {}
    for pid in last:
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            pass
    return out


def test_sigkilled_driver_resumes_with_every_trial_once(tmp_path: Path) -> None:
    import optuna

    runs = tmp_path / "runs"
    args = ["--budget", BUDGET, "--study", "kill", "--runs-dir", str(runs)]
    log1, log2 = tmp_path / "first.log", tmp_path / "resumed.log"
    first = driver([*args, "--space", TINY, "--trials", "4", "--seed", "1"],
                   log1, tmp_path)
    resumed: subprocess.Popen[bytes] | None = None
    try:
        _wait_for(lambda: _some_done_one_running(runs), first, log1, 600)
        os.kill(first.pid, signal.SIGKILL)  # the driver only: what a crash does
        first.wait(30)
        lock = json.loads((runs / "kill" / "session.lock").read_text())
        assert lock["pid"] == first.pid and lock["ray_session"]
        # Ray's head processes die with the driver (fate sharing), some agents do not
        leftovers = _settled_members(first.pid)
        # ... the stores are consistent after the kill
        assert integrity(runs / "optuna.db") == "ok" and integrity(runs / "mlflow.db") == "ok"
        storage = f"sqlite:///{runs / 'optuna.db'}"
        before = optuna.load_study(study_name="kill", storage=storage).trials
        complete_before = {t.number: t.values for t in before
                           if t.state == optuna.trial.TrialState.COMPLETE}
        running_before = {t.number for t in before
                          if t.state == optuna.trial.TrialState.RUNNING}
        assert running_before
        optuna_trials_before = optuna_trials(runs, "kill")

        resumed = driver([*args, "--resume"], log2, tmp_path)
        assert resumed.wait(600) == 0, log2.read_text()[-3000:]
        out = log2.read_text()
        assert f"took over the lock of study 'kill' from pid {first.pid}" in out, out
        said = re.search(r"resumed study 'kill': .* recorded as interrupted .*; kept the "
                         r"(\d+) trials it had recorded \((.*)\)", out)
        assert said, out
        # then, in this order, the trials' time limit and where their output goes
        lines = out.splitlines()
        took = next(i for i, x in enumerate(lines) if x.startswith("took over the lock"))
        assert lines[took + 1].startswith("resumed study 'kill'"), lines[took:took + 4]
        assert lines[took + 2].startswith("trial time limit: "), lines[took:took + 4]
        assert "trial-NNNN.log" in lines[took + 3], lines[took:took + 4]
        # the killed driver's Ray leftovers are gone: stopped by the resumed run (it says
        # how many) or exited on their own before it looked; the resumed run left nothing
        gone = re.search(r"stopped (\d+) leftover process\(es\)", out)
        stopped = int(gone.group(1)) if gone else 0
        assert stopped <= len(leftovers), (leftovers, out)
        assert session_members(first.pid) == [], (leftovers, out)
        assert session_members(resumed.pid) == []
    finally:
        kill_session(first.pid)
        if resumed is not None:
            kill_session(resumed.pid)

    statuses, after, rows = assert_kept_after_resume(runs, storage, complete_before)
    for n in running_before:  # interrupted and retried once
        assert statuses[n] == "interrupted" and rows[n]["interrupted"]
        retries = [m for m, r in rows.items() if r.get("retry_of") == n]
        assert len(retries) == (1 if after[n].params else 0)
        for m in retries:
            assert after[m].params == after[n].params and statuses[m] != "running"
    assert not any(r.get("retry_of") in complete_before for r in rows.values())  # no repeat
    kept_before = [n for n, (s, r) in optuna_trials_before.items() if r and s != "RUNNING"]
    assert int(said.group(1)) == len(kept_before), (said.group(0), kept_before)
    counted = [n for n, r in rows.items() if r["status"] not in ("infeasible",)
               and not r.get("interrupted")]
    assert len(counted) == 4  # what the killed run asked
    # the resume ran the search the killed driver was asked for (its stored plan)
    assert optuna.load_study(study_name="kill", storage=storage).user_attrs[ATTR][
        "multi_fidelity"] is False
    assert (runs / "kill" / "session.lock").read_text() == ""  # released cleanly
    pareto = json.loads((runs / "kill" / "pareto.json").read_text())
    assert pareto["recovered"] and "recorded as interrupted" in pareto["recovered"]
    assert len(set(pareto["members"][0]) & {"trial", "config"}) == 2


# ------------------------------------------------------------------ shared stores


def _has_trials(runs: Path, study: str) -> bool:
    try:
        return (runs / "optuna.db").exists() and bool(optuna_trials(runs, study))
    except sqlite3.Error:
        return False


def _spans(runs: Path, study: str) -> list[tuple[datetime, datetime]]:
    """(start, end) of each finished trial of `study`, from Optuna's SQLite file."""
    rows = optuna_rows(runs, "t.datetime_start, t.datetime_complete", study)
    return [(datetime.fromisoformat(a), datetime.fromisoformat(b)) for a, b in rows
            if a is not None and b is not None]


def test_two_searches_share_one_runs_dir_and_a_study_opens_once(
        ray_local: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Search "a" is a CLI process (its own Ray); search "b" is the CLI's `main` in this
    process (the module's Ray), started while "a" runs: two drivers writing one optuna.db
    and one mlflow.db at the same time."""
    from autoembed.cli import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runs = tmp_path / "runs"
    trials = {"a": 8, "b": 4}  # "a" longer: it still runs while "b" trains
    a = driver(["--budget", BUDGET, "--space", TINY, "--trials", str(trials["a"]),
                "--seed", "1", "--study", "a", "--runs-dir", str(runs)],
               tmp_path / "a.log", tmp_path)
    try:
        # "a" creates its study while holding its lock: wait for its first trial
        _wait_for(lambda: _has_trials(runs, "a"), a, tmp_path / "a.log", 600)
        # the same study opened a second time while "a" runs: refused, nothing touched
        rc = main(["search", "--budget", BUDGET, "--space", TINY, "--study", "a",
                   "--runs-dir", str(runs), "--tracking-uri", "none", "--resume"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert "is open in another search" in err and f"pid {a.pid}" in err, err
        rc = main(["search", "--budget", BUDGET, "--space", TINY, "--trials", str(trials["b"]),
                   "--seed", "2", "--study", "b", "--runs-dir", str(runs)])
        assert rc == 0, capsys.readouterr()
        assert a.wait(600) == 0, (tmp_path / "a.log").read_text()[-3000:]
    finally:
        kill_session(a.pid)
    # the two searches' trials ran at the same time
    assert any(s1 < e2 and s2 < e1 for s1, e1 in _spans(runs, "a")
               for s2, e2 in _spans(runs, "b")), (_spans(runs, "a"), _spans(runs, "b"))
    assert integrity(runs / "optuna.db") == "ok" and integrity(runs / "mlflow.db") == "ok"
    for name in ("a", "b"):
        statuses = assert_stores_agree(runs, name)
        assert sum(1 for s in statuses.values() if s != "infeasible") == trials[name]
        pareto = json.loads((runs / name / "pareto.json").read_text())
        assert pareto["study"] == name and pareto["members"]
        assert {m["trial"] for m in pareto["members"]} <= set(statuses)


# ------------------------------------------------------------------ your own model

USER_LOOP = "import os, pathlib, time\n" + BAG_MODEL + '''

def example(params):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (32, 4), generator=g)
    return ids, (ids < 500).sum(1).gt(1).long()


def train(model, params, report):
    marks = pathlib.Path(os.environ["MARKS"])
    n = len(list(marks.iterdir()))
    (marks / str(n)).write_text(str(os.getpid()))
    if n == 1 and os.environ.get("HANG"):
        time.sleep(600)  # the second trial runs until the driver is killed
    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    for step in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10):
        opt.zero_grad()
        loss = model(*example(params))
        loss.backward(); opt.step()
    report(step=10, samples=320, quality=1.0 / (1.0 + float(loss)))
'''


def test_sigkilled_driver_of_a_user_search_resumes_with_every_trial_once(
        tmp_path: Path) -> None:
    """A search of the user's own model and loop (Ray executor, MLflow on) whose driver is
    SIGKILLed while a trial runs: `--resume` takes over the lock and stops the killed
    driver's Ray (the hanging trial with it), keeps every recorded trial once and unchanged,
    marks the running one failed and retries it once, and finishes; Optuna, trials.csv and
    MLflow agree trial by trial."""
    import optuna

    pkg = tmp_path / "src" / "resuser"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(USER_LOOP)
    (tmp_path / "marks").mkdir()
    (tmp_path / "space.yaml").write_text(
        "embedding: {precision: fp32, table_optimizer: adam}\n"
        "user:\n  dim: {choices: [4, 8, 16]}\n  lr: {choices: [0.01, 0.05]}\n"
        "objectives: [quality, memory]\n")
    runs = tmp_path / "runs"
    args = ["--budget", "700MB", "--space", "space.yaml", "--model", "resuser.loop:build",
            "--example", "resuser.loop:example", "--train", "resuser.loop:train",
            "--trials", "2", "--study", "kill", "--runs-dir", str(runs)]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI",
                                                            "AUTOEMBED_FAULTS")}
    env.update(MARKS=str(tmp_path / "marks"), RAY_worker_niceness="0",
               PYTHONPATH=os.pathsep.join([str(tmp_path / "src"), str(ROOT)]))

    def start(extra: list[str], log: Path, **more: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "autoembed", "search", *args, *extra],
                                stdout=log.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tmp_path, env={**env, **more})

    log1, log2 = tmp_path / "first.log", tmp_path / "resumed.log"
    first = start([], log1, HANG="1")
    resumed: subprocess.Popen[bytes] | None = None
    storage = f"sqlite:///{runs / 'optuna.db'}"
    try:
        _wait_for(lambda: (tmp_path / "marks" / "1").exists(), first, log1, 600)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
        lock = json.loads((runs / "kill" / "session.lock").read_text())
        assert lock["pid"] == first.pid and lock["ray_session"]  # recorded for a cleanup
        assert integrity(runs / "optuna.db") == "ok" and integrity(runs / "mlflow.db") == "ok"
        before = optuna.load_study(study_name="kill", storage=storage).trials
        complete_before = {t.number: t.values for t in before
                           if t.state == optuna.trial.TrialState.COMPLETE}
        running_before = {t.number for t in before
                          if t.state == optuna.trial.TrialState.RUNNING}
        assert len(complete_before) == 1 and len(running_before) == 1, before
        resumed = start(["--resume"], log2)
        assert resumed.wait(600) == 0, log2.read_text()[-3000:]
        out = log2.read_text()
        assert f"took over the lock of study 'kill' from pid {first.pid}" in out, out
        # the killed driver's Ray, the hanging trial's worker with it, is gone
        assert session_members(first.pid) == [], out
        assert session_members(resumed.pid) == []
    finally:
        kill_session(first.pid)
        if resumed is not None:
            kill_session(resumed.pid)

    statuses, after, rows = assert_kept_after_resume(runs, storage, complete_before)
    (killed,) = running_before
    assert statuses[killed] == "interrupted" and rows[killed]["interrupted"]
    retries = [m for m, r in rows.items() if r.get("retry_of") == killed]
    assert len(retries) == 1 and after[retries[0]].params == after[killed].params
    # the search finished: two trials asked, the retry the second (counted once)
    assert sum(1 for s in statuses.values() if s == "complete") == 2
    assert len(list((tmp_path / "marks").iterdir())) == 3  # each trial trained once, + retry
