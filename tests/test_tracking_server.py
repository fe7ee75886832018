"""End to end against a real MLflow server, and the `autoembed ui` command: one `autoembed ui`
process (an `mlflow server` of the shared runs directory's store) is the module's server; the
last test stops it with Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_tracking import (  # noqa: F401 - _store_dir is a fixture
    _store_dir,
    check_layout,
    make_records,
    read_back,
    tracker_cycle,
)

from autoembed import load_config
from autoembed.export import export_config
from autoembed.tracking import make_tracker

pytestmark = pytest.mark.slow
STARTUP_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while not healthy(url):
        assert proc.poll() is None, f"mlflow server exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{url}/health did not answer in {STARTUP_S} s"
        time.sleep(0.5)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server we started, by its process group id (it forks a uvicorn worker)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(15)
            return
        except subprocess.TimeoutExpired:
            continue


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets in LISTEN state on `port`, read from the kernel
    (/proc/net/tcp and tcp6), not from any argument a process was given."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: TCP_LISTEN
                raw = bytes.fromhex(addr)  # kernel-order 32-bit words
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(socket.inet_ntop(socket.AF_INET if len(raw) == 4
                                           else socket.AF_INET6, words))
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@dataclass
class Ui:
    """The module's `autoembed ui` process: its URL, port and the lines it has printed."""

    url: str
    port: int
    proc: subprocess.Popen[bytes]
    lines: list[str]
    reader: threading.Thread  # reads the process's output into `lines` until it ends


@pytest.fixture(scope="module")
def ui(store_dir: Path) -> Iterator[Ui]:
    """`autoembed ui` on the shared runs directory, with study 'ui-study' recorded before it
    starts: the module's MLflow server (an mlflow server start is ~13 CPU s; one serves
    every test here). The last test, `test_ui_serves_the_runs_dir_and_stops_on_ctrl_c`,
    stops it with Ctrl-C; whatever is left is stopped here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        tracker = make_tracker(None, store_dir)  # a store with (at least) this search in it
        tracker.start("ui-study", {"budget": "1GB"}, None)
        tracker.close("FINISHED")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoembed", "ui", "--port", str(port), "--runs-dir",
         str(store_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env,
    )
    stdout = proc.stdout
    assert stdout is not None
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(ln.decode() for ln in iter(stdout.readline, b"")),
        daemon=True,
    )
    reader.start()
    served = Ui(f"http://127.0.0.1:{port}", port, proc, lines, reader)
    try:
        wait_healthy(served.url, proc)
        yield served
    finally:
        stop_group(proc)
        reader.join(10)
    assert not group_alive(proc.pid)


@pytest.fixture(scope="module")
def server(ui: Ui) -> str:
    """The URL of a live MLflow server (with artifacts served): the module's `ui`."""
    assert ui.proc.poll() is None, "the ui was stopped before a test that needs its server"
    return ui.url


def test_full_cycle_against_a_server(server: str, tmp_path: Path) -> None:
    tracker = make_tracker(server, tmp_path / "runs")
    tracker_cycle(tracker, tmp_path, "served", pareto=(1, 4))
    seen = read_back(server, "served")
    check_layout(seen, pareto=(1, 4))
    assert seen["by_role"]["search"][0].info.artifact_uri.startswith("mlflow-artifacts:")
    # export reads the trial's config back through the server
    out = tmp_path / "from-server.yaml"
    run_id = seen["trials"][1].info.run_id
    export_config(None, out, run_id=run_id, runs_dir=tmp_path / "runs", tracking_uri=server)
    assert load_config(out) == make_records()[1].config


def test_server_gone_mid_search_costs_seconds(
    server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow import MlflowClient

    from autoembed.tracking.mlflow_store import MlflowTracker

    tracker = make_tracker(server, tmp_path / "runs")
    assert isinstance(tracker, MlflowTracker)
    tracker.start("gone", {"budget": "1GB"}, None)
    # the server "dies": the same client code now talks to a port nobody listens on
    tracker._client = MlflowClient(f"http://127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    for r in make_records():
        tracker.trial(r)  # warns, never raises
    tracker.finish([0], [])
    tracker.close("FINISHED")
    assert time.monotonic() - t0 < 30  # MLflow's defaults would retry for minutes per call
    assert not tracker.enabled and "tracking is off" in caplog.text


def test_env_uri_is_used(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    tracker = make_tracker(None, tmp_path / "runs")
    tracker.start("env-study", {"budget": "1GB"}, None)
    tracker.close("FINISHED")
    assert not (tmp_path / "runs" / "mlflow.db").exists()
    (parent,) = read_back(server, "env-study")["by_role"]["search"]
    assert parent.data.params == {"budget": "1GB"}


def test_search_records_every_trial_on_the_server(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`autoembed search` on the tiny space, tracked on the server: one parent, one run per
    trial of trials.csv, Pareto tags identical to pareto.json's members. The CLI's `main` in
    this process (what is tested is what reaches the server, not the process; a process
    of its own re-imported torch, Ray and MLflow, ~5 CPU s)."""
    import csv
    import json

    from autoembed.cli import main

    runs = tmp_path / "runs"
    rc = main(["search", "--budget", "1GB", "--space", "tiny", "--trials", "2", "--study",
               "e2e", "--runs-dir", str(runs), "--tracking-uri", server])
    assert rc == 0, capsys.readouterr().err[-3000:]
    assert not (runs / "mlflow.db").exists()  # recorded on the server, not the default store
    pareto = json.loads((runs / "e2e" / "pareto.json").read_text())
    with (runs / "e2e" / "trials.csv").open() as fh:
        rows = {int(r["trial"]): r for r in csv.DictReader(fh)}
    seen = read_back(server, "e2e")
    (parent,) = seen["by_role"]["search"]
    assert parent.info.status == "FINISHED" and parent.data.params["budget"] == "1GB"
    trials = seen["trials"]
    assert sorted(trials) == sorted(rows)
    members = {m["trial"] for m in pareto["members"]}
    assert {n: r.data.tags["pareto"] for n, r in trials.items()} == {
        n: str(n in members).lower() for n in rows
    }
    for n, run in trials.items():
        assert run.data.tags["status"] == rows[n]["status"]
        assert run.data.params["dim"] == str(json.loads(rows[n]["config_json"])["dim"])
        assert "estimate_device_total" in run.data.metrics
        if rows[n]["status"] == "complete":
            assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
            assert run.data.metrics["quality"] == pytest.approx(float(rows[n]["quality"]))
            assert len(seen["client"].get_metric_history(run.info.run_id, "valid_quality")) >= 2
    names = {f.path for f in seen["client"].list_artifacts(parent.info.run_id)}
    assert {"pareto.json", "trials.csv", "best.yaml", "tiny.yaml"} <= names
    # the search's pick, exported from its run on the server, is the search's best.yaml
    out = tmp_path / "picked.yaml"
    best = trials[pareto["best"]].info.run_id
    export_config(None, out, run_id=best, runs_dir=runs, tracking_uri=server)
    assert load_config(out) == load_config(runs / "e2e" / "best.yaml")
    import yaml

    got, want = (yaml.safe_load(p.read_text())["source"] for p in (out, runs / "e2e" / "best.yaml"))
    for key in ("budget", "budget_bytes", "memory"):  # one shape: the search run's budget
        assert got[key] == want[key], key


def test_ui_serves_the_runs_dir_and_stops_on_ctrl_c(ui: Ui) -> None:
    """Last in this file: it stops the module's `ui` (the server of the tests above)."""
    url, proc, lines, port = ui.url, ui.proc, ui.lines, ui.port
    try:
        assert listening_addresses(port) == {"127.0.0.1"}  # README: ui binds loopback only
        deadline = time.monotonic() + 30
        while not any("study ui-study: " in ln for ln in lines):
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        body = urllib.request.urlopen(
            f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ui-study", timeout=5
        ).read()
        assert b"ui-study" in body
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        proc.wait(30)
        ui.reader.join(10)
    finally:
        stop_group(proc)
    text = "".join(lines)
    assert proc.returncode == 130, text
    assert f"at {url}" in text and "MLflow UI stopped" in text
    assert f"study ui-study: {url}/#/experiments/" in text
    # nothing of mlflow's to read past: its registry and security-settings notes, uvicorn's
    # start and request lines, starlette's deprecation warning
    for noise in ("Registry store URI not provided", "Security middleware", "INFO:",
                  "DeprecationWarning"):
        assert noise not in text, text
    assert not healthy(url)
    assert not group_alive(proc.pid)
