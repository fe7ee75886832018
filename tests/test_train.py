"""`autoembed train`: checkpoints, resume after a hard kill, nothing half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autoembed.config import EmbeddingConfig, save_config
from autoembed.training import CHECKPOINT, train

DATA = {"name": "synthetic-ctr", "vocab_sizes": [500, 2000], "rows": [20000, 2000, 2000]}


def small(**kw: object) -> EmbeddingConfig:
    base: dict[str, object] = dict(
        dim=8, batch_size=64, dense_layers=(16,), table_optimizer="sparse_adam", data=DATA
    )
    base.update(kw)
    return EmbeddingConfig(**base)  # type: ignore[arg-type]


def test_train_then_resume_in_process(tmp_path: Path) -> None:
    r1 = train(small(), out_dir=tmp_path, max_steps=30, checkpoint_every=10)
    assert r1.status == "complete" and r1.steps == 30 and r1.env["resumed_from"] == 0
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "model.pt").exists()
    st = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert st["step"] == 30
    r2 = train(small(), out_dir=tmp_path, max_steps=50, checkpoint_every=10)
    assert r2.status == "complete" and r2.steps == 50 and r2.env["resumed_from"] == 30
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 50


def test_checkpoint_of_another_config_is_refused(tmp_path: Path) -> None:
    from autoembed.errors import ConfigError

    train(small(), out_dir=tmp_path, max_steps=10, checkpoint_every=5)
    with pytest.raises(ConfigError, match="another config"):
        train(small(dim=16), out_dir=tmp_path, max_steps=10)


@pytest.mark.slow
def test_cli_resumes_after_sigkill(tmp_path: Path) -> None:
    cfg = tmp_path / "best.yaml"
    save_config(small(), cfg)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "autoembed",
        "train",
        "--config",
        str(cfg),
        "--max-steps",
        "400",
        "--checkpoint-every",
        "20",
        "--out",
        str(out),
    ]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 240
    try:
        while not (out / CHECKPOINT).exists():
            assert p.poll() is None, p.communicate()
            assert time.time() < deadline, "no checkpoint written"
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    assert not (out / "metrics.json").exists()  # a killed run leaves no finished result
    step = torch.load(out / CHECKPOINT, weights_only=True)["step"]
    assert 20 <= step < 400
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["steps"] == 400 and res["env"]["resumed_from"] >= step
    assert (out / "metrics.json").exists()


def test_cli_bad_input(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "autoembed", "train", "--config", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    cfg = tmp_path / "nodata.yaml"
    save_config(small(data=None), cfg)
    r = subprocess.run(
        [sys.executable, "-m", "autoembed", "train", "--config", str(cfg)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--data" in r.stderr
