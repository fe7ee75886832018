"""Real services for the cluster and team-store tests: a PostgreSQL server and Ray nodes,
each started in its own temporary directory on free loopback ports and stopped by PID.

Never `ray stop` or `pg_ctl stop -m immediate` on a shared machine: other people's Ray and
PostgreSQL run beside ours. Every process a service starts lives in one session (started
with `start_new_session`), and stopping a service signals exactly the PIDs of that session.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["free_port", "session_pids", "stop_session", "postgres_bin", "PostgresServer",
           "need_postgres", "RayNode", "start_ray_node"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """PIDs of the live processes whose session id is `sid` (field 6 of /proc/PID/stat)."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(stat.split("/")[2]))
    return out


def stop_session(sid: int, grace_s: float = 15.0, kill_s: float = 10.0) -> list[int]:
    """SIGTERM every process of session `sid`, SIGKILL what is left after `grace_s`, and
    again, for up to `kill_s`, whatever the session still holds (a process it started while
    stopping, or one the kernel has not torn down yet). Returns the PIDs it signalled."""
    pids = session_pids(sid)
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and session_pids(sid):
        time.sleep(0.2)
    deadline = time.monotonic() + kill_s
    while (left := session_pids(sid)) and time.monotonic() < deadline:
        _signal(left, signal.SIGKILL)
        time.sleep(0.1)
    return pids


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def postgres_bin() -> Path | None:
    """The directory of PostgreSQL's server binaries (initdb, postgres), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                    key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return Path(debian[-1]).parent if debian else None


def need_postgres() -> Path:
    """The binaries, or skip (fail in CI, where .ci/run installs them)."""
    where = postgres_bin()
    problem = None
    if where is None:
        problem = "no PostgreSQL binaries (initdb) on PATH or under /usr/lib/postgresql"
    elif shutil.which("runuser") is None:
        problem = "no runuser (PostgreSQL refuses to run as root)"
    else:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            problem = "no 'postgres' user to run the server as"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        problem = problem or "psycopg2 is not installed (pip install 'autoembed[team]')"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; .ci/run installs PostgreSQL and scripts/test.sh the "
                        "team extra")
        pytest.skip(problem)
    assert where is not None
    return where


@dataclass
class PostgresServer:
    """A throw-away PostgreSQL server on 127.0.0.1:port, data and socket in `root`, run as
    user postgres (it refuses root) with trust authentication for loopback."""

    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ae-pg-")))
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # the postmaster's

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def sockets(self) -> Path:
        return self.root / "sock"

    def _as_postgres(self, *cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True,
                              text=True, timeout=120, check=True, **kw)  # type: ignore[call-overload]

    def start(self) -> PostgresServer:
        self.sockets.mkdir(parents=True)
        shutil.chown(self.root, "postgres")
        shutil.chown(self.sockets, "postgres")
        self._as_postgres(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                          "-A", "trust", "--no-sync", "-E", "UTF8")
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", str(self.bindir / "postgres"),
             "-D", str(self.data), "-p", str(self.port), "-k", str(self.sockets),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pidfile = self.data / "postmaster.pid"
            if pidfile.exists() and self.proc.poll() is None:
                lines = pidfile.read_text().splitlines()
                if len(lines) >= 8 and "ready" in lines[7]:
                    self.pid = int(lines[0])
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = (self.root / "server.log").read_text()[-2000:]
        self.stop()
        raise RuntimeError(f"PostgreSQL did not start on port {self.port}:\n{tail}")

    def url(self, db: str, user: str = "postgres", password: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{db}"

    def env(self) -> dict[str, str]:
        """What libpq's tools (createdb, psql) need to reach this server."""
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.port)}

    def createdb(self, name: str) -> None:
        self._as_postgres(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p",
                          str(self.port), name)

    def stop(self) -> None:
        """Fast shutdown by the postmaster's PID (SIGINT), then the whole session."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            stop_session(self.proc.pid, grace_s=5)
            self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class RayNode:
    """A node a `ray start` command started: its processes' session and temporary folder."""

    sid: int  # the session of every process this `ray start` left running
    temp_dir: Path

    def node_id(self) -> str:
        """The raylet's --node_id, read from its command line (independent of Ray's API)."""
        for pid in session_pids(self.sid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"/raylet"):
                for a in argv:
                    if a.startswith(b"--node_id="):
                        return a.split(b"=", 1)[1].decode()
        raise AssertionError(f"no raylet in session {self.sid}")


def start_ray_node(cmd: str, env: dict[str, str], cwd: Path, nodes: list[RayNode]) -> None:
    """Run a `ray start` command with its own temporary folder, free ports and one CPU, in a
    session of its own (appended to `nodes` before it is waited for, so a caller's cleanup
    stops it whatever happens)."""
    temp = Path(tempfile.mkdtemp(prefix="ae-ray-", dir="/tmp"))  # short: sockets
    extra = (f" --temp-dir {temp} --num-cpus 1 --dashboard-agent-listen-port {free_port()}"
             " --disable-usage-stats")
    if "--head" in cmd:  # Ray starts a dashboard process even with it off
        extra += f" --include-dashboard false --dashboard-port {free_port()}"
    proc = subprocess.Popen(["bash", "-c", cmd + extra], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    nodes.append(RayNode(proc.pid, temp))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, (cmd, out[-3000:])
