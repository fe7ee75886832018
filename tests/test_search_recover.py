"""A driver killed between Optuna's ask and the trial's first row: the trial still gets a
row (failed, interrupted) and its params are re-queued once."""

from __future__ import annotations

import optuna

from autoembed.config import EmbeddingConfig
from autoembed.pipeline.study import load_rows, recover


def test_trial_asked_but_never_recorded_gets_a_row_and_a_retry() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    t = study.ask()
    t.suggest_int("dim", 8, 64)  # killed here: RUNNING, params set, no row yet
    rec = recover(study, storage, "interrupted", lambda p: EmbeddingConfig(dim=p["dim"]))
    assert rec.failed == (0,) and rec.requeued == (0,)
    rows = load_rows(study)
    assert rows[0].status == "failed" and rows[0].interrupted
    assert rows[0].config.dim == t.params["dim"]
    states = [x.state for x in study.get_trials()]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]


def test_trial_killed_before_any_param_gets_a_row_and_no_retry() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s", directions=["maximize"])
    study.ask()  # killed before the first suggest: no params
    rec = recover(study, storage, "interrupted", lambda p: EmbeddingConfig(**p))
    assert rec.failed == (0,) and rec.requeued == ()
    rows = load_rows(study)
    assert rows[0].status == "failed" and rows[0].interrupted
    assert [x.state for x in study.get_trials()] == [optuna.trial.TrialState.FAIL]
