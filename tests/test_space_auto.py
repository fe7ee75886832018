"""The derived search space against hand-made tables: bounds, shares, untouched small tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.space import parse_space
from autoembed.space_auto import (
    DataFacts,
    TableFacts,
    auto_space,
    derive_space,
    dim_bound,
    facts_of,
    hash_bucket_range,
    qr_collision_range,
    seq_len_choices,
)

GB = 10**9


def _facts(rows: list[int], task: str = "ctr", train: int = 40_000) -> DataFacts:
    tables = tuple(TableFacts(f"t{i}", r) for i, r in enumerate(rows))
    spec = {"name": "synthetic-ctr", "vocab_sizes": rows}
    return DataFacts(task, tables, train, 5_000, 1, (), spec)


def test_small_user_tables_get_no_compression_and_dims_bounded_by_cardinality() -> None:
    # the user CSV: two id columns of a few thousand values and a few small ones
    auto = derive_space(_facts([3000, 2500, 12, 7]), 8 * GB)
    # 1.6 * 3000^0.56 = 1.6 * e^(0.56 ln 3000) = 1.6 * 88.49 = 141.6 -> 144 (multiple of 8);
    # 1.6 * 2500^0.56 = 127.9 -> 128; 12 and 7 rows: 6.4 and 4.6 -> the floor of 8
    assert [t.dim_high for t in auto.tables] == [144, 128, 8, 8]
    assert auto.dim == (8, 144)
    assert not auto.big_tables  # 3000 x 144 x 16 B = 6.9 MB, far below 1% of 8 GB
    raw = auto.to_space_dict()
    assert "compression" not in raw["params"] and "hash_buckets" not in raw["params"]
    space = parse_space(raw, "auto")
    dim = next(p for p in space.params if p.name == "dim")
    assert (dim.low, dim.high, dim.multiple_of) == (8, 144, 8)
    # 40k train rows: batch 2048 would leave 19 steps an epoch (< 20): not offered
    assert auto.batch_sizes == (256, 512, 1024)
    # 600k samples / 40k rows = 15 epochs; eval every (15 x 78 steps at 512) // 8
    assert raw["run"]["epochs"] == 15 and raw["run"]["eval_every"] == 15 * 78 // 8
    assert raw["run"]["eval_batches"] == 20  # the whole 5,000-row split at batch 256
    # no big table: row-wise Adagrad (a memory saver for big tables) is not searched
    assert raw["params"]["table_optimizer"]["choices"] == ["adam", "adagrad"]
    assert raw["params"]["weight_decay"]["when"] == {"table_optimizer": ["adam"]}


@pytest.mark.parametrize("task, train, want", [
    ("ctr", 32, 32), ("ctr", 100, 64), ("ctr", 300, 256), ("text", 20, 16), ("text", 1, 1)])
def test_a_train_split_smaller_than_a_batch_gets_a_batch_it_holds(task: str, train: int,
                                                                    want: int) -> None:
    """Below the smallest choice (256 ctr, 32 text) every trial trained no step and failed;
    the batch is now the largest power of two within the split (the smallest choice where
    it fits once), and the length says it trains."""
    auto = derive_space(_facts([10], task, train), 8 * GB)
    assert auto.batch_sizes == (want,)
    assert auto.length.samples >= train // want * want > 0


def test_the_derived_space_names_the_tables_it_embeds() -> None:
    # a file's tables are its columns, auto-detected or named: the description says which
    assert derive_space(_facts([3000]), 8 * GB).describe().startswith(
        "auto: 1 table (t0: 3,000 rows); ")
    assert derive_space(_facts([3000, 12]), 8 * GB).describe().startswith(
        "auto: 2 tables (t0: 3,000 rows, t1: 12 rows); ")
    many = derive_space(_facts([5, 7, 9, 11, 13, 15, 17, 1000]), 8 * GB).describe()
    assert many.startswith("auto: 8 tables of 5-1,000 rows (t0: 5 rows, t1: 7 rows, t2: 9 "
                           "rows, t3: 11 rows, t4: 13 rows, t5: 15 rows, 2 more); ")


def test_big_tables_are_compressed_by_shares_and_small_ones_left_alone() -> None:
    rows = [40_000_000, 10_000_000, 10_000, 5]
    auto = derive_space(_facts(rows, train=200_000), 8 * GB)
    # big: rows x 256 dims x 16 B >= 80 MB; 10,000 x 256 x 16 = 41 MB is not
    assert [t.big for t in auto.tables] == [True, True, False, False]
    assert auto.tables[0].hash_buckets == (400_000, 20_000_000)  # 1% and 50% of the rows
    assert auto.tables[1].hash_buckets == (100_000, 5_000_000)
    assert auto.tables[0].qr_collisions == (2, 64)
    assert auto.tables[2].hash_buckets is None and auto.tables[2].qr_collisions is None
    raw = auto.to_space_dict()
    # the small tables pinned uncompressed; the big ones hashed by 1% to 50% of their rows
    assert raw["tables"] == [{"name": "t2", "compression": "none"},
                             {"name": "t3", "compression": "none"}]
    params = raw["params"]
    assert params["compression"]["choices"] == ["none", "hash", "qr"]
    assert (params["hash_buckets"]["low"], params["hash_buckets"]["high"]) == (0.01, 0.5)
    parse_space(raw, "auto")
    # a big table: row-wise Adagrad too, and it takes weight decay
    assert params["table_optimizer"]["choices"] == ["adam", "adagrad", "rowwise_adagrad"]
    assert params["weight_decay"]["when"] == {"table_optimizer": ["adam", "rowwise_adagrad"]}


def test_all_big_tables_search_qr_too() -> None:
    auto = derive_space(_facts([4_000_000, 1_000_000], train=200_000), 1 * GB)
    raw = auto.to_space_dict()
    params = raw["params"]
    assert "tables" not in raw  # no small table to pin
    assert params["compression"]["choices"] == ["none", "hash", "qr"]
    # 64 collisions (min(64, isqrt(1M) = 1000)) as a share: a quotient table of 1/64 the rows
    assert (params["qr_collisions"]["low"], params["qr_collisions"]["high"]) == (1 / 64, 0.5)
    parse_space(raw, "auto")


def test_range_helpers_by_hand() -> None:
    assert dim_bound(3) == 8  # never below 8 (and 3 rows round up to one multiple of 8)
    assert dim_bound(10**9) == 256
    assert hash_bucket_range(3) == (1, 1)  # 1% rounds up to 1 bucket, 50% down to 1
    assert hash_bucket_range(1000) == (10, 500)
    assert hash_bucket_range(1) is None
    assert qr_collision_range(3) is None  # isqrt(3) = 1
    assert qr_collision_range(100) == (2, 10)
    assert seq_len_choices([20] * 50, 128) == (16, 32)
    assert seq_len_choices(list(range(1, 201)), 128) == (16, 32, 64, 128)
    assert seq_len_choices([5] * 10, 8) == (8,)
    with pytest.raises(ConfigError, match="budget"):
        derive_space(_facts([10]), 0)


@settings(deadline=None, max_examples=60, derandomize=True)
@given(st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=8),
       st.integers(min_value=10**8, max_value=10**11))
def test_never_more_buckets_than_ids_and_small_tables_untouched(rows: list[int],
                                                                budget: int) -> None:
    auto = derive_space(_facts(rows, train=1_000_000), budget)
    for t in auto.tables:
        assert 8 <= t.dim_high <= 256 and t.dim_high % 8 == 0
        if t.hash_buckets:
            assert 1 <= t.hash_buckets[0] <= t.hash_buckets[1] < t.rows
    raw = auto.to_space_dict()
    hb = raw["params"].get("hash_buckets")
    if hb:  # 50% of a big table's rows at most (ceil: fewer than its rows from 2 rows on)
        assert hb["high"] == 0.5 and all(t.rows >= 2 for t in auto.big_tables)
        pinned = {r["name"] for r in raw.get("tables", [])}
        assert pinned == {t.name for t in auto.tables if not t.big}
    parse_space(raw, "auto")


def test_facts_of_a_text_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 60, 300)
    docs = [" ".join(f"w{rng.integers(50)}" for _ in range(n)) for n in lengths]
    frame = pd.DataFrame({"text": docs, "label": rng.integers(0, 2, 300)})
    path = tmp_path / "docs.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="label", text_column="text", seq_len=40))
    facts = facts_of(data)
    want = np.minimum(lengths[data.split_rows("train")], 40)  # type: ignore[attr-defined]
    assert sorted(facts.doc_lengths) == sorted(want.tolist())
    auto = derive_space(facts, 8 * GB)
    assert auto.seq_lens == (16, 32, 40)  # 95% of the documents are longer than 32 words
    # 240 train rows: no batch size leaves 20 steps an epoch; the smallest is kept
    assert auto.task == "text" and auto.batch_sizes == (32,)
    parse_space(auto.to_space_dict(), "auto")


def test_auto_space_of_a_ctr_file_round_trips_through_its_yaml(tmp_path: Path) -> None:
    import yaml

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"user": rng.integers(0, 2000, 3000), "day": rng.integers(0, 7, 3000),
                          "y": rng.integers(0, 2, 3000)})
    path = tmp_path / "clicks.csv"
    frame.to_csv(path, index=False)
    data = load_dataset(DataSpec(str(path), label="y", categorical=("user", "day")))
    space = auto_space(data, 8 * GB)
    assert space.source == "auto" and space.data["name"] == str(path)
    assert {p.name for p in space.params} >= {"dim", "lr", "batch_size", "wide"}
    assert "compression" not in {p.name for p in space.params}
    assert parse_space(yaml.safe_load(space.text), "auto") == space


def test_derived_space_leaves_small_tables_alone_and_sizes_big_ones_by_share() -> None:
    from dataclasses import replace

    from autoembed.config import EmbeddingConfig, TableConfig, resolved_tables

    rows = [40_000_000, 10_000_000, 10_000, 5]
    raw = derive_space(_facts(rows, train=200_000), 8 * GB).to_space_dict()
    assert raw["tables"] == [{"name": "t2", "compression": "none"},
                             {"name": "t3", "compression": "none"}]
    params = raw["params"]
    assert params["compression"]["choices"] == ["none", "hash", "qr"]
    hb, qc = params["hash_buckets"], params["qr_collisions"]
    assert (hb["type"], hb["low"], hb["high"]) == ("float", 0.01, 0.5)
    assert (qc["type"], qc["low"], qc["high"]) == ("float", 1 / 64, 0.5)
    pinned = {r["name"] for r in raw["tables"]}
    tables = tuple(TableConfig(f"t{i}", r, compression="none" if f"t{i}" in pinned else None)
                   for i, r in enumerate(rows))
    base = EmbeddingConfig(tables=tables, dim=16)
    for share in (hb["low"], hb["high"]):  # the range's ends, as the config resolves them
        got = resolved_tables(replace(base, compression="hash", hash_buckets=share))
        assert [t.compression for t in got] == ["hash", "hash", "none", "none"]
        # ceil(share x rows): 1% and 50% of 40M and 10M; never as many buckets as ids
        want = {0.01: [400_000, 100_000], 0.5: [20_000_000, 5_000_000]}[share]
        assert [t.hash_buckets for t in got[:2]] == want
        assert all(t.hashed[0] < t.vocab_size for t in got[:2])
        assert [t.hashed for t in got[2:]] == [(10_000, None), (5, None)]
    for share, m in ((qc["low"], 64), (qc["high"], 2)):
        got = resolved_tables(replace(base, compression="qr", qr_collisions=share))
        assert [t.qr_collisions for t in got[:2]] == [m, m]
        assert [t.qr for t in got] == [True, True, False, False]
    # no big table: nothing to pin, nothing compressed
    assert "tables" not in derive_space(_facts([3000, 7]), 8 * GB).to_space_dict()
