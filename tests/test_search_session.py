"""The study lock (one driver per study) and the cleanup of a dead driver's Ray leftovers,
with real processes started by these tests (and only those are ever signalled)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoembed.cli import main
from autoembed.pipeline.session import LOCK_NAME, StudyInUseError, StudyLock

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "search_spaces" / "tiny.yaml")

HOLDER = """
import sys, time
from pathlib import Path
from autoembed.pipeline.session import StudyLock
with StudyLock(Path(sys.argv[1]), "s"):
    print("held", flush=True)
    time.sleep(120)
"""


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live process holding study 's' under tmp_path/runs."""
    study_dir = tmp_path / "runs" / "s"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(study_dir)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc, study_dir
    proc.kill()
    proc.wait()


def test_a_study_held_by_a_live_driver_is_refused(
        holder: tuple[subprocess.Popen[str], Path]) -> None:
    proc, study_dir = holder
    record = json.loads((study_dir / LOCK_NAME).read_text())
    assert record["pid"] == proc.pid and record["host"] == socket.gethostname()
    with pytest.raises(StudyInUseError, match=f"pid {proc.pid} on host"):
        with StudyLock(study_dir, "s"):
            pass
    # the refused one did not touch the holder's record
    assert json.loads((study_dir / LOCK_NAME).read_text())["pid"] == proc.pid


def test_cli_refuses_a_study_open_elsewhere_with_exit_2(
        holder: tuple[subprocess.Popen[str], Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    proc, _ = holder
    rc = main(["search", "--budget", "800MB", "--space", TINY, "--study", "s",
               "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", "none"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and f"pid {proc.pid}" in err and "--study" in err
    assert not (tmp_path / "runs" / "optuna.db").exists() or _studies(tmp_path) == 0


def _studies(tmp_path: Path) -> int:
    import sqlite3

    con = sqlite3.connect(tmp_path / "runs" / "optuna.db")
    try:
        return int(con.execute("SELECT count(*) FROM studies").fetchone()[0])
    finally:
        con.close()


def test_a_dead_drivers_lock_is_taken_over_with_a_message(tmp_path: Path) -> None:
    study_dir = tmp_path / "s"
    study_dir.mkdir()
    dead = _dead_pid()
    (study_dir / LOCK_NAME).write_text(json.dumps(
        {"pid": dead, "host": socket.gethostname(), "start_ticks": 1, "started": "earlier"}))
    notes: list[str] = []
    with StudyLock(study_dir, "s", notes.append) as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == dead
        assert json.loads((study_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert len(notes) == 1 and f"pid {dead}" in notes[0] and "no longer running" in notes[0]
    assert (study_dir / LOCK_NAME).read_text() == ""  # released cleanly: an empty record
    with StudyLock(study_dir, "s", notes.append):  # a clean lock is taken silently
        pass
    assert len(notes) == 1


def test_a_reused_pid_does_not_keep_a_stale_lock(tmp_path: Path) -> None:
    """The record's PID is alive but is another process (start time differs)."""
    study_dir = tmp_path / "s"
    study_dir.mkdir()
    (study_dir / LOCK_NAME).write_text(json.dumps(
        {"pid": os.getppid(), "host": socket.gethostname(), "start_ticks": 1,
         "started": "earlier"}))
    notes: list[str] = []
    with StudyLock(study_dir, "s", notes.append) as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == os.getppid()
        assert lock.taken_over.start_ticks == 1
        assert json.loads((study_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert len(notes) == 1 and f"pid {os.getppid()}" in notes[0]
    os.kill(os.getppid(), 0)  # the PID was alive all along: only its start time told


def test_a_live_holder_with_its_own_start_time_keeps_the_lock(tmp_path: Path) -> None:
    """The same record as above with the parent's true start time (read here from
    /proc/<pid>/stat, field 22) names a live driver: the lock is refused, and kept."""
    study_dir = tmp_path / "s"
    study_dir.mkdir()
    stat = Path(f"/proc/{os.getppid()}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2:].split()[22 - 3])  # fields after "(comm)" start at 3
    record = json.dumps({"pid": os.getppid(), "host": socket.gethostname(),
                         "start_ticks": ticks, "started": "earlier"})
    (study_dir / LOCK_NAME).write_text(record)
    with pytest.raises(StudyInUseError, match=f"pid {os.getppid()}"):
        StudyLock(study_dir, "s").__enter__()
    assert (study_dir / LOCK_NAME).read_text() == record


def test_a_lock_from_another_host_is_refused(tmp_path: Path) -> None:
    study_dir = tmp_path / "s"
    study_dir.mkdir()
    (study_dir / LOCK_NAME).write_text(json.dumps(
        {"pid": 1234, "host": "elsewhere.invalid", "start_ticks": 5, "started": "earlier"}))
    with pytest.raises(StudyInUseError, match="remove the lock file"):
        with StudyLock(study_dir, "s"):
            pass


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_takeover_stops_the_dead_sessions_ray_processes_only(tmp_path: Path) -> None:
    """Stand-ins for a killed driver's Ray leftovers: one names the session directory on its
    command line (like gcs_server/raylet), one is a `ray::` worker with the raylet's PID in
    its environment (like the orphaned DashboardAgent). Two look-alikes must survive: a
    `ray::` process of another raylet, and a non-Ray process with the right environment. A
    third leftover is found by the log file it holds open in the session directory."""
    session = str(tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1")
    Path(session, "logs").mkdir(parents=True)
    raylet = 999_999_001  # not a real PID: only matched in environments
    sleep = ["/bin/sleep", "60"]
    env = {**os.environ, "RAY_RAYLET_PID": str(raylet)}
    procs: dict[str, subprocess.Popen[Any]] = {
        "names_session": subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                           f"--session-dir={session}"]),
        "ray_worker": subprocess.Popen(["ray::DashboardAgent", "60"], executable="/bin/sleep",
                                       env=env),
        "holds_log": subprocess.Popen(
            ["ray::RuntimeEnvAgent", "-c", "import sys, time; f = open(sys.argv[1], 'a'); "
             "print('open', flush=True); time.sleep(60)", f"{session}/logs/agent.log"],
            executable=sys.executable, stdout=subprocess.PIPE, text=True),
        "other_raylet": subprocess.Popen(["ray::IDLE", "60"], executable="/bin/sleep",
                                         env={**os.environ, "RAY_RAYLET_PID": "999999002"}),
        "not_ray": subprocess.Popen(sleep, env=env),
    }
    try:
        out = procs["holds_log"].stdout
        assert out is not None and out.readline().strip() == "open"
        time.sleep(0.3)
        study_dir = tmp_path / "s"
        study_dir.mkdir()
        (study_dir / LOCK_NAME).write_text(json.dumps(
            {"pid": _dead_pid(), "host": socket.gethostname(), "start_ticks": None,
             "started": "earlier", "ray_session": session, "raylet_pid": raylet}))
        notes: list[str] = []
        with StudyLock(study_dir, "s", notes.append) as lock:
            expected = {procs["names_session"].pid, procs["ray_worker"].pid,
                        procs["holds_log"].pid}
            assert set(lock.stopped) == expected
        for k in ("names_session", "ray_worker", "holds_log"):
            procs[k].wait(timeout=10)
        assert _alive(procs["other_raylet"].pid) and _alive(procs["not_ray"].pid)
        assert "stopped 3 leftover process(es)" in notes[0]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.mark.parametrize("left", ["trials.csv", "pareto.json"])
def test_a_new_study_never_writes_over_another_searchs_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], left: str) -> None:
    """runs/s/ holds the files of a search whose study is not in this storage (another
    --storage, a removed optuna.db): a new study 's' is refused in one line (exit 2) before
    anything runs, and those files are kept as they were (they were overwritten)."""
    study_dir = tmp_path / "runs" / "s"
    study_dir.mkdir(parents=True)
    (study_dir / left).write_text("another search's result\n")
    rc = main(["search", "--budget", "800MB", "--space", TINY, "--study", "s", "--trials",
               "1", "--executor", "local", "--runs-dir", str(tmp_path / "runs"),
               "--tracking-uri", "none"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and str(study_dir) in err and left in err, err
    assert [p.name for p in study_dir.iterdir()] == [left]
    assert (study_dir / left).read_text() == "another search's result\n"
    assert _studies(tmp_path) == 0
