"""A user search survives the user's faults, stops trials that cannot reach the front, and
logs the loop's learning curve: in process and on Ray."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _user_code import install_loop

import autoembed
from autoembed.errors import ConfigError

LOOP = textwrap.dedent('''
    import math, os, pathlib, signal
    import torch
    from torch import nn
    import autoembed

    class Bag(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.emb = nn.Embedding(1000, dim)
            self.out = nn.Linear(dim, 2)
        def forward(self, ids):
            return self.out(self.emb(ids).mean(1)).logsumexp(1).mean()

    def build(params):
        if params["mode"] == "badbuild" or os.environ.get("BUILD_FAILS"):
            raise ValueError("no such layer size")
        torch.manual_seed(0)
        return Bag(8)

    def example(params):
        return (torch.randint(0, 1000, (4, 3)),)

    def train(model, params, report):
        mode = params["mode"]
        if mode == "raise":
            raise RuntimeError("my loop broke")
        if mode == "oom":  # what the user's loop raises on a GPU that runs out
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        # quality by mode: a plateau the scheduler can judge (4 reports, 10 steps apart)
        q = {"good": 0.9, "ok": 0.8, "bad": 0.1}.get(mode, 0.5)
        for step in (10, 20, 30, 40):
            if mode == "nan" and step == 20:
                report(step=step, samples=step * 4, quality=math.nan)
            if mode == "metric" and step == 20:
                report(step=step, samples=step * 4, quality=q, acuracy=0.5)
            try:
                report(step=step, samples=step * 4, quality=q + step / 1e4)
            except autoembed.TrialStopped:
                pathlib.Path(os.environ["STOPPED"], str(params["seed"])).write_text(str(step))
                raise
        return {"quality": q + 0.004}
''')


@pytest.fixture
def user(tmp_path: Path, monkeypatch):
    (tmp_path / "stopped").mkdir()
    monkeypatch.setenv("STOPPED", str(tmp_path / "stopped"))
    return install_loop(tmp_path, "faultyuser", LOOP, monkeypatch), tmp_path


def space(root: Path, modes: list[str], trials: int, early_stop: bool = False) -> Path:
    path = root / f"space-{len(list(root.glob('space-*')))}.yaml"
    es = "early_stop: {max_steps: 40, eval_every: 10}\n" if early_stop else ""
    path.write_text(textwrap.dedent(f"""
        embedding: {{precision: fp32, table_optimizer: adam}}
        user:
          mode: {{choices: {modes}}}
          seed: {{low: 0, high: 1000000}}
        objectives: [quality, memory]
        trials: {trials}
    """) + es)
    return path


def run(user, modes, trials, *, study, executor="local", early_stop=False, tracking=None,
        seed=0, sampler=None):
    from autoembed.tracking import NullTracker

    mod, root = user
    opts = ({"tracking_uri": tracking} if tracking else {"tracker": NullTracker()})
    return autoembed.search(budget="700MB", model=mod.build, example=mod.example,
                            train=mod.train, space=str(space(root, modes, trials, early_stop)),
                            executor=executor, study=study, runs_dir=root / "runs", seed=seed,
                            sampler=sampler, **opts)


def by_mode(res) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in res.rows:
        out.setdefault(r.params["user.mode"], []).append(r)
    return out


def test_an_oom_in_the_users_loop_is_oom_and_sets_the_ceiling(user, monkeypatch) -> None:
    """A trial whose loop runs out of device memory is `oom`, and every later proposal at
    or above its priced size (here: all, one model size) is over the ceiling, never run
    (the search gives up after 5 such proposals in a row instead of 300)."""
    import autoembed.pipeline.engine as engine

    monkeypatch.setattr(engine, "MAX_REJECTIONS_IN_A_ROW", 5)
    res = run(user, ["ok", "oom"], 4, study="o", seed=1, sampler="random")  # an ok trial first
    statuses = [(r.params["user.mode"], r.status) for r in res.rows]
    first = next((i for i, (m, _) in enumerate(statuses) if m == "oom"), None)
    assert first is not None, "reseed: no oom proposal"
    assert statuses[first][1] == "oom"
    assert all(r.status == "complete" for r in res.rows[:first])
    later = res.rows[first + 1:]
    assert later and all(r.status == "infeasible" for r in later), statuses
    assert all(r.estimate["device_total"] >= res.rows[first].estimate["device_total"]
               for r in later)


def test_faults_in_the_users_code_are_the_trials(user) -> None:
    """Each fault is its trial's status; a build failing on a later proposal is that
    proposal's failure with the message, and the search goes on to its trial count.
    Random proposals (`ehvi` proposes no config it could not price)."""
    res = run(user, ["ok", "raise", "nan", "metric", "badbuild"], 14, study="f", seed=0,
              sampler="random")
    got = by_mode(res)
    assert set(got) == {"ok", "raise", "nan", "metric", "badbuild"}, "widen trials or reseed"
    assert res.rows[0].params["user.mode"] != "badbuild"  # else: bad input, exit before trials
    assert all(r.status == "complete" for r in got["ok"])
    for r in got["raise"]:
        assert r.status == "failed" and r.reason.startswith("RuntimeError: my loop broke")
        assert "faultyuser/loop.py" in r.reason and "in train" in r.reason
    assert all(r.status == "diverged" and "not finite" in r.reason for r in got["nan"])
    for r in got["metric"]:
        assert r.status == "failed" and "unknown metric 'acuracy'" in r.reason
    for r in got["badbuild"]:
        assert r.status == "failed" and r.result is None
        assert "raised ValueError: no such layer size" in r.reason
    assert len(res.rows) == 14


def test_a_build_failing_on_the_first_proposal_is_bad_input(user, monkeypatch) -> None:
    import optuna

    _, root = user
    monkeypatch.setenv("BUILD_FAILS", "1")
    with pytest.raises(ConfigError, match="raised ValueError: no such layer size"):
        run(user, ["ok"], 3, study="b")
    # priced before the study is made: nothing trained, no study left to block a rerun
    assert "b" not in optuna.get_all_study_names(f"sqlite:///{root / 'runs' / 'optuna.db'}")


def _early_stop_checks(res, root: Path, raised_in_loop: bool) -> None:
    got = by_mode(res)
    first_good = min((r.number for r in got.get("good", []) if r.status == "complete"),
                     default=None)
    assert first_good is not None, "reseed: no good trial completed"
    late_bad = [r for r in got.get("bad", []) if r.number > first_good]
    assert late_bad, "reseed: no bad trial after the first good one"
    for r in late_bad:  # a good trial on the front dominates its projection: stopped
        assert r.status == "pruned", (r.status, r.reason)
        assert r.metrics["steps"] == 20.0  # the second report, the first decision
        seen = root / "stopped" / str(r.params["user.seed"])
        assert (seen.read_text() == "20") if raised_in_loop else True
    assert all(r.status == "complete" for r in got["good"])  # never stopped: on the front
    assert all(r.status == "complete" for r in got.get("bad", []) if r.number < first_good)


def test_early_stop_reaches_the_users_loop_in_process(user) -> None:
    """The engine's stop decision comes back through the channel and is raised from
    `report` as TrialStopped inside the user's loop; the trial is pruned."""
    _, root = user
    res = run(user, ["good", "bad"], 8, study="es", early_stop=True, seed=2, sampler="random")
    _early_stop_checks(res, root, raised_in_loop=True)


def test_without_early_stop_nothing_is_pruned(user) -> None:
    res = run(user, ["good", "bad"], 8, study="nes", seed=2, sampler="random")
    assert res.count("pruned") == 0 and res.count("complete") == 8


def test_learning_curve_is_logged_by_step_in_mlflow(user) -> None:
    import mlflow

    _, root = user
    uri = f"sqlite:///{root / 'mlflow.db'}"
    res = run(user, ["ok"], 2, study="ml", tracking=uri)
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "tags.mlflow.runName = 'trial-0001'")
    assert len(runs) == 1 and runs[0].data.tags.get("mlflow.parentRunId")
    hist = client.get_metric_history(runs[0].info.run_id, "valid_quality")
    assert [(h.step, round(h.value, 4)) for h in hist] == [
        (10, 0.801), (20, 0.802), (30, 0.803), (40, 0.804)]
    assert runs[0].data.metrics["quality"] == pytest.approx(0.804)
    assert res.count("complete") == 2


def test_on_ray_early_stop_prunes_and_a_killed_worker_is_recorded(user) -> None:
    """Ray Tune: the scheduler's STOP ends the trial (pruned); a worker killed by SIGKILL
    in the user's loop is that trial's failure, and the search goes on."""
    _, root = user
    res = run(user, ["good", "bad", "kill"], 8, study="ray", executor="ray",
              early_stop=True, seed=2, sampler="random")
    got = by_mode(res)
    _early_stop_checks(res, root, raised_in_loop=False)
    assert got.get("kill"), "reseed: no kill trial"
    assert all(r.status == "failed" and r.reason for r in got["kill"])
    assert len(res.rows) == 8
