"""Real data (`RunSettings.fit_to_data`): a training length from the data's size, the trial
judged by its best validation evaluation, and an exported config that trains that long."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.export import export_config
from autoembed.pipeline.records import objective_metrics
from autoembed.runner import RunSettings, run_trial
from autoembed.training import stored_steps, train

PEAK = 375  # the injected curve's best step


def _clicks(tmp_path: Path, n: int = 1000, seed: int = 3) -> Any:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 30, n)
    y = ((a % 3 == 0) ^ (rng.random(n) < 0.2)).astype(int)  # learnable, with label noise
    frame = pd.DataFrame({"a": a.astype(str), "b": rng.integers(0, 5, n).astype(str), "y": y})
    path = tmp_path / "clicks.csv"
    frame.to_csv(path, index=False)
    return load_dataset(DataSpec(str(path), label="y", categorical=("a", "b")))


def _weight(step: int) -> float:
    """The injected curve: the signal grows to step PEAK, then fades (overfitting)."""
    return 0.25 * (1.0 - abs(step - PEAK) / 1000)  # below the noise span: AUC < 1


def _noise(ids: torch.Tensor) -> torch.Tensor:
    return (ids[:, 0].double() * 0.37) % 1.0


class CurveTrainer:
    """Stands in for a Trainer: its one weight follows `_weight(step)`, and its logits are
    weight x (2y - 1) plus a fixed noise per id, so validation AUC follows the curve."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.model = torch.nn.Linear(1, 1, bias=False)
        self.n = 0

    def step(self, batches: list[Batch]) -> float:
        self.n += 1
        with torch.no_grad():
            self.model.weight.fill_(_weight(self.n))
        return 0.5

    def predict(self, batch: Batch) -> torch.Tensor:
        w = float(self.model.weight.item())
        return w * (2 * batch.labels.double() - 1) + _noise(batch.features["a"])


def _auc_at(dataset: Any, split: str, w: float) -> float:
    ys, zs = [], []
    for b in dataset.batches(split, 4096, shuffle=False):
        ys.append(b.labels.numpy())
        zs.append((w * (2 * b.labels.double() - 1) + _noise(b.features["a"])).numpy())
    return float(roc_auc_score(np.concatenate(ys), np.concatenate(zs)))


def _config() -> EmbeddingConfig:
    return EmbeddingConfig(tables=(TableConfig("a", 1), TableConfig("b", 1)), dim=8,
                           batch_size=16, dense_layers=(8,), lr=0.05)


def test_best_evaluation_of_an_injected_curve_is_the_trial_and_its_export(
        tmp_path: Path) -> None:
    data = _clicks(tmp_path)
    assert data.num_rows("train") == 800
    # 800 rows <= 600k samples: 20 epochs (the cap) of 800 // 16 = 50 steps, 8 evaluations
    r = run_trial(_config(), data, RunSettings(fit_to_data=True, measure_latency=False,
                                               test_batches=None), trainer=CurveTrainer())
    assert r.status == "complete" and r.steps == 1000
    assert [e.step for e in r.curve] == list(range(125, 1001, 125))
    assert r.best_step == PEAK and r.best_samples == PEAK * 16
    assert r.valid_quality == pytest.approx(_auc_at(data, "valid", _weight(PEAK)))
    # the test figure is of the best evaluation's weights, not the last step's
    assert r.test_quality == pytest.approx(_auc_at(data, "test", _weight(PEAK)))
    assert r.test_quality != pytest.approx(_auc_at(data, "test", _weight(1000)))
    # the validation predictions the driver pairs trials on are the best evaluation's
    ys = np.concatenate([b.labels.numpy() for b in data.batches("valid", 64, shuffle=False)])
    want = np.concatenate([(_weight(PEAK) * (2 * b.labels.double() - 1)
                            + _noise(b.features["a"])).numpy()
                           for b in data.batches("valid", 64, shuffle=False)])
    assert r.valid_scores is not None and r.valid_scores.labels.tolist() == ys.tolist()
    assert r.valid_scores.scores == pytest.approx(want.astype(np.float32))
    assert "valid_scores" not in r.to_dict()  # never stored

    # the exported file carries the step; `autoembed train --config` reads it
    runs = tmp_path / "runs"
    (runs / "s").mkdir(parents=True)
    metrics = objective_metrics(r, r.estimate, use_measured=False)
    (runs / "s" / "pareto.json").write_text(json.dumps({
        "members": [{"trial": 4, "config": r.config.to_dict(), "metrics": metrics}],
        "best": 4, "data": r.config.data}))
    out = export_config("s", tmp_path / "best.yaml", runs_dir=runs)
    assert stored_steps(out.path) == PEAK


def test_without_fit_to_data_the_last_evaluation_counts(tmp_path: Path) -> None:
    data = _clicks(tmp_path)
    r = run_trial(_config(), data, RunSettings(max_steps=500, eval_every=125,
                                               measure_latency=False), trainer=CurveTrainer())
    assert [e.step for e in r.curve] == [125, 250, 375, 500]
    assert r.best_step == 500
    assert r.valid_quality == pytest.approx(_auc_at(data, "valid", _weight(500)))


def test_training_the_exported_step_reproduces_the_trial(tmp_path: Path) -> None:
    data = _clicks(tmp_path, n=600)
    # 480 train rows at batch 64: 20 epochs of 7 steps = 140 steps, evaluated every 17
    r = run_trial(replace(_config(), batch_size=64), data,
                  RunSettings(fit_to_data=True, measure_latency=False, threads=1))
    assert r.status == "complete" and r.steps == 140 and r.best_step is not None
    assert r.best_step % 17 == 0 or r.best_step == 140
    again = train(r.config, data=data, out_dir=tmp_path / "t", max_steps=r.best_step,
                  measure={"eval_every": r.best_step})
    assert again.steps == r.best_step
    assert again.valid_quality == pytest.approx(r.valid_quality, abs=1e-9)
