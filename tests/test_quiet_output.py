"""What a user sees: a private Ray cluster starts without Ray's token-auth notice (its
default, which Ray otherwise prints on every search), and the project installs without
setuptools' deprecation warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

START = """
from autoembed.pipeline.ray_tune import ray_session
with ray_session(None, 1, 0):
    import ray
    print("cpus", ray.cluster_resources().get("CPU"))
"""


def test_private_ray_starts_without_the_token_auth_notice() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["RAY_worker_niceness"] = "0"
    out = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True,
                         env=env, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "cpus 1.0" in out.stdout
    assert "Token authentication" not in out.stderr, out.stderr[-2000:]


def test_license_is_an_spdx_string_for_a_setuptools_that_takes_it() -> None:
    # A TOML table here is deprecated by setuptools >= 77 and printed at every install.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(meta["project"]["license"], str)
    assert any(r.startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77
               for r in meta["build-system"]["requires"])
