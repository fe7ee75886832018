"""Pricing of host_cached tables (placement `host_cached`): device and host bytes, expected
miss rate and transfer per step. The table of bytes and the formulas (LFU, LRU by Che's
approximation, over Zipf row popularity from the table's `frequency` or `fit_zipf` of counted
ids; uniform without either): docs/host_cache.md, "What lives where" and "Expected miss rate
and transfer". The device cache and its state are ordinary `param_specs` tensors (priced by
`analytic`); this module adds the bookkeeping, the host bytes and the traffic.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from autoembed.config import (
    EmbeddingConfig,
    cache_rows,
    precision_policy,
    resolved_tables,
    storage_rows,
)
from autoembed.memory.types import CacheTable, round_block

__all__ = ["CacheTable", "HOST_ROW_BOOKKEEPING_BYTES", "cache_tables",
           "device_bookkeeping", "miss_rate", "fit_zipf", "zipf_exponent_for", "row_state_bytes"]

# models/host_cached_table.py: per slot slot_row, slot_last, slot_count (int64 each).
SLOT_BOOKKEEPING_TENSORS = 3
# models/host_cached_table.py: per host row slot_of_row and use_count (int64 each).
HOST_ROW_BOOKKEEPING_BYTES = 16
DYNAMIC_OWNER_BYTES = 8  # nn/dynamic_ids.py: owner id of each dynamic row (int64)
ROWWISE_STATE_BYTES = 4  # RowWiseAdagrad: one fp32 per row
# Per-element state tensors (in the parameter dtype) each optimizer keeps per row.
STATE_TENSORS = {"sgd": 0, "adagrad": 1, "sparse_adam": 2, "rowwise_adagrad": 0}
_EXACT_RANKS = 4096  # Che's approximation: ranks summed one by one up to here
_BIN_RATIO = 1.01  # then geometric bins of ranks this wide


def row_state_bytes(config: EmbeddingConfig, dim: int, optimizer: str | None = None) -> int:
    """Optimizer-state bytes of one row under `optimizer` (default: the config's table
    optimizer; no master: host_cached)."""
    pb = precision_policy(config.precision).param_bytes
    opt = optimizer or config.table_optimizer
    if opt == "rowwise_adagrad":
        return ROWWISE_STATE_BYTES
    return STATE_TENSORS[opt] * dim * pb


def device_bookkeeping(cache: int) -> int:
    return SLOT_BOOKKEEPING_TENSORS * round_block(cache * 8)


def _probabilities(rows: int, exponent: float) -> tuple[npt.NDArray[np.float64], ...]:
    """(p per representative rank, how many ranks it stands for): exact for the head,
    geometric bins beyond (p at the bin's geometric middle)."""
    from autoembed.zipf import zipf_probability

    head = min(rows, _EXACT_RANKS)
    ranks = [np.arange(head, dtype=np.float64)]
    weights = [np.ones(head)]
    lo = head
    edges = []
    while lo < rows:
        hi = min(rows, max(lo + 1, math.ceil(lo * _BIN_RATIO)))
        edges.append((lo, hi))
        lo = hi
    if edges:
        e = np.asarray(edges, dtype=np.float64)
        ranks.append(np.sqrt(e[:, 0] * np.maximum(e[:, 1] - 1, e[:, 0])))
        weights.append(e[:, 1] - e[:, 0])
    k = np.concatenate(ranks)
    w = np.concatenate(weights)
    p = zipf_probability(k, rows, exponent)
    p = p / float(np.dot(p, w))  # the binning's small error: renormalise
    return p, w


def miss_rate(
    rows: int,
    cache: int,
    policy: str,
    exponent: float = 0.0,
    probabilities: npt.ArrayLike | None = None,
) -> float:
    """Steady-state share of lookups that miss a `cache`-row cache (see the module doc).
    `probabilities` (row popularities, any order, summing to 1) replace the Zipf law."""
    if cache >= rows:
        return 0.0
    if probabilities is not None:
        p = np.sort(np.asarray(probabilities, dtype=np.float64))[::-1]
        p = p / p.sum()
        w = np.ones_like(p)
    else:
        if exponent == 0.0:
            return 1.0 - cache / rows
        p, w = _probabilities(rows, exponent)
    if policy == "lfu":
        cum = np.cumsum(w)
        full = cum <= cache
        held = float(np.dot(p[full], w[full]))
        i = int(full.sum())
        if i < len(p):  # part of the bin at the boundary
            held += p[i] * (cache - (cum[i - 1] if i else 0.0))
        return max(0.0, 1.0 - held)
    if policy != "lru":
        raise ValueError(f"cache policy '{policy}' is not lru or lfu")

    def occupied(t: float) -> float:
        return float(np.dot(-np.expm1(-p * t), w))

    lo, hi = 0.0, 1.0
    while occupied(hi) < cache:
        hi *= 2.0
    for _ in range(100):  # bisection: occupied(T) is increasing in T
        mid = 0.5 * (lo + hi)
        if occupied(mid) < cache:
            lo = mid
        else:
            hi = mid
    t = 0.5 * (lo + hi)
    return float(np.clip(np.dot(p * np.exp(-p * t), w), 0.0, 1.0))


@lru_cache(maxsize=256)
def zipf_exponent_for(rows: int, frequency: float) -> float:
    """The Zipf exponent s whose sum_k p_k^2 over `rows` ranks is `frequency` (bisection on
    s in [0, 4]; the sum rises with s; the sum over the binned ranks of `_probabilities`)."""

    def freq(s: float) -> float:
        p, w = _probabilities(rows, s)
        return float(np.dot(p * p, w))

    if frequency <= 1.0 / rows * (1 + 1e-9):
        return 0.0
    lo, hi = 0.0, 4.0
    if freq(hi) <= frequency:
        return hi
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if freq(mid) < frequency:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_zipf(counts: npt.ArrayLike) -> float:
    """Zipf exponent of counted ids: least-squares slope of log count against log rank over
    the rows seen (counts sorted descending), clipped to >= 0."""
    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    c = c[c > 0]
    if len(c) < 2:
        return 0.0
    x = np.log(np.arange(1, len(c) + 1, dtype=np.float64))
    y = np.log(c)
    slope = float(np.polyfit(x, y, 1)[0])
    return max(0.0, -slope)


def cache_tables(config: EmbeddingConfig) -> tuple[CacheTable, ...]:
    """Pricing of every table of a host_cached config (empty for placement device)."""
    if config.placement != "host_cached":
        return ()
    config = config.resolve()
    pb = precision_policy(config.precision).param_bytes
    out = []
    for t in resolved_tables(config):
        rows, cache, dim = storage_rows(config, t), cache_rows(config, t), t.dim
        st = row_state_bytes(config, dim, t.table_optimizer)
        row_b = dim * pb + st
        host = rows * row_b + rows * HOST_ROW_BOOKKEEPING_BYTES
        host += config.dynamic_rows * DYNAMIC_OWNER_BYTES
        known = rows - config.dynamic_rows
        s = 0.0
        if t.frequency is not None and known > 1:
            s = zipf_exponent_for(known, float(t.frequency))
        m = miss_rate(rows, cache, config.cache_policy, s)
        misses = config.batch_size * t.lookups * m
        out.append(CacheTable(
            t.name, rows, cache, dim, row_b, host, device_bookkeeping(cache), s, m, misses,
            math.ceil(2 * misses * row_b),
        ))
    return tuple(out)
