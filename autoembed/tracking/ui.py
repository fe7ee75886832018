"""`autoembed ui`: the MLflow UI for the embedded store of a runs directory.

Runs `mlflow server` (one worker, the store's SQLite file and artifact folder) bound to
127.0.0.1 unless told otherwise, in its own process group so that Ctrl-C here stops all of it.
MLflow's job runner (GenAI jobs, several extra processes) is off unless the user turns it on.
The server says only what needs reading: warnings and errors, not uvicorn's start lines and
one line per request, nor MLflow's note on its default security settings (`_NOISE`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from autoembed.errors import ConfigError
from autoembed.rules import Integer
from autoembed.tracking.store import TrackingError, TrackingStore, default_store_uri, resolve_store

__all__ = ["DEFAULT_PORT", "server_command", "serve_ui"]

DEFAULT_PORT = 5000
STARTUP_S = 120.0  # mlflow server takes ~10-15 s to answer /health on 2 cores
STOP_S = 10.0


# What `mlflow server` prints on every start where no allowed hosts are set, which no option
# or variable of MLflow turns off (setting them prints another line); it names flags of
# `mlflow server` that `autoembed ui` has not. Dropped from the server's stderr, alone.
_NOISE = ("[MLflow] Security middleware enabled with default settings",)
# starlette's deprecation of a module MLflow imports: nothing the user can act on
_WARNINGS = "ignore:starlette.middleware.wsgi is deprecated"


def server_command(store: TrackingStore, host: str, port: int) -> list[str]:
    assert store.artifact_root is not None
    # the registry in the same store, named (else mlflow prints that it chose so); uvicorn's
    # warnings and errors only (MLflow's log config kept)
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store.uri,
            "--registry-store-uri", store.uri,
            "--artifacts-destination", str(store.artifact_root), "--host", host,
            "--port", str(port), "--workers", "1",
            "--uvicorn-opts", "--log-level warning --no-access-log"]


def _relay(stream: IO[bytes]) -> None:
    """Copy the server's stderr to ours as it comes, line by line, but `_NOISE`."""
    for line in iter(stream.readline, b""):
        if not line.startswith(tuple(n.encode() for n in _NOISE)):
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()


def _check_port(host: str, port: int) -> None:
    Integer(1, 65535).check_argument("--port", port)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({e.strerror or e}); pass another --port "
                "or --host") from None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as r:  # noqa: S310 - local
            return bool(r.status == 200)
    except OSError:
        return False


def study_links(url: str) -> list[tuple[str, str]]:
    """(study, link to its runs table) for each autoembed experiment the server holds.
    `workflowType=machine_learning` opens MLflow 3's "Model training" view, not GenAI."""
    req = urllib.request.Request(
        f"{url}/api/2.0/mlflow/experiments/search", data=json.dumps({"max_results": 1000}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 - local
            experiments = json.loads(r.read()).get("experiments", [])
    except (OSError, ValueError):
        return []
    out = []
    for e in experiments:
        tags = {t.get("key"): t.get("value") for t in e.get("tags", [])}
        if "autoembed.study" in tags:
            link = f"{url}/#/experiments/{e['experiment_id']}/runs?workflowType=machine_learning"
            out.append((str(e["name"]), link))
    return sorted(out)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server's process group (it forks a uvicorn worker): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, STOP_S), (signal.SIGKILL, STOP_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _interrupt_on_signals() -> Callable[[], None]:
    """Make SIGINT (even if inherited as ignored, e.g. `autoembed ui &`), SIGTERM and SIGHUP
    raise KeyboardInterrupt, so the server in its own session is always stopped with us.
    Returns a function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt)
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    return restore


def serve_ui(runs_dir: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
             echo: Callable[[str], None] | None = None) -> int:
    """Run the UI until Ctrl-C (exit status 130) or until the server exits on its own (1)."""
    if echo is None:
        def echo(line: str) -> None:
            print(line, flush=True)  # shows at once even when stdout is a pipe
    # the UI is for the runs directory's embedded store, whatever MLFLOW_TRACKING_URI says
    store = resolve_store(default_store_uri(runs_dir), runs_dir)
    _check_port(host, port)
    assert store.db_path is not None
    if not store.db_path.is_file():
        echo(f"no searches recorded under {runs_dir} yet; creating an empty store")
        from autoembed.tracking.mlflow_store import open_client

        open_client(store)  # one process creates the schema before the server opens it
    env = dict(os.environ)
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), _WARNINGS) if w)
    env.pop("MLFLOW_TRACKING_URI", None)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else shown}:{port}"
    restore = _interrupt_on_signals()
    proc = subprocess.Popen(server_command(store, host, port), env=env, start_new_session=True,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    relay = threading.Thread(target=_relay, args=(proc.stderr,), daemon=True)
    relay.start()
    echo(f"MLflow UI for {store.uri} starting at {url} (Ctrl-C to stop)")
    if host not in ("127.0.0.1", "localhost", "::1"):
        echo(f"note: listening on {host} without authentication; MLflow accepts Host names "
             "of localhost and private IPs only unless MLFLOW_SERVER_ALLOWED_HOSTS is set")
    try:
        deadline = time.monotonic() + STARTUP_S
        ready = False
        while proc.poll() is None:
            if not ready and _healthy(url):
                ready = True
                echo(f"MLflow UI ready: {url}")
                for name, link in study_links(url):
                    echo(f"  study {name}: {link}")
            if not ready and time.monotonic() > deadline:
                _stop(proc)
                raise TrackingError(f"mlflow server did not answer {url}/health within "
                                    f"{STARTUP_S:g} s")
            time.sleep(0.5 if not ready else 1.0)
        raise TrackingError(f"mlflow server exited with status {proc.returncode} (see above)")
    except KeyboardInterrupt:
        _stop(proc)
        echo("MLflow UI stopped")
        return 130
    finally:
        if proc.poll() is None:
            _stop(proc)  # any other way out must not leave the server running
        relay.join(STOP_S)  # the server's last lines before ours
        restore()
