"""A first run keeps its promise: search -> export -> `autoembed train --config` reproduces
the exported trial's validation and test figures by default, although the search trained
its trials on a 1/1000 stand-in of the priced tables; `--full-size` trains the priced
config on the full data and says what that costs before it starts.

Tolerance: 1e-6 on AUC. The rerun is the same computation as the trial (the same resolved
config, seed, data order, validation and test batches and torch threads, on the same CPU),
and seeded CPU reruns have reproduced trials exactly; 1e-6 leaves room for nothing but a
different float summation order, which would already show as a larger drift after 60
optimizer steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoembed.budget import format_bytes
from autoembed.config import load_config
from autoembed.export import export_config
from autoembed.pipeline import search
from autoembed.pipeline.executor import InProcessExecutor
from autoembed.trace import estimate
from autoembed.tracking import NullTracker

pytestmark = pytest.mark.slow
TOL = 1e-6


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autoembed", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("rerun")
    res = search(1_000_000_000, "tiny", trials=2, runs_dir=tmp / "runs", study="s",
                 tracker=NullTracker(), early_stop=False, executor=InProcessExecutor())
    assert res.best is not None
    out = export_config("s", tmp / "best.yaml", runs_dir=tmp / "runs").path
    return out, dict(res.best.metrics)


def test_export_says_what_the_figures_were_measured_on(exported: tuple[Path, dict]) -> None:
    path, _ = exported
    raw = yaml.safe_load(path.read_text())
    block = raw["trained_on"]
    assert block["stand_in"] is True
    priced = {t["name"]: t["vocab_size"] for t in raw["config"]["tables"]}
    trained = {t["name"]: t["vocab_size"] for t in block["config"]["tables"]}
    # search_spaces/tiny.yaml: 2M, 500k, 100k ids priced; vocab_scale 0.001 trained
    assert priced == {"f0": 2_000_000, "f1": 500_000, "f2": 100_000}
    assert trained == {"f0": 2_000, "f1": 500, "f2": 100}
    assert block["config"]["data"]["vocab_sizes"] == [2000, 500, 100]
    assert block["run"] == {"eval_every": 20, "eval_batches": 4, "test_batches": 4,
                            "warmup_steps": 2, "threads": block["run"]["threads"]}


def test_train_reproduces_the_trial_by_default(exported: tuple[Path, dict],
                                              tmp_path: Path) -> None:
    path, metrics = exported
    run = _cli("train", "--config", str(path), "--out", str(tmp_path / "t"), "--json",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["steps"] == metrics["best_step"]
    assert got["valid_quality"] == pytest.approx(metrics["quality"], abs=TOL)
    assert got["test_quality"] == pytest.approx(metrics["test_quality"], abs=TOL)
    # it trained the stand-in's tables, not the priced 2.6M rows
    assert sum(t["vocab_size"] for t in got["config"]["tables"]) == 2_600


def test_full_size_says_its_cost_first(exported: tuple[Path, dict], tmp_path: Path) -> None:
    path, metrics = exported
    run = _cli("train", "--config", str(path), "--full-size", "--dry-run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    est = estimate(load_config(path))
    assert f"estimated device_total {format_bytes(est.device_total)}" in run.stdout
    assert "2,600,000 table rows" in run.stdout
    steps = int(metrics["best_step"])
    assert f"for {steps:,} steps at the trial's {metrics['throughput']:,.0f} samples/s" \
        in run.stdout
    assert not (tmp_path / "runs").exists()  # a dry run trains and writes nothing
