"""Replays of `ehvi`'s variants (variants.py) beside the product and random search, with
compare.py's yardstick and harness, each replay ended once it has reached both targets it
is read for (hv95 and best; the times to them are those a full replay records, hv90/hv99
are not read). The records go to `--jsonl` (never results/); `--report` prints, per table
and worker count, the mean wall-clock and compute to each target, the ratio to random-full
with one worker (paired by seed, 95% bootstrap interval: `compare.ratio`) and the ratio of
N workers to one.

    nice -n 5 .venv/bin/python benchmarks/replay/variant_replays.py --tables movielens default \
        --methods ehvi-front ehvi-np-front --workers 1 8 32 --seeds 4 --jsonl /tmp/w.jsonl.gz
    .venv/bin/python benchmarks/replay/variant_replays.py --report --jsonl /tmp/w.jsonl.gz
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import harness  # noqa: E402
from _common import read_jsonl  # noqa: E402
from compare import Method, ehvi  # noqa: E402

VARIANTS = {
    "ehvi-np-front": Method("ehvi-np-front", ehvi(pending=False), front_rule=True,
                            note="ehvi not believing running trials"),
    "ehvi-nbs-front": Method("ehvi-nbs-front", ehvi(no_bootstrap=True), front_rule=True,
                             note="ehvi with its trees fit without bootstrap"),
    "ehvi-tf-front": Method("ehvi-tf-front", ehvi(top_first=True), front_rule=True,
                            note="ehvi with its start-up spread from the top of memory down"),
    **{f"ehvi-m{round(r * 100)}-front": Method(
        f"ehvi-m{round(r * 100)}-front", ehvi(margin=r), front_rule=True,
        note=f"ehvi with the reference {r} beyond the budget")
       for r in (0.25, 0.5, 1.0, 2.0)},
    **{f"ehvi-m{round(r * 100)}-s{round(w * 100)}-front": Method(
        f"ehvi-m{round(r * 100)}-s{round(w * 100)}-front", ehvi(margin=r, seconds_weight=w),
        front_rule=True, note=f"ehvi with the reference {r} beyond the budget, seconds ^ {w}")
       for r in (0.5, 1.0) for w in (0.5, 0.0)},
}
TARGETS = ("hv95", "best")


class UntilTargets(harness.ReplayExecutor):
    """The replay's executor, ending the search once hv95 and best are both reached
    (`stick`: the table's `compare.Yardstick`)."""

    stick: compare.Yardstick | None = None

    def _log(self, engine: Any, r: Any, cost: float, steps: int, logged: set[int]) -> None:
        super()._log(engine, r, cost, steps, logged)
        stick = type(self).stick
        t = self.log[-1]
        if stick is None or t.status != "complete" or t.quality is None:
            return
        points = getattr(self, "_points", [])
        points.append((t.quality, t.memory))
        self._points = points
        self._best = getattr(self, "_best", False) or t.quality >= stick.q_best - stick.noise
        self._hv = getattr(self, "_hv", False) or (
            stick.volume(points) / stick.reference >= 0.95 - 1e-12)
        if self._best and self._hv:
            engine.stop_reason = "hv95 and best reached"


def run(tables: Sequence[str], seeds: Sequence[int], methods: Sequence[str],
        workers: Sequence[int], jsonl: Path) -> None:
    harness.ReplayExecutor = UntilTargets  # type: ignore[misc]
    orig = compare.Yardstick.__init__

    def init(self: compare.Yardstick, table: Any) -> None:
        orig(self, table)
        UntilTargets.stick = self

    compare.Yardstick.__init__ = init  # type: ignore[method-assign]
    compare.run(tables, HERE / "tables", seeds, methods, False, jsonl, workers)


def report(jsonl: Path, also: Sequence[Path] = ()) -> str:
    """The figures of the replays in `jsonl` and `also` (module docstring)."""
    recs = [r for p in (jsonl, *also) for r in read_jsonl(p) if not r["start_points"]]
    lines = []
    for table in sorted({r["table"] for r in recs}):
        mine = [r for r in recs if r["table"] == table]
        lines += [f"## {table}", "",
                  "| method | workers | seeds | reached hv95/best | wall hv95 | wall best | "
                  "compute hv95 | compute best | hv95 vs random-full | best vs random-full | "
                  "compute hv95 / 1 worker | compute best / 1 worker | wall hv95 / 1 worker |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        one = {(r["method"], r["seed"]): r for r in mine if compare._workers(r) == 1}
        for m, n in sorted({(r["method"], compare._workers(r)) for r in mine}):
            rs = {(r["method"], r["seed"]): r for r in mine
                  if r["method"] == m and compare._workers(r) == n}
            seeds = sorted(s for _, s in rs)
            both = {**one, **rs} if n == 1 else {**{k: v for k, v in one.items()
                                                    if k[0] == "random-full"}, **rs}
            cells = [m, str(n), str(len(seeds)),
                     "/".join(str(sum(rs[(m, s)][k] is not None for s in seeds))
                              for k in TARGETS)]
            cells += [f"{_mean(rs, m, seeds, k):.0f}" for k in TARGETS]
            cells += [f"{_mean(rs, m, seeds, 'compute_' + k):.0f}" for k in TARGETS]
            cells += [compare._fmt_ratio(compare.ratio(both, m, "random-full",
                                                       "compute_" + k, seeds))
                      for k in TARGETS]
            cells += [_vs_one(rs, one, m, seeds, k)
                      for k in ("compute_hv95", "compute_best", "hv95")]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _mean(rs: Mapping[tuple[str, int], Any], m: str, seeds: Sequence[int], key: str) -> float:
    return statistics.fmean(compare._at(rs[(m, s)], key) for s in seeds)


def _vs_one(rs: Mapping[tuple[str, int], Any], one: Mapping[tuple[str, int], Any], m: str,
            seeds: Sequence[int], key: str) -> str:
    """N workers' mean `key` over one worker's, paired by seed, with its interval."""
    paired = {(m + "@n", s): rs[(m, s)] for s in seeds}
    paired.update({(m + "@1", s): one[(m, s)] for s in seeds if (m, s) in one})
    return compare._fmt_ratio(compare.ratio(paired, m + "@n", m + "@1", key, seeds))


def main(argv: Sequence[str] | None = None) -> int:
    compare.METHODS.update(VARIANTS)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", default=list(compare.TABLES))
    ap.add_argument("--methods", nargs="+", default=["random-full", "ehvi-front"],
                    choices=list(compare.METHODS))
    ap.add_argument("--workers", nargs="+", type=int, default=[1])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--seed-from", type=int, default=0)
    ap.add_argument("--jsonl", type=Path, required=True)
    ap.add_argument("--also", type=Path, nargs="*", default=[],
                    help="more files of replays to report beside --jsonl's")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if not args.report:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        run(args.tables, range(args.seed_from, args.seeds), args.methods, args.workers,
            args.jsonl)
    print(report(args.jsonl, args.also))
    return 0


if __name__ == "__main__":
    sys.exit(main())
