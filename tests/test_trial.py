"""The one trial record and its codec (autoembed.trial), alone: old stored forms read back,
the quality rule, trials.csv rows with and without `config_json`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoembed.config import EmbeddingConfig, TableConfig, config_from_dict
from autoembed.errors import ConfigError
from autoembed.trial import (
    Evaluation,
    TrialResult,
    TrialRow,
    config_from_flat,
    decode_csv_row,
    decode_result,
    decode_row,
    encode_result,
    encode_row,
    objective_quality,
)

CFG = EmbeddingConfig(task="ctr", tables=(TableConfig("user", 1000), TableConfig("item", 500)),
                      dim=16, dense_layers=(32, 16), compression="hash", hash_buckets=100)


def old_result() -> dict[str, Any]:
    """A result as the version before `test_quality` stored it: the test figure under
    `quality`, and no `data_seconds` / `eval_seconds` fields."""
    return {"status": "complete", "config": CFG.to_dict(), "quality": 0.61,
            "valid_quality": 0.74, "metrics": {"auc": 0.61}, "steps": 40, "samples": 2560,
            "curve": [{"step": 40, "samples": 2560, "quality": 0.74, "metrics": {"auc": 0.74},
                       "elapsed_s": 1.5}],
            "throughput": 900.0, "latency_ms": {"p50_b1": 0.3}, "estimate": {},
            "env": {"device": "cpu"}, "train_seconds": 1.2, "wall_seconds": 2.0}


def test_old_result_reads_its_test_figure_as_test_quality() -> None:
    r = decode_result(old_result())
    assert r.test_quality == 0.61 and r.valid_quality == 0.74
    assert r.objective_quality == 0.74  # the objective is validation, not the old `quality`
    assert r.data_seconds == 0.0 and r.eval_seconds == 0.0
    assert r.curve == (Evaluation(40, 2560, 0.74, {"auc": 0.74}, 1.5),)
    assert r.config == CFG


def test_result_round_trip_uses_the_new_name() -> None:
    r = TrialResult("complete", CFG, test_quality=0.5, valid_quality=0.6, steps=3,
                    curve=(Evaluation(3, 30, 0.6, {}, 0.1),), data_seconds=0.25)
    d = json.loads(json.dumps(encode_result(r)))
    assert "quality" not in d and d["test_quality"] == 0.5
    assert decode_result(d) == r


def test_old_row_decodes_with_its_result() -> None:
    raw = {"status": "complete", "config": CFG.to_dict(), "estimate": {"device_total": 123},
           "params": {"dim": 16}, "metrics": {"quality": 0.74, "memory": 123.0},
           "result": old_result(), "reason": None, "overshoot": -0.5}
    row = decode_row(7, raw)  # no concurrency, node, interrupted: an older row
    assert row.number == 7 and row.device_total == 123 and row.feasible and row.counted
    assert row.result is not None and row.result.test_quality == 0.61
    assert row.node == {} and row.concurrency == 0 and not row.interrupted
    again = decode_row(7, json.loads(json.dumps(encode_row(row))))
    assert again == row


def test_quality_rule() -> None:
    assert objective_quality(0.7, 0.6) == 0.7
    assert objective_quality(None, 0.6) == 0.6
    assert objective_quality(None, None) is None


def test_encode_row_has_no_nan() -> None:
    row = TrialRow(1, "complete", CFG, {"device_total": 5}, metrics={"latency": float("nan")})
    assert encode_row(row)["metrics"] == {"latency": None}


def test_csv_row_from_config_json_and_from_flat_columns() -> None:
    by_json = {"trial": "4", "status": "pruned", "quality": "0.7",
               "config_json": json.dumps(CFG.to_dict())}
    n, status, raw, metrics = decode_csv_row(by_json, "t")
    assert (n, status, metrics["quality"]) == (4, "pruned", 0.7)
    assert config_from_dict(raw) == CFG
    # an older / hand-made file: flat config columns, values as str() wrote them
    flat = {"trial": "2", "status": "complete",
            **{f"config.{k}": v for k, v in CFG.flat_params().items()}}
    assert config_from_dict(decode_csv_row(flat, "t")[2]) == CFG
    assert config_from_flat({"dense_layers": "(32, 16)", "adam_eps": "1e-08",
                             "hash_buckets": "None", "checkpointing": "True"}, "t") == {
        "dense_layers": [32, 16], "adam_eps": 1e-08, "hash_buckets": None,
        "checkpointing": True}
    with pytest.raises(ConfigError, match="no config columns"):
        decode_csv_row({"trial": "1", "status": "complete"}, "t")
