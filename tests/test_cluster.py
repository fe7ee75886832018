"""docs/clusters.md, followed as written on one machine: a real PostgreSQL
server and a real two-node Ray cluster on 127.0.0.1, a search whose trials are placed on
both nodes by custom resources, then every process stopped by PID.

The page's commands are run as they are, with its placeholders set, and these documented
substitutions only (two nodes on one host, a shared machine): `sudo -u postgres` becomes
`runuser -u postgres --` against the server this test starts; `apt-get install` is left to
.ci/run; each `ray start` gets its own temporary directory and ports and one CPU; `ray stop`
(which would stop everyone's Ray) becomes killing the PIDs of the nodes' sessions.
"""

from __future__ import annotations

import csv
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _services import (
    PostgresServer,
    RayNode,
    free_port,
    need_postgres,
    session_pids,
    start_ray_node,
    stop_session,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "clusters.md"


def readme_commands(text: str) -> list[str]:
    """The shell commands of the page's ```bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for cmd in re.sub(r"\\\n\s*", "", block).splitlines():
            if cmd.strip() and not cmd.lstrip().startswith("#"):
                commands.append(cmd.strip())
    return commands


def test_page_has_the_commands_this_test_follows() -> None:
    cmds = readme_commands(PAGE.read_text())
    kinds = [c.split()[0] for c in cmds]
    assert kinds.count("ray") == 3 and kinds.count("autoembed") == 1, cmds
    assert "sudo" in kinds and "export" in kinds and cmds[-1] == "ray stop"


@pytest.fixture()
def pg() -> Iterator[PostgresServer]:
    server = PostgresServer(need_postgres()).start()
    try:
        yield server
    finally:
        server.stop()


def _bash(cmd: str, env: dict[str, str], cwd: Path, timeout: float = 900,
          new_session: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, start_new_session=new_session)


def test_cluster_search_as_the_readme_says(pg: PostgresServer, tmp_path: Path) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env.update(
        PATH=f"{pg.bindir}:{venv_bin}:{env.get('PATH', '')}",
        HEAD_IP="127.0.0.1", RAY_PORT=str(free_port()), RAY_TOKEN=secrets.token_hex(32),
        DB_HOST="127.0.0.1", DB_PORT=str(pg.port), DB_PASSWORD=secrets.token_hex(8),
        RAY_USAGE_STATS_ENABLED="0", **pg.env())
    nodes: list[RayNode] = []
    search: subprocess.CompletedProcess[str] | None = None
    try:
        for cmd in readme_commands(PAGE.read_text()):
            word = shlex.split(cmd)[0]
            if cmd.startswith("apt-get install"):
                continue  # .ci/run installs PostgreSQL; need_postgres() found it
            if cmd.startswith("sudo -u postgres "):
                cmd = "runuser -u postgres -- " + cmd.removeprefix("sudo -u postgres ")
                done = _bash(cmd, env, tmp_path, 120)
                assert done.returncode == 0, (cmd, done.stderr)
            elif word == "export":
                done = _bash(f"{cmd}; env -0", env, tmp_path, 30)
                assert done.returncode == 0, (cmd, done.stderr)
                env = dict(kv.split("=", 1) for kv in done.stdout.split("\0") if "=" in kv)
            elif cmd.startswith("ray start"):
                start_ray_node(cmd, env, tmp_path, nodes)
            elif word == "autoembed":
                search = _bash(cmd, env, tmp_path)
                assert search.returncode == 0, (cmd, search.stderr[-4000:])
            elif cmd == "ray stop":
                ids = {n.temp_dir.name: n.node_id() for n in nodes}
                for n in nodes:
                    assert stop_session(n.sid), f"node {n.temp_dir} had no process"
            else:
                raise AssertionError(f"clusters.md command this test does not know: {cmd}")
    finally:
        for n in nodes:
            stop_session(n.sid, grace_s=5)
            shutil.rmtree(n.temp_dir, ignore_errors=True)
    assert search is not None and len(nodes) == 2
    for n in nodes:  # every process of both nodes is gone
        assert session_pids(n.sid) == [], n

    node_a, node_b = ids[nodes[0].temp_dir.name], ids[nodes[1].temp_dir.name]
    assert node_a != node_b
    # --trials 4, one at a time, --trial-resources node_a=1 then node_b=1: a, b, a, b
    with (tmp_path / "runs" / "team-tiny" / "trials.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] != "infeasible"]
    # trained: complete, or stopped early when it could not reach the front
    assert len(rows) == 4 and {r["status"] for r in rows} <= {"complete", "pruned"}, rows
    where = [r["ray_node"].split() for r in rows]
    assert [w[1:] for w in where] == [[node_a, "node_a=1"], [node_b, "node_b=1"],
                                      [node_a, "node_a=1"], [node_b, "node_b=1"]]

    # the study and the runs are complete in PostgreSQL, as user autoembed with its password
    db = f"postgresql://autoembed:{env['DB_PASSWORD']}@127.0.0.1:{pg.port}"
    study = optuna.load_study(study_name="team-tiny", storage=f"{db}/autoembed_optuna")
    assert study.user_attrs["autoembed"]["multi_fidelity"] is True  # the page's MO-ASHA
    trained = {t.number for t in study.trials
               if (t.user_attrs.get("autoembed") or {}).get("status") in ("complete", "pruned")}
    assert trained == {int(r["trial"]) for r in rows}
    client = MlflowClient(tracking_uri=f"{db}/autoembed_mlflow")
    exp = client.get_experiment_by_name("team-tiny")
    assert exp is not None
    runs = {int(r.data.tags["trial"]): r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("autoembed.role") == "trial"}
    assert set(runs) == {t.number for t in study.trials}
    for r in rows:
        run = runs[int(r["trial"])]
        assert run.info.status == "FINISHED"
        assert run.data.tags["ray_node_id"] == r["ray_node"].split()[1]
        assert run.data.tags["ray_resources"] == r["ray_node"].split()[2]
