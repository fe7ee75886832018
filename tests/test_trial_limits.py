"""In process, a trial cannot overrule its time limit: one that blocks SIGALRM, swallows
every exception or catches the timeout and returns a quality ends as `timeout` within its
limit plus the executor's grace, is never on the front, and costs the seconds it ran."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _user_code import install_loop

import autoembed

LIMIT = 1.0  # seconds a trial may run here
GRACE = 1.0  # the executor's grace, shortened for the test

LOOP = textwrap.dedent('''
    import signal, time
    import torch
    from torch import nn

    STOP = False  # set by the test: an abandoned trial's thread then ends

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 4)
            self.out = nn.Linear(4, 2)
        def forward(self, ids):
            return self.out(self.emb(ids).mean(1)).logsumexp(1).mean()

    def build(params):
        return Bag()

    def example(params):
        return (torch.randint(0, 100, (4, 3)),)

    def naps():  # 8 s at most, so that the old executor ends too
        for _ in range(160):
            if STOP:
                return
            time.sleep(0.05)

    def train(model, params, report):
        mode = params["mode"]
        if mode == "blocks":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            naps()
        elif mode == "swallows":
            t0 = time.monotonic()
            while not STOP and time.monotonic() - t0 < 8:
                try:
                    naps()
                except BaseException:
                    pass
        elif mode == "fakes":
            try:
                naps()
            except BaseException:
                return {"quality": 0.99}
        return {"quality": 0.99 if mode != "ok" else 0.5}
''')


def test_a_misbehaving_trial_ends_as_timeout_within_its_limit_and_grace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoembed.pipeline import executor
    from autoembed.tracking import NullTracker

    monkeypatch.setattr(executor, "GRACE_S", GRACE)
    mod = install_loop(tmp_path, "limited", LOOP, monkeypatch)
    space = tmp_path / "space.yaml"
    space.write_text("embedding: {precision: fp32, table_optimizer: adam}\n"
                     "user:\n  mode: {choices: [ok, blocks, swallows, fakes]}\n"
                     "objectives: [quality, memory]\n")
    try:
        res = autoembed.search(budget="700MB", model=mod.build, example=mod.example,
                               train=mod.train, space=str(space), executor="local",
                               sampler="grid", trials=4, trial_time_limit=LIMIT,
                               study="limits", runs_dir=tmp_path / "runs",
                               tracker=NullTracker())
    finally:
        mod.STOP = True
    rows = {r.params["user.mode"]: r for r in res.rows}
    assert set(rows) == {"ok", "blocks", "swallows", "fakes"}
    assert rows["ok"].status == "complete" and res.best.number == rows["ok"].number
    assert [r.number for r in res.front] == [rows["ok"].number]
    for mode in ("blocks", "swallows", "fakes"):
        m = rows[mode].metrics
        assert rows[mode].status == "timeout", (mode, rows[mode].reason)
        # its cost is the seconds it ran: its limit, and for the one that never yields
        # the grace too; none of it is the search's overhead
        assert LIMIT <= m["wall_seconds"] <= LIMIT + GRACE + 0.5, (mode, m)
        assert m["train_seconds"] >= LIMIT, (mode, m)
        assert m["overhead_seconds"] - m["ask_seconds"] - m["pricing_seconds"] < 0.5, (mode, m)
    assert rows["swallows"].metrics["wall_seconds"] >= LIMIT + GRACE  # abandoned
