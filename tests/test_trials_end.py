"""Every trial ends (issue 26): a trial past its time limit is `timeout` and the search goes
on (in process and on Ray, whose worker is killed); a `sys.exit` in the user's loop is that
trial's failure; Ctrl-C ends a search with one line saying what was kept and how to resume;
on Ray a trial's prints land in runs/<study>/logs/ and the private Ray's session folder is
removed when the search ends."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _user_code import install_loop

import autoembed
from autoembed.errors import ConfigError

LOOP = textwrap.dedent('''
    import os, pathlib, sys, time
    import torch
    from torch import nn

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 8)
            self.out = nn.Linear(8, 2)
        def forward(self, ids):
            return self.out(self.emb(ids).mean(1)).logsumexp(1).mean()

    def build(params):
        torch.manual_seed(0)
        return Bag()

    def example(params):
        return (torch.randint(0, 1000, (4, 3)),)

    def train(model, params, report):
        calls = pathlib.Path(os.environ["CALLS"])
        n = len(calls.read_text()) if calls.exists() else 0
        calls.write_text("x" * (n + 1))
        print(f"trial says call {n}, seed {params['seed']}", flush=True)
        if os.environ.get("EXIT_AT") == str(n):
            sys.exit(3)
        if os.environ.get("HANG_AT") == str(n):
            while True:  # never reports, never returns
                time.sleep(0.05)
        if os.environ.get("CTRL_C_AT") == str(n):
            raise KeyboardInterrupt
        report(step=10, samples=40, quality=0.8)
        return {"quality": 0.8}
''')


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    return install_loop(tmp_path, "enduser", LOOP, monkeypatch), tmp_path


def space(root: Path, trials: int) -> Path:
    """The user's loop fails, hangs or gets Ctrl-C at the call its environment names."""
    path = root / "space.yaml"
    path.write_text(textwrap.dedent(f"""
        embedding: {{precision: fp32}}
        user:
          seed: {{low: 0, high: 1000000}}
        objectives: [quality, memory]
        trials: {trials}
    """))
    return path


def run(user, trials: int, *, study: str, **opts):
    from autoembed.tracking import NullTracker

    mod, root = user
    opts.setdefault("executor", "local")
    return autoembed.search(budget="700MB", model=mod.build, example=mod.example,
                            train=mod.train, space=str(space(root, trials)),
                            study=study, runs_dir=root / "runs", tracker=NullTracker(), **opts)


def test_in_process_a_hung_trial_times_out_and_sys_exit_fails_only_its_trial(
    user, monkeypatch
) -> None:
    """The second trial calls `sys.exit(3)`, the third hangs. Before: `sys.exit` ended the
    search (SystemExit through the executor), and a hung trial ran forever."""
    monkeypatch.setenv("EXIT_AT", "1")
    monkeypatch.setenv("HANG_AT", "2")
    res = run(user, 4, study="ip", trial_time_limit=1.5)
    assert [r.status for r in res.rows] == ["complete", "failed", "timeout", "complete"]
    exited, hung = res.rows[1], res.rows[2]
    assert "sys.exit(3)" in exited.reason, exited.reason
    assert "time limit of 1.5 s" in hung.reason and hung.counted, hung.reason


def test_ctrl_c_says_what_was_kept_and_how_to_resume(user, monkeypatch, capsys) -> None:
    """The third trial's loop gets Ctrl-C: exit 130 with one line naming the two trials kept,
    the one re-queued, and the command that resumes (before: 'autoembed: interrupted')."""
    from autoembed.cli import main

    _, root = user
    monkeypatch.setenv("CTRL_C_AT", "2")
    rc = main(["search", "--budget", "700MB", "--space", str(space(root, 5)),
               "--model", "enduser.loop:build", "--example", "enduser.loop:example",
               "--train", "enduser.loop:train", "--executor", "local", "--study", "cc",
               "--runs-dir", str(root / "runs"), "--tracking-uri", "none"])
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert rc == 130, cap
    last = err[-1]
    assert last.startswith("autoembed: interrupted: study 'cc' kept 2 trials (2 complete)")
    assert "1 trial(s) left running" in last and "re-queued 1 of them" in last
    assert "autoembed search --study cc --resume" in last
    assert not any("Traceback" in line for line in err)


def test_the_time_limit_is_stated_checked_and_derived() -> None:
    """The default by hand: built-in trials 600 s + 1 s a step until one completes, a user's
    loop 6 h; then 10x the longest completed trial, at least 600 s."""
    from autoembed.pipeline.time_limit import TrialTimeLimit

    assert TrialTimeLimit().for_trial(250, []) == 850.0
    assert TrialTimeLimit(user=True).for_trial(None, []) == 6 * 3600.0
    assert TrialTimeLimit(user=True).for_trial(None, [12.0, 95.0]) == 950.0
    assert TrialTimeLimit().for_trial(250, [3.0]) == 600.0
    assert TrialTimeLimit(7.0).for_trial(10**6, [1e4]) == 7.0
    assert "6 h" in TrialTimeLimit(user=True).describe()
    with pytest.raises(ConfigError, match="--trial-time-limit = 0"):
        autoembed.search(budget="1GB", space="tiny", trial_time_limit=0)


@pytest.mark.slow
def test_on_ray_a_hung_trial_is_killed_its_output_kept_and_ray_cleaned_up(
    user, monkeypatch
) -> None:
    """The second trial hangs: Ray kills its worker at the limit (timeout) and the third
    trial runs; every trial's print is in runs/<study>/logs/trial-NNNN.log; the session
    folder of the Ray the search started is gone afterwards (before: ~97 MB left in the
    temp directory for 3 trials)."""
    from autoembed.pipeline import ray_tune

    sessions: list[str | None] = []
    enter = ray_tune.ray_session.__enter__

    def spy(self):  # the session folder of the Ray this search starts
        got = enter(self)
        sessions.append(self.session_dir)
        return got

    monkeypatch.setattr(ray_tune.ray_session, "__enter__", spy)
    monkeypatch.setenv("HANG_AT", "1")
    res = run(user, 3, study="ray", executor="ray", trial_time_limit=25)
    assert [r.status for r in res.rows] == ["complete", "timeout", "complete"]
    logs = res.out_dir / "logs"
    for r in res.rows:
        text = (logs / f"trial-{r.number:04d}.log").read_text()
        assert f"seed {r.params['user.seed']}" in text, text
    assert len(sessions) == 1 and sessions[0] is not None
    assert Path(sessions[0]).name.startswith("session_")
    assert not Path(sessions[0]).exists()
