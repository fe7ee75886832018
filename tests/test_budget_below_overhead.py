"""A budget below the fixed overhead that every config's device total holds (CUDA context
512 MiB + cuBLAS workspace 32 MiB, docs/searching.md) cannot be met by a cheaper config:
`search` and `estimate` said to widen the space or choose a smaller config; they now say
the budget is below that overhead and the least budget that could fit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autoembed.cli import main

ROOT = Path(__file__).resolve().parents[1]
OVERHEAD = "570.43 MB (544.00 MiB)"  # 512 MiB + 32 MiB = 570_425_344 bytes


def _least(err: str) -> str:
    m = re.search(r"raise --budget to at least ([0-9.]+ [kMG]B \([0-9.]+ [KMG]iB\)), what", err)
    assert m, err
    return m.group(1)


def test_a_search_under_the_overhead_names_it_and_not_a_cheaper_space(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["search", "--budget", "100MB", "--space", str(ROOT / "search_spaces" / "tiny.yaml"),
               "--runs-dir", str(tmp_path), "--tracking-uri", "none"])
    err = capsys.readouterr().err.strip()
    assert rc == 3 and "\n" not in err, err
    assert f"is below the fixed overhead every config needs (CUDA context, cuBLAS workspace), " \
           f"{OVERHEAD}" in err and "widen" not in err, err
    assert _least(err) == "572.56 MB (546.04 MiB)"  # the tiny space's cheapest corner


def test_an_estimate_under_the_overhead_names_it_and_the_configs_total(
        capsys: pytest.CaptureFixture[str]) -> None:
    config = ["--vocab", "1000", "--dim", "8"]
    assert main(["estimate", *config, "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["device_total"]
    assert main(["estimate", *config, "--budget", "100MB"]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"below the fixed overhead every config needs (CUDA context, cuBLAS workspace, " \
           f"--reserve), {OVERHEAD}" in err and "smaller config" not in err, err
    assert _least(err).startswith(f"{total / 1e6:.2f} MB"), (total, err)
