"""Host-resident tables with a device cache (issue 9): exact training, LRU/LFU eviction,
write-back of optimizer state, dynamic ids, pricing against the built structures."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from autoembed.batch import Batch
from autoembed.cli import main
from autoembed.config import EmbeddingConfig, TableConfig, load_config, save_config
from autoembed.errors import ConfigError
from autoembed.memory.cache_model import fit_zipf, miss_rate
from autoembed.models import make_trainer
from autoembed.models.embedding import LookupSpec
from autoembed.models.host_cached_table import HostCachedTable, host_cached_tables
from autoembed.nn.dynamic_ids import DynamicIds
from autoembed.trace import estimate

warnings.filterwarnings("ignore", message="Sparse invariant checks")

SPEC = LookupSpec("mean", sparse=True, text=False)


def block(n: int) -> int:
    return -(-n // 512) * 512


def base_config(opt: str, **kw: Any) -> EmbeddingConfig:
    return EmbeddingConfig(
        tables=(TableConfig("a", 400, 2.0), TableConfig("b", 150)), dim=8, batch_size=16,
        dense_layers=(16,), table_optimizer=opt, dense_optimizer="adam", lr=0.05, **kw,
    )


def batches(n: int, seed: int = 1) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        f = {"a": torch.randint(-1, 400, (16, 2), generator=g),  # -1: a missing id
             "b": torch.randint(0, 150, (16, 1), generator=g)}
        out.append(Batch(f, torch.randint(0, 2, (16,), generator=g).float()))
    return out


# ===================================================================== exact training


@pytest.mark.parametrize(
    ("opt", "policy"),
    [("sgd", "lru"), ("adagrad", "lru"), ("rowwise_adagrad", "lfu"), ("sparse_adam", "lru"),
     ("sparse_adam", "lfu")],
)
def test_host_cached_trains_to_the_device_weights(opt: str, policy: str) -> None:
    dev_cfg = base_config(opt)
    hc_cfg = replace(dev_cfg, placement="host_cached", cache_load_factor=0.25,
                     cache_policy=policy)
    dev, hc = make_trainer(dev_cfg), make_trainer(hc_cfg)
    for b in batches(15):
        dev.step([b])
        hc.step([b])
    tables = dict(host_cached_tables(hc.model))
    evictions = 0
    for name in ("a", "b"):
        t = tables[f"tables.{name}"]
        w: Any = dev.model.tables[name].weight
        torch.testing.assert_close(t.full_weight(), w.detach(), rtol=1e-5, atol=1e-6)
        dev_state = dev.optimizers.table.state[w]
        for key, host in t.host_state.items():  # the state written back is the device's
            torch.testing.assert_close(host, dev_state[key], rtol=1e-5, atol=1e-6)
        evictions += t.stats.evictions
    assert evictions > 0  # the cache was too small to hold everything: rows did move
    torch.testing.assert_close(  # the tower saw the same embeddings all along
        hc.model.tower[0].weight, dev.model.tower[0].weight, rtol=1e-5, atol=1e-6)


def test_text_task_host_cached_matches_device() -> None:
    cfg = EmbeddingConfig(task="text", tables=(TableConfig("tokens", 300),), seq_len=6,
                          num_classes=3, dim=8, batch_size=8, dense_layers=(8,),
                          table_optimizer="adagrad", dense_optimizer="adam", lr=0.1)
    hc_cfg = replace(cfg, placement="host_cached", cache_load_factor=0.2)
    dev, hc = make_trainer(cfg), make_trainer(hc_cfg)
    g = torch.Generator().manual_seed(3)
    for _ in range(10):
        ids = torch.randint(1, 300, (8, 6), generator=g)
        ids[:, 4:] = 0  # padding
        b = Batch({"tokens": ids}, torch.randint(0, 3, (8,), generator=g))
        dev.step([b])
        hc.step([b])
    (_, t), = host_cached_tables(hc.model)
    dev_w: Any = dev.model.tables["tokens"].weight
    torch.testing.assert_close(t.full_weight(), dev_w.detach())
    assert float(t.full_weight()[0].abs().sum()) == 0.0  # the pad row never trains


def test_no_grad_batch_larger_than_the_cache_reads_around_it() -> None:
    cfg = replace(base_config("sgd"), placement="host_cached", cache_load_factor=0.11)
    tr = make_trainer(cfg)
    tr.step([batches(1)[0]])
    ids = {"a": torch.arange(400).reshape(100, 4), "b": torch.arange(100).reshape(100, 1)}
    big = Batch(ids, torch.zeros(100))
    got = tr.predict(big)
    dev = make_trainer(base_config("sgd"))
    dev.step([batches(1)[0]])
    torch.testing.assert_close(got, dev.predict(big))
    (_, a), _ = host_cached_tables(tr.model)
    assert a.eval_stats.uncached_reads == 400 and a.stats.uncached_reads == 0
    assert a.stats.lookups == 16 * 2 - int((batches(1)[0].features["a"] < 0).sum())


# ===================================================================== eviction policies


def table(policy: str, rows: int = 10, cache: int = 3, opt: str = "adagrad") -> HostCachedTable:
    return HostCachedTable(rows, 4, cache, policy, opt, SPEC)


def access(t: HostCachedTable, *seq: int) -> None:
    for r in seq:
        t.resident_slots(torch.tensor([r]))


def cached(t: HostCachedTable) -> set[int]:
    return {int(r) for r in t.slot_row if r >= 0}


def test_lru_evicts_the_least_recently_used_row() -> None:
    t = table("lru")
    access(t, 0, 1, 2, 0)  # row 1 is now the least recent
    access(t, 3)
    assert cached(t) == {0, 2, 3}
    access(t, 4)  # then row 2
    assert cached(t) == {0, 3, 4}
    assert (t.stats.hits, t.stats.misses, t.stats.evictions) == (1, 5, 2)


def test_lfu_evicts_the_least_frequently_used_row_and_lru_differs() -> None:
    seq = (0, 0, 0, 1, 1, 2)  # counts: row 0 x3, row 1 x2, row 2 x1; row 0 the least recent
    lfu, lru = table("lfu"), table("lru")
    access(lfu, *seq, 3)
    access(lru, *seq, 3)
    assert cached(lfu) == {0, 1, 3}  # LFU drops row 2 (one use)
    assert cached(lru) == {1, 2, 3}  # LRU drops row 0 (oldest)
    access(lfu, 3, 4)  # rows 1 and 3 both have 2 uses: the tie goes to the least recent (1)
    assert cached(lfu) == {0, 3, 4}
    assert lfu.use_count[:5].tolist() == [3, 2, 1, 2, 1]  # use counts of every row are kept


def test_a_batch_never_evicts_its_own_rows() -> None:
    t = table("lru", cache=3)
    access(t, 0, 1, 2)
    slots = t.resident_slots(torch.tensor([2, 5, 1]))  # 1 and 2 hit; 5 must take row 0's slot
    assert cached(t) == {1, 2, 5}
    assert [int(t.slot_row[s]) for s in slots] == [2, 5, 1]


def test_a_training_batch_larger_than_the_cache_is_a_clear_error() -> None:
    t = table("lru", cache=3)
    with pytest.raises(ConfigError, match="raise cache_load_factor"):
        t.resident_slots(torch.tensor([0, 1, 2, 3]))


def test_write_back_keeps_weight_and_optimizer_state() -> None:
    t = table("lru", cache=2)
    (slot,) = t.resident_slots(torch.tensor([5])).tolist()
    with torch.no_grad():
        t.cache_weight[slot] = 3.0
        t.cache_state["sum"][slot] = 7.0
    access(t, 1, 2)  # row 5 is evicted
    assert 5 not in cached(t)
    assert t.host_weight[5].tolist() == [3.0] * 4
    assert t.host_state["sum"][5].tolist() == [7.0] * 4
    (slot,) = t.resident_slots(torch.tensor([5])).tolist()  # and comes back with them
    assert t.cache_weight[slot].tolist() == [3.0] * 4
    assert t.cache_state["sum"][slot].tolist() == [7.0] * 4
    assert t.stats.bytes_to_host == 2 * (4 * 4 + 4 * 4)  # two evictions, weight + state


# ===================================================================== dynamic vocabulary


def test_dynamic_ids_get_rows_up_to_the_cap_then_hash() -> None:
    d = DynamicIds(base=10, capacity=2, seed=0)
    out = d.map(torch.tensor([[3, 15, 12], [15, 99, 12]]))
    # 3 is known; 15 then 12 take rows 10, 11 in order of first sight; 99 finds no free row
    fallback = 10 + int(__import__("autoembed.nn.hashing", fromlist=["x"]).hash_id_reference(
        99, 2, 0))
    assert out.tolist() == [[3, 10, 11], [10, fallback, 11]]
    assert (d.assigned, d.folded) == (2, 1)
    assert d.map(torch.tensor([15])).tolist() == [10]  # an id keeps its row
    assert d.release(torch.tensor([10])) == [15]
    assert d.map(torch.tensor([99])).tolist() == [10]  # a freed row goes to the next new id


def test_host_cached_table_gives_new_ids_rows_and_folds_rare_ones() -> None:
    cfg = EmbeddingConfig(tables=(TableConfig("a", 50),), dim=4, batch_size=4,
                          dense_layers=(4,), table_optimizer="sgd", dense_optimizer="sgd",
                          placement="host_cached", cache_load_factor=0.5, dynamic_rows=3)
    tr = make_trainer(cfg)
    (_, t), = host_cached_tables(tr.model)
    ids = torch.tensor([[7], [1000], [2000], [1000]])
    tr.step([Batch({"a": ids}, torch.ones(4))])
    assert t.dynamic is not None
    assert (t.dynamic.row_of(1000), t.dynamic.row_of(2000)) == (50, 51)
    assert t.use_count[50:53].tolist() == [2, 1, 0]
    tr.step([Batch({"a": torch.tensor([[3000], [4000], [5], [5]])}, torch.ones(4))])
    assert t.dynamic.row_of(3000) == 52 and t.dynamic.row_of(4000) is None  # cap: hashed
    assert t.dynamic.folded == 1
    gone = t.fold_rare(min_count=2)  # 2000 and 3000 were seen once
    assert sorted(gone) == [2000, 3000]
    assert t.dynamic.free_rows == 2 and t.dynamic.row_of(1000) == 50
    with pytest.raises(ConfigError, match="dynamic rows"):
        replace(cfg, compression="hash", hash_buckets=10)


def test_ids_outside_the_table_without_dynamic_rows_are_a_clear_error() -> None:
    cfg = replace(base_config("sgd"), placement="host_cached", cache_load_factor=0.5)
    tr = make_trainer(cfg)
    b = Batch({"a": torch.tensor([[400, 1]] * 16), "b": torch.zeros(16, 1, dtype=torch.long)},
              torch.zeros(16))
    with pytest.raises(ConfigError, match="dynamic_rows"):
        tr.step([b])


# ===================================================================== pricing


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "amp_bf16"])
@pytest.mark.parametrize("opt", ["sgd", "adagrad", "rowwise_adagrad", "sparse_adam"])
def test_built_bytes_equal_analytic_for_every_optimizer(opt: str, precision: str) -> None:
    cfg = replace(base_config(opt, precision=precision), placement="host_cached",
                  cache_load_factor=0.3, adam_eps=1e-4)
    tr = make_trainer(cfg)
    tr.step(batches(1))
    tabs = [t for _, t in host_cached_tables(tr.model)]
    est = estimate(cfg)
    state = sum(block(v.numel() * v.element_size()) for o in tr.optimizers.all
                for st in o.state.values() for v in st.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0)
    host = sum(v.numel() * v.element_size() for t in tabs for v in t.host_tensors().values())
    assert sum(block(p.numel() * p.element_size()) for p in tr.model.parameters()) \
        == est.parameters
    assert state == est.optimizer_state
    assert host == est.host_bytes


def test_analytic_figures_equal_bytes_of_the_built_structures() -> None:
    cfg = replace(base_config("sparse_adam"), placement="host_cached", cache_load_factor=0.3,
                  dynamic_rows=5)
    tr = make_trainer(cfg)
    tr.step(batches(1))
    tabs = [t for _, t in host_cached_tables(tr.model)]
    est = estimate(cfg)
    params = sum(block(p.numel() * p.element_size()) for p in tr.model.parameters())
    state = sum(block(v.numel() * v.element_size()) for o in tr.optimizers.all
                for st in o.state.values() for v in st.values()
                if isinstance(v, torch.Tensor) and v.dim() > 0)
    host = sum(v.numel() * v.element_size() for t in tabs for v in t.host_tensors().values())
    books = sum(block(v.numel() * v.element_size()) for t in tabs
                for v in t.device_bookkeeping().values())
    assert params == est.parameters
    assert state == est.optimizer_state
    assert host == est.host_bytes
    assert books == sum(c.device_bookkeeping for c in est.cache)
    # by hand: table a has 405 rows (400 + 5 dynamic), 122 cached (ceil 0.3 x 405); rows of
    # 8 fp32 + Adam's two 8-float states = 96 B, plus 16 B of host bookkeeping per row
    a = est.cache[0]
    assert (a.rows, a.cache_rows, a.row_bytes) == (405, 122, 96)
    assert a.host_bytes == 405 * 96 + 405 * 16 + 5 * 8
    assert a.device_bookkeeping == 3 * 1024  # 122 x 8 B = 976 B: one 512 B-rounded block each


def test_the_cache_lowers_the_device_bytes_by_the_rows_it_leaves_on_the_host() -> None:
    dev = EmbeddingConfig(tables=(TableConfig("a", 1_000_000),), dim=32, batch_size=256,
                          table_optimizer="adagrad", dense_optimizer="adam")
    hc = replace(dev, placement="host_cached", cache_load_factor=0.1)
    e_dev, e_hc = estimate(dev), estimate(hc)
    # table + adagrad state: 1e6 x 32 x 4 x 2 on the device; cached: 1e5 rows of it
    assert e_dev.parameters + e_dev.optimizer_state - (e_hc.parameters + e_hc.optimizer_state) \
        == 2 * (block(1_000_000 * 128) - block(100_000 * 128))
    assert e_hc.host_bytes == 1_000_000 * (256 + 16)
    assert e_dev.host_bytes == 0


def test_traced_prices_host_cached_configs_like_the_analytic_model() -> None:
    cfg = replace(base_config("adagrad"), placement="host_cached", cache_load_factor=0.3)
    ana, tr = estimate(cfg), estimate(cfg, method="traced")
    assert tr.host_bytes == ana.host_bytes
    assert tr.parameters == ana.parameters
    assert abs(tr.allocated_peak - ana.allocated_peak) <= 0.1 * ana.allocated_peak
    assert any("host_cached" in n for n in tr.notes)


def test_miss_rate_formulas_on_hand_worked_cases() -> None:
    assert miss_rate(1000, 250, "lru") == pytest.approx(0.75)  # uniform: 1 - C/R
    assert miss_rate(1000, 250, "lfu") == pytest.approx(0.75)
    assert miss_rate(3, 1, "lfu", probabilities=[0.2, 0.5, 0.3]) == pytest.approx(0.5)
    # LRU, two equally likely rows, one slot: Che's T solves 2(1 - e^{-T/2}) = 1, m = 1/2
    assert miss_rate(2, 1, "lru", probabilities=[0.5, 0.5]) == pytest.approx(0.5)
    assert miss_rate(100, 100, "lru", 1.0) == 0.0
    assert fit_zipf(1e6 * np.arange(1, 500, dtype=float) ** -1.2) == pytest.approx(1.2)


def test_predicted_miss_rate_matches_a_simulated_cache() -> None:
    from autoembed.zipf import zipf_ranks

    rows, cache, s = 2000, 200, 1.0
    ids = zipf_ranks(np.random.default_rng(0).random(6000), rows, s)
    for policy in ("lru", "lfu"):
        t = HostCachedTable(rows, 2, cache, policy, "sgd", SPEC)
        for i in ids[:2000]:  # warm up
            t.resident_slots(torch.tensor([int(i)]))
        t.reset_stats()
        for i in ids[2000:]:
            t.resident_slots(torch.tensor([int(i)]))
        simulated = 1 - t.stats.hit_rate
        assert simulated == pytest.approx(miss_rate(rows, cache, policy, s), abs=0.04)


# ===================================================================== config and CLI


def test_config_round_trips_through_yaml(tmp_path: object) -> None:
    cfg = replace(base_config("rowwise_adagrad"), placement="host_cached",
                  cache_load_factor=0.35, cache_policy="lfu", dynamic_rows=7)
    path = save_config(cfg, f"{tmp_path}/c.yaml")
    assert load_config(path) == cfg


@pytest.mark.parametrize(
    ("kw", "words"),
    [({"cache_load_factor": 0.0}, "(0.0, 1.0]"), ({"cache_load_factor": 1.5}, "(0.0, 1.0]"),
     ({"cache_policy": "fifo"}, "lru, lfu"), ({"table_optimizer": "adam"}, "sparse_adam"),
     ({"cache_load_factor": 0.01}, "raise cache_load_factor"),
     ({"compression": "qr"}, "compression none or hash"),
     ({"precision": "fp16_master"}, "master"), ({"grad_accum_steps": 2}, "use 1")],
)
def test_bad_placement_values_name_the_rule(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as e:
        replace(base_config("adagrad"), placement="host_cached", **kw)
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--cache-load-factor", "0"], "--cache-load-factor"),
     (["--cache-load-factor", "2"], "--cache-load-factor"),
     (["--cache-policy", "fifo"], "--cache-policy"), (["--host-budget", "1MB"], "--host-budget"),
     (["--placement", "disk"], "placement")],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["estimate", "--vocab", "100000", "--batch", "16", "--seq", "8", "--placement",
               "host_cached", "--optimizer", "adagrad", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err


def test_cli_estimate_reports_host_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", "--vocab", "100000", "--dim", "16", "--placement", "host_cached",
               "--optimizer", "rowwise_adagrad", "--cache-load-factor", "0.05",
               "--batch", "16", "--seq", "8", "--host-budget", "1GB", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    # 100000 rows x (16 x 4 B weight + 4 B row-wise sum + 16 B bookkeeping)
    assert out["host_bytes"] == 100_000 * (64 + 4 + 16)
    assert out["host_fits"] is True
    assert out["cache"][0]["cache_rows"] == 5000


def test_a_checkpoint_resumes_exactly() -> None:
    cfg = replace(base_config("sparse_adam"), placement="host_cached", cache_load_factor=0.25,
                  cache_policy="lfu", dynamic_rows=4)
    data = batches(12, seed=5)
    data[3].features["a"][0, 0] = 900  # a new id: takes a dynamic row
    straight = make_trainer(cfg)
    for b in data:
        straight.step([b])
    first = make_trainer(cfg)
    for b in data[:6]:
        first.step([b])
    saved = {"model": first.model.state_dict(), "opt": first.optimizers.state_dict()}
    resumed = make_trainer(cfg)
    resumed.model.load_state_dict(saved["model"])
    resumed.optimizers.load_state_dict(saved["opt"])
    for _, t in host_cached_tables(resumed.model):
        t.bind_optimizer(resumed.optimizers.table)
    for b in data[6:]:
        resumed.step([b])
    for (_, x), (_, y) in zip(host_cached_tables(straight.model),
                              host_cached_tables(resumed.model), strict=True):
        torch.testing.assert_close(x.full_weight(), y.full_weight())
        assert torch.equal(x.slot_row, y.slot_row) and torch.equal(x.use_count, y.use_count)
        for k in x.host_state:
            torch.testing.assert_close(x.host_state[k], y.host_state[k])
    (_, ta), _ = host_cached_tables(resumed.model)
    assert ta.dynamic is not None and ta.dynamic.row_of(900) == 400
