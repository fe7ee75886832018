"""What the replay tables hold so far, and the figures phase 2's schedule is to be read from.

Per table: rows (priced, fitting, trained), trials per seed, CPU seconds per trial and where
they go, the spread of validation quality, the seed-to-seed noise, and how well the ranking of
configs at a fraction f of their training agrees with the ranking at full length (Spearman
rho of validation quality at the last evaluation at or before f x max_steps, or the best up
to there where the trials are judged by their best evaluation (`fit_to_data`), against the
same at full length, seed 0) next to how well two training seeds agree (rho of seed 0
against seed 1, same rows): the smallest f whose rho reaches the seeds' rho is where an early
ranking stops being worse than noise (README, "Brackets and rungs from the data").

    python benchmarks/replay/summary.py [--tables default movielens flights bbcnews]
        [--write]     # also benchmarks/results/replay_tables.md, stamped
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import markdown_table, write_result  # noqa: E402
from table import Table  # noqa: E402

FRACTIONS = (1 / 27, 1 / 9, 1 / 3, 2 / 3, 1.0)
MIN_PAIRS = 5  # rows with both seeds before a seed rho is shown


def quality_at(trial: dict[str, Any], fraction: float, best: bool = False
               ) -> tuple[float, float] | None:
    """(validation quality, loop CPU seconds) at the last evaluation at or before
    `fraction` of the trial's steps (`best`: the best quality up to there, as a trial under
    `fit_to_data` is judged); None before the first evaluation."""
    limit = fraction * trial["max_steps"] + 1e-9
    points = [p for p in trial["curve"] if p["step"] <= limit]
    if not points:
        return None
    q = max(p["quality"] for p in points) if best else points[-1]["quality"]
    return q, points[-1]["loop_cpu_s"]


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < MIN_PAIRS:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr(xs, ys).statistic)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def table_rows(t: Table) -> dict[str, Any]:
    """The summary figures of one table (module docstring)."""
    done = [tr for tr in t.trials.values() if tr["status"] == "complete"]
    seed0 = {tr["row"]: tr for tr in done if tr["seed"] == 0}
    seed1 = {tr["row"]: tr for tr in done if tr["seed"] == 1}
    both = sorted(set(seed0) & set(seed1))
    cpu = [tr["cost"]["total_cpu_s"] for tr in done]

    def share(key: str) -> float | None:
        parts = [tr["cost"][key] / tr["cost"]["total_cpu_s"] for tr in done
                 if tr["cost"]["total_cpu_s"] > 0]
        return statistics.median(parts) if parts else None

    fid = {}
    best = bool(t.header["run_settings"].get("fit_to_data"))

    def final(tr: dict[str, Any]) -> float:
        q = quality_at(tr, 1.0, best)
        assert q is not None  # a complete trial evaluates at its last step
        return q[0]

    for f in FRACTIONS:
        pairs = [(quality_at(tr, f, best), final(tr), tr["cost"]["total_cpu_s"])
                 for tr in seed0.values()]
        pairs = [(q, v, c) for q, v, c in pairs if q is not None]
        rho = spearman([q[0] for q, _, _ in pairs], [v for _, v, _ in pairs])
        cost = statistics.median(q[1] / c for q, _, c in pairs) if pairs else None
        fid[f] = (rho, cost, len(pairs))
    rho_seeds = spearman([final(seed0[r]) for r in both], [final(seed1[r]) for r in both])
    diffs = [abs(final(seed0[r]) - final(seed1[r])) for r in both]
    r_min = next((f for f in FRACTIONS if rho_seeds is not None and fid[f][0] is not None
                  and fid[f][0] >= rho_seeds - 1e-9), None)
    qualities = [tr["valid_quality"] for tr in seed0.values()]
    from generate import SEEDED, tasks

    planned = len(tasks(t, SEEDED, 1))
    per = [tr["cost"]["total_cpu_s"] + tr["cost"]["extra_cpu_s"] for tr in done]
    return {
        "planned": planned,
        "to_go_h": (planned - len(t.trials)) * statistics.mean(per) / 3600 if per else None,
        "rows": len(t.rows), "fitting": sum(1 for r in t.rows.values() if r["fits"]),
        "trials": len(t.trials), "complete": len(done),
        "per_seed": {s: sum(1 for (_, s2) in t.trials if s2 == s) for s in (0, 1, 2)},
        "cpu_median": statistics.median(cpu) if cpu else None,
        "cpu_total_h": sum(cpu) / 3600,
        "extra_total_h": sum(tr["cost"]["extra_cpu_s"] for tr in done) / 3600,
        "shares": {k: share(k) for k in ("steps_cpu_s", "search_evals_cpu_s",
                                         "startup_cpu_s", "final_cpu_s")},
        "wall_per_cpu": statistics.median(tr["cost"]["total_wall_s"] / tr["cost"]["total_cpu_s"]
                                          for tr in done) if done else None,
        "quality": (min(qualities), statistics.median(qualities), max(qualities))
        if qualities else None,
        "seed_pairs": len(both), "rho_seeds": rho_seeds,
        "seed_diff_median": statistics.median(diffs) if diffs else None,
        "fidelity": fid, "r_min": r_min,
    }


def report(names: Sequence[str]) -> str:
    out = []
    head = ["table", "rows (fitting)", "trials (seed 0/1/2)", "CPU s per trial (median)",
            "CPU h (+ extras)", "planned trials, CPU h to go (est.)",
            "steps / search evals / startup / final (median share)",
            "wall / CPU", "validation quality min / median / max"]
    rows, fids = [], []
    for n in names:
        path = HERE / "tables" / f"{n}.jsonl.gz"
        if not path.exists():
            continue
        s = table_rows(Table.load(path))
        sh = s["shares"]
        q = s["quality"]
        rows.append([n, f"{s['rows']} ({s['fitting']})",
                     f"{s['trials']} ({'/'.join(str(s['per_seed'][k]) for k in (0, 1, 2))})",
                     _fmt(s["cpu_median"], 1),
                     f"{s['cpu_total_h']:.2f} (+{s['extra_total_h']:.2f})",
                     f"{s['planned']}, {_fmt(s['to_go_h'], 1)}",
                     " / ".join(_fmt(sh[k], 2) for k in sh), _fmt(s["wall_per_cpu"], 1),
                     "—" if q is None else " / ".join(f"{x:.4f}" for x in q)])
        fids.append([n, f"{_fmt(s['rho_seeds'])} ({s['seed_pairs']} rows)",
                     _fmt(s["seed_diff_median"], 4),
                     *(f"{_fmt(s['fidelity'][f][0])} ({_fmt(s['fidelity'][f][1], 2)})"
                       for f in FRACTIONS),
                     "—" if s["r_min"] is None else f"{s['r_min']:.3f}"])
    out.append(markdown_table(head, rows))
    out.append("Rank agreement: Spearman rho of validation quality between two training seeds "
               "(seed 0 vs 1, final), the median |difference| between them, and per fraction f "
               "of a trial's steps rho(quality at f, final quality) over the seed-0 trials, with "
               "(in brackets) the median share of the trial's CPU seconds spent by then; "
               "r_min: the smallest f whose rho reaches the seeds' rho. With a handful of "
               "seeded rows spread over the whole range of quality the seeds' rho is near 1 and "
               "says little: read the median seed difference (the noise unit) beside it.")
    out.append(markdown_table(
        ["table", "rho seeds", "median seed diff", *(f"f = {f:.3f}" for f in FRACTIONS), "r_min"],
        fids))
    return "\n\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", nargs="+", default=["default", "movielens", "flights", "bbcnews"])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    body = report(a.tables)
    if a.write:
        write_result("replay_tables", "Replay tables: what they hold so far", body,
                     "python benchmarks/replay/summary.py --write")
    else:
        print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
