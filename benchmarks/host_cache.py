"""Host-resident tables with a device cache (issue 9): throughput against cache load factor,
and a search where `host_cached` wins under a budget the device-resident table does not fit.

Part 1 (throughput): one CTR table of V = 1,000,000 rows, dim 32, 4 ids per sample drawn from
a Zipf law (exponent 1.05), batch 1024, row-wise Adagrad, fp32; the same id stream for every
run. For `device` and each cache load factor: `--warmup` untimed steps (they fill the
cache), then `--steps` timed steps of the shared training step; samples/s, the measured
misses per lookup next to the cache model's prediction (`memory/cache_model.py`: LRU by
Che's approximation), bytes moved per step (host -> device fills and write-backs), and the
share of step time spent making rows resident (the throughput cost of misses). On a CPU
machine host and "device" are the same memory, so this measures the cache's bookkeeping and
copies, not a PCIe transfer; on a GPU the host copy is pinned and the copies cross PCIe.

Part 2 (search): `autoembed search --space host_cache --sampler grid --budget 700MB`
(search_spaces/host_cache.yaml: fields of 2M and 50k ids, dim 32, trained at full size).
The table shows every grid point: status, device_total, host bytes, test AUC and, for
host_cached trials, the measured hit rate and time share of cache work.

    python benchmarks/host_cache.py [--steps 20] [--warmup 10] [--no-search]

Prints markdown tables and writes them to benchmarks/results/host_cache.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402

VOCAB, DIM, BAG, BATCH, ZIPF = 200_000, 32, 4, 1024, 1.05
# The model's miss rate is a steady state: before the timed steps the cache is filled by
# running the id stream through it (lookups only) until every slot is taken, plus this many
# batches, at most MAX_FILL batches.
SETTLE, MAX_FILL = 50, 2000
ROUNDS = 3
FACTORS = (0.5, 0.2, 0.1, 0.05, 0.025)
THREADS = 2
BUDGET = "700MB"


def _batches(n: int, seed: int = 0) -> list[Any]:
    import numpy as np
    import torch

    from autoembed.batch import Batch
    from autoembed.zipf import zipf_ranks

    # popular ids spread over the table, as in real data; one permutation for every stream
    perm = np.random.default_rng(0).permutation(VOCAB)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ranks = zipf_ranks(rng.random((BATCH, BAG)), VOCAB, ZIPF)
        ids = torch.from_numpy(perm[ranks].astype("int64"))
        labels = torch.from_numpy(rng.integers(0, 2, BATCH).astype("float32"))
        out.append(Batch({"f0": ids}, labels))
    return out


def _fill(table: Any) -> int:
    """Run fresh id batches through the cache until it is full, plus SETTLE; batches used."""
    n = full_at = 0
    seed = 1000
    while n < MAX_FILL:
        (b,) = _batches(1, seed + n)
        table.resident_slots(b.features["f0"].reshape(-1))
        n += 1
        if not full_at and bool((table.slot_row >= 0).all()):
            full_at = n
        if full_at and n >= full_at + SETTLE:
            break
    return n


def throughput(steps: int, warmup: int) -> str:
    import torch

    from autoembed.config import EmbeddingConfig, TableConfig
    from autoembed.memory.cache_model import miss_rate
    from autoembed.models import make_trainer
    from autoembed.models.host_cached_table import total_stats

    torch.set_num_threads(THREADS)
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    base = EmbeddingConfig(
        tables=(TableConfig("f0", VOCAB, float(BAG)),), dim=DIM, batch_size=BATCH,
        dense_layers=(64,), table_optimizer="rowwise_adagrad", dense_optimizer="adam", lr=0.05,
    )
    data = _batches(warmup + steps * ROUNDS)
    runs: list[tuple[float | None, Any, list[Any], list[int], list[float]]] = []
    for factor in (None, *FACTORS):
        cfg = base if factor is None else replace(
            base, placement="host_cached", cache_load_factor=factor, cache_policy="lru")
        tr = make_trainer(cfg)
        tables: list[Any] = [m for m in tr.model.modules() if hasattr(m, "reset_stats")]
        filled = [_fill(t) for t in tables]
        for b in data[:warmup]:
            tr.step([b])
        for t in tables:
            t.reset_stats()
        runs.append((factor, tr, tables, filled, []))
    # ROUNDS rounds over all configs, each timing `steps` batches: the machine is
    # shared, so a config's figure is its median round, measured beside the others
    for r in range(ROUNDS):  # fresh batches each round (repeats would be cache hits)
        batch_r = data[warmup + r * steps: warmup + (r + 1) * steps]
        for _, tr, _, _, times in runs:
            t0 = time.perf_counter()
            for b in batch_r:
                tr.step([b])
            times.append(time.perf_counter() - t0)
    rows = []
    for factor, tr, tables, filled, times in runs:
        dt = statistics.median(times)
        sps = steps * BATCH / dt
        if factor is None:
            rows.append(["device", f"{VOCAB:,}", "-", f"{sps:,.0f}", "-", "-", "-", "-"])
            continue
        s = total_stats(tr.model)
        cache = tables[0].cache_rows
        n = steps * ROUNDS
        rows.append([
            f"host_cached {factor:g}", f"{cache:,}", str(filled[0]), f"{sps:,.0f}",
            f"{s.misses / s.lookups:.3f}", f"{miss_rate(VOCAB, cache, 'lru', ZIPF):.3f}",
            f"{(s.bytes_to_device + s.bytes_to_host) / n / 1e6:.2f}",
            f"{100 * s.seconds / sum(times):.0f}%",
        ])
    header = ["placement", "device rows", "fill batches", "samples/s", "misses/lookup (measured)",
              "misses/lookup (model, LRU)", "MB moved/step", "time in cache work"]
    return (
        f"V = {VOCAB:,}, dim {DIM}, {BAG} Zipf({ZIPF}) ids per sample, batch {BATCH}, "
        f"rowwise_adagrad, {THREADS} threads; the cache is filled by id batches (lookups only) "
        f"until full + {SETTLE}, then {warmup} warm-up steps; samples/s is the median of "
        f"{ROUNDS} rounds of {steps} timed steps (rounds interleaved across configs).\n\n"
        + markdown_table(header, rows)
    )


def search_table() -> str:
    from autoembed.pipeline import search

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = search(BUDGET, "host_cache", sampler="grid", runs_dir=tmp, study="bench",
                     tracking_uri="none")
        wall = time.perf_counter() - t0
    rows = []
    for r in sorted(res.rows, key=lambda r: r.number):
        # invalid proposals carry the space's base config: describe them by their params
        p, m = r.params, r.metrics
        host = p.get("placement") == "host_cached"
        rows.append([
            r.number, p.get("placement"), p.get("compression"), p.get("hash_buckets", "-"),
            f"{p['cache_load_factor']:g}" if host else "-", p.get("cache_policy", "-"),
            r.status, _mb(r.estimate.get("device_total")), _mb(r.estimate.get("host_bytes")),
            _num(m.get("test_quality", m.get("quality")), 4), _num(m.get("cache_hit_rate"), 3),
            _pct(m.get("cache_time_share")), _num(m.get("throughput"), 0),
        ])
    header = ["trial", "placement", "compression", "buckets", "cache factor", "policy",
              "status", "device_total MB", "host MB", "test AUC", "hit rate (rows/batch)",
              "time in cache work", "samples/s"]
    done = [r for r in res.rows if r.status == "complete" and r.metrics.get("quality")]
    best = max(done, key=lambda r: float(r.metrics.get("test_quality")
                                         or r.metrics["quality"] or 0.0))
    twin = [r for r in res.rows if r.config.placement == "device"
            and r.config.compression == best.config.compression
            and r.config.hash_buckets == best.config.hash_buckets]
    verdict = (
        f"Highest test AUC: trial {best.number} ({best.config.placement}, "
        f"{best.config.compression}), AUC "
        f"{float(best.metrics.get('test_quality') or best.metrics['quality'] or 0):.4f}. "
        + (f"The same config resident on the device (trial {twin[0].number}) is "
           f"{twin[0].status}: {twin[0].reason or ''}" if twin else "")
    )
    return (
        f"`autoembed search --budget {BUDGET} --space host_cache --sampler grid` "
        f"({wall:.0f} s wall, {len(res.rows)} grid points; invalid points are host_cached "
        "hash tables of 2000 rows whose 5% cache holds fewer rows than a batch).\n\n"
        + markdown_table(header, rows) + "\n\n" + verdict
    )


def _num(v: object, digits: int) -> str:
    try:
        return f"{float(v):,.{digits}f}" if v is not None else "-"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"


def _pct(v: object) -> str:
    try:
        return f"{100 * float(v):.0f}%" if v is not None else "-"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"


def _mb(v: object) -> str:
    try:
        return f"{int(float(v)) / 1e6:,.0f}" if v not in (None, 0) else "-"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-search", action="store_true")
    a = ap.parse_args()
    body = "## Throughput against cache load factor\n\n" + throughput(a.steps, a.warmup)
    if not a.no_search:
        body += "\n\n## A search under a budget the device-resident table does not fit\n\n"
        body += search_table()
    cmd = "python benchmarks/host_cache.py" + "".join(
        f" {x}" for x in sys.argv[1:])
    write_result("host_cache", "Host-resident tables with a device cache", body, cmd)


if __name__ == "__main__":
    main()
