"""Smoke and unit tests of the benchmark scripts' core functions (not timed assertions)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_stage_timer_attributes_time_to_the_innermost_stage() -> None:
    from overhead import StageTimer

    clock = FakeClock()
    timer = StageTimer(clock=clock)

    def pricing() -> None:
        clock.t += 2.0

    price = timer.wrap("pricing", pricing)

    def ask_and_price() -> int:
        clock.t += 1.0  # Optuna's own work before pricing
        price()
        clock.t += 0.5  # and after
        return 7

    ask = timer.wrap("optuna", ask_and_price, "propose")
    assert ask() == 7
    price()  # a call outside any other stage
    assert timer.totals["optuna"] == pytest.approx(1.5)
    assert timer.totals["pricing"] == pytest.approx(4.0)
    # inclusive times per call: propose spanned 3.5 s, returned 7
    (propose,) = [c for c in timer.calls if c[1] == "propose"]
    assert propose[3] - propose[2] == pytest.approx(3.5) and propose[5] == 7


_PREVIOUS = """# Search overhead

Wall time 40.0 s. Counting only the optimizer steps as useful work, 72% is outside.

| where the wall time went | seconds | share |
|---|---|---|
| fetching training batches (complete trials) | 10.80 | 27.0% |
| imports (ray, tune, mlflow on first use) | 1.00 | 2.5% |
| Ray start and shutdown | 3.00 | 7.5% |
| outputs (trials.csv, pareto.json/png, best.yaml) | 0.50 | 1.2% |
| driver, other (space, data, cheapest corner, study setup) | 1.50 | 3.8% |
| **total wall time** | 40.00 | 100% |

Per launched trial ...

| trial | status | steps | outside loop / steps |
|---|---|---|---|
| 1 | complete | 200 | 75% / 87% |
| 2 | pruned | 100 | loop 4.48 s of 4.56 |
| 3 | complete | 200 | 26% / 61% |
| 4 | complete | 200 | 21% / 55% |
"""


def test_overhead_reads_the_previous_results_and_says_how_each_figure_moved() -> None:
    from overhead import PER_TRIAL, STARTUP, WHOLE, moved, parse_results, trial_share

    got = parse_results(_PREVIOUS)
    assert got[WHOLE] == 72.0
    assert got[PER_TRIAL] == 61.0  # median of the complete trials' 87, 61, 55
    assert got[STARTUP] == pytest.approx(1.0 + 3.0 + 0.5 + 1.5)  # before the figure existed
    assert got["fetching training batches (complete trials)"] == 27.0
    assert "**total wall time**" not in got
    now = {WHOLE: 48.0, PER_TRIAL: 30.0, STARTUP: 5.0}
    table = moved(got, now, [PER_TRIAL, WHOLE, STARTUP])
    assert f"| {PER_TRIAL} | 61.0% | 30.0% | -31.0 |" in table
    assert f"| {WHOLE} | 72.0% | 48.0% | -24.0 |" in table
    assert f"| {STARTUP} | 6.0 s | 5.0 s | -1.0 |" in table
    # a completed trial: 1 s of steps in 3.5 s in flight + 0.5 s of driver time
    assert trial_share({"span": 3.5, "driver": 0.5, "train": 1.0}) == pytest.approx(0.75)
    assert trial_share({"span": 3.5, "driver": 0.5}) is None  # stopped early: no timings


def test_gpu_seed_case_runs_on_cpu(tmp_path: Path) -> None:
    import json

    from autoembed.config import EmbeddingConfig, TableConfig

    base = EmbeddingConfig(task="text", tables=(TableConfig("tokens", 50_000, 64.0),), dim=32,
                           num_classes=4, seq_len=64, pooling="naive", dense_layers=(),
                           batch_size=16)
    chosen = EmbeddingConfig(**{**base.to_dict(), "tables": base.tables, "dense_layers": (),
                                "compression": "hash", "hash_buckets": 20_000,
                                "table_optimizer": "rowwise_adagrad"})
    ctr = EmbeddingConfig(tables=(TableConfig("f0", 40_000), TableConfig("f1", 900)), dim=8,
                          batch_size=32, compression="qr", qr_collisions=8)
    cfg = tmp_path / "seed.json"
    cfg.write_text(json.dumps({
        "text": {"baseline_config": base.to_dict(), "chosen_config": chosen.to_dict()},
        "ctr": {"baseline_config": ctr.to_dict(), "chosen_config": ctr.to_dict()}}))
    out = tmp_path / "gpu.md"
    from gpu_seed_case import main

    assert main(["--device", "cpu", "--quick", "--config", str(cfg), "--out", str(out)]) == 0
    text = out.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| text") or ln.startswith("| ctr")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| text baseline", "| text chosen", "| ctr baseline", "| ctr chosen"]
    assert "n/a (cpu)" in rows[0]  # no device memory is claimed on a CPU
    assert "chosen / baseline throughput" in text


def test_gpu_seed_case_zipf_ids_stay_in_range_and_favour_the_head() -> None:
    import torch
    from gpu_seed_case import SCATTER, zipf_ids

    g = torch.Generator().manual_seed(0)
    v = 1000
    ids = zipf_ids((20_000,), v, g)
    assert int(ids.min()) >= 0 and int(ids.max()) < v
    # rank 0 (id 0 after scattering) has P = F(2) = (2^-0.2 - 1) / (1001^-0.2 - 1)
    #   = (0.87055 - 1) / (0.25115 - 1) = 0.1729
    share0 = float((ids == 0).float().mean())
    assert share0 == pytest.approx(0.1729, abs=0.01)
    assert int((ids == (1 * SCATTER) % v).sum()) < int((ids == 0).sum())


def test_pick_best_quality_takes_the_front_best_and_breaks_ties_by_throughput() -> None:
    from dataclasses import dataclass, field

    import pytest
    from seed_case import pick_best_quality

    @dataclass
    class Row:
        number: int
        metrics: dict[str, float | None] = field(default_factory=dict)

    front = [Row(0, {"quality": 0.800, "throughput": 100.0}),
             Row(1, {"quality": 0.797, "throughput": 300.0}),  # faster, 0.4% worse: not picked
             Row(2, {"quality": 0.800, "throughput": 900.0}),  # ties 0: faster wins
             Row(3, {"quality": None, "throughput": 5000.0})]  # no quality: skipped
    assert pick_best_quality(front).number == 2
    assert pick_best_quality(front[:2]).number == 0
    assert pick_best_quality([Row(5, {"quality": 0.7, "throughput": None})]).number == 5
    with pytest.raises(ValueError):
        pick_best_quality(front[3:])


def test_side_by_side_trains_both_to_equal_samples_on_the_same_data() -> None:
    from seed_case import side_by_side, to_target

    from autoembed.config import EmbeddingConfig
    from autoembed.data import DataSpec, load_dataset
    from autoembed.runner import resolve_for_data

    ds = load_dataset(DataSpec(name="synthetic-text", vocab_size=500, seq_len=16,
                               rows=(2000, 200, 300)))
    a = resolve_for_data(EmbeddingConfig(task="text", dim=8, batch_size=32, dense_layers=(),
                                         pooling="naive", lr=0.05), ds)
    b = resolve_for_data(EmbeddingConfig(task="text", dim=8, batch_size=64, dense_layers=(),
                                         compression="hash", hash_buckets=100,
                                         table_optimizer="rowwise_adagrad", lr=0.1), ds)
    order: list[str] = []
    out = side_by_side([("a", a), ("b", b)], ds, samples=256, eval_every=128, valid_rows=200,
                       test_rows=300, log=lambda s: order.append(s.split(":")[0].strip()))
    assert [(o.label, o.steps, o.samples) for o in out] == [("a", 8, 256), ("b", 4, 256)]
    # evaluated at 128 and 256 samples each; the one behind always steps next, so the
    # evaluations interleave rather than one model finishing first
    assert [(s, n) for s, n, _ in out[0].curve] == [(4, 128), (8, 256)]
    assert [(s, n) for s, n, _ in out[1].curve] == [(2, 128), (4, 256)]
    assert order == ["b", "a", "b", "a"]  # b (64 a step) reaches each 128 first
    z, y = out[0].test_correct
    assert z.shape == (300, 4) and y.shape == (300,)
    assert out[0].test_quality == pytest.approx(float((z.argmax(1) == y).mean()))
    assert to_target(out[0].curve, -1.0) == (4, 128)
    assert to_target(out[0].curve, 2.0) is None


def test_side_by_side_equal_time_trains_the_faster_model_on() -> None:
    from seed_case import side_by_side

    from autoembed.config import EmbeddingConfig
    from autoembed.data import DataSpec, load_dataset
    from autoembed.runner import resolve_for_data

    ds = load_dataset(DataSpec(name="synthetic-text", vocab_size=500, seq_len=16,
                               rows=(2000, 200, 300)))
    a = resolve_for_data(EmbeddingConfig(task="text", dim=8, batch_size=32, dense_layers=()),
                         ds)
    b = resolve_for_data(EmbeddingConfig(task="text", dim=8, batch_size=64, dense_layers=()),
                         ds)
    for cap, extra_steps in ((100.0, 4), (2.0, 2)):
        clock = FakeClock()

        def tick(c: FakeClock = clock) -> float:
            c.t += 1.0  # read before and after each step: every step takes 1 s
            return c.t

        out = side_by_side([("a", a), ("b", b)], ds, samples=256, eval_every=256,
                           valid_rows=100, test_rows=100, clock=tick, equal_time_cap=cap)
        # a: 8 steps = 8 s, the slowest; b: 4 steps = 4 s, then on towards 8 s, capped
        assert out[0].equal_time is None and out[0].step_seconds == pytest.approx(8.0)
        assert out[1].samples == 256
        et = out[1].equal_time
        assert et is not None
        assert et[0] == 256 + 64 * extra_steps
        assert et[1] == pytest.approx(4.0 + extra_steps)


def test_sampler_comparison_intervals_by_hand() -> None:
    import math

    from search_efficiency import paired_ratio, t_interval

    # mean 2, sd 1, n 3: half width t(0.975, 2) = 4.302653 x 1 / sqrt(3) = 2.484138
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and lo == pytest.approx(2 - 2.484138) and hi == pytest.approx(2 + 2.484138)
    # ratios 2 and 8: geometric mean 4; logs ln2, ln8 (sd ln4 / sqrt 2), t(0.975, 1) = 12.7062
    r, rlo, rhi = paired_ratio([2.0, 8.0], [1.0, 1.0])
    half = 12.706205 * (math.log(4) / math.sqrt(2)) / math.sqrt(2)
    assert r == pytest.approx(4.0)
    assert (rlo, rhi) == (pytest.approx(4 * math.exp(-half)), pytest.approx(4 * math.exp(half)))
    assert all(math.isnan(x) for x in paired_ratio([0.0, 1.0], [1.0, 1.0]))


def test_sampler_comparison_hv2n_from_the_fronts_nadir_by_hand() -> None:
    from search_efficiency import hv2n, hv2n_reference

    a = {"points": [[0.8, 10.0, 1.0], [0.7, 2.0, 1.0], [0.6, 9.0, 1.0]]}  # (0.6, 9) dominated
    b = {"points": [[0.75, 5.0, 1.0]]}
    # fronts' nadir (0.7, 10), ideal (0.8, 2); 10% of the range out: (0.69, 10.8)
    ref = hv2n_reference([a, b])
    assert ref == (pytest.approx(0.69), pytest.approx(10.8), 0.8, 2.0)
    box = 0.11 * 8.8
    # a: 0.11 x 0.8 + 0.01 x 8.8 - their overlap 0.01 x 0.8; b: 0.06 x 5.8
    assert hv2n(a, ref) == pytest.approx((0.088 + 0.088 - 0.008) / box)
    assert hv2n(b, ref) == pytest.approx(0.06 * 5.8 / box)


def test_sampler_comparison_verdict_reads_the_paired_interval() -> None:
    from search_efficiency import verdict

    from autoembed.pipeline.study import DEFAULT_SAMPLER

    def rec(sampler: str, seed: int, hv: float) -> dict[str, object]:
        return {"sampler": sampler, "seed": seed, "hv2": hv, "hv2n": hv}

    table = [rec("random", s, 1.0) for s in range(3)]
    table += [rec(DEFAULT_SAMPLER, s, x) for s, x in enumerate([1.3, 1.25, 1.35])]  # better
    table += [rec("gp", s, x) for s, x in enumerate([0.8, 0.85, 0.9])]  # all below: worse
    table += [rec("tpe-plain", s, x) for s, x in enumerate([0.9, 1.3, 1.0])]  # straddles 1
    lines = verdict(table).splitlines()
    assert lines[0].startswith(f"* {DEFAULT_SAMPLER} (default): HV2 1.30x")
    assert "better than random, reaches 1.2x" in lines[0]
    assert lines[1].startswith("* tpe-plain") and "no difference shown, below" in lines[1]
    assert lines[2].startswith("* gp") and "worse than random, below 1.2x" in lines[2]


def test_sampler_comparison_summary_names_who_reaches_1_2x_at_20_trials() -> None:
    from search_efficiency import summary

    def rec(sampler: str, seed: int, hv: float, trials: int = 20) -> dict[str, object]:
        return {"space": "s", "sampler": sampler, "seed": seed, "hv2": hv, "trials": trials}

    table = [rec("random", s, 1.0) for s in range(2)] + [rec("gp", 0, 1.3), rec("gp", 1, 1.1)]
    assert "no sampler measured reaches 1.2x" in summary(table)  # geometric mean 1.196
    table += [rec("tpe-s4", 0, 1.2), rec("tpe-s4", 1, 1.3)]
    table += [rec("random", 0, 1.0, 50), rec("tpe", 0, 9.0, 50)]  # 50 trials: not the test
    assert summary(table).startswith("At 20 trained trials, 1.2x random's HV2: tpe-s4 on s (1.25x")


def test_sampler_comparison_keeps_searches_without_start_points_apart() -> None:
    """A search from before there were start points is another search (not a resumed one)
    and is compared only with its like, in a table of its own."""
    from search_efficiency import _key, comparison_report

    def rec(sampler: str, seed: int, hv: float, start: bool | None) -> dict[str, object]:
        r = {"space": "s", "sampler": sampler, "trials": 20, "seed": seed, "hv2": hv,
             "memory_basis": "allocated_peak", "infeasible": 0, "wall": 1.0, "front": 1,
             "trained": 20, "points": [[0.5 + hv, 1e6, 1.0]]}
        return r if start is None else {**r, "start_points": start}

    old = [rec("random", s, 0.1, None) for s in range(2)]  # no field: measured before
    new = [rec("random", s, 0.2, True) for s in range(2)]
    new += [rec("tpe-mix", s, 0.3, True) for s in range(2)]
    assert _key(old[0]) != _key(new[0]) and _key(old[0]) == _key({**old[0], "start_points": 0})
    report = comparison_report(old + new)
    on, _, off = report.partition("## s, 20 trained trials, no start points")
    assert on.startswith("## s, 20 trained trials\n") and "| tpe-mix" in on
    assert "1.50x [1.50, 1.50] (2)" in on  # 0.3 over the start-point random's 0.2
    assert "| random | 2 | 0.1000" in off and "tpe-mix" not in off.split("HV2:")[0]


@pytest.mark.slow
def test_sampler_comparison_resumes_where_it_stopped(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import gzip
    import json

    from search_efficiency import main

    store = tmp_path / "sampler_comparison.jsonl.gz"
    done = {  # a search an earlier run finished: not run again
        "space": "tiny", "sampler": "random", "trials": 2, "seed": 0, "budget_bytes": 1,
        "wall": 1.0, "points": [], "front": 1, "infeasible": 0, "pruned": 0, "trained": 2,
        "hv2": 0.05, "memory_basis": "allocated_peak", "start_points": True}
    # two measured on the old memory objective (no basis recorded): run again, kept apart
    legacy = [{**done, "memory_basis": None}, {**done, "sampler": "tpe", "hv2": 0.5}]
    del legacy[1]["memory_basis"]
    store.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in [done, *legacy])
                                    .encode()))
    args = ["--compare-samplers", "--spaces", "tiny", "--samplers", "random", "tpe",
            "--settings", "2x1", "--results", str(tmp_path)]
    main(args)
    assert "3 searches on file, 1 to run" in capsys.readouterr().out
    recs = [json.loads(x) for x in gzip.decompress(store.read_bytes()).decode().splitlines()]
    assert [r["sampler"] for r in recs] == ["random", "random", "tpe", "tpe"]
    assert recs[3]["trained"] == 2 and recs[3]["hv2"] > 0
    assert recs[3]["memory_basis"] == "allocated_peak" and recs[3]["start_points"] is True
    main(args)  # everything on file: nothing runs, the report is rebuilt
    assert "4 searches on file, 0 to run" in capsys.readouterr().out
    report = (tmp_path / "sampler_comparison.md").read_text()
    current, _, old = report.partition("# Legacy")
    ratio = recs[3]["hv2"] / 0.05
    assert "## tiny, 2 trained trials" in current and f"{ratio:.2f}x [nan, nan] (1)" in current
    assert "10.00x" in old and "10.00x" not in current  # the legacy 0.5 against 0.05
    main([*args[:-4], "--settings", "2x2", "--report-only", *args[-2:]])  # seed 1: not run
    assert "4 searches on file, 2 to run" in capsys.readouterr().out
    assert len(gzip.decompress(store.read_bytes()).decode().splitlines()) == 4


# ------------------------------------------------------------------ compression.py
def test_compression_budgets_split_by_rows_and_keep_a_method_minimum() -> None:
    from compression import budgets

    # all fit: shares in proportion to rows
    assert budgets("hash", [300, 100], 800.0) == [600.0, 200.0]
    # qr needs ceil(400 / m) + m >= 40 rows (m = 20) for 400 ids = 640 values, more than its
    # share (12928 * 400 / 40400 = 128): it takes 640 and the other table the rest
    got = budgets("qr", [40_000, 400], 40_400 * 16 / 50)
    assert got == pytest.approx([40_400 * 16 / 50 - 640, 640])
    # 40,000 ids need 400 qr rows (6400 values): 1000 values cannot hold both minimums
    assert budgets("qr", [40_000, 400], 1000.0) is None


@pytest.mark.parametrize("method", ["hash", "qr", "robe", "tt", "hot_cold"])
def test_compression_tables_fit_their_budget(method: str) -> None:
    import numpy as np
    from compression import DIM, _table

    from autoembed.models.embedding import LookupSpec

    v, budget = 20_000, 20_000 * DIM / 10
    table, _ = _table(method, v, budget, LookupSpec("mean", False, False),
                      lambda n: np.arange(n), 0)
    nbytes = sum(p.nbytes for p in table.parameters()) + sum(b.nbytes for b in table.buffers())
    assert nbytes <= budget * 4  # fp32 values
    assert nbytes >= 0.5 * budget * 4  # the largest that fits, not any that fits


def test_compression_store_resumes_by_key(tmp_path: Path) -> None:
    from compression import Store

    path = tmp_path / "runs.jsonl"
    store = Store(path)
    line = {"part": "methods", "workload": "w", "method": "hash", "ratio": 10.0, "lr": 0.01,
            "steps": 5, "finetune": None, "test_auc": 0.7}
    store.add(line)
    again = Store(path)
    assert again.has(part="methods", workload="w", method="hash", ratio=10.0, lr=0.01, steps=5)
    assert not again.has(part="methods", workload="w", method="hash", ratio=10.0, lr=0.03,
                         steps=5)
    assert again.select(method="hash") == [line]


@pytest.mark.parametrize(("v", "rows"), [(20_000, 2000), (150_000, 1500), (5_000, 500)])
def test_compression_qr_takes_the_most_rows_that_fit(v: int, rows: int) -> None:
    from compression import DIM, _table

    from autoembed.models.embedding import LookupSpec

    # brute force: every m, the most ceil(v / m) + m rows within the budget
    best = max(-(-v // m) + m for m in range(2, v + 1) if -(-v // m) + m <= rows)
    table, _ = _table("qr", v, rows * DIM, LookupSpec("mean", False, False), None, 0)
    assert table.q_weight.shape[0] + table.r_weight.shape[0] == best


RESULTS = BENCH / "results"
DOCS_PAGE = BENCH.parent / "docs" / "benchmarks.md"


def _listed_results() -> list[str]:
    """The first column of docs/benchmarks.md's "Every results file" table."""
    page = DOCS_PAGE.read_text()
    section = page.split("## Every results file", 1)[1]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_every_results_file_is_listed_once_as_current_and_nothing_else_is() -> None:
    listed = _listed_results()
    assert len(listed) == len(set(listed)), sorted(n for n in listed if listed.count(n) > 1)
    held = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    assert sorted(listed) == held


def test_results_stay_under_two_megabytes() -> None:
    size = sum(p.stat().st_size for p in RESULTS.iterdir() if p.is_file())
    assert size < 2 * 2**20, f"benchmarks/results/ holds {size:,} bytes"


def test_every_results_link_in_the_docs_resolves() -> None:
    root = BENCH.parent
    pages = [root / "README.md", BENCH / "README.md", BENCH / "replay" / "README.md",
             *sorted((root / "docs").glob("*.md"))]
    broken = [f"{page.relative_to(root)}: {link}" for page in pages
              for link in re.findall(r"\]\(([^)\s#]*results/[^)\s#]+)", page.read_text())
              if not (page.parent / link).exists()]
    assert not broken, broken


def test_results_jsonl_reads_plain_and_gzipped_and_drops_a_torn_tail(tmp_path: Path) -> None:
    from _common import append_jsonl, read_jsonl, results_stem, write_jsonl

    for name in ("r.jsonl", "r.jsonl.gz"):
        path = tmp_path / name
        write_jsonl(path, [{"a": 1}, {"a": 2}])
        before = path.stat().st_size
        append_jsonl(path, {"a": 3})
        assert read_jsonl(path) == [{"a": 1}, {"a": 2}, {"a": 3}]
        data = path.read_bytes()
        path.write_bytes(data[:(before + len(data)) // 2])  # killed inside the last record
        assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
        assert results_stem(path) == tmp_path / "r"


def test_live_60s_report_counts_each_sampler_and_a_rerun_replaces_its_seed(tmp_path, monkeypatch):
    import live_time_budget as live

    monkeypatch.setattr(live, "ROWS_60S", tmp_path / "rows.jsonl")
    monkeypatch.setattr(live, "table_best", lambda: (0.8235, 0.0021))  # threshold 0.8214

    def row(sampler: str, seed: int, valid: float, best: float) -> dict:
        return {"sampler": sampler, "seed": seed, "valid": valid, "best_valid": best,
                "load_start": "0", "load_end": "0", "complete": 40, "pruned": 5,
                "pick": 3, "rule": "within-noise", "workers": 2, "commit": "abc"}

    live.keep_rows([row("ehvi", 0, 0.8220, 0.8230), row("ehvi", 1, 0.8100, 0.8216)])
    rows = live.keep_rows([row("random", 0, 0.8000, 0.8100)])
    text = live.report_default(rows, 60)
    assert "## `ehvi` (commit abc)" in text and "## `random`" in text
    assert "1 of 2 (the search's best within noise: 2 of 2)" in text
    assert "0 of 1 (the search's best within noise: 0 of 1)" in text
    rows = live.keep_rows([row("ehvi", 0, 0.8300, 0.8300)])  # a rerun replaces its seed
    assert sorted((r["sampler"], r["seed"]) for r in rows) == [
        ("ehvi", 0), ("ehvi", 1), ("random", 0)]
    text = live.report_default(rows, 60)
    assert "| 0 | 0 | 0 | 40/5 | trial 3 (within-noise) | 0.8300 | yes | 0.8300 | yes |" in text
    assert "1 of 2 (the search's best within noise: 2 of 2)" in text


def test_the_docs_quote_the_models_estimator_median_error_of_its_results_file() -> None:
    """own_model.md and benchmarks.md said 0.35%; the file's 72 cells give 0.34%."""
    import statistics

    text = (RESULTS / "estimator_accuracy_models.md").read_text()
    errors = [abs(float(e)) for e in re.findall(r"\| ([+-]\d+\.\d+)% \|", text)]
    assert len(errors) == 72
    median = f"{statistics.median(errors):.2f}%"
    assert f"median {median}," in text
    for page in ("own_model.md", "benchmarks.md"):
        quoted = re.findall(r"median \|error\| (\d+\.\d+%)",
                            (BENCH.parent / "docs" / page).read_text())
        assert quoted == [median], (page, quoted)


def _replay_hv95(method: str) -> dict[str, tuple[int, str]]:
    """Per table, `method`'s seeds and hv95 ratio to random-full (start points off) in
    search_efficiency_replay.md."""
    text = (RESULTS / "search_efficiency_replay.md").read_text()
    off = text.split("## Start points off", 1)[1].split("## Start points on", 1)[0]
    out = {}
    for block in off.split("### ")[1:]:
        row = re.search(rf"^\| {method} \| (\d+) \|(?:[^|]*\|){{7}} (\d\.\d\d) \[", block,
                        flags=re.M)
        assert row, (method, block.split()[0])
        out[block.split()[0]] = (int(row[1]), row[2])
    return out


def test_the_docs_quote_ehvi_with_and_without_mo_asha_as_the_replay_file_does() -> None:
    """searching.md quoted ehvi-front at 0.25/0.10/0.18/0.42 on 8 seeds (a scratch replay,
    no results file); the file's table gives each method's own seeds."""
    order = ("flights", "movielens", "bbcnews", "default")
    asha, front = _replay_hv95("ehvi-asha"), _replay_hv95("ehvi-front")
    page = (BENCH.parent / "docs" / "searching.md").read_text().replace("\n", " ")
    quoted = (f"`ehvi-asha` reached it in {asha['flights'][1]}x, {asha['movielens'][1]}x, "
              f"{asha['bbcnews'][1]}x and {asha['default'][1]}x (flights, MovieLens, BBC "
              f"News, the default space; {asha['flights'][0]} seeds) against `ehvi-front`'s "
              f"{front['flights'][1]}x, {front['movielens'][1]}x, {front['bbcnews'][1]}x and "
              f"{front['default'][1]}x ({', '.join(str(front[t][0]) for t in order[:3])} and "
              f"{front['default'][0]} seeds)")
    assert quoted in page
    rs = _replay_hv95("ehvi-rs-front")
    bench = DOCS_PAGE.read_text().replace("\n", " ")
    order = ("movielens", "flights", "bbcnews", "default")
    for ratios in (rs, asha):
        assert "{}×, {}×, {}× and {}×".format(*(ratios[t][1] for t in order)) in bench


def test_searching_quotes_the_live_120s_trial_counts_of_its_results_file() -> None:
    """searching.md said MovieLens 40–46 and flights 25–29 complete (an earlier run's file);
    the current file's seeds 0–2 give the ranges quoted."""
    text = (RESULTS / "search_live_120s.md").read_text()
    done = {data: sorted(int(n) for n in re.findall(rf"^\| {data} \| [0-2] \|(?:[^|]*\|){{2}}"
                                                     r" (\d+)/\d+ \|", text, flags=re.M))
            for data in ("movielens", "flights")}
    assert all(len(v) == 3 for v in done.values()), done
    page = (BENCH.parent / "docs" / "searching.md").read_text().replace("\n", " ")
    ml, fl = done["movielens"], done["flights"]
    assert f"MovieLens {ml[0]}–{ml[-1]} complete, flights {fl[0]}–{fl[-1]}:" in page


def test_benchmarks_page_quotes_the_live_files_counts() -> None:
    """benchmarks.md said the replay took 7.8 trials to hv95 (the file: 6.9) and 8 of 9 over
    seeds 0–8 (a count across two files and commits); it now quotes each file's own."""
    page = DOCS_PAGE.read_text().replace("\n", " ")
    live = (RESULTS / "search_live_vs_replay.md").read_text()
    section = live.split("(301 rows trained", 1)[1]
    replay = re.search(r"^\| hv95 \| [\d.]+ ± [\d.]+ \([^)]*\) \| ([\d.]+) ±", section,
                       flags=re.M)[1]
    assert f"after 9.8 trials on average (the replay: {replay})" in page
    more = (RESULTS / "search_live_120s_more_seeds.md").read_text()
    counts = re.search(r"movielens (\d of \d); flights (\d of \d)", more).groups()
    assert "in {} on MovieLens and {} on flights".format(*counts) in page


def test_torchrec_page_quotes_the_dmp_files_state_and_peak_ranges() -> None:
    """torchrec.md said 1-2.6 GB of table state per rank in one place and 1.4-2.8 GB in
    another; the file's table gives one range, and the step peaks' percentages."""
    text = (RESULTS / "torchrec_dmp_cpu.md").read_text()
    rows = re.findall(r"^\| C\d \| \d \| [^|]+ \| ([\d.]+) \|(?:[^|]*\|){3} [+-][\d.]+ "
                      r"\(\+([\d.]+)%\) \|", text, flags=re.M)
    assert len(rows) == 16
    mb = [float(r[0]) for r in rows]
    pct = sorted(float(r[1]) for r in rows)
    page = (BENCH.parent / "docs" / "torchrec.md").read_text().replace("\n", " ")
    state = f"{min(mb) / 1000:.1f}-{max(mb) / 1000:.1f} GB"
    assert page.count(state) == 2, state
    assert f"step peak {pct[0]:.2f}-{pct[-1]:.2f}% above the measured one" in page
