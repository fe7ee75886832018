"""Selection on validation: the noise of a validation figure, read from the split's labels."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoembed.config import EmbeddingConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.runner import Evaluation, RunSettings
from autoembed.selection import (
    BestStep,
    best_evaluation,
    label_counts,
    pick_noise,
    to_target,
    training_length,
    validation_noise,
)


def _clicks(tmp_path: Path, n: int = 500) -> tuple[pd.DataFrame, object]:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.integers(0, 30, n).astype(str),
                          "y": (rng.random(n) < 0.3).astype(int)})
    path = tmp_path / "clicks.csv"
    frame.to_csv(path, index=False)
    return frame, load_dataset(DataSpec(str(path), label="y", categorical=("a",)))


def test_label_counts_read_the_first_rows(tmp_path: Path) -> None:
    frame, data = _clicks(tmp_path)
    yv = frame["y"].to_numpy()[data.split_rows("valid")]  # type: ignore[attr-defined]
    assert label_counts(data, "valid") == (int((yv == 0).sum()), int((yv == 1).sum()))
    assert label_counts(data, "valid", 7) == (int((yv[:7] == 0).sum()), int((yv[:7] == 1).sum()))


@dataclass(frozen=True)
class Row:
    number: int
    values: dict[str, float]
    config: EmbeddingConfig = field(default_factory=lambda: EmbeddingConfig(batch_size=16))


def test_noise_is_that_of_the_best_on_the_rows_it_was_measured_on(tmp_path: Path) -> None:
    frame, data = _clicks(tmp_path)
    yv = frame["y"].to_numpy()[data.split_rows("valid")]  # type: ignore[attr-defined]
    pos, neg = int(yv[:32].sum()), int(32 - yv[:32].sum())
    a = 0.7  # Hanley-McNeil by hand
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    want = math.sqrt((a * (1 - a) + (pos - 1) * (q1 - a * a) + (neg - 1) * (q2 - a * a))
                     / (pos * neg))
    rows = [Row(1, {"quality": 0.6}), Row(2, {"quality": 0.7}), Row(3, {"quality": math.nan})]
    assert pick_noise(rows, data, eval_batches=2) == pytest.approx(want)  # 2 x 16 rows
    assert validation_noise(data, 0.7, 32) == pytest.approx(want)
    assert pick_noise(rows, None, 2) is None
    assert pick_noise([Row(1, {"quality": math.nan})], data, 2) is None
    assert pick_noise(rows, data, None) == pytest.approx(
        validation_noise(data, 0.7, len(yv)))


def _curve(qualities: list[float], every: int = 50, batch: int = 512) -> list[Evaluation]:
    return [Evaluation((i + 1) * every, (i + 1) * every * batch, q, {"auc": q}, float(i))
            for i, q in enumerate(qualities)]


def test_best_evaluation_of_an_injected_curve() -> None:
    # rises, peaks at step 200, overfits; a tie at step 300 and a NaN later never win
    curve = _curve([0.70, 0.74, 0.77, 0.79, 0.78, 0.79, math.nan, 0.76])
    assert best_evaluation(curve) == BestStep(0.79, 200, 200 * 512)
    assert best_evaluation(list(reversed(curve))) == BestStep(0.79, 200, 200 * 512)
    assert best_evaluation(_curve([math.nan])) is None
    assert best_evaluation([]) is None


def test_steps_and_samples_to_a_target() -> None:
    curve = _curve([0.70, 0.74, 0.77, 0.79, 0.78])
    assert to_target(curve, 0.7721) == (200, 200 * 512)  # 0.77 is below it, 0.79 is not
    assert to_target(curve, 0.77) == (150, 150 * 512)  # reaching the target exactly counts
    assert to_target(curve, 0.80) is None  # never reached
    assert to_target(curve, None) is None  # no baseline, no target
    assert to_target(list(reversed(curve)), 0.75) == (150, 150 * 512)  # in step order


def test_training_length_follows_the_data_size() -> None:
    # MovieLens' 80,004 train rows at batch 512: ceil(600k / 80,004) = 8 epochs of 156 steps
    ml = training_length(80_004, 512)
    assert (ml.epochs, ml.max_steps) == (8, None)
    assert ml.samples == 8 * 156 * 512 and ml.eval_every == 8 * 156 // 8
    assert ml.run_settings(20) == {"eval_every": 156, "eval_batches": 20, "warmup_steps": 3,
                                   "epochs": 8}
    # 1,780 BBC articles: capped at 20 epochs
    assert training_length(1_780, 32).epochs == 20
    # 10M rows: less than one epoch, ceil(600k / 1024) = 586 steps
    big = training_length(10_000_000, 1024)
    assert (big.epochs, big.max_steps, big.samples) == (None, 586, 586 * 1024)
    assert big.run_settings(5)["max_steps"] == 586
    RunSettings(**big.run_settings(5))  # the runner takes it
    RunSettings(**ml.run_settings(5))
    with pytest.raises(ConfigError, match="train_rows"):
        training_length(0, 512)
