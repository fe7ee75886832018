"""One driver per study at a time, and what a killed driver left behind.

`runs/<study>/session.lock` holds the driver's record (JSON: pid, host, process start time,
then its private Ray's session directory and raylet PID) under an exclusive `flock` that the
kernel drops when the driver dies, even by SIGKILL. A live holder: refused (exit 2), naming
it. A dead one's record: taken over, with a message; its private Ray's orphans are stopped
by PID (SIGTERM, then SIGKILL), each only once shown to be of that session
(`session_processes`; never another user's), then its session folder removed. A record of
another host cannot be checked: refused until removed by hand. A clean exit (success, error
or Ctrl-C) empties the record and releases the lock.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from autoembed.errors import ConfigError

__all__ = ["LOCK_NAME", "Holder", "StudyLock", "StudyInUseError", "session_processes",
           "stop_processes", "remove_session"]

LOCK_NAME = "session.lock"
STOP_GRACE_S = 3.0  # seconds between SIGTERM and SIGKILL for a stale session's processes


class StudyInUseError(ConfigError):
    """The study is open in another live driver (exit status 2)."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with
    the PID it identifies one process, even after the PID is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class Holder:
    """The driver holding (or last holding) a study."""

    pid: int
    host: str
    start_ticks: int | None
    started: str
    ray_session: str | None = None
    raylet_pid: int | None = None

    @classmethod
    def me(cls) -> Holder:
        return cls(os.getpid(), socket.gethostname(), _start_ticks(os.getpid()),
                   _dt.datetime.now().isoformat(timespec="seconds"))

    @property
    def local(self) -> bool:
        return self.host == socket.gethostname()

    def alive(self) -> bool:
        """Whether this driver still runs (on this host; another host's is assumed alive)."""
        if not self.local:
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # someone else's process: it exists
        ticks = _start_ticks(self.pid)
        return self.start_ticks is None or ticks is None or ticks == self.start_ticks

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host} (since {self.started})"


def _read(fh: IO[str]) -> Holder | None:
    fh.seek(0)
    text = fh.read().strip()
    if not text:
        return None
    try:
        raw = json.loads(text)
        return Holder(**{k: raw.get(k) for k in Holder.__dataclass_fields__})
    except (ValueError, TypeError):
        return None  # a torn write from a killed driver: nothing to act on


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            "utf-8", "replace")
    except OSError:
        return ""


def session_processes(ray_session: str, raylet_pid: int | None) -> list[int]:
    """PIDs of this user's processes that belong to the Ray session `ray_session` (its
    directory): the command line names the directory, or the command line is Ray's
    (`ray::...` or under `ray/`) and the process has a file in the directory open or
    RAY_RAYLET_PID=<raylet_pid> in its environment."""
    uid = os.getuid()
    marker = f"RAY_RAYLET_PID={raylet_pid}".encode() if raylet_pid else None
    out = []
    for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()):
        if pid == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        cmd = _cmdline(pid)
        if not cmd:
            continue  # gone, or a zombie
        if ray_session in cmd:
            out.append(pid)
            continue
        if not (cmd.startswith("ray::") or "/ray/" in cmd):
            continue
        if _has_open_file_in(pid, ray_session) or _environ_has(pid, marker):
            out.append(pid)
    return sorted(out)


def _has_open_file_in(pid: int, directory: str) -> bool:
    """Whether the process holds a file under `directory` open (Ray processes keep their
    log files in the session directory open)."""
    prefix = directory.rstrip("/") + "/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def _environ_has(pid: int, marker: bytes | None) -> bool:
    """Whether the process's environment holds `marker` (a process that set its title may
    have overwritten the memory /proc shows as its environment: then it is not found)."""
    if marker is None:
        return False
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def stop_processes(pids: list[int], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM each, SIGKILL what is left after `grace_s`; returns the PIDs signalled."""
    done = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            done.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    left = list(done)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if _cmdline(p)]  # zombies have an empty command line
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return done


def remove_session(path: str) -> None:
    """Delete a stopped private Ray's session folder (its logs and shipped code), and
    `session_latest` when that names it; only a folder named `session_*` is touched."""
    p = Path(path)
    if not p.name.startswith("session_") or p.name == "session_latest" or not p.is_dir():
        return
    latest = p.parent / "session_latest"
    if latest.is_symlink() and Path(os.readlink(latest)).name == p.name:
        latest.unlink(missing_ok=True)
    shutil.rmtree(p, ignore_errors=True)


class StudyLock:
    """`with StudyLock(study_dir, name, note) as lock:` hold the study; `lock.ray(...)`
    records the private Ray session once it runs. `note` gets the takeover message."""

    def __init__(self, study_dir: Path, name: str,
                 note: Callable[[str], None] | None = None) -> None:
        self.path = study_dir / LOCK_NAME
        self.name = name
        self.note = note
        self.holder = Holder.me()
        self.taken_over: Holder | None = None
        self.stopped: list[int] = []
        self._fh: IO[str] | None = None
        self._made_dir = False

    def __enter__(self) -> StudyLock:
        import fcntl

        self._made_dir = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            other = _read(fh)
            fh.close()
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = other.describe() if other else "another process"
            raise StudyInUseError(
                f"study '{self.name}' is open in another search ({who}; lock {self.path}); "
                "wait for it to finish, or use another --study name") from None
        old = _read(fh)
        if old is not None and old.pid != os.getpid() and old.alive():
            fh.close()  # flock not honoured (another host, a network filesystem)
            hint = ("remove the lock file if that search is gone" if not old.local
                    else "wait for it to finish, or use another --study name")
            raise StudyInUseError(
                f"study '{self.name}' is open in another search ({old.describe()}; lock "
                f"{self.path}); {hint}")
        self._fh = fh
        self._write(self.holder)
        if old is not None:
            self.taken_over = old
            if old.ray_session and old.local:
                self.stopped = stop_processes(session_processes(old.ray_session,
                                                                old.raylet_pid))
                if not session_processes(old.ray_session, old.raylet_pid):
                    remove_session(old.ray_session)
            if self.note is not None:
                ray = (f"; stopped {len(self.stopped)} leftover process(es) of its Ray "
                       f"session {Path(old.ray_session or '').name} (pid "
                       f"{', '.join(map(str, self.stopped))})" if self.stopped else "")
                self.note(f"took over the lock of study '{self.name}' from {old.describe()}, "
                          f"which is no longer running{ray}")
        return self

    def _write(self, holder: Holder) -> None:
        assert self._fh is not None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(json.dumps(asdict(holder)))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def ray(self, session_dir: str | None, raylet_pid: int | None) -> None:
        """Record the private Ray session this driver started (for a later cleanup)."""
        if session_dir is None or self._fh is None:
            return
        self.holder = replace(self.holder, ray_session=session_dir, raylet_pid=raylet_pid)
        self._write(self.holder)

    def __exit__(self, *exc: Any) -> None:
        if self._fh is None:
            return
        try:
            self._fh.seek(0)
            self._fh.truncate()  # an empty record: released cleanly
            self._fh.flush()
            # a search refused before it wrote anything leaves no study directory behind
            if self._made_dir and [p.name for p in self.path.parent.iterdir()] == [LOCK_NAME]:
                self.path.unlink()
                self.path.parent.rmdir()
        finally:
            self._fh.close()  # closing drops the flock
            self._fh = None
