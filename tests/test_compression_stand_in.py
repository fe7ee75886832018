"""The stand-in of the default spaces under robe and hot_cold (issue 16): each method keeps
its share of rows, a hot set keeps its share of *lookups*, and the space's per-table rules
reach the trained config as they select the full-size tables.

Zipf coverage is computed here by hand from the generator's law (`autoembed.zipf`'s
docstring: a rank is floor(X) - 1, X with density proportional to x^-s on [1, V + 1)), so
the top k ranks take ((k + 1)^(1-s) - 1) / ((V + 1)^(1-s) - 1) of the lookups."""

from __future__ import annotations

import math

import pytest

from autoembed.compression import hot_count, hot_share_at_scale
from autoembed.config import resolved_tables
from autoembed.pipeline.priced_data import build_priced_data as build_workload
from autoembed.pipeline.priced_data import data_spec_for
from autoembed.runner import resolve_for_data
from autoembed.space import load_space, parse_space

S = 1.2  # synthetic-ctr's default exponent


def _cover(k: int, v: int, s: float = S) -> float:
    """Share of lookups taken by ranks 0..k-1 of v, summed term by term for small v."""
    if v <= 100_000:
        def big_f(x: float) -> float:
            return (x ** (1 - s) - 1) / ((v + 1) ** (1 - s) - 1)
        return math.fsum(big_f(r + 2) - big_f(r + 1) for r in range(k))
    return ((k + 1) ** (1 - s) - 1) / ((v + 1) ** (1 - s) - 1)


def _least_k(cover: float, v: int) -> int:
    """Brute force: the fewest top ranks of v taking at least `cover` of the lookups."""
    total, k = 0.0, 0
    big_f = [((x) ** (1 - S) - 1) / ((v + 1) ** (1 - S) - 1) for x in range(1, v + 2)]
    while total < cover - 1e-12 and k < v:
        total = big_f[k + 1]  # F(k + 2): ranks 0..k
        k += 1
    return max(1, k)


def test_top_1_percent_of_40m_covers_more_than_of_40k() -> None:
    full = _cover(400_000, 40_000_000)
    small = _cover(400, 40_000)
    assert full == pytest.approx(0.953, abs=1e-3) and small == pytest.approx(0.794, abs=1e-3)
    share = hot_share_at_scale(0.01, 40_000_000, 40_000, S)
    k = _least_k(full, 40_000)
    assert share == k / 40_000 and hot_count(40_000, share) == k
    assert _cover(k, 40_000) >= full > _cover(k - 1, 40_000)
    assert 0.2 < share < 0.25  # 1% of the full table's rows, ~23% of the stand-in's


@pytest.mark.parametrize(("share", "v", "small"), [(0.001, 20_000, 20), (0.05, 200_000, 200),
                                                    (1.0, 1000, 10), (0.3, 1000, 1000)])
def test_hot_share_at_scale_by_brute_force(share: float, v: int, small: int) -> None:
    k = _least_k(_cover(hot_count(v, share), v), small)
    assert hot_share_at_scale(share, v, small, S) == pytest.approx(k / small)


def _default_workload(tables_yaml: str = "") -> tuple[object, object]:
    space = load_space("default")
    if tables_yaml:
        import yaml

        raw = yaml.safe_load(space.text)
        raw["tables"] = yaml.safe_load(tables_yaml)
        space = parse_space(raw, "default+tables")
    spec, stand_in = data_spec_for(space)
    return space, build_workload(spec, stand_in, space.tables)


def test_default_stand_in_keeps_each_hot_sets_share_of_lookups() -> None:
    space, w = _default_workload()
    values = {"dim": 16, "compression": "hot_cold", "hash_buckets": 65536, "hot_share": 0.01,
              "table_optimizer": "adam"}
    priced = w.priced(space.config_for(values))  # type: ignore[attr-defined]
    trained = resolve_for_data(w.trained(space.config_for(values)),  # type: ignore[attr-defined]
                               w.train_dataset)  # type: ignore[attr-defined]
    full = {t.name: t for t in resolved_tables(priced)}
    for ts in resolved_tables(trained):
        f = full[ts.name]
        want = _cover(hot_count(f.vocab_size, 0.01), f.vocab_size)
        hot = hot_count(ts.vocab_size, ts.hot_share)
        assert _cover(hot, ts.vocab_size) >= want - 1e-12
        assert hot == 1 or _cover(hot - 1, ts.vocab_size) < want  # and no more ids than that
        # cold buckets scale with the rows: 65536 / 1000
        assert ts.cold_buckets == 66
    f0 = {ts.name: ts for ts in resolved_tables(trained)}["f0"]
    assert hot_count(f0.vocab_size, f0.hot_share) == _least_k(_cover(400_000, 40_000_000),
                                                             40_000)


def test_robe_counts_scale_with_the_rows_shares_follow_them() -> None:
    space, w = _default_workload()
    for robe, want_f0 in ((4_000_000, 4000), (0.01, math.ceil(0.01 * 40_000 * 16))):
        values = {"dim": 16, "compression": "robe", "robe_size": robe}
        trained = resolve_for_data(w.trained(space.config_for(values)),  # type: ignore
                                   w.train_dataset)  # type: ignore[attr-defined]
        f0 = {ts.name: ts for ts in resolved_tables(trained)}["f0"]
        assert f0.robe_size == want_f0


def test_table_rules_reach_the_trained_config_by_full_size_rows() -> None:
    space, w = _default_workload("- {min_rows: 1000000, compression: hot_cold, hot_share: 0.01,"
                                 " hash_buckets: 0.001}\n")
    values = {"dim": 16, "compression": "none", "table_optimizer": "adam"}
    priced = w.priced(space.config_for(values))  # type: ignore[attr-defined]
    trained = resolve_for_data(w.trained(space.config_for(values)),  # type: ignore[attr-defined]
                               w.train_dataset)  # type: ignore[attr-defined]
    got = {ts.name: ts.compression for ts in resolved_tables(trained)}
    want = {ts.name: ts.compression for ts in resolved_tables(priced)}
    # 40M, 10M, 4M, 1M rows are compressed at full size; at 1/1000 they are 40k .. 1k rows
    assert want == {"f0": "hot_cold", "f1": "hot_cold", "f2": "hot_cold", "f3": "hot_cold",
                    "f4": "none", "f5": "none"}
    assert got == want
