"""Search efficiency: how good a front each sampler finds in the same number of trials, and
whether early stopping buys a better front per wall-clock minute.

Workload: search_spaces/tiny.yaml (three fields priced at 2M/500k/100k ids, trained on a
1/1000 stand-in) with 120 steps per trial and an evaluation every 20 steps (so early stopping
has something to cut), budget 800 MB (about 40% of the space does not fit). Every search
trains N trials; proposals over budget are free and not counted, for every sampler.

Cost: wall-clock seconds per search, and the optimizer steps trained in all its trials (early
stopping saves steps; unlike wall-clock, steps do not depend on what else runs on the
machine).

Front quality: hypervolume (HV) dominated by the front, relative to a reference point
(quality 0.5 = chance AUC, memory = the budget, throughput 0):
* HV2 over (quality, memory / budget) — both independent of machine load;
* HV3 over (quality, memory / budget, throughput / T) with T the largest throughput any
  search measured (throughput is noisy on a shared CPU: read HV3 with care).

Usage: python benchmarks/search_efficiency.py [--trials 12] [--seeds 0 1 2] [--quick]
Writes benchmarks/results/search_efficiency.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUDGET = "800MB"
BUDGET_BYTES = 800_000_000
RUN = {"max_steps": 120, "eval_every": 20, "eval_batches": 4, "test_batches": 4,
       "warmup_steps": 2}


def bench_space(tmp: Path) -> Path:
    import yaml

    space = yaml.safe_load((ROOT / "search_spaces" / "tiny.yaml").read_text())
    space["run"] = RUN
    p = tmp / "bench.yaml"
    p.write_text(yaml.safe_dump(space, sort_keys=False))
    return p


def one(space: Path, runs: Path, sampler: str, seed: int, trials: int,
        early_stop: bool) -> dict[str, Any]:
    from autoembed.search import search
    from autoembed.tracking import NullTracker

    name = f"{sampler}-{'es' if early_stop else 'full'}-{seed}"
    t0 = time.monotonic()
    res = search(BUDGET, space, trials=trials, sampler=sampler, seed=seed, runs_dir=runs,
                 study=name, tracker=NullTracker(), early_stop=early_stop)
    wall = time.monotonic() - t0
    done = [r for r in res.rows if r.status == "complete" and r.feasible]
    return {
        "sampler": sampler, "seed": seed, "early_stop": early_stop, "wall": wall,
        "points": [(r.metrics["quality"], r.metrics["memory"], r.metrics["throughput"])
                   for r in done if r.metrics.get("quality") is not None
                   and r.metrics.get("throughput") is not None],
        "front": len(res.front), "infeasible": res.count("infeasible"),
        "pruned": res.count("pruned"), "trained": sum(1 for r in res.rows if r.counted),
        "steps": sum(int(r.metrics.get("steps") or 0) for r in res.rows if r.counted),
    }


def hv2(points: list[tuple[float, float, float]]) -> float:
    from autoembed.pareto import hypervolume

    pts = [[q, m / BUDGET_BYTES] for q, m, _ in points]
    return hypervolume(pts, [0.5, 1.0], ["maximize", "minimize"])


def hv3(points: list[tuple[float, float, float]], tmax: float) -> float:
    from autoembed.pareto import hypervolume

    pts = [[q, m / BUDGET_BYTES, t / tmax] for q, m, t in points]
    return hypervolume(pts, [0.5, 1.0, 0.0], ["maximize", "minimize", "maximize"])


def mean_sd(xs: list[float], fmt: str) -> str:
    if len(xs) < 2:
        return fmt.format(xs[0]) if xs else "-"
    return f"{fmt.format(statistics.mean(xs))} ± {fmt.format(statistics.stdev(xs))}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--samplers", nargs="+", default=["tpe", "random", "grid"])
    ap.add_argument("--quick", action="store_true", help="one seed, 4 trials (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.seeds = 4, [0]
    import ray

    import autoembed.search.ray_tune  # noqa: F401 - sets Ray's environment before it starts

    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             log_to_driver=False)
    results: list[dict[str, Any]] = []
    t_all = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="autoembed-bench-") as tmp:
            space = bench_space(Path(tmp))
            runs = Path(tmp) / "runs"
            # warm-up (discarded): Ray's worker processes start and import torch once
            one(space, runs, "random", 99, 1, False)
            variants = [(s, False) for s in args.samplers] + [("tpe", True)]
            plan = []
            for i, seed in enumerate(args.seeds):  # rotate the order: load drifts over time
                k = i % len(variants)
                plan += [(s, seed, es) for s, es in variants[k:] + variants[:k]]
            for sampler, seed, es in plan:
                r = one(space, runs, sampler, seed, args.trials, es)
                results.append(r)
                print(f"{sampler:7s} seed {seed} early_stop={es!s:5s}: wall {r['wall']:.0f} s, "
                      f"front {r['front']}, infeasible {r['infeasible']}, pruned {r['pruned']}, "
                      f"HV2 {hv2(r['points']):.4f}", flush=True)
    finally:
        ray.shutdown()
    tmax = max((t for r in results for _, _, t in r["points"]), default=1.0)
    rows = []
    for sampler, stop in [(s, False) for s in args.samplers] + [("tpe", True)]:
        rs = [r for r in results if r["sampler"] == sampler and r["early_stop"] == stop]
        h2 = [hv2(r["points"]) for r in rs]
        h3 = [hv3(r["points"], tmax) for r in rs]
        minutes = [r["wall"] / 60 for r in rs]
        per_min = [h / m for h, m in zip(h2, minutes, strict=True)]
        per_kstep = [h / (r["steps"] / 1000) for h, r in zip(h2, rs, strict=True)]
        label = sampler + (" + early stop" if stop else "") + (
            " (default)" if sampler == "tpe" and not stop else "")
        rows.append([label, len(rs), args.trials, mean_sd(h2, "{:.4f}"), mean_sd(h3, "{:.4f}"),
                     mean_sd([r["front"] for r in rs], "{:.1f}"),
                     mean_sd([r["infeasible"] for r in rs], "{:.1f}"),
                     mean_sd([r["pruned"] for r in rs], "{:.1f}"),
                     mean_sd([r["steps"] for r in rs], "{:.0f}"), mean_sd(per_kstep, "{:.4f}"),
                     mean_sd([r["wall"] for r in rs], "{:.0f}"), mean_sd(per_min, "{:.4f}")])
    header = ["sampler", "seeds", "trials", "HV2 (quality, memory)", "HV3 (+ throughput)",
              "front size", "over budget (free)", "pruned", "steps trained",
              "HV2 per 1000 steps", "wall s", "HV2 per minute"]
    table = markdown_table(header, rows)
    per_seed = markdown_table(
        ["sampler", "seed", "early stop", "HV2", "HV3", "front", "pruned", "steps", "wall s"],
        [[r["sampler"], r["seed"], r["early_stop"], f"{hv2(r['points']):.4f}",
          f"{hv3(r['points'], tmax):.4f}", r["front"], r["pruned"], r["steps"],
          f"{r['wall']:.0f}"] for r in results])
    stopped = [r for r in results if r["early_stop"]]
    full = [r for r in results if r["sampler"] == "tpe" and not r["early_stop"]]
    verdict = ""
    if stopped and full:
        a = statistics.mean(hv2(r["points"]) / (r["wall"] / 60) for r in stopped)
        b = statistics.mean(hv2(r["points"]) / (r["wall"] / 60) for r in full)
        c = statistics.mean(hv2(r["points"]) / (r["steps"] / 1000) for r in stopped)
        d = statistics.mean(hv2(r["points"]) / (r["steps"] / 1000) for r in full)
        e = statistics.mean(hv2(r["points"]) for r in stopped)
        f = statistics.mean(hv2(r["points"]) for r in full)
        verdict = (f"\nEarly stopping (tpe, same seeds): HV2 {e:.4f} with it vs {f:.4f} "
                   f"without; per 1000 trained steps {c:.4f} vs {d:.4f}; per wall-clock minute "
                   f"{a:.4f} vs {b:.4f} (wall-clock is only meaningful on an otherwise idle "
                   "machine; trained steps are the load-independent cost).\n")
    body = (f"Workload: tiny.yaml with {RUN}, budget {BUDGET}, {args.trials} trained trials "
            f"per search, seeds {args.seeds}; total {time.monotonic() - t_all:.0f} s.\n\n"
            f"{table}\n{verdict}\nPer search:\n\n{per_seed}\n\n"
            "HV2: hypervolume over (quality, memory/budget) from (0.5, 1.0); HV3 adds "
            "throughput / the largest throughput measured (reference 0). Higher is better. "
            "Over-budget proposals are priced and told to the sampler without training.")
    cmd = "python benchmarks/search_efficiency.py " + " ".join(sys.argv[1:])
    write_result("search_efficiency", "Search efficiency: samplers and early stopping", body,
                 cmd.strip())


if __name__ == "__main__":
    main()
