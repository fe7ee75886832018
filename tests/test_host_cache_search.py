"""host_cached as a searched choice (issue 9): trials report the cache, the search's host
budget makes proposals infeasible, stand-ins keep a batch-sized cache."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.data import DataSpec
from autoembed.pipeline.builtin import BuiltinWorkload
from autoembed.pipeline.engine import SearchEngine, SearchSettings
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.pipeline.study import make_sampler, open_storage
from autoembed.runner import RunSettings, run_trial
from autoembed.space import load_space

warnings.filterwarnings("ignore", message="Sparse invariant checks")
ROOT = Path(__file__).resolve().parents[1]
OBJ = [("quality", "maximize"), ("memory", "minimize"), ("throughput", "maximize")]


def test_a_host_cached_trial_reports_its_cache() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("f0", 1), TableConfig("f1", 1)), dim=8,
                          batch_size=64, dense_layers=(8,), table_optimizer="adagrad",
                          dense_optimizer="adam", lr=0.05, placement="host_cached",
                          cache_load_factor=0.1)
    data = DataSpec(name="synthetic-ctr", vocab_sizes=(5000, 800), rows=(3000, 500, 500))
    r = run_trial(cfg, data, RunSettings(max_steps=20, eval_every=10, eval_batches=2,
                                         test_batches=2, warmup_steps=2,
                                         measure_latency=False))
    assert r.status == "complete", r.error
    m = r.metrics
    assert 0.0 < m["cache_hit_rate"] < 1.0  # a 10% cache over Zipf ids: some hits, some misses
    assert m["cache_misses_per_step"] > 0 and m["cache_bytes_per_step"] > 0
    assert 0.0 < m["cache_time_share"] < 1.0
    assert r.estimate["host_bytes"] > 0


def test_device_trials_report_no_cache_metrics() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("f0", 1),), dim=8, batch_size=64,
                          dense_layers=(8,), table_optimizer="adagrad", dense_optimizer="adam")
    data = DataSpec(name="synthetic-ctr", vocab_sizes=(500,), rows=(1000, 200, 200))
    r = run_trial(cfg, data, RunSettings(max_steps=4, eval_every=4, eval_batches=1,
                                         test_batches=1, warmup_steps=1,
                                         measure_latency=False))
    assert not any(k.startswith("cache_") for k in r.metrics)


@pytest.fixture(scope="module")
def host_space() -> tuple[Any, Any]:
    space = load_space(ROOT / "search_spaces" / "host_cache.yaml")
    spec, stand_in = data_spec_for(space)
    return space, build_workload(spec, stand_in)


def test_host_budget_makes_host_cached_proposals_infeasible(
    tmp_path: Path, host_space: tuple[Any, Any]
) -> None:
    space, workload = host_space
    study = optuna.create_study(study_name="h", storage=open_storage(tmp_path),
                                directions=["maximize", "minimize", "maximize"],
                                sampler=make_sampler("random", 0))
    # the 2M-row table needs 2.05M x (128 + 4 + 16) B = 303 MB on the host; allow 100 MB
    eng = SearchEngine(study, SearchSettings(
        workload=BuiltinWorkload.of(space, workload, run={"max_steps": 5}),
        budget=Budget.parse("700MB"), objectives=OBJ, trials=10,
        host_budget_bytes=Budget.of("100MB")))
    launched = [eng.propose() for _ in range(6)]
    assert all(p is not None for p in launched)
    assert all(p.estimate.host_bytes <= 100_000_000
               for p in launched if p is not None)
    refused = [r for r in eng.rows.values() if "host budget" in (r.reason or "")]
    assert refused and all(r.status == "infeasible" for r in refused)
    assert all(r.config.placement == "host_cached" and r.config.compression == "none"
               for r in refused)  # only the unhashed 2M-row host table is that big
    assert "host_bytes 303,4" in (refused[0].reason or "")  # 2,050,000 rows x 148 B = 303.4 MB


def test_stand_in_raises_the_cache_factor_to_hold_a_batch() -> None:
    space = load_space(ROOT / "search_spaces" / "tiny.yaml")
    spec, stand_in = data_spec_for(space)
    w = build_workload(spec, stand_in)
    cfg = space.config_for({"dim": 8, "compression": "none", "table_optimizer": "adagrad",
                            "batch_size": 256})
    from dataclasses import replace

    hc = replace(cfg, placement="host_cached", cache_load_factor=0.05)
    trained = w.trained(hc)
    # stand-in vocabularies 2000, 500, 100: a batch of 256 needs 256 / 500 of table f1 and
    # all of f2's 100 rows: the factor becomes 1.0; at full size 0.05 is kept
    assert trained.cache_load_factor == pytest.approx(1.0)
    assert w.priced(hc).cache_load_factor == 0.05
    assert not math.isnan(trained.cache_load_factor)
