"""Safety: YAML is loaded safely, checkpoints with weights_only=True, exported configs are
plain data, the UI binds loopback by default, and outputs stay under the runs directory."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoembed.cli import main
from autoembed.config import EmbeddingConfig, load_config, save_config
from autoembed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "search_spaces" / "tiny.yaml")


def _payload(marker: Path) -> str:
    """A YAML document that, loaded unsafely, creates `marker`."""
    return (f"config: !!python/object/apply:builtins.exec\n"
            f"  - \"open(r'{marker}', 'w').close()\"\n")


def test_a_python_object_in_a_config_file_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(_payload(marker))
    with pytest.raises(ConfigError, match="evil.yaml"):
        load_config(evil)
    assert not marker.exists()


def test_cli_refuses_python_objects_in_configs_and_spaces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(_payload(marker))
    for argv in (["estimate", "--config", str(evil)],
                 ["search", "--budget", "1GB", "--space", str(evil), "--study", "x",
                  "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", "none"]):
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2, err
        assert len(err.splitlines()) == 1 and "Traceback" not in err and "evil.yaml" in err
    assert not marker.exists()


class _Evil:
    """Pickled, it asks the unpickler to run exec(...)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (builtins.exec, (f"open(r'{self.marker}', 'w').close()",))


def test_a_malicious_checkpoint_is_refused(tmp_path: Path) -> None:
    import torch

    from autoembed.models import make_trainer
    from autoembed.training import load_checkpoint

    marker = tmp_path / "pwned"
    ckpt = tmp_path / "checkpoint.pt"
    torch.save({"format": 1, "payload": _Evil(marker)}, ckpt)
    cfg = EmbeddingConfig(dim=8)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_checkpoint(ckpt, make_trainer(cfg, "cpu"), cfg)
    assert not marker.exists()
    # the same file, loaded without weights_only, would have run the payload: the test can
    # tell the difference
    torch.load(ckpt, weights_only=False)
    assert marker.exists()


def _plain(v: Any) -> bool:
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_plain(x) for x in v)
    return v is None or isinstance(v, (str, int, float, bool))


def test_exported_configs_are_plain_data(tmp_path: Path) -> None:
    cfg = EmbeddingConfig(dim=16, compression="hash", hash_buckets=1000)
    for name in ("c.yaml", "c.json"):
        p = save_config(cfg, tmp_path / name, {"search": {"study": "s", "trial": 3,
                                                          "budget_bytes": 800_000_000}})
        text = p.read_text()
        assert "!!" not in text and "!<" not in text  # no YAML type tags of any kind
        body = yaml.safe_load(text)
        assert _plain(body) and body["search"]["trial"] == 3
        assert load_config(p).to_dict() == cfg.to_dict()


def test_ui_binds_loopback_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`autoembed ui` with no --host: the mlflow server it starts listens on 127.0.0.1."""
    import socket

    import autoembed.tracking.ui as ui

    started: list[list[str]] = []

    class Stop(Exception):
        pass

    def fake_popen(cmd: list[str], **kw: Any) -> Any:
        started.append(cmd)
        raise Stop

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "mlflow.db").touch()  # an existing store: no schema to create here
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(ui.subprocess, "Popen", fake_popen)  # the server is not started
    main(["ui", "--runs-dir", str(runs), "--port", str(port)])
    (cmd,) = started
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    main(["ui", "--runs-dir", str(runs), "--port", str(port), "--host", "0.0.0.0"])
    assert started[1][started[1].index("--host") + 1] == "0.0.0.0"


@pytest.mark.parametrize("study", ["../../etc", "..", ".", "/etc/autoembed", "a/b",
                                   "x;rm -rf ~", "name with space", "caf\u00e9", "",
                                   "a" * 129, "~root"])
def test_study_names_that_could_escape_the_runs_dir_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        study: str) -> None:
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "deep" / "er"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for argv in (["search", "--budget", "1GB", "--space", TINY, "--study", study,
                  "--runs-dir", "runs", "--tracking-uri", "none"],
                 ["export", "--study", study, "--runs-dir", "runs", "--out", "best.yaml"]):
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 2, (argv, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert f"study name '{study}' is not allowed" in err, err
    # nothing was written anywhere: not in the working directory, not above it
    assert sorted(os.listdir(tmp_path)) == ["deep"] and os.listdir(work) == []
    assert not Path("/etc/autoembed").exists()
