"""docs/clusters.md's "your own model" on one machine: a real two-node Ray cluster on
127.0.0.1 whose second node holds another copy of the user's package, a search of the user's
own model on it, then every process stopped by PID (tests/test_cluster.py follows the page's
commands; this file is apart so that the two clusters run in parallel under pytest-xdist)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _services import RayNode, free_port, session_pids, start_ray_node, stop_session
from _user_code import BAG_MODEL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

USER_LOOP = BAG_MODEL + '''

def example(params):
    ids = torch.randint(0, 1000, (16, 4))
    return ids, (ids < 500).sum(1).gt(1).long()


def train(model, params, report):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(1, 21):
        ids, y = example(params)
        opt.zero_grad()
        loss = model(ids, y)
        loss.backward(); opt.step()
    report(step=20, samples=320, quality=1.0 / (1.0 + float(loss)))
'''


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

    nodes: list[RayNode] = []
    results = {}
    try:
        start_ray_node(f"ray start --head --node-ip-address 127.0.0.1 --port {port}",
                    path(copies["installed"]), tmp_path, nodes)
        start_ray_node(f"ray start --address 127.0.0.1:{port}", path(copies["stale"]),
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
