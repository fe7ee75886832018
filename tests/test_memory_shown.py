"""The memory judged is the memory shown: a search's progress lines, front table, pick line,
pareto.png legend, best.yaml and an exported file give each trained trial's device total
(what the budget judges) and its share of the budget beside the `memory` objective (the
allocated peak), and say in one line which is which."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import yaml
from rich.console import Console

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig
from autoembed.pareto import Pick
from autoembed.pipeline.engine import SearchStatus
from autoembed.pipeline.render import SearchProgress, render_result
from autoembed.pipeline.search_report import SearchReport
from autoembed.space import Objective
from autoembed.trial import TrialRow

BUDGET = Budget(10**9, "1GB")
OVERHEAD = (512 + 32) * 2**20
OBJS = (Objective("quality", "maximize"), Objective("memory", "minimize"))


def _row(n: int, quality: float, allocated: int, reserved: int) -> TrialRow:
    est = {"allocated_peak": allocated, "reserved_peak": reserved, "overhead": OVERHEAD,
           "device_total": reserved + OVERHEAD}
    return TrialRow(n, "complete", EmbeddingConfig(), est,
                    metrics={"quality": quality, "memory": float(allocated)},
                    overshoot=BUDGET.overshoot(reserved + OVERHEAD))


# the pick: 308.33 MB allocated, 897.58 MB judged = 89.8% of 1 GB (by hand:
# 897,580,000 / 10**9); a cheaper member at 100 MB allocated, 120 MB reserved
PICK = _row(3, 0.61, 308_330_000, 897_580_000 - OVERHEAD)
SMALL = _row(5, 0.55, 100_000_000, 120_000_000)


def _log(row: TrialRow) -> str:
    buf = io.StringIO()
    status = SearchStatus(trained=1, target=6, running=0, complete=1, infeasible=0, pruned=0,
                          failed=0, front=1, best_quality=0.61, elapsed_s=3.0, last=row,
                          budget_bytes=BUDGET.bytes)
    with SearchProgress(Console(file=buf, width=80, force_terminal=False)) as prog:
        prog.update(status)
    return buf.getvalue()


def test_progress_line_gives_the_device_total_and_its_share_of_the_budget() -> None:
    line = _log(PICK)
    assert "memory 308.33 MB" in line
    assert "device total 897.58 MB (89.8% of the budget)" in line


def _report() -> SearchReport:
    return SearchReport.build([PICK, SMALL], OBJS, Pick("max-quality"), BUDGET, "s",
                              memory_basis="allocated_peak")


def test_front_table_and_pick_line_show_the_judged_memory_and_say_which_is_which() -> None:
    rep = _report()
    result = SimpleNamespace(
        study="s", front=rep.front, best=rep.best, budget_bytes=BUDGET.bytes, pick="max-quality",
        objectives=OBJS, searched={}, rows=rep.rows, count=rep.count, wall_seconds=1.0,
        stop_reason="done", extra={"memory_basis": "allocated_peak"}, recovered=None, files={})
    buf = io.StringIO()
    render_result(Console(file=buf, width=200, force_terminal=False), result)
    out = buf.getvalue()
    assert "device total (of budget)" in out
    assert "897.58 MB (89.8%)" in out and "120.00 MB" not in out  # 120 MB + the overhead:
    small_total = 120_000_000 + OVERHEAD  # 690.43 MB, 69.0% of 1 GB
    assert f"{small_total / 1e6:.2f} MB ({100 * small_total / 1e9:.1f}%)" in out
    assert "memory = the allocated peak, the objective" in out
    assert "what the budget judges" in out
    assert "--reserve" not in out  # an estimate's option: a search has none
    (pick,) = [ln for ln in out.splitlines() if ln.startswith("the pick, trial 3: ")]
    assert "memory 308.33 MB" in pick
    assert pick.endswith("device total 897.58 MB (89.8% of the budget)")


def test_json_result_gives_each_members_device_total_and_share() -> None:
    from autoembed.pipeline.render import result_json

    rep = _report()
    result = SimpleNamespace(
        study="s", out_dir=Path("x"), front=rep.front, best=rep.best,
        budget_bytes=BUDGET.bytes, pick="max-quality", picks={}, objectives=OBJS, rows=rep.rows,
        count=rep.count, wall_seconds=1.0, stop_reason="done", recovered=None, files={},
        extra={"memory_basis": "allocated_peak"})
    body = result_json(result)
    by_trial = {m["trial"]: m for m in body["front"]}
    assert by_trial[3]["device_total"] == 897_580_000 and by_trial[3]["budget_share"] == 0.8976
    assert body["memory_note"].startswith("memory = the allocated peak, the objective")


def test_best_yaml_and_png_legend_carry_the_judged_memory(tmp_path: Path) -> None:
    rep = _report()
    files = rep.write(tmp_path, {})
    body = yaml.safe_load(files["best.yaml"].read_text())
    assert "search" not in body  # one shape: the exported file's `source` block
    mem = body["source"]["memory"]
    assert mem == {"objective": "allocated_peak", "allocated_peak": 308_330_000,
                   "device_total": 897_580_000, "budget": "1GB", "budget_bytes": 10**9,
                   "budget_share": 0.8976}
    labels = rep.plot_labels()
    assert labels["best"] == "best (trial 3: device total 897.58 MB (89.8% of the budget))"
    assert labels["budget"] == "budget 1GB less the 570.43 MB fixed overhead"
    assert labels["memory"] == "memory objective (allocated peak)"


def test_an_exported_file_has_the_same_memory_block(tmp_path: Path) -> None:
    from autoembed.export import export_config

    rep = _report()
    runs = tmp_path / "runs"
    rep.write(runs / "s", {})
    body = json.loads((runs / "s" / "pareto.json").read_text())
    assert body["best"] == 3
    out = export_config("s", tmp_path / "out.yaml", runs_dir=runs)
    exported = yaml.safe_load(out.path.read_text())
    searched = yaml.safe_load((runs / "s" / "best.yaml").read_text())
    assert exported["source"]["memory"] == searched["source"]["memory"]


def test_an_exported_files_source_is_best_yamls_key_by_key(tmp_path: Path) -> None:
    """docs/searching.md: an exported file has best.yaml's shape. Its `source` lacked the
    search's `budget`, `budget_bytes` and the data the trials trained on (`trained_on`)."""
    from autoembed.export import export_config

    data = {"name": "synthetic-ctr", "rows": [100, 10, 10]}
    runs = tmp_path / "runs"
    _report().write(runs / "s", {"trained_on": data})
    exported = yaml.safe_load(export_config("s", tmp_path / "out.yaml", runs_dir=runs)
                              .path.read_text())["source"]
    searched = yaml.safe_load((runs / "s" / "best.yaml").read_text())["source"]
    want = {"study": "s", "trial": 3, "budget": "1GB", "budget_bytes": 10**9,
            "metrics": {"quality": 0.61, "memory": 308_330_000.0}, "trained_on": data}
    for block in (searched, exported):
        assert list(block) == ["study", "trial", "pick", "budget", "budget_bytes", "metrics",
                               "memory", "trained_on"]
        assert {k: v for k, v in block.items() if k in want} == want
        assert block["memory"]["device_total"] == 897_580_000
    assert exported["memory"] == searched["memory"]
    # `pick` says how each chose the trial: the search's rule; the export, that it took it
    assert (searched["pick"], exported["pick"]) == ("max-quality",
                                                    "search pick max-quality = trial:3")


def test_old_best_yaml_with_a_search_block_still_reads() -> None:
    """best.yaml files written before the one shape have a `search:` block: train still
    reads which trial they are and its figures."""
    from autoembed.training import _source

    block = {"study": "s", "trial": 3, "metrics": {"quality": 0.7}}
    for key in ("search", "source"):
        assert _source({"config": {}, key: block}) == ("trial 3 of study 's'",
                                                      {"quality": 0.7})
