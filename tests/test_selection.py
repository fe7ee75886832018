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
from autoembed.selection import label_counts, pick_noise, validation_noise


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
