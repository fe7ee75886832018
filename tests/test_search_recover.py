"""A driver killed between Optuna's ask and the trial's first row: the trial still gets a
row (interrupted) and its params are re-queued once."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from _user_code import install_loop

from autoembed.config import EmbeddingConfig
from autoembed.pipeline.study import load_rows, recover


def test_trial_asked_but_never_recorded_gets_an_interrupted_row_and_a_retry() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    t = study.ask()
    t.suggest_int("dim", 8, 64)  # killed here: RUNNING, params set, no row yet
    rec = recover(study, storage, "interrupted", lambda p: EmbeddingConfig(dim=p["dim"]))
    assert rec.interrupted == (0,) and rec.requeued == (0,)
    rows = load_rows(study)
    assert rows[0].status == "interrupted" and rows[0].interrupted
    assert rows[0].config.dim == t.params["dim"]
    states = [x.state for x in study.get_trials()]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]


def test_trial_stopped_before_any_param_is_interrupted_in_its_ask_not_retried() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    study.ask()  # killed before the first suggest: no params
    rec = recover(study, storage, "interrupted", lambda p: EmbeddingConfig(**p))
    assert rec.interrupted == rec.in_ask == (0,) and rec.requeued == ()
    assert rec.describe() == (
        "1 trial(s) left running by the stopped driver (0) recorded as interrupted (not "
        "counted); trial 0 stopped in its ask before any value was drawn (the next ask "
        "replaces it)")
    rows = load_rows(study)
    assert rows[0].status == "interrupted" and rows[0].interrupted
    assert [x.state for x in study.get_trials()] == [optuna.trial.TrialState.FAIL]


ASK_LOOP = '''
import torch
from torch import nn

TRAINED = [0]
INTERRUPT = [True]  # Ctrl-C once, in the first pricing after a trial trained


class Bag(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = nn.Embedding(100, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids):
        return self.out(self.emb(ids).mean(1)).logsumexp(1).mean()


def build(params):
    if TRAINED[0] and INTERRUPT[0]:
        INTERRUPT[0] = False
        raise KeyboardInterrupt
    return Bag(params["dim"])


def example(params):
    return (torch.randint(0, 100, (4, 3)),)


def train(model, params, report):
    TRAINED[0] += 1
    return {"quality": 0.5 + params["dim"] / 100}
'''


def test_a_trial_interrupted_in_its_ask_is_interrupted_requeued_and_in_trials_csv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the second proposal of a user search is priced: that trial is recorded
    `interrupted` (not failed, not counted), said to be stopped in its ask (not "retried
    once already"), re-queued once on resume where values were drawn, and in trials.csv."""
    import csv

    import autoembed
    from autoembed.tracking import NullTracker

    mod = install_loop(tmp_path, "askstop", ASK_LOOP, monkeypatch)
    space = tmp_path / "space.yaml"
    space.write_text("embedding: {precision: fp32, table_optimizer: adam}\n"
                     "user:\n  dim: {choices: [4, 8, 16, 32]}\nobjectives: [quality, memory]\n")
    kw = {"budget": "700MB", "model": mod.build, "example": mod.example, "train": mod.train,
          "space": str(space), "executor": "local", "sampler": "grid", "trials": 2,
          "study": "s", "runs_dir": tmp_path / "runs", "tracker": NullTracker()}
    with pytest.raises(KeyboardInterrupt) as stopped:
        autoembed.search(**kw)
    said = str(stopped.value)
    assert "recorded as interrupted" in said and "retry already" not in said, said
    res = autoembed.search(resume=True, **kw)
    with (res.out_dir / "trials.csv").open(newline="") as fh:
        table = {int(r["trial"]): r for r in csv.DictReader(fh)}
    assert table[1]["status"] == "interrupted", table[1]
    retries = [n for n, r in table.items() if r["retry_of"] == "1"]
    # re-queued once, with the values it was given
    assert "re-queued 1 of them once (trial 1)" in said, said
    assert len(retries) == 1
    assert table[retries[0]]["param.user.dim"] == table[1]["param.user.dim"] != ""
    assert sum(1 for r in res.rows if r.counted) == 2 and res.count("failed") == 0
    body = json.loads((res.out_dir / "pareto.json").read_text())
    assert body["counts"]["interrupted"] == 1 and body["counts"]["failed"] == 0


def test_a_retry_stopped_in_its_ask_is_requeued_with_its_values() -> None:
    """A re-queued trial that never trained (stopped in its own ask) is re-queued again:
    the once-only rule is for retries that ran."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    first = study.ask()
    first.suggest_int("dim", 8, 64)
    recover(study, storage, "interrupted", lambda p: EmbeddingConfig(**p))
    study.ask()  # the retry, stopped before its first suggest
    rec = recover(study, storage, "interrupted", lambda p: EmbeddingConfig(**p))
    assert rec.interrupted == rec.requeued == (1,) and rec.in_ask == ()
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert waiting.system_attrs["fixed_params"] == first.params
    assert waiting.user_attrs["retry_of"] == 0
