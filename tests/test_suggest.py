"""`autoembed estimate` says what would fit: over the budget (exit 3) it lists the changes
that fit, each with its device total, and each of them, priced again on its own by the
same command with its flags added, fits with that total."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autoembed.cli import main

ROOT = Path(__file__).resolve().parents[1]
SEED = ["--task", "text", "--vocab", "1000000", "--dim", "300", "--batch", "64", "--seq", "512",
        "--precision", "fp32", "--optimizer", "adam"]
USER = ["--model", "examples.seed_mean:full_model", "--example",
        "examples.seed_mean:full_example"]
BUDGET = 4 * 10**9


def _estimate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    rc = main(["estimate", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def _argv(base: list[str], flags: dict[str, Any]) -> list[str]:
    """`base` with each of `flags` set (replacing the value `base` gives it)."""
    out = list(base)
    for k, v in flags.items():
        flag = "--" + k.replace("_", "-")
        if flag in out:
            i = out.index(flag)
            del out[i:i + 2]
        out += [flag] if v is True else [f"--no-{flag[2:]}"] if v is False else [flag, str(v)]
    return out


def _repriced(capsys: pytest.CaptureFixture[str], base: list[str], s: dict[str, Any],
              tmp_path: Path) -> dict[str, Any]:
    argv = _argv(base, s["flags"])
    if s["apply"] is not None:
        path = tmp_path / f"{s['kind']}.json"
        path.write_text(json.dumps(s["apply"]))
        argv += ["--apply", str(path)]
    rc, d = _estimate(capsys, *argv, "--budget", "4GB")
    assert rc == 0, (s, d["device_total"])
    return d


def test_seed_over_budget_lists_three_changes_that_fit_when_priced_again(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, d = _estimate(capsys, *SEED, "--budget", "4GB")
    assert rc == 3 and d["device_total"] > BUDGET
    tips = d["suggestions"]
    assert len(tips) >= 3 and len({t["kind"] for t in tips}) == len(tips)
    assert {"precision", "hash"} <= {t["kind"] for t in tips}
    for s in tips:
        again = _repriced(capsys, SEED, s, tmp_path)
        assert again["fits"] is True and again["device_total"] == s["device_total"] <= BUDGET


def test_user_model_over_budget_lists_changes_that_fit_when_priced_again(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # --model imports from the current directory
    monkeypatch.setattr("autoembed.pricing.suggest.USER_SECONDS", 120.0)  # a loaded machine: all
    rc, d = _estimate(capsys, *USER, "--budget", "4GB")
    assert rc == 3 and d["device_total"] > BUDGET
    tips = d["suggestions"]
    assert len(tips) >= 3
    assert any(t["apply"] is not None for t in tips)  # its largest table compressed
    for s in tips:
        again = _repriced(capsys, USER, s, tmp_path)
        assert again["fits"] is True and again["device_total"] == s["device_total"] <= BUDGET


def test_suggest_when_it_fits_offers_what_the_budget_leaves_room_for(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = _argv(SEED, {"precision": "bf16"})
    rc, d = _estimate(capsys, *base, "--budget", "8GB", "--suggest")
    assert rc == 0 and d["fits"] is True
    tips = d["suggestions"]
    assert tips and all(d["device_total"] < t["device_total"] <= 8 * 10**9 for t in tips)
    assert "precision" in {t["kind"] for t in tips}  # fp32 or a master copy: more bytes
    rc, plain = _estimate(capsys, *base, "--budget", "8GB")
    assert "suggestions" not in plain  # only asked for, when it fits


def test_human_output_names_each_change_and_the_overhead(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *SEED, "--budget", "4GB"]) == 3
    out, err = capsys.readouterr()
    assert "What would fit" in out and "--precision bf16" in out
    assert "make one of the changes listed under 'What would fit'" in err
    assert main(["estimate", *SEED, "--budget", "4GB", "--reserve", "1GB"]) == 3
    out = capsys.readouterr().out
    # the fixed overhead, by hand: 512 MiB CUDA context + 32 MiB cuBLAS workspace + reserve
    assert "overhead 1.57 GB" in out and f"{(512 + 32) * 2**20 + 10**9:,}" in out
    assert "CUDA context" in out and "--reserve 1.00 GB" in out


def test_suggest_without_a_budget_is_bad_input_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *SEED, "--suggest"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--suggest needs --budget" in err


def test_suggest_with_world_size_is_bad_input_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *USER, "--world-size", "2", "--budget", "4GB", "--suggest"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--suggest" in err and "--world-size" in err


def test_a_budget_under_the_fixed_overhead_says_nothing_can_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """500 MB is under the 544 MiB (570.43 MB) of context and workspace: no change fits,
    and the output says why instead of pointing at changes."""
    assert main(["estimate", *SEED, "--budget", "500MB"]) == 3
    out, err = capsys.readouterr()
    assert "the fixed overhead alone, 570.43 MB" in out
    assert "choose a smaller config" not in err and "What would fit" not in err  # none helps
    assert "is below the fixed overhead" in err and "raise --budget to at least" in err
