"""The seed's four measures in every completed trial's trials.csv row: memory, samples/s,
latency (batch 1 and a serving batch) and steps/samples to the target beside it; and on real
data each trial trains for the data's length and exports the step it was judged at."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from autoembed.pipeline import search
from autoembed.pipeline.executor import InProcessExecutor
from autoembed.tracking import NullTracker
from autoembed.training import stored_steps

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.6


def _rows(out_dir: Path) -> list[dict[str, str]]:
    with (out_dir / "trials.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _first_reaching(curve: Any, target: float) -> tuple[float | None, float | None]:
    for e in sorted(curve, key=lambda e: e.step):
        if e.quality >= target:
            return e.step, e.samples
    return None, None


def _num(cell: str) -> float | None:
    return float(cell) if cell else None


def _check_measures(res: Any) -> None:
    """Every complete row has the measures; steps to target where its curve reached it."""
    rows = {int(r["trial"]): r for r in _rows(res.out_dir)}
    done = [r for r in res.rows if r.status == "complete"]
    assert done
    for row in done:
        cells = rows[row.number]
        for col in ("memory", "throughput", "latency", "latency_serving", "target"):
            assert cells[col] and float(cells[col]) > 0, (col, cells[col])
        target = float(cells["target"])
        reached = (_num(cells["steps_to_target"]), _num(cells["samples_to_target"]))
        assert reached == _first_reaching(row.result.curve, target)


def test_a_default_stand_in_search_fills_latency_and_steps_to_target(tmp_path: Path) -> None:
    res = search(800_000_000, "tiny", trials=2, runs_dir=tmp_path / "runs", study="m",
                 tracker=NullTracker(), early_stop=False, executor=InProcessExecutor())
    _check_measures(res)
    # the stand-in keeps its space's workload: 60 steps, the last evaluation counts
    for row in res.rows:
        if row.status == "complete":
            assert row.result.steps == 60 and row.result.best_step == 60


def _clicks(tmp_path: Path, n: int = 1500) -> Path:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 40, n)
    y = ((a % 3 == 0) ^ (rng.random(n) < 0.15)).astype(int)
    path = tmp_path / "clicks.csv"
    pd.DataFrame({"a": a.astype(str), "b": rng.integers(0, 6, n).astype(str),
                  "y": y}).to_csv(path, index=False)
    return path


SPACE = f"""
data: {{name: synthetic-ctr}}
base: {{dense_layers: [8], lr: 0.05}}
params:
  dim: {{choices: [8, 16]}}
  batch_size: {{choices: [64, 128]}}
target: {TARGET}
run: {{eval_batches: 4, test_batches: 4}}
"""


def test_a_real_data_search_fits_the_length_and_exports_the_best_step(
        tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    res = search(800_000_000, str(space), trials=3, runs_dir=tmp_path / "runs", study="r",
                 data=str(_clicks(tmp_path)), label="y", categorical=("a", "b"), seed=1,
                 tracker=NullTracker(), early_stop=False, executor=InProcessExecutor())
    _check_measures(res)
    assert any(r.metrics["steps_to_target"] for r in res.rows if r.status == "complete")
    for row in res.rows:
        if row.status != "complete":
            continue
        r = row.result
        assert r.target == TARGET
        # 1200 train rows: 20 epochs of 1200 // batch steps, about 8 evaluations
        steps = 20 * (1200 // r.config.batch_size)
        assert r.steps == steps and r.curve[0].step == steps // 8
        best = max(r.curve, key=lambda e: (e.quality, -e.step))
        assert r.best_step == best.step and row.metrics["quality"] == best.quality
    exported = res.out_dir / "best.yaml"
    chosen = next(r for r in res.rows if r.number == res.best.number)
    assert stored_steps(exported) == chosen.result.best_step
    assert not math.isnan(float(chosen.metrics["best_step"]))

    # `autoembed train --config best.yaml` trains to that step and measures its quality
    cmd = [sys.executable, "-m", "autoembed", "train", "--config", str(exported), "--out",
           str(tmp_path / "train"), "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    again = json.loads(run.stdout)
    assert again["steps"] == chosen.result.best_step
    assert again["valid_quality"] == pytest.approx(chosen.metrics["quality"], abs=1e-6)


def test_a_file_without_a_train_entry_keeps_the_default(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("config: {dim: 8}\n")
    assert stored_steps(p) is None
    p.write_text("config: {dim: 8}\ntrain: {max_steps: 0}\n")
    with pytest.raises(Exception, match="max_steps"):
        stored_steps(p)
