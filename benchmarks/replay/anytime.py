"""The pick's quality against seconds of search: time-boxed searches (`--time-budget`, start
points off) replayed at boxes of 60, 120, 240 and 480 CPU s on the tables with a baseline,
for the default, random search and the peers; each search's pick is its own (the search's
`SearchReport.build`, the default rule `within-noise`: `time_box.picks`) and its score is
the pick's TEST quality from the trained record, beside the table's logistic-regression
baseline.

    nice -n 5 python benchmarks/replay/anytime.py [--seeds 10] [--boxes 60 120 240 480]
        [--tables movielens flights bbcnews] [--methods ehvi-front random-full optuna-tpe ...]
    python benchmarks/replay/anytime.py --report          # write the results only

Every replay is compare.py's (the real sampler, engine and scheduler against the table; the
clock charges the table's CPU seconds, the fixed overheads and the decision time), each box
a search of its own (a sampler may read the share of its budget spent). A box is in the
table's one-thread CPU seconds (time_box.py's docstring: what a live box on 2 cores holds).
Methods: the default (`DEFAULT`), random search at full fidelity and every peer whose
package is installed (compare.PEER_METHODS); the figure shows, per table, the default,
random search and the best peer there (the highest mean pick test score over the boxes and
seeds it holds), with the baseline as a line. Each replay is appended to
results/search_anytime_pick.jsonl.gz as it ends (a rerun skips those held); the .md and
.png are written from that file alone.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import peers  # noqa: E402
from _common import append_jsonl, read_jsonl, results_stem  # noqa: E402
from harness import Replay, table_workload  # noqa: E402
from table import Table  # noqa: E402
from time_box import picks  # noqa: E402

RESULTS = HERE.parent / "results"
JSONL = RESULTS / "search_anytime_pick.jsonl.gz"
TABLES = ("movielens", "flights", "bbcnews")  # the tables with a baseline
BOXES = (60.0, 120.0, 240.0, 480.0)
DEFAULT = "ehvi-front"  # the search's default sampler with its early stop, as compare.py names it
RANDOM = "random-full"
RULE = "within-noise"  # the default pick rule


def installed_peers() -> list[str]:
    """compare.py's peers whose package imports here."""
    out = []
    for m in compare.PEER_METHODS:
        needs = compare.METHODS[m].needs
        try:
            if needs is not None:
                peers.require(needs)
        except peers.PeerMissing:
            continue
        out.append(m)
    return out


def one(table: Table, real: Any, method: str, seed: int, box: float) -> dict[str, Any]:
    """One time-boxed search replayed, its pick and the pick's test score."""
    replay = Replay(table, seed=seed, budget_s=box, real=real)
    result = replay.run(compare.METHODS[method])
    chosen = picks(table, result, real).get(RULE)
    done = [t for t in result.trials if t.status == "complete"]
    tests = [table.trials[(int(t.row or 0), int(t.seed or 0))].get("test_quality")
             for t in done]  # a complete trial has its row and seed
    return {"table": table.header["name"], "method": method, "seed": seed, "box_s": box,
            "complete": len(done), "pick": chosen,
            "pick_test": None if chosen is None else chosen["test"],
            "best_trained_test": max((q for q in tests if q is not None), default=None),
            "baseline_test": table.header["baseline"]["test"]}


def run(tables: Sequence[str], seeds: Sequence[int], boxes: Sequence[float],
        methods: Sequence[str], jsonl: Path) -> None:
    held = {(r["table"], r["method"], r["seed"], r["box_s"]) for r in
            (read_jsonl(jsonl) if jsonl.exists() else [])}
    for name in tables:
        table = Table.load(HERE / "tables" / f"{name}.jsonl.gz")
        real = table_workload(table)
        for seed in seeds:
            for box in boxes:
                for m in methods:
                    if (table.header["name"], m, seed, float(box)) in held:
                        continue
                    rec = one(table, real, m, seed, float(box))
                    rec.update(commit=compare._commit(), load=list(os.getloadavg()))
                    append_jsonl(jsonl, rec)
                    print(f"{name} {m} seed {seed} box {box:g}: {rec['complete']} complete, "
                          f"pick test {rec['pick_test']}", flush=True)


# ---------------------------------------------------------------------- the report
def _by(recs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[float, list[Any]]]]:
    """table -> method -> box -> records."""
    out: dict[str, dict[str, dict[float, list[Any]]]] = {}
    for r in recs:
        out.setdefault(r["table"], {}).setdefault(r["method"], {}).setdefault(
            float(r["box_s"]), []).append(r)
    return out


def _score(r: Mapping[str, Any]) -> float:
    """A record's pick test score; a search that completed nothing picks nothing: its
    score is the baseline's (a user then keeps the baseline)."""
    return float(r["pick_test"] if r["pick_test"] is not None else r["baseline_test"])


def mean_ci(xs: Sequence[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% interval (Student's t: a few seeds; 0 for
    one value)."""
    from scipy.stats import t

    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, float(t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / math.sqrt(len(xs))


def best_peer(by_method: Mapping[str, Mapping[float, Sequence[Any]]]) -> str | None:
    """The peer with the highest mean pick test score over the boxes and seeds it holds."""
    scores = {m: statistics.fmean(_score(r) for rs in boxes.values() for r in rs)
              for m, boxes in by_method.items() if m in compare.PEER_METHODS}
    return max(scores, key=lambda m: scores[m]) if scores else None


def report(recs: Sequence[Mapping[str, Any]], png: str) -> str:
    commits = sorted({str(r.get("commit", "?")) for r in recs})
    loads = [r["load"][0] for r in recs if r.get("load")]
    lines = ["# The pick's quality against seconds of search", "",
             "Written by `benchmarks/replay/anytime.py` (its docstring says how) from "
             "`search_anytime_pick.jsonl.gz`. Each cell: time-boxed searches replayed with "
             "start points off, the mean TEST score of the search's own pick (rule "
             f"`{RULE}`) over seeds with a 95% interval (Student's t), the share of seeds at "
             "or above the table's logistic-regression baseline, and the mean complete "
             "trials. A search "
             "that completed nothing counts at the baseline's score.", "",
             f"Commits: {', '.join(commits)}; 1-min load while replaying "
             f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f} on 2 cores (CPU "
             "seconds from the tables and the engine's thread time).", ""]
    for table, by_method in _by(recs).items():
        base = next(iter(next(iter(by_method.values())).values()))[0]["baseline_test"]
        boxes = sorted({b for bm in by_method.values() for b in bm})
        peer = best_peer(by_method)
        lines += [f"## {table}", "",
                  f"Baseline (logistic regression) test {base:.4f}; best peer here: "
                  f"{peer or 'none replayed'}.", "",
                  "| method | " + " | ".join(f"{b:g} s" for b in boxes) + " |",
                  "|---|" + "---|" * len(boxes)]
        order = [m for m in (DEFAULT, RANDOM) if m in by_method]
        order += sorted(m for m in by_method if m not in order)
        for m in order:
            cells = []
            for b in boxes:
                rs = by_method[m].get(b, [])
                if not rs:
                    cells.append("—")
                    continue
                mean, half = mean_ci([_score(r) for r in rs])
                above = sum(_score(r) >= base for r in rs)
                trials = statistics.fmean(r["complete"] for r in rs)
                cells.append(f"{mean:.4f} ± {half:.4f} ({above}/{len(rs)} ≥ base, "
                             f"{trials:.0f} trials)")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"![pick test score against seconds of search]({png})", ""]
    return "\n".join(lines)


def figure(recs: Sequence[Mapping[str, Any]], out: Path) -> None:
    """Per table: the mean pick test score (95% interval) against the box, for the default,
    random search and the best peer, the baseline as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _by(recs)
    if not by:
        return
    fig, axes = plt.subplots(1, len(by), figsize=(4.4 * len(by), 3.6), squeeze=False)
    for ax, (table, by_method) in zip(axes[0], by.items(), strict=True):
        peer = best_peer(by_method)
        shown = [m for m in (DEFAULT, RANDOM, peer) if m is not None and m in by_method]
        for k, m in enumerate(shown):
            boxes = sorted(by_method[m])
            stats = [mean_ci([_score(r) for r in by_method[m][b]]) for b in boxes]
            nudge = 1.04 ** (k - (len(shown) - 1) / 2)  # side by side, not on top
            ax.errorbar([b * nudge for b in boxes], [s[0] for s in stats],
                        yerr=[s[1] for s in stats], capsize=3, marker="o", label=m,
                        linestyle="--" if m == peer else "-")
        ticks = sorted({b for bm in by_method.values() for b in bm})
        base = next(iter(next(iter(by_method.values())).values()))[0]["baseline_test"]
        ax.axhline(base, color="grey", linestyle=":", label="logistic regression")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{b:g}" for b in ticks])
        ax.minorticks_off()
        ax.set_title(table)
        ax.set_xlabel("search (CPU s)")
    axes[0][0].set_ylabel("pick's test score (mean, 95% CI)")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=list(TABLES))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-from", type=int, default=0)
    ap.add_argument("--boxes", nargs="*", type=float, default=list(BOXES))
    ap.add_argument("--methods", nargs="*", default=None, choices=list(compare.METHODS),
                    metavar="METHOD", help=f"default: {DEFAULT}, {RANDOM} and every "
                    "installed peer")
    ap.add_argument("--report", action="store_true", help="write the results only")
    ap.add_argument("--jsonl", type=Path, default=JSONL)
    args = ap.parse_args(argv)
    if any(b <= 0 for b in args.boxes):
        ap.error(f"--boxes {' '.join(map(str, args.boxes))}: each must be above 0 s")
    missing = [t for t in args.tables if not (HERE / "tables" / f"{t}.jsonl.gz").exists()]
    if missing:
        ap.error(f"--tables {' '.join(missing)}: no such table in {HERE / 'tables'}")
    no_base = [t for t in args.tables
               if not (compare._header(HERE / "tables" / f"{t}.jsonl.gz") or {}).get("baseline")]
    if no_base and not args.report:
        ap.error(f"--tables {' '.join(no_base)}: no baseline in the table; use "
                 f"{' '.join(TABLES)}")
    if not args.report:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        methods = args.methods or [DEFAULT, RANDOM, *installed_peers()]
        run(args.tables, range(args.seed_from, args.seeds), args.boxes, methods, args.jsonl)
    if not args.jsonl.exists():
        ap.error(f"--jsonl {args.jsonl}: no such file of replays; run the replays first")
    stem = results_stem(args.jsonl)
    recs = read_jsonl(args.jsonl)
    stem.with_suffix(".md").write_text(report(recs, stem.with_suffix(".png").name))
    figure(recs, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
