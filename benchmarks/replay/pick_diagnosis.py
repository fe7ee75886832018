"""Why `ehvi` reaches the best quality late (benchmarks/results/ehvi_pick_rules_replay.md):
replays `ehvi-front` (compare.py's harness and yardstick, one worker) and prints, per seed,

* every trial of a near-best row (its seed-0 quality within the table's noise unit of the
  table's best): when it started, whether it completed or the front rule pruned it;
* over the model's asks before the first near-best trial, how often the candidate each
  acquisition would choose snaps to a near-best row: the product's (EHVI per predicted
  second), EHVI alone, the expected improvement (EI) of quality alone, EI per second, the
  predicted quality, and a candidate drawn at random.

    nice -n 5 .venv/bin/python benchmarks/replay/pick_diagnosis.py default --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from compare import Yardstick  # noqa: E402
from harness import Method, Replay  # noqa: E402
from table import Table  # noqa: E402
from variants import expected_improvement  # noqa: E402

import autoembed.pipeline.priced_ehvi as pe  # noqa: E402

RULES = ("product", "ehvi", "ei", "ei/s", "mean", "random")


class Watched(pe.PricedEHVI):
    """The product's sampler, noting each model ask's candidates (as the rows they snap to)
    with their EHVI, predicted quality and predicted seconds."""

    def __init__(self, seed: int, snapper: Any) -> None:
        super().__init__(seed)
        self.snapper, self.asks = snapper, []  # type: ignore[var-annotated]
        self._seen: list[Any] = []

    def _candidates(self, study: Any, number: int, done: Sequence[Any] = ()) -> Any:
        rng, cands = super()._candidates(study, number, done)
        self._cands = cands
        return rng, cands

    def _gain(self, number: int, q: np.ndarray, front: Any, x: np.ndarray, mu: np.ndarray,
              sd: np.ndarray) -> np.ndarray:
        gain = super()._gain(number, q, front, x, mu, sd)
        self._seen = [number, float(q.max()), gain, mu, sd]
        return gain

    def _choose(self, study: Any, number: int, done: list[Any]) -> Any:
        fits: list[tuple[np.ndarray, np.ndarray]] = []
        forest = pe._forest

        def noted(*a: Any) -> Any:
            fits.append(out := forest(*a))
            return out

        pe._forest, self._seen = noted, []  # type: ignore[assignment]
        try:
            chosen = super()._choose(study, number, done)
        finally:
            pe._forest = forest
        if self._seen:
            n_secs = sum(1 for *_, s in done if s)
            secs = np.exp(fits[-1][0]) if n_secs >= pe.MIN_COSTS else np.ones(len(self._cands))
            rows = [self.snapper.nearest(p)[0] for p, _ in self._cands]
            self.asks.append((*self._seen, secs, rows))
        return chosen


def near_rows(table: Table, stick: Yardstick) -> set[int]:
    """Rows whose seed-0 quality is within the noise unit of the table's best."""
    return {row for (row, s), r in table.trials.items()
            if s == 0 and r["status"] == "complete" and r.get("valid_quality") is not None
            and float(r["valid_quality"]) >= stick.q_best - stick.noise}


def hits(asks: Sequence[Any], near: set[int], before: int) -> dict[str, list[float]]:
    """Per rule, per ask before trial `before`: 1 when its choice snaps to a near-best row
    (random: the share of near-best candidates)."""
    out: dict[str, list[float]] = {r: [] for r in RULES}
    for number, best, gain, mu, sd, secs, rows in asks:
        if number >= before:
            continue
        is_near = np.array([r in near for r in rows])
        ei = expected_improvement(mu, sd, best)
        for rule, score in zip(RULES[:-1], (gain / secs, gain, ei, ei / secs, mu),
                               strict=True):
            out[rule].append(float(is_near[int(np.argmax(score))]))
        out["random"].append(float(is_near.mean()))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import optuna

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = Table.load(HERE / "tables" / f"{args.table}.jsonl.gz")
    stick = Yardstick(table)
    near = near_rows(table, stick)
    print(f"{args.table}: {len(near)} near-best rows {sorted(near)}")
    total: dict[str, list[float]] = {r: [] for r in RULES}
    made: list[Watched] = []

    def make(s: int, workload: Any) -> Watched:
        made.append(w := Watched(s, workload.snapper))
        return w

    for seed in args.seeds:
        result = Replay(table, seed=seed, budget_s=stick.budget_s).run(
            Method("ehvi-front", make, front_rule=True))
        mine = sorted((t for t in result.trials if t.row in near), key=lambda t: t.number)
        first = mine[0].number if mine else 10**9
        print(f"seed {seed}: best at {stick.times(result)['best']}")
        for t in mine:
            print(f"  trial {t.number} row {t.row} (seed {t.seed}) {t.status}, "
                  f"quality {t.quality}, started at {t.start:.0f} s")
        for rule, h in hits(made[-1].asks, near, first).items():
            total[rule] += h
    n = len(total["product"])
    print(f"asks before the first near-best trial: {n}; share choosing a near-best row:")
    for rule, h in total.items():
        print(f"  {rule:8s} {sum(h) / max(n, 1):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
