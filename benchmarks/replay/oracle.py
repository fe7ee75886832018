"""The limit (issue 44): the least compute that could reach each of compare.py's targets on
a table, were the right rows known in advance: an oracle that trains only them, at full
fidelity, at seed 0, one after another.

* `best`: the cheapest single row whose validation quality is within the noise unit of the
  table's best.
* `hvNN`: the cheapest set of rows whose front reaches NN% of the reference hypervolume.
  Solved exactly (`cheapest_set`), not greedily: on two maximised axes (quality, memory
  goodness, both normalised as `compare.Yardstick.volume` does) the hypervolume of a chain
  of points sorted by memory goodness descending, quality ascending, is
  sum_i q_i (g_i - g_{i+1}) (g after the last: 0), so a set's volume depends only on
  consecutive members; a label-setting search over chains (per last point, the Pareto set
  of (cost, volume so far), cut at the cheapest set found) finds the optimum. Only
  mutually non-dominated sets need be searched: a dominated member adds cost, no volume.

Each row costs its seed-0 record's compute (`total_cpu_s`, or wall) plus the per-trial
charge, and a search the per-search charge once (`harness.Costs`); no decision time. A
replay can beat it only by drawing a row at another training seed that happens to score
higher (a repeat), or by a pruned trial that counts toward `best` (they do not: a target
counts complete trials).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Point", "chain_volume", "cheapest_set", "cheapest_within", "least_max_cost",
           "limits", "wall_limits"]


@dataclass(frozen=True)
class Point:
    """A row as the oracle sees it: memory goodness `g` and quality `q` (both normalised to
    [0, 1], higher better) and its compute."""

    row: int
    g: float
    q: float
    cost: float


def _order(points: Sequence[Point]) -> list[Point]:
    return sorted(points, key=lambda p: (-p.g, p.q, p.cost, p.row))


def chain_volume(points: Sequence[Point]) -> float:
    """Hypervolume (reference (0, 0)) of mutually non-dominated points: the chain formula."""
    pts = _order(points)
    return sum(p.q * (p.g - (pts[k + 1].g if k + 1 < len(pts) else 0.0))
               for k, p in enumerate(pts))


@dataclass
class _Label:
    cost: float
    volume: float  # the members' shares finalised so far (all but the last)
    rows: tuple[int, ...]


def _pareto(labels: list[_Label]) -> list[_Label]:
    """Labels no other is at most as costly and at least as voluminous as (ties: the first)."""
    out: list[_Label] = []
    for lab in sorted(labels, key=lambda x: (x.cost, -x.volume)):
        if not out or lab.volume > out[-1].volume:
            out.append(lab)
    return out


def cheapest_set(points: Sequence[Point], target: float
                 ) -> tuple[float, tuple[int, ...]] | None:
    """The least total cost of a set of `points` whose hypervolume is at least `target`,
    and its rows (None: not even all of them reach it). Exact (module docstring)."""
    pts = _order([p for p in points if p.g >= 0 and p.q >= 0])
    best: tuple[float, tuple[int, ...]] | None = None
    labels: list[list[_Label]] = []
    for j, pj in enumerate(pts):
        bound = best[0] if best else math.inf
        cands = [_Label(pj.cost, 0.0, (pj.row,))]
        for i in range(j):
            pi = pts[i]
            if pi.q > pj.q:
                continue
            share = pi.q * (pi.g - pj.g)
            cands += [_Label(lab.cost + pj.cost, lab.volume + share, (*lab.rows, pj.row))
                      for lab in labels[i]]
        keep: list[_Label] = []
        for lab in _pareto([c for c in cands if c.cost < bound]):
            if lab.volume + pj.q * pj.g >= target:
                if best is None or lab.cost < best[0]:
                    best = (lab.cost, lab.rows)
            else:
                keep.append(lab)
        labels.append(keep)
    if best is not None:
        return best[0], tuple(sorted(best[1]))
    return None


def cheapest_within(points: Sequence[Point], q_min: float) -> tuple[float, int] | None:
    """The cheapest point of quality at least `q_min`: (cost, row)."""
    ok = [(p.cost, p.row) for p in points if p.q >= q_min]
    return min(ok) if ok else None


def least_max_cost(points: Sequence[Point], target: float
                   ) -> tuple[float, tuple[int, ...]] | None:
    """The least cost C such that some set of `points`, none costlier than C, has a
    hypervolume of at least `target`, and the fewest rows at most C that reach it (None: not
    even all of them reach it). Exact (module docstring)."""
    costs = sorted({p.cost for p in points})

    def reaches(c: float) -> bool:
        return _volume([p for p in points if p.cost <= c]) >= target

    if not costs or not reaches(costs[-1]):
        return None
    lo, hi = 0, len(costs) - 1  # bisect: the rows at most costs[k] reach it for k >= answer
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(costs[mid]) else (mid + 1, hi)
    cheap = [Point(p.row, p.g, p.q, 1.0) for p in points if p.cost <= costs[lo]]
    fewest = cheapest_set(cheap, target)
    assert fewest is not None
    return costs[lo], fewest[1]


def _volume(points: Sequence[Point]) -> float:
    """Hypervolume of any points (the dominated ones add none)."""
    pts = list({(p.g, p.q): p for p in points if p.g >= 0 and p.q >= 0}.values())
    return chain_volume([p for p in pts if not any(
        o.g >= p.g and o.q >= p.q and o is not p for o in pts)])


def _points(stick: Any, table: Any, costs: Any, charged: bool = True) -> list[Point]:
    """The table's seed-0 complete rows as the oracle sees them (each at its record's
    compute, plus the per-trial charge where `charged`)."""
    span = max(stick.q_best - stick.q_lo, 1e-12)
    width = stick.mem_hi - stick.mem_lo
    points = []
    for (row, seed), rec in sorted(table.trials.items()):
        if seed != 0 or rec["status"] != "complete" or rec.get("valid_quality") is None:
            continue
        m = float(table.rows[row]["estimate"]["allocated_peak"])
        points.append(Point(row, (stick.mem_hi - math.log10(max(m, 1.0))) / width,
                            (float(rec["valid_quality"]) - stick.q_lo) / span,
                            float(rec["cost"][f"total_{costs.basis}_s"])
                            + (costs.per_trial_s if charged else 0.0)))
    return points


def limits(stick: Any, table: Any, costs: Any, fractions: Sequence[float]
           ) -> dict[str, dict[str, Any] | None]:
    """The oracle's compute to each target of `stick` (a `compare.Yardstick`) on `table`:
    {"hv95": {"compute_s", "rows"}, ..., "best": {...}}; None where no set reaches it."""
    points = _points(stick, table, costs)
    span = max(stick.q_best - stick.q_lo, 1e-12)
    out: dict[str, dict[str, Any] | None] = {}
    for f in fractions:
        got = cheapest_set(points, (f - 1e-12) * stick.reference)
        out[f"hv{round(f * 100)}"] = None if got is None else {
            "compute_s": costs.per_search_s + got[0], "rows": list(got[1])}
    one = cheapest_within(points, (stick.q_best - stick.noise - stick.q_lo) / span)
    out["best"] = None if one is None else {"compute_s": costs.per_search_s + one[0],
                                            "rows": [one[1]]}
    return out


def wall_limits(stick: Any, table: Any, costs: Any, fractions: Sequence[float]
                ) -> dict[str, dict[str, Any] | None]:
    """The least wall-clock to each target of `stick` on `table` with unlimited workers
    (module docstring): {"hv95": {"wall_s": the lower bound, "max_row_s": the least
    costliest row's seconds, "rows": the fewest rows that cheap reaching it, "schedule_s":
    their wall-clock handed over costliest first (an upper bound)}, ..., "best": {...}};
    None where no set reaches it."""
    points = _points(stick, table, costs, charged=False)  # each row's own seconds
    by_row = {p.row: p.cost for p in points}
    driver = costs.per_trial_s - costs.worker_s

    def limit(got: tuple[float, tuple[int, ...]] | None) -> dict[str, Any] | None:
        if got is None:
            return None
        order = sorted((by_row[r] for r in got[1]), reverse=True)
        last = max((k + 1) * driver + c for k, c in enumerate(order))
        return {"wall_s": costs.per_search_s + costs.per_trial_s + got[0],
                "max_row_s": got[0], "rows": sorted(got[1]),
                "schedule_s": costs.per_search_s + costs.worker_s + last}

    out = {f"hv{round(f * 100)}": limit(least_max_cost(points, (f - 1e-12) * stick.reference))
           for f in fractions}
    span = max(stick.q_best - stick.q_lo, 1e-12)
    one = cheapest_within(points, (stick.q_best - stick.noise - stick.q_lo) / span)
    out["best"] = limit(None if one is None else (one[0], (one[1],)))
    return out
