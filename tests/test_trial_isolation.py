"""Trials never open the store: a real search whose Ray workers cannot import mlflow or
optuna (tests/_store_guard.py) still completes its trials, while the driver records to
MLflow and Optuna as usual."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
TINY = TESTS.parent / "search_spaces" / "tiny.yaml"


def test_trial_workers_never_import_mlflow_or_optuna(tmp_path: Path) -> None:
    from autoembed.pipeline import search
    from autoembed.pipeline.ray_tune import ray_session

    log = tmp_path / "guard.log"
    log.touch()
    env = {"AUTOEMBED_STORE_GUARD_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # Ray's workers inherit the driver's environment
    try:  # Ray as a search starts it (without its idle helpers), with the guard
        with ray_session(None, 2, None,
                         runtime_env={"worker_process_setup_hook": "_store_guard.install"}):
            result = search("800MB", TINY, trials=3, seed=1, study="iso", runs_dir=tmp_path,
                            tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    lines = log.read_text().splitlines()
    assert any(line.endswith(" installed") for line in lines), lines  # the guard ran
    assert not [line for line in lines if "blocked" in line or "preloaded" in line], lines
    with (tmp_path / "iso" / "trials.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    trained = [r for r in rows if r["status"] not in ("infeasible",)]
    assert trained and all(r["status"] == "complete" for r in trained), rows
    assert "mlflow" in sys.modules and "optuna" in sys.modules  # the driver did open them
    assert result.front
