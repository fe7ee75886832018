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

Samplers: the product's kinds (`autoembed search --sampler`) and those it left out
(benchmarks/samplers.py: gp, tpe-plain, tpe-s4, tpe-cost, tpe-mix-cost).

Sampler comparison (issue 15): `--compare-samplers` runs every sampler of COMPARE_SAMPLERS at
each (trained trials, seeds) setting of COMPARE_SETTINGS (20 x 5 and 50 x 3) on each space of
COMPARE_SPACES: `default` (search_spaces/default.yaml, 8GB) and `movielens-auto` (the space
`--space auto` derives for MovieLens under 8GB, each trial cut to --real-steps steps). Every
search trains the space's start points first (space.start, as a user's search does: the same
configs for every sampler, counted among the trained trials), then the sampler's proposals;
searches measured before there were start points (records with `start_points` false) are
reported in tables of their own. It reports each sampler's HV2 with a 95%
t-interval and its ratio to random's HV2 paired by seed (geometric mean of the per-seed
ratios, 95% t-interval on their logs). HV2's memory is the search's memory objective
(memory.objective, `allocated_peak`) over the budget; where the fronts sit within a sliver of
the budget (MovieLens: tens of MB of 8 GB) HV2 is the best quality above chance, so HV2n, from
the nadir of the table's fronts, is reported beside it. Over-budget proposals never count as
trained trials; the samplers learn of them through the `memory` constraint (TPE splits such
trials by violation alone, random fits nothing; Optuna's GPSampler fits its objective models
on every complete trial, their placeholders included). REAL_STEPS = 200: a MovieLens search
takes 4-6 minutes at load 14 on 2 cores. Every search is appended to
results/sampler_comparison.jsonl.gz as it ends, and a rerun skips those the file already holds,
so the figures can be built up across runs; results/sampler_comparison.md is rewritten from
the whole file each time.

    python benchmarks/search_efficiency.py --compare-samplers [--spaces default]
        [--samplers random tpe gp] [--settings 20x5 50x3] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import append_jsonl, git_commit, markdown_table, read_jsonl, stamp, write_result  # noqa: E402

from autoembed.memory.objective import LEGACY_BASIS, MEMORY_BASIS  # noqa: E402
from autoembed.pipeline.study import DEFAULT_SAMPLER  # noqa: E402

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
        early_stop: bool | None, budget: str = BUDGET, tag: str = "",
        start_points: bool | None = None) -> dict[str, Any]:
    from samplers import experiment_kinds

    from autoembed.pipeline import search
    from autoembed.tracking import NullTracker

    stop = {True: "es", False: "full", None: "default"}[early_stop]
    name = f"{tag}{sampler}-{stop}-{seed}-{trials}"
    t0 = time.monotonic()
    with experiment_kinds():  # `sampler`: a product kind or one of samplers.EXPERIMENTS
        res = search(budget, space, trials=trials, sampler=sampler, seed=seed, runs_dir=runs,
                     study=name, tracker=NullTracker(), early_stop=early_stop,
                     start_points=start_points)
    wall = time.monotonic() - t0
    done = [r for r in res.rows if r.status == "complete" and r.feasible]
    return {
        "sampler": sampler, "seed": seed, "early_stop": early_stop, "wall": wall,
        "points": [(r.metrics["quality"], r.metrics["memory"], r.metrics["throughput"])
                   for r in done if r.metrics.get("quality") is not None
                   and r.metrics.get("throughput") is not None],
        "front": len(res.front), "infeasible": res.count("infeasible"),
        "pruned": res.count("pruned"), "trained": sum(1 for r in res.rows if r.counted),
        # the study's memory objective, as pareto.json states it
        "memory_basis": json.loads(res.files["pareto.json"].read_text())["memory_basis"],
        "steps": sum(int(r.metrics.get("steps") or 0) for r in res.rows if r.counted),
    }


def hv2(points: list[tuple[float, float, float]], budget_bytes: int = BUDGET_BYTES) -> float:
    from autoembed.pareto import hypervolume

    pts = [[q, m / budget_bytes] for q, m, _ in points]
    return hypervolume(pts, [0.5, 1.0], ["maximize", "minimize"])


def hv3(points: list[tuple[float, float, float]], tmax: float) -> float:
    from autoembed.pareto import hypervolume

    pts = [[q, m / BUDGET_BYTES, t / tmax] for q, m, t in points]
    return hypervolume(pts, [0.5, 1.0, 0.0], ["maximize", "minimize", "maximize"])


def mean_sd(xs: list[float], fmt: str) -> str:
    if len(xs) < 2:
        return fmt.format(xs[0]) if xs else "-"
    return f"{fmt.format(statistics.mean(xs))} ± {fmt.format(statistics.stdev(xs))}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--samplers", nargs="+", default=None)
    ap.add_argument("--quick", action="store_true", help="one seed, 4 trials (a smoke run)")
    ap.add_argument("--compare-samplers", action="store_true",
                    help="the resumable sampler comparison (docstring)")
    ap.add_argument("--spaces", nargs="+", default=list(COMPARE_SPACES))
    ap.add_argument("--settings", nargs="+", default=[f"{t}x{n}" for t, n in COMPARE_SETTINGS],
                    help="TRIALSxSEEDS, e.g. 20x5")
    ap.add_argument("--real-steps", type=int, default=REAL_STEPS)
    ap.add_argument("--results", type=Path, default=None, help="results directory")
    ap.add_argument("--report-only", action="store_true",
                    help="with --compare-samplers: rewrite the report from the .jsonl, run none")
    args = ap.parse_args(argv)
    if args.compare_samplers:
        compare_samplers(args)
        return
    args.samplers = args.samplers or ["tpe", "random", "grid"]
    if args.quick:
        args.trials, args.seeds = 4, [0]
    import ray

    import autoembed.pipeline.ray_tune  # noqa: F401 - sets Ray's environment before it starts

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


# ============================================================ sampler comparison (issue 15)

COMPARE_SAMPLERS = ("random", "ehvi", "tpe", "tpe-mix", "tpe-plain", "gp")
COMPARE_SETTINGS = ((20, 5), (50, 3))  # (trained trials, seeds)
COMPARE_SPACES = ("default", "movielens-auto")
COMPARE_BUDGET = "8GB"
REAL_STEPS = 200  # steps per trial on the real-data space (its derived epochs take minutes)
REAL_SPACES = ("movielens-auto",)
NAMES = {"hv2": "HV2", "hv2n": "HV2n"}
TARGET_RATIO = 1.2  # issue 15: the default's hypervolume against random's, at 20 trials
NADIR_MARGIN = 0.1  # HV2n's reference: this share of the fronts' range beyond their nadir
BASELINE = "random"
COMPARE_START = True  # every search trains the space's start points first (docstring)


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean with its two-sided 95% Student-t interval (n >= 2)."""
    from scipy import stats

    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def paired_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """a / b paired by position: the geometric mean of a_i / b_i with the 95% t-interval on
    the log ratios, mapped back; NaNs when any value is not positive."""
    if len(a) != len(b) or not a or any(x <= 0 for x in (*a, *b)):
        return math.nan, math.nan, math.nan
    m, lo, hi = t_interval([math.log(x / y) for x, y in zip(a, b, strict=True)])
    return math.exp(m), math.exp(lo), math.exp(hi)


def parse_setting(text: str) -> tuple[int, int]:
    trials, _, seeds = text.partition("x")
    if not (trials.isdigit() and seeds.isdigit()) or int(trials) < 1 or int(seeds) < 1:
        raise SystemExit(f"setting '{text}' must be TRIALSxSEEDS, e.g. 20x5")
    return int(trials), int(seeds)


def compare_space(name: str, tmp: Path, real_steps: int) -> tuple[Path, str]:
    """The space file of a comparison space and its budget."""
    import yaml

    from autoembed.budget import Budget

    budget = Budget.parse(COMPARE_BUDGET).bytes
    if name == "default":
        return ROOT / "search_spaces" / "default.yaml", COMPARE_BUDGET
    if name == "tiny":  # the smoke test's space: seconds a search
        return bench_space(tmp), BUDGET
    if name == "movielens-auto":
        from autoembed.data import load_dataset
        from autoembed.space_auto import derive_space, facts_of

        # as `--space auto` derives it (space_auto.auto_space)
        raw = derive_space(facts_of(load_dataset("movielens")), budget).to_space_dict()
        run = dict(raw["run"])
        run.pop("epochs", None)
        run.update(max_steps=real_steps, eval_every=max(1, real_steps // 6))
        raw["run"] = run
        path = tmp / "movielens-auto.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path, COMPARE_BUDGET
    raise SystemExit(f"space '{name}' is not one of {', '.join(COMPARE_SPACES)} or tiny")


def load_records(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path) if path.is_file() else []


def _key(r: dict[str, Any]) -> tuple[str, str, int, int, str, int, bool]:
    """A search's identity: what it searched, on which memory objective (records from
    before the objective became allocated_peak have no basis and are legacy device_total)
    and whether it trained the start points first."""
    return (r["space"], r["sampler"], int(r["trials"]), int(r["seed"]),
            r.get("memory_basis") or LEGACY_BASIS, int(r.get("real_steps") or 0),
            bool(r.get("start_points")))


def _current(records: list[dict[str, Any]], real_steps: int) -> list[dict[str, Any]]:
    """The records the report compares: on today's memory objective and, on the real-data
    space, at `real_steps` steps a trial."""
    return [r for r in records if (r.get("memory_basis") or LEGACY_BASIS) == MEMORY_BASIS
            and int(r.get("real_steps") or 0) == _steps_of(r["space"], real_steps)]


def _steps_of(space: str, real_steps: int) -> int:
    return real_steps if space in REAL_SPACES else 0


def compare_samplers(args: argparse.Namespace) -> None:
    import ray

    import autoembed.pipeline.ray_tune  # noqa: F401 - sets Ray's environment before it starts
    from autoembed.budget import Budget

    results = args.results or RESULTS_DIR
    results.mkdir(parents=True, exist_ok=True)
    store = results / "sampler_comparison.jsonl.gz"
    samplers = args.samplers or list(COMPARE_SAMPLERS)
    settings = [parse_setting(s) for s in args.settings]
    done = {_key(r) for r in load_records(store)}
    plan = [(sp, smp, t, seed) for sp in args.spaces for t, n in settings
            for seed in range(n) for smp in samplers
            if (sp, smp, t, seed, MEMORY_BASIS, _steps_of(sp, args.real_steps),
                COMPARE_START) not in done]
    print(f"{len(done)} searches on file, {len(plan)} to run", flush=True)
    if plan and not args.report_only:
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
                 log_to_driver=False)
        try:
            with tempfile.TemporaryDirectory(prefix="autoembed-samplers-") as tmp:
                spaces = {sp: compare_space(sp, Path(tmp), args.real_steps)
                          for sp in dict.fromkeys(p[0] for p in plan)}
                for sp, smp, t, seed in plan:
                    path, budget = spaces[sp]  # the search's defaults: early stopping on
                    r = one(path, Path(tmp) / "runs", smp, seed, t, None, budget, sp,
                            COMPARE_START)
                    nbytes = Budget.parse(budget).bytes
                    rec = {"space": sp, "sampler": smp, "trials": t, "seed": seed,
                           "budget_bytes": nbytes, "wall": r["wall"], "points": r["points"],
                           "front": r["front"], "infeasible": r["infeasible"],
                           "pruned": r["pruned"], "trained": r["trained"],
                           "hv2": hv2(r["points"], nbytes), "commit": git_commit(),
                           "memory_basis": r["memory_basis"],
                           "real_steps": _steps_of(sp, args.real_steps),
                           "start_points": COMPARE_START,
                           "load": os.getloadavg()}
                    append_jsonl(store, rec)  # one record per search: resumable
                    print(f"{sp} {smp:9s} {t} trials seed {seed}: HV2 {rec['hv2']:.4f}, "
                          f"wall {r['wall']:.0f} s", flush=True)
        finally:
            ray.shutdown()
    records = load_records(store)
    body = (summary(_current(records, args.real_steps)) + "\n\n"
            + comparison_report(_current(records, args.real_steps)))
    legacy = [r for r in records if not r.get("memory_basis")]
    if legacy:
        body += (f"\n\n# Legacy: memory objective `{LEGACY_BASIS}`\n\nSearches measured "
                 "before the memory objective became allocated_peak (the fixed context and "
                 "workspace inside every value); not comparable with the tables above.\n\n"
                 + comparison_report(legacy, basis=LEGACY_BASIS))
    (results / "sampler_comparison.md").write_text(
        f"# Samplers against random\n\nCommand: `python "
        f"benchmarks/search_efficiency.py {' '.join(sys.argv[1:])}`\n\n{stamp()} (this "
        f"invocation; each search's own commit and load are in the .jsonl)\n\n{body}\n")
    print(body)


def comparison_report(records: list[dict[str, Any]], basis: str = MEMORY_BASIS) -> str:
    """One table per (space, trials): each sampler's HV2 and HV2n (mean, 95% interval) and
    their ratios to random's, paired by seed."""
    out = []
    for space, trials, start in _groups(records):
        mine = _group(records, space, trials, start)
        ref = hv2n_reference(mine)
        mine = [{**r, "hv2n": hv2n(r, ref)} for r in mine]
        rows = []
        for smp in sorted({r["sampler"] for r in mine}, key=_sampler_order):
            label = smp + (" (default)" if smp == DEFAULT_SAMPLER else "")
            rs = sorted((r for r in mine if r["sampler"] == smp), key=lambda r: r["seed"])
            rows.append([label, len(rs), *_against_random(rs, mine, "hv2"),
                         *_against_random(rs, mine, "hv2n"),
                         f"{statistics.mean(r['infeasible'] for r in rs):.1f}",
                         f"{statistics.mean(r['wall'] for r in rs):.0f}"])
        per_search = markdown_table(
            ["sampler", "seed", "HV2", "HV2n", "trained", "over budget", "front", "wall s",
             "commit", "1-min load at end"],
            [[r["sampler"], r["seed"], f"{r['hv2']:.4f}", f"{r['hv2n']:.4f}", r["trained"],
              r["infeasible"], r["front"], f"{r['wall']:.0f}",
              str(r.get("commit", "unstamped"))[:12],
              f"{r['load'][0]:.1f}" if r.get("load") else "-"]
             for r in sorted(mine, key=lambda r: (_sampler_order(r["sampler"]), r["seed"]))])
        steps = {int(r.get("real_steps") or 0) for r in mine} - {0}
        where = f" ({', '.join(map(str, sorted(steps)))} steps a trial)" if steps else ""
        bare = "" if start else ", no start points (measured before there were any)"
        out.append(
            f"## {space}{where}, {trials} trained trials{bare}\n\nHV2n reference point: quality "
            f"{ref[0]:.4f}, memory {ref[1] / 1e6:.1f} MB (the nadir of these searches' fronts "
            f"+ {NADIR_MARGIN:.0%} of the range); ideal point {ref[2]:.4f}, {ref[3] / 1e6:.1f} MB"
            "\n\n" + markdown_table(
                ["sampler", "seeds", "HV2 mean [95% CI]", f"HV2 / {BASELINE} [95% CI] (pairs)",
                 "HV2n mean [95% CI]", f"HV2n / {BASELINE} [95% CI] (pairs)", "over budget",
                 "wall s"], rows) + "\n\n" + verdict(mine) + "\n\nPer search:\n\n"
            + per_search)
    if basis != MEMORY_BASIS:
        return "\n\n".join(out)
    out.append(f"HV2: hypervolume over (validation quality, memory / budget), reference point "
               f"(0.5, 1.0) (chance AUC, the whole budget), higher is better; memory is the "
               f"search's memory objective, `{MEMORY_BASIS}` (memory.objective: the step's "
               "device bytes above the fixed context and workspace), over the 8GB budget. "
               "Only complete, feasible trials count. HV2n: the same front's hypervolume from "
               "the nadir of the fronts of every search in the table (the lowest quality and "
               "the largest memory any of them has on its front, moved 10% of the range "
               "further out), as a share of the box from there to the ideal point (the best "
               "quality, the least memory on those fronts): it measures the trade-off region "
               "the searches reach, where HV2's budget-wide box is almost all quality above "
               "chance. "
               "The ratio is the geometric mean of the "
               "per-seed ratios to random with the same seed (t-interval on the logs). "
               "Over-budget proposals are priced, told to the sampler as a violated constraint "
               "and not counted as trained trials. Searches measured before the memory "
               f"objective was `{MEMORY_BASIS}` (records without a basis: `{LEGACY_BASIS}`) "
               "stay in the .jsonl and are left out here.")
    return "\n\n".join(out)


def _front(points: list[list[float]]) -> list[tuple[float, float]]:
    from autoembed.pareto import non_dominated

    pts = [(float(q), float(m)) for q, m, *_ in points]
    return [pts[i] for i in non_dominated(pts, ["maximize", "minimize"])]


def nadir_of_fronts(records: list[dict[str, Any]]) -> tuple[float, float, float, float]:
    """(worst quality, most memory, best quality, least memory) over the members of every
    record's (quality, memory) front."""
    members = [p for r in records for p in _front(r["points"])]
    if not members:
        return (math.nan,) * 4
    qs, ms = [q for q, _ in members], [m for _, m in members]
    return min(qs), max(ms), max(qs), min(ms)


def hv2n_reference(records: list[dict[str, Any]]) -> tuple[float, float, float, float]:
    """HV2n's (reference quality, reference memory, ideal quality, ideal memory): the nadir
    of the records' fronts moved NADIR_MARGIN of the range further out (so that the members
    at the nadir still count), and the ideal point."""
    wq, wm, bq, bm = nadir_of_fronts(records)
    return wq - NADIR_MARGIN * (bq - wq), wm + NADIR_MARGIN * (wm - bm), bq, bm


def hv2n(record: dict[str, Any], ref: tuple[float, float, float, float]) -> float:
    """The record's (quality, memory) hypervolume from the nadir `ref[:2]`, as a share of
    the box from the nadir to the ideal point `ref[2:]` (0 when the box is empty)."""
    from autoembed.pareto import hypervolume

    box = (ref[2] - ref[0]) * (ref[1] - ref[3])
    if not box > 0:
        return 0.0
    pts = [[q, m] for q, m in _front(record["points"])]
    return hypervolume(pts, [ref[0], ref[1]], ["maximize", "minimize"]) / box


def _ratio(rs: list[dict[str, Any]], table: list[dict[str, Any]],
           key: str) -> tuple[float, float, float, int]:
    """`key` of `rs` over random's in `table`, paired by seed: (ratio, low, high, pairs)."""
    base = {int(r["seed"]): r[key] for r in table if r["sampler"] == BASELINE}
    paired = [r for r in rs if int(r["seed"]) in base]
    ratio = paired_ratio([r[key] for r in paired], [base[int(r["seed"])] for r in paired])
    return (*ratio, len(paired))


def _against_random(rs: list[dict[str, Any]], table: list[dict[str, Any]],
                    key: str) -> list[str]:
    """[mean with 95% interval, ratio to random paired by seed] of `key` over `rs`."""
    m, lo, hi = t_interval([r[key] for r in rs])
    ratio, rlo, rhi, n = _ratio(rs, table, key)
    return [f"{m:.4f} [{lo:.4f}, {hi:.4f}]",
            "-" if rs[0]["sampler"] == BASELINE else f"{ratio:.2f}x [{rlo:.2f}, {rhi:.2f}] ({n})"]


def _groups(records: list[dict[str, Any]]) -> list[tuple[str, int, bool]]:
    """The tables: (space, trained trials, start points first), start points first."""
    return sorted({(r["space"], int(r["trials"]), bool(r.get("start_points")))
                   for r in records}, key=lambda g: (g[0], g[1], not g[2]))


def _group(records: list[dict[str, Any]], space: str, trials: int,
           start: bool) -> list[dict[str, Any]]:
    return [r for r in records if (r["space"], int(r["trials"]),
                                   bool(r.get("start_points"))) == (space, trials, start)]


def summary(records: list[dict[str, Any]]) -> str:
    """The issue's test at 20 trained trials: which samplers reach TARGET_RATIO x random's
    HV2 (with at least two seeds paired), on which spaces; else, that none does."""
    groups = [(sp, st) for sp, t, st in _groups(records) if t == 20]
    reached, spaces = [], sorted({sp for sp, _ in groups})
    for space, start in groups:
        table = _group(records, space, 20, start)
        for smp in sorted({r["sampler"] for r in table} - {BASELINE}, key=_sampler_order):
            ratio, lo, hi, n = _ratio([r for r in table if r["sampler"] == smp], table, "hv2")
            if n >= 2 and ratio >= TARGET_RATIO:
                reached.append(f"{smp} on {space} ({ratio:.2f}x [{lo:.2f}, {hi:.2f}])")
    if reached:
        return f"At 20 trained trials, {TARGET_RATIO}x random's HV2: " + "; ".join(reached) + "."
    return (f"At 20 trained trials no sampler measured reaches {TARGET_RATIO}x random's HV2 on "
            f"{' or '.join(spaces) or 'any space'} (figures below); the default is "
            f"`{DEFAULT_SAMPLER}`.")


def verdict(table: list[dict[str, Any]]) -> str:
    """What the table says of each sampler against random, on HV2 and HV2n: worse (the
    95% interval of the ratio below 1), better (above 1), no difference shown, and whether
    the ratio reaches TARGET_RATIO."""
    lines = []
    for smp in sorted({r["sampler"] for r in table} - {BASELINE}, key=_sampler_order):
        rs = [r for r in table if r["sampler"] == smp]
        said = []
        for key in ("hv2", "hv2n"):
            ratio, lo, hi, n = _ratio(rs, table, key)
            if n < 2:
                said.append(f"{NAMES[key]}: {n} pair(s), no interval")
                continue
            how = ("worse than random" if hi < 1 else "better than random" if lo > 1
                   else "no difference shown")
            reach = "reaches" if ratio >= TARGET_RATIO else "below"
            said.append(f"{NAMES[key]} {ratio:.2f}x [{lo:.2f}, {hi:.2f}]: {how}, {reach} "
                        f"{TARGET_RATIO}x")
        lines.append(f"* {smp}{' (default)' if smp == DEFAULT_SAMPLER else ''}: "
                     + "; ".join(said))
    return "\n".join(lines)


def _sampler_order(s: str) -> tuple[int, str]:
    return (COMPARE_SAMPLERS.index(s) if s in COMPARE_SAMPLERS else len(COMPARE_SAMPLERS), s)


RESULTS_DIR = Path(__file__).resolve().parent / "results"


if __name__ == "__main__":
    main()
