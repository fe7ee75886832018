"""`autoembed estimate --model ... --example ...`: same output and exit codes as for a config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autoembed.cli import main

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["--model", "examples.seed_mean:full_model", "--example", "examples.seed_mean:full_example"]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # --model imports from the current directory, as python -m does


def test_json_figures_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *MODEL, "--json", "--budget", "8GB"]) == 0
    d = json.loads(capsys.readouterr().out)
    table = 1_000_000 * 300 * 4  # the seed's fp32 table, by hand
    assert d["parameters"] >= table and d["optimizer_state"] >= 2 * table
    assert d["fits"] is True and d["tables"][0]["name"] == "embedding"
    assert {m["name"] for m in d["modules"]} >= {"embedding", "fc"}
    assert main(["estimate", *MODEL, "--json", "--budget", "4GB"]) == 3


def test_seed_naive_equals_built_in_text_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed's first pattern (lookup, plain mean over S, Linear) is the built-in text model
    with pooling naive and no dense layers: the same step, so the same peak within blocks."""
    assert main(["estimate", *MODEL, "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)["allocated_peak"]
    assert main(["estimate", "--method", "traced", "--pooling", "naive", "--json"]) == 0
    built_in = json.loads(capsys.readouterr().out)["allocated_peak"]
    assert abs(mine - built_in) <= 64 * 512, (mine, built_in)


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        ([*MODEL, "--vocab", "10"], "--vocab describes the built-in model"),
        ([*MODEL, "--gpus", "2"], "--gpus describes the built-in model"),
        (["--model", "examples.nope:x", "--example", "examples.seed_mean:full_example"],
         "does not import"),
        (["--model", "examples.seed_mean:ful_model", "--example",
          "examples.seed_mean:full_example"], "did you mean 'full_model'"),
        (["--model", "examples.seed_mean:full_model"], "--example is missing"),
        (["--model", "examples.seed_mean", "--example", "x:y"], "give pkg.module:name"),
        (["--model", "examples.seed_mean:make_example", "--example",
          "examples.seed_mean:full_example"], "returned tuple, not an nn.Module"),
        (["--model", "examples.seed_mean:TextClassifier", "--example",
          "examples.seed_mean:full_example"], "raised TypeError"),
    ],
)
def test_bad_input_one_line_exit_2(
    argv: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and "\n" not in err and "Traceback" not in err, err


def test_runs_as_a_user_would_from_the_repo() -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "autoembed", "estimate", *MODEL, "--budget", "8GB"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Per module" in r.stdout and "fits the budget" in r.stdout


TWO_TOWER = '''
import torch
from torch import nn


class TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.user = nn.Embedding(5000, 16)
        self.item = nn.Embedding(3000, 16)

    def forward(self, users, items):
        return (self.user(users) * self.item(items)).sum(-1).sigmoid().mean()


def build():
    return TwoTower()


def example():
    return (torch.zeros(8, dtype=torch.long), torch.zeros(8, dtype=torch.long))
'''


def _by_hand(users: int, items: int, dim: int) -> int:
    return (users + items) * dim * 4  # the two fp32 tables' parameter bytes, by hand


@pytest.mark.parametrize("spec", ["./twotower.py", "twotower.py", "sub/twotower.py",
                                  "pkg/twotower.py"])
def test_model_from_a_file_path(spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """`--model ./twotower.py:build`, a path as many users write it, works as
    `pkg.module:name` does (it used to be a TypeError about relative imports); a file in a
    package is imported under its package's name."""
    target = tmp_path / spec.removeprefix("./")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(TWO_TOWER)
    if spec.startswith("pkg/"):
        (tmp_path / "pkg" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the loader adds to it
    assert main(["estimate", "--model", f"{spec}:build", "--example", f"{spec}:example",
                 "--json"]) == 0, capsys.readouterr().err
    d = json.loads(capsys.readouterr().out)
    assert d["parameters"] == _by_hand(5000, 3000, 16)
    if spec.startswith("pkg/"):
        assert "pkg.twotower" in __import__("sys").modules


def test_an_apply_file_without_dims_takes_the_models_dims(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--apply FILE` reads a table without a dim at its module's (16), as
    `autoembed.apply(model, FILE)` does; it used to take the config default 64 and refuse."""
    (tmp_path / "twotower.py").write_text(TWO_TOWER)
    (tmp_path / "hashed.yaml").write_text(
        "tables:\n  - {name: user, vocab_size: 5000, compression: hash, hash_buckets: 512}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert main(["estimate", "--model", "twotower.py:build", "--example", "twotower.py:example",
                 "--apply", "hashed.yaml", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["parameters"] == _by_hand(512, 3000, 16)


@pytest.mark.parametrize(("spec", "text"), [
    ("./nothere.py:build", "there is no file './nothere.py'"),
    ("./notes.txt:build", "is not a .py file"),
])
def test_bad_file_path_one_line(spec: str, text: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["estimate", "--model", spec, "--example", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and "\n" not in err and "relative import" not in err, err


LOGITS = ["--model", "examples.next_item:full_model", "--example",
          "examples.next_item:full_example"]


def test_loss_prices_a_forward_that_returns_logits(capsys: pytest.CaptureFixture[str]) -> None:
    """--loss names the loss of a forward that returns logits; without it the stand-in
    (cross-entropy on an fp32 copy of the [B, catalog] logits held through the step) is
    priced and one stderr line says so. At Adam's step peak the two differ by that copy."""
    assert main(["estimate", *LOGITS, "--loss", "examples.next_item:cross_entropy",
                 "--json"]) == 0
    out = capsys.readouterr()
    mine = json.loads(out.out)
    assert "stand-in" not in out.err
    assert main(["estimate", *LOGITS, "--json"]) == 0
    out = capsys.readouterr()
    stand = json.loads(out.out)
    notes = out.err.strip().splitlines()
    assert len(notes) == 1 and "stand-in" in notes[0] and "--loss" in notes[0], out.err
    assert mine["peak_phase"] == stand["peak_phase"] == "step"
    b, catalog = 1024, 50_000  # examples.next_item SIZES["full"], by hand
    copy = b * catalog * 4
    # the caching allocator hands a large block out whole when its rest is at most 1 MiB
    assert copy <= stand["allocated_peak"] - mine["allocated_peak"] <= copy + 2**20


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        ([*LOGITS, "--loss", "examples.next_item:SIZES"], "not a function"),
        ([*LOGITS, "--loss", "examples.next_item:crossentropy"], "did you mean 'cross_entropy'"),
        ([*LOGITS, "--loss", "examples.next_item"], "give pkg.module:name"),
        (["--loss", "examples.next_item:cross_entropy"], "--model is missing"),
        ([*LOGITS, "--loss", "examples.next_item:bce"], "loss or backward raised KeyError"),
    ],
)
def test_bad_loss_one_line_exit_2(
    argv: list[str], text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and "\n" not in err and "Traceback" not in err, err


def test_a_native_crash_prints_where_it_happened(tmp_path: Path) -> None:
    """A segmentation fault in native code (here a user's build reading address 0) kills the
    process, and with it any Python handler; the CLI has faulthandler print every thread's
    Python stack to stderr first, so a crash report says where."""
    import subprocess
    import sys

    (tmp_path / "crashing.py").write_text(
        "import ctypes\n\n\ndef build():\n    return ctypes.string_at(0)\n\n\n"
        "def example():\n    return ()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    run = subprocess.run([sys.executable, "-m", "autoembed", "estimate", "--model",
                          "crashing:build", "--example", "crashing:example"],
                         cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == -11, run.stderr[-2000:]  # SIGSEGV
    assert "Fatal Python error: Segmentation fault" in run.stderr
    assert 'crashing.py", line 5 in build' in run.stderr


def test_the_options_said_to_apply_with_model_include_those_made_for_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal said "only --optimizer, ... and --json apply", leaving out --apply and
    --suggest, which do: every option whose help says "With --model" is named."""
    import re

    import typer

    from autoembed.cli import app

    cmd = typer.main.get_command(app).commands["estimate"]  # type: ignore[attr-defined]
    made = {p.opts[0] for p in cmd.params if (p.help or "").startswith("With --model")}
    assert {"--apply", "--example", "--loss", "--space"} <= made
    assert main(["estimate", *MODEL, "--dim", "8"]) == 2
    err = capsys.readouterr().err
    listed = set(re.findall(r"--[a-z-]+", err.split("(only ", 1)[1]))
    assert made | {"--suggest"} <= listed, made - listed
