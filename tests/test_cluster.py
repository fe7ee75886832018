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
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _services import PostgresServer, free_port, need_postgres, session_pids, stop_session
from _user_code import BAG_MODEL

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


@dataclass
class Node:
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
    nodes: list[Node] = []
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
                temp = Path(tempfile.mkdtemp(prefix="ae-ray-", dir="/tmp"))  # short: sockets
                extra = (f" --temp-dir {temp} --num-cpus 1 --dashboard-agent-listen-port "
                         f"{free_port()} --disable-usage-stats")
                if "--head" in cmd:  # Ray starts a dashboard process even with it off
                    extra += f" --include-dashboard false --dashboard-port {free_port()}"
                proc = subprocess.Popen(["bash", "-c", cmd + extra], env=env, cwd=tmp_path,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
                nodes.append(Node(proc.pid, temp))
                out, _ = proc.communicate(timeout=180)
                assert proc.returncode == 0, (cmd, out[-3000:])
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


# ---------------------------------------------------------------------- your own model
USER_LOOP = BAG_MODEL + '''

def example(params):
    ids = torch.randint(0, 1000, (16, 4))
    return ids, (ids < 500).sum(1).gt(1).long()


def train(model, params, report):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(1, 21):
        ids, y = example(params)
        loss = model(ids, y)
        opt.zero_grad(); loss.backward(); opt.step()
    report(step=20, samples=320, quality=1.0 / (1.0 + float(loss)))
'''


def _start_node(cmd: str, env: dict[str, str], cwd: Path, nodes: list[Node]) -> None:
    temp = Path(tempfile.mkdtemp(prefix="ae-ray-", dir="/tmp"))
    extra = (f" --temp-dir {temp} --num-cpus 1 --dashboard-agent-listen-port {free_port()}"
             " --disable-usage-stats")
    if "--head" in cmd:
        extra += f" --include-dashboard false --dashboard-port {free_port()}"
    proc = subprocess.Popen(["bash", "-c", cmd + extra], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    nodes.append(Node(proc.pid, temp))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, (cmd, out[-3000:])


def test_user_search_ships_its_code_to_both_nodes_and_checks_each_copy(tmp_path: Path) -> None:
    """A search of the user's own model on a two-node cluster. The second node has another
    copy of the user's package on its own path: shipped in the runtime_env, the recorded
    copy runs on both nodes; not shipped (the package found in a site-packages directory,
    as an installed package is), the hash check fails that node's trials, naming the module,
    and the head's (which has the same copy) complete."""
    from autoembed.pipeline.study import load_rows

    copies = {"src": tmp_path / "src", "installed": tmp_path / "lib" / "site-packages",
              "stale": tmp_path / "node_b"}
    for kind, where in copies.items():
        pkg = where / "clusteruser"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "loop.py").write_text(USER_LOOP + ("\n# another copy\n" if kind == "stale"
                                                  else ""))
    (tmp_path / "space.yaml").write_text(
        "embedding: {precision: fp32, table_optimizer: adam}\n"
        "user:\n  dim: {choices: [4, 8, 16, 32]}\nobjectives: [quality, memory]\n")
    port, token = free_port(), secrets.token_hex(32)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    base.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0",
                RAY_worker_niceness="0",
                PATH=f"{Path(sys.executable).parent}:{base.get('PATH', '')}")

    def path(*dirs: Path) -> dict[str, str]:
        return {**base, "PYTHONPATH": os.pathsep.join([*map(str, dirs), str(ROOT)])}

    nodes: list[Node] = []
    results = {}
    try:
        _start_node(f"ray start --head --node-ip-address 127.0.0.1 --port {port}",
                    path(copies["installed"]), tmp_path, nodes)
        _start_node(f"ray start --address 127.0.0.1:{port}", path(copies["stale"]),
                    tmp_path, nodes)
        for study, where in (("shipped", copies["src"]), ("unshipped", copies["installed"])):
            cmd = [sys.executable, "-m", "autoembed", "search", "--budget", "700MB",
                   "--space", "space.yaml", "--model", "clusteruser.loop:build",
                   "--example", "clusteruser.loop:example", "--train", "clusteruser.loop:train",
                   "--ray-address", f"127.0.0.1:{port}", "--workers", "2", "--trials", "4",
                   "--study", study, "--runs-dir", "runs", "--tracking-uri", "none"]
            done = subprocess.run(cmd, env=path(where), cwd=tmp_path, capture_output=True,
                                  text=True, timeout=900)
            assert done.returncode == 0, done.stderr[-4000:]
            import optuna

            results[study] = list(load_rows(optuna.load_study(
                study_name=study, storage=f"sqlite:///{tmp_path / 'runs' / 'optuna.db'}"
            )).values())
        head, other = nodes[0].node_id(), nodes[1].node_id()
    finally:
        for n in nodes:
            stop_session(n.sid, grace_s=5)
            shutil.rmtree(n.temp_dir, ignore_errors=True)
    for n in nodes:
        assert session_pids(n.sid) == [], n

    shipped = results["shipped"]
    assert len(shipped) == 4 and {r.status for r in shipped} == {"complete"}, shipped
    assert {r.node["ray_node_id"] for r in shipped} == {head, other}  # both nodes trained
    unshipped = results["unshipped"]
    on = {n: [r for r in unshipped if r.node.get("ray_node_id") == n] for n in (head, other)}
    assert on[head] and on[other], unshipped
    assert {r.status for r in on[head]} == {"complete"}
    for r in on[other]:
        assert r.status == "failed" and "has another copy of 'clusteruser.loop'" in r.reason
        assert str(copies["stale"]) in r.reason
