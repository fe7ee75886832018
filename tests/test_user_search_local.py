"""A local user search end to end on a tiny model, with a budget that binds."""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

import autoembed

USER = textwrap.dedent('''
    import math
    import torch
    from torch import nn

    class Bag(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.emb = nn.Embedding(40_000, dim)
            self.out = nn.Linear(dim, 2)
        def forward(self, ids, y):
            return nn.functional.cross_entropy(self.out(self.emb(ids).mean(1)), y)

    def data(n, seed):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 50, (n, 4), generator=g)
        return ids, (ids < 25).sum(1).gt(2).long()

    def build(params):
        torch.manual_seed(0)
        return Bag(params["dim"])

    def example(params):
        return data(params["batch_size"], 0)

    def own_apply(model, config):  # a search's own apply: autoembed's, marked
        import autoembed
        model.applied_by_user = True
        return autoembed.apply(model, config)

    def train(model, params, report):
        if params["lr"] > 0.5:
            raise RuntimeError("lr too high for my loop")
        ids, y = data(256, 0)
        vids, vy = data(256, 1)
        opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
        for step in range(1, 41):
            opt.zero_grad()
            loss = model(ids[:32], y[:32])
            loss.backward(); opt.step()
            if step % 20 == 0:
                with report.evaluating(), torch.no_grad():
                    q = float((model.out(model.emb(vids).mean(1)).argmax(1) == vy).float().mean())
                report(step=step, samples=step * 32, quality=q)
''')


@pytest.fixture
def user(tmp_path: Path, monkeypatch):
    pkg = tmp_path / "src" / "tinyuser"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loop.py").write_text(USER)
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""
        embedding: {precision: fp32, table_optimizer: adam}
        user:
          dim: {choices: [8, 1024]}
          lr: {choices: [0.05, 0.9]}
          batch_size: 32
        trials: 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)
    forget_user_modules()
    return importlib.import_module("tinyuser.loop"), tmp_path


def forget_user_modules() -> None:
    """The next import of tinyuser.loop reads this test's file (the package too: a previous
    test's `tinyuser` would find its own loop.py)."""
    for name in ("tinyuser.loop", "tinyuser"):
        sys.modules.pop(name, None)


def api_search(user, study: str, trials: int):
    """autoembed.search over the tiny user model, in process, without MLflow."""
    from autoembed.tracking import NullTracker

    mod, root = user
    return autoembed.search(budget="700MB", model=mod.build, example=mod.example,
                            train=mod.train, space=str(root / "space.yaml"), trials=trials,
                            executor="local", study=study, runs_dir=root / "runs",
                            tracker=NullTracker())


def test_local_search_binds_and_records(user) -> None:
    _, root = user
    from autoembed.tracking import NullTracker
    res = autoembed.search("700MB", root / "space.yaml", model="tinyuser.loop:build",
                           example="tinyuser.loop:example", train="tinyuser.loop:train",
                           executor="local", study="t1", runs_dir=root / "runs",
                           tracker=NullTracker())
    by = {}
    for r in res.rows:
        by.setdefault(r.status, []).append(r)
    # the budget binds: a dim-1024 config (1.4 GB) never trains (ehvi prices it and does not
    # propose it; a sampler that does sees it told infeasible)
    assert all(r.params["user.dim"] == 1024 and r.result is None
               for r in by.get("infeasible", []))
    assert all(r.params["user.dim"] == 8 for r in res.rows if r.status != "infeasible")
    # the loop raising is the trial's failure, with the user's traceback
    assert all(r.params["user.lr"] == 0.9 for r in by.get("failed", []))
    for r in by.get("failed", []):
        assert r.reason.startswith("RuntimeError: lr too high for my loop")
        assert "tinyuser/loop.py" in r.reason
    done = by["complete"]
    assert done and all(r.metrics["quality"] > 0.6 for r in done)
    assert res.best is not None and res.best.params["user.dim"] == 8
    assert (res.out_dir / "trials.csv").exists() and (res.out_dir / "pareto.json").exists()


def test_cli_runs_a_local_user_search(user, capsys) -> None:
    from autoembed.cli import main

    _, root = user
    rc = main(["search", "--budget", "700MB", "--space", str(root / "space.yaml"),
               "--model", "tinyuser.loop:build", "--example", "tinyuser.loop:example",
               "--train", "tinyuser.loop:train", "--executor", "local", "--study", "c1",
               "--runs-dir", str(root / "runs"), "--tracking-uri", "none"])
    out = capsys.readouterr()
    assert rc == 0
    # the same output as a built-in search: the front table, the counts and the files
    assert "Pareto front of study 'c1'" in out.out and "over budget" in out.out
    assert "pareto.json" in out.out and "best.yaml" in out.out
    # within-noise says how it picked, as a built-in search does: no noise measured, so the
    # best quality (the summary said nothing, and docs/searching.md claimed an unpaired SE)
    rows = list(csv.DictReader((root / "runs" / "c1" / "trials.csv").open()))
    best = max((r for r in rows if r["status"] == "complete"), key=lambda r: float(r["quality"]))
    assert "no standard error was measured" in " ".join(out.out.split())
    pareto = json.loads((root / "runs" / "c1" / "pareto.json").read_text())
    assert pareto["noise"] is None and pareto["best"] == int(best["trial"])
    # 2 of the 4 configs fit (dim 8), 3 trials asked: each trains once, and the search
    # ends saying so, exit 0 with its files written
    assert "(every fitting config tried: 2)" in " ".join(out.out.split())
    rows = list(csv.DictReader((root / "runs" / "c1" / "trials.csv").open()))
    assert sorted((r["param.user.dim"], r["param.user.lr"]) for r in rows) == [
        ("8", "0.05"), ("8", "0.9")]
    # trials.csv says which row is the model as written (trial 0), as pareto.json does
    assert [(r["trial"], r["origin"]) for r in rows] == [("0", "as written"), ("1", "")]


@pytest.mark.parametrize("args, says", [
    (["--model", "tinyuser.loop:build"], "--example, --train missing"),
    (["--model", "tinyuser.loop:biuld", "--example", "tinyuser.loop:example", "--train",
      "tinyuser.loop:train"], "has no 'biuld' (did you mean 'build'?)"),
    (["--model", "tinyuser.loop:build", "--example", "tinyuser.loop:example", "--train",
      "tinyuser.loop:train", "--data", "movielens"],
     "--data does not apply to a search over your own model"),
])
def test_cli_bad_input_is_one_line_exit_2(user, capsys, args, says) -> None:
    from autoembed.cli import main

    _, root = user
    rc = main(["search", "--budget", "700MB", "--space", str(root / "space.yaml"), *args,
               "--runs-dir", str(root / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and err.count("\n") == 1
    assert not (root / "runs" / "optuna.db").exists()  # nothing made before the check


def test_python_api(user) -> None:
    res = api_search(user, "api", 1)
    assert res.count("complete") + res.count("failed") == 1


def test_sigkill_then_resume_loses_nothing(user, tmp_path, monkeypatch, capsys) -> None:
    """A driver killed by SIGKILL mid-trial: --resume keeps every recorded trial, fails and
    re-queues the one it was running, and finishes the search. The killed driver is a CLI
    process; the resume is the CLI's `main` in this process (what a new process would add,
    on Ray: test_search_resilience.py)."""
    import os
    import signal
    import subprocess
    import time

    import optuna

    from autoembed.cli import main

    _, root = user
    (root / "space.yaml").write_text(textwrap.dedent("""
        embedding: {precision: fp32, table_optimizer: adam}
        user:
          dim: {choices: [8, 16]}
          lr: {choices: [0.05, 0.1]}
          batch_size: 32
        trials: 3
    """))
    loop = (root / "src" / "tinyuser" / "loop.py")
    loop.write_text(loop.read_text() + textwrap.dedent('''
        import os, pathlib, time as _time
        _train = train
        def train(model, params, report):
            marks = pathlib.Path(os.environ["MARKS"])
            marks.mkdir(exist_ok=True)
            n = len(list(marks.iterdir()))
            (marks / str(n)).write_text("")
            if n == 1 and os.environ.get("HANG"):
                _time.sleep(600)  # the second trial hangs until the driver is killed
            return _train(model, params, report)
    '''))
    base = [sys.executable, "-m", "autoembed", "search", "--budget", "700MB", "--space",
            str(root / "space.yaml"), "--model", "tinyuser.loop:build", "--example",
            "tinyuser.loop:example", "--train", "tinyuser.loop:train", "--executor", "local",
            "--study", "k", "--runs-dir", str(root / "runs"), "--tracking-uri", "none"]
    env = {**os.environ, "MARKS": str(root / "marks"), "HANG": "1",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(base, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while not (root / "marks" / "1").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    storage = f"sqlite:///{root / 'runs' / 'optuna.db'}"
    before = optuna.load_study(study_name="k", storage=storage).trials
    done_before = [t for t in before if t.state.name == "COMPLETE"]
    assert len(done_before) == 1 and any(t.state.name == "RUNNING" for t in before)
    monkeypatch.setenv("MARKS", str(root / "marks"))
    forget_user_modules()  # the loop as rewritten above, not as first imported
    rc = main([*base[3:], "--resume"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"took over the lock of study 'k' from pid {proc.pid}" in err, err
    after = optuna.load_study(study_name="k", storage=storage).trials
    first = after[done_before[0].number]
    assert first.state.name == "COMPLETE" and first.values == done_before[0].values
    killed = next(t for t in before if t.state.name == "RUNNING").number
    assert after[killed].state.name == "FAIL"
    retry = [t for t in after if t.user_attrs.get("retry_of") == killed]
    assert len(retry) == 1 and retry[0].params == after[killed].params
    assert sum(t.state.name == "COMPLETE" for t in after) == 3  # the search finished


def test_export_python_rebuilds_the_pick(user) -> None:
    from autoembed.export import export_config

    _, root = user
    res = api_search(user, "ex", 2)
    done = export_config("ex", root / "best_model.py", fmt="python", runs_dir=root / "runs")
    module, cfg = done.path, done.path.with_suffix(".yaml")
    assert done.trial == res.best.number and cfg.exists()
    spec = importlib.util.spec_from_file_location("best_model_x", module)
    built = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(built)
    assert built.PARAMS["dim"] == res.best.params["user.dim"]
    model = built.build_model()
    assert model.emb.weight.shape == (40_000, built.PARAMS["dim"])
    assert autoembed.load_config(cfg).tables[0].name == "emb"


def test_export_python_rebuilds_each_member_as_its_trial_built_it(user) -> None:
    """A search with its own apply: a member's module calls it, and the model as written
    (trial 0, always on this front: it is the only feasible dim) is `build(params)` alone."""
    import json

    from autoembed.export import export_config
    from autoembed.tracking import NullTracker

    mod, root = user
    autoembed.search(budget="700MB", model=mod.build, example=mod.example, train=mod.train,
                     apply=mod.own_apply, space=str(root / "space.yaml"), trials=2,
                     executor="local", study="ap", runs_dir=root / "runs",
                     tracker=NullTracker())
    members = json.loads((root / "runs" / "ap" / "pareto.json").read_text())["members"]
    assert {m["trial"]: m["origin"] for m in members}.get(0) == "as written"
    for m in members:
        out = root / f"m{m['trial']}.py"
        export_config("ap", out, pick=f"trial:{m['trial']}", fmt="python",
                      runs_dir=root / "runs")
        spec = importlib.util.spec_from_file_location(f"ap_{m['trial']}", out)
        built = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(built)
        model = built.build_model()
        assert getattr(model, "applied_by_user", False) == (m["origin"] is None), m["trial"]


def test_cli_export_format_python(user, capsys) -> None:
    from autoembed.cli import main

    _, root = user
    res = api_search(user, "cx", 1)
    rc = main(["export", "--study", "cx", "--format", "python", "--out",
               str(root / "m.py"), "--runs-dir", str(root / "runs")])
    assert rc == 0 and (root / "m.py").exists() and (root / "m.yaml").exists()
    # the record's source carries the trial's metrics, as an export of autoembed's models
    # does (it had study, trial, pick and memory only)
    import yaml

    source = yaml.safe_load((root / "m.yaml").read_text())["source"]
    assert source["trial"] == res.best.number
    assert source["metrics"]["quality"] == res.best.metrics["quality"]
    assert source["metrics"]["memory"] == res.best.estimate["allocated_peak"]
    assert main(["export", "--study", "cx", "--format", "python", "--out",
                 str(root / "m.py"), "--runs-dir", str(root / "runs")]) == 2  # exists


def test_ray_executor_runs_the_users_loop(user, monkeypatch) -> None:
    """executor='ray': trials run in a Ray worker started elsewhere, the user's package
    arriving only through the runtime_env."""
    monkeypatch.setenv("RAY_worker_niceness", "0")
    from autoembed.tracking import NullTracker

    mod, root = user
    res = autoembed.search(budget="700MB", model=mod.build, example=mod.example,
                           train=mod.train, space=str(root / "space.yaml"), trials=2,
                           executor="ray", study="ray1", runs_dir=root / "runs",
                           tracker=NullTracker())
    assert res.count("complete") + res.count("failed") == 2
    assert all(r.node.get("ray_node_ip") for r in res.rows if r.status == "complete")


def test_a_trial_off_the_front_exports_with_its_stored_params(user) -> None:
    """A user-search trial that is not a pareto.json member (from trials.csv, or a run id)
    exports with the params the study stored for it, as a member does (it was refused:
    'params were not recorded; export a front member')."""
    _, root = user
    api_search(user, "off", 2)
    pj = root / "runs" / "off" / "pareto.json"
    body = json.loads(pj.read_text())
    member = body["members"][0]
    body["members"] = body["members"][1:]  # trial N now comes from trials.csv
    pj.write_text(json.dumps(body))
    n = member["trial"]
    out = root / "off.yaml"
    from autoembed.export import export_config

    export_config("off", out, pick=f"trial:{n}", runs_dir=root / "runs")
    import yaml

    record = yaml.safe_load(out.read_text())
    flat = member["params"]  # the Optuna params pareto.json held for it
    assert record["source"]["trial"] == n
    assert (record["params"]["dim"], record["params"]["lr"]) == (flat["user.dim"],
                                                                 flat["user.lr"])
    # a stopped search has no pareto.json: its trials still export as the user's record
    # (they were written as a config of autoembed's CTR model, `task: ctr` and all)
    pj.unlink()
    export_config("off", root / "stopped.yaml", pick=f"trial:{n}", runs_dir=root / "runs")
    stopped = yaml.safe_load((root / "stopped.yaml").read_text())
    assert stopped["params"]["dim"] == flat["user.dim"] and "task" not in stopped["config"]
    assert [t["name"] for t in stopped["config"]["tables"]] == ["emb"]
