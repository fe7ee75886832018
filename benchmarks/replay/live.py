"""Live searches against the replay's figures (issue 25): does a real search of a table's
workload reach the targets when and as the replay of the same method says it does?

    nice -n 10 .venv/bin/python benchmarks/replay/live.py [--table default] [--seeds 5]
        [--trials 40] [--start-points] [--sampler tpe-mix|ehvi|random]
    .venv/bin/python benchmarks/replay/live.py --report       # write only

Each seed runs a search as a user runs it (`autoembed search`: `--sampler tpe-mix` or
`ehvi` with the front rule and MLflow on, as by default; or `--sampler random` with
`--no-early-stop`, the replay's `random-full`, the baseline of its ratios), on the table's
request (`--budget` of the table, its space), one trial at a time (`--workers 1`, the
replay's one worker), with start points off (`--no-start-points`, as the replay's headline
figures) or, `--start-points`, on (the default, trained first; the replay's second
section). Every search is appended to results/search_live_vs_replay.jsonl as it ends (a
rerun skips the seeds held); then results/search_live_vs_replay.md is written beside the
replay's records of the same method (`tpe-mix-front`, `ehvi-front`, `random-full`) and
start points in results/search_efficiency_replay.jsonl.gz, and each live method's compute to
the targets over live random search's on the seeds both hold (`ratios`), beside the
replay's ratio on the same seeds.

The yardstick is compare.py's (`Yardstick`: the table's reference front, memory axis and
noise unit), applied to the search's trials.csv in trial order:

* trials to each target: completed trials until the front's hypervolume reaches 90/95/99%
  of the reference, and until the best validation quality is within one noise unit of the
  table's best (independent of any clock);
* compute to each target on the replay's clock: each trial's own CPU seconds from
  trials.csv (a trial stopped early: up to its stop; over-budget proposals: 0) plus its
  ask and pricing seconds, with the replay's fixed charges (`harness.Costs`: per launched
  trial and per search) — so a difference from the replay is the search's behaviour (its
  proposals, their qualities and costs), not the fixed costs' model;
* the live wall clock to each target: the driver's seconds from each ask to its trial's end
  (trials.csv ask + pricing + train + overhead seconds, summed in trial order) plus the
  process's seconds outside them (start-up and the end's outputs, all charged at the
  start: an upper bound on the wall seconds to a target).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
from compare import FRACTIONS, Yardstick, _commit, _records  # noqa: E402
from harness import Costs, ReplayResult, TrialLog  # noqa: E402
from table import Table  # noqa: E402

RESULTS = HERE.parent / "results"
JSONL = RESULTS / "search_live_vs_replay.jsonl"
# --sampler -> the replay's method of the same sampler: with the default front rule, or
# (random) random search at full fidelity, the baseline of the replay's ratios
METHODS = {"tpe-mix": "tpe-mix-front", "ehvi": "ehvi-front", "random": "random-full"}
FLAGS = {"random": ["--no-early-stop"]}  # what else a sampler's search is run with
KEYS = [f"hv{round(f * 100)}" for f in FRACTIONS] + ["best"]


def _num(v: str | None) -> float:
    return float(v) if v not in (None, "") else 0.0


def search(table: Table, seed: int, trials: int, start_points: bool, sampler: str,
           work: Path) -> tuple[list[dict[str, str]], float]:
    """Run one live search; (its trials.csv rows, the process's wall seconds outside the
    driver's per-trial seconds: start-up and the end)."""
    study = f"live-{table.header['name']}-{seed}"
    cmd = [str(Path(sys.prefix) / "bin" / "autoembed"), "search",
           "--budget", str(table.header["budget_bytes"]), "--seed", str(seed),
           "--workers", "1", "--trials", str(trials), "--sampler", sampler,
           "--study", study, "--runs-dir", str(work / "runs")]
    if not start_points:
        cmd.append("--no-start-points")
    cmd += FLAGS.get(sampler, [])
    if table.header.get("space") not in (None, "default"):
        cmd += ["--space", str(table.header["space"])]
    if table.header.get("data"):
        cmd += ["--data", str(table.header["data"])]
    t0 = time.monotonic()
    run = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr[-2000:]}")
    with (work / "runs" / study / "trials.csv").open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["trial"]))
    driver = sum(_num(r["ask_seconds"]) + _num(r["pricing_seconds"]) + _num(r["train_seconds"])
                 + _num(r["overhead_seconds"]) for r in rows)
    return rows, max(wall - driver, 0.0)


def clocks(rows: Sequence[Mapping[str, str]], startup_s: float) -> dict[str, list[TrialLog]]:
    """The search's trials as the replay logs them, on the replay's clock and on the live
    wall clock."""
    costs = Costs()
    out: dict[str, list[TrialLog]] = {"replay_clock": [], "wall": []}
    t_replay, t_wall = costs.per_search_s, startup_s
    for r in rows:
        decision = _num(r["ask_seconds"]) + _num(r["pricing_seconds"])
        trained = r["status"] not in ("infeasible",)
        t_replay += decision + (_num(r["cpu_seconds"]) + costs.per_trial_s if trained else 0.0)
        t_wall += decision + _num(r["train_seconds"]) + _num(r["overhead_seconds"])
        for key, end in (("replay_clock", t_replay), ("wall", t_wall)):
            ok = r["status"] == "complete" and r["quality"] and r["memory"]
            out[key].append(TrialLog(
                number=int(r["trial"]), status=r["status"], start=0.0, end=end,
                quality=float(r["quality"]) if ok else None,
                memory=float(r["memory"]) if ok else None))
    return out


def _times(stick: Yardstick, logs: list[TrialLog]) -> dict[str, Any]:
    return stick.times(ReplayResult("live", 0, logs, 0.0, 0.0, 0.0, 0.0, None))


def _trials_to(curve: Sequence[Sequence[float]], stick_times: Mapping[str, Any],
               key: str) -> int | None:
    """Completed trials until the target `key` was reached (the curve holds one point per
    completed trial, at its end rounded to 2 decimals)."""
    at = stick_times.get(key)
    if at is None:
        return None
    return next(i + 1 for i, (end, _) in enumerate(curve) if end >= at - 0.006)  # 2 dp


def measure(table: Table, stick: Yardstick, seed: int, trials: int,
            start_points: bool, sampler: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="autoembed-live-") as tmp:
        rows, startup = search(table, seed, trials, start_points, sampler, Path(tmp))
    logs = clocks(rows, startup)
    replay_clock, wall = _times(stick, logs["replay_clock"]), _times(stick, logs["wall"])
    rec: dict[str, Any] = {
        "table": table.header["name"], "seed": seed, "trials": trials,
        "start_points": start_points, "method": METHODS[sampler],
        "budget_bytes": table.header["budget_bytes"],
        "rows": sum(s == 0 for _, s in table.trials),  # the table's density: its yardstick
        "launched": len(rows), "complete": sum(r["status"] == "complete" for r in rows),
        "pruned": sum(r["status"] == "pruned" for r in rows),
        "infeasible": sum(r["status"] == "infeasible" for r in rows),
        "startup_s": round(startup, 2), "total_s": logs["replay_clock"][-1].end,
        "final_frac": (replay_clock["curve"] or [[0, 0]])[-1][1],
        "commit": _commit(), "load": list(os.getloadavg()),
    }
    rec["points"] = [[int(r["trial"]), r["status"], _num(r["quality"]) or None,
                      _num(r["memory"]) or None, round(_num(r["cpu_seconds"]), 3)]
                     for r in rows]  # trial, status, quality, memory, CPU s
    for key in KEYS:
        rec[f"{key}_trials"] = _trials_to(replay_clock["curve"], replay_clock, key)
        rec[f"{key}_s"] = replay_clock[key]
        rec[f"{key}_wall_s"] = wall[key]
    return rec


# Files of compare.py's replays the report reads (`--replays`): the current one by default.
# The live searches against the tables at about 80 rows were set beside the replays of
# those tables, which are in the git history at fbf29c6
# (benchmarks/results/search_efficiency_replay_81rows.jsonl there): name it to report them.
REPLAYS: list[Path] = [compare.JSONL]


def _replay_side(table: str, method: str, start_points: bool,
                 rows: int) -> list[dict[str, Any]]:
    """The replays of `method` on the table as dense as the live searches' yardstick was
    (records before densities were recorded: the 81-row tables)."""
    recs = [r for path in REPLAYS if path.exists() for r in _records(path)
            if r["table"] == table and r["method"] == method
            and r["start_points"] == start_points and r.get("rows", 81) == rows]
    for r in recs:
        for key in KEYS:
            r[f"{key}_trials"] = _trials_to(r["curve"], r, key)
    return recs


def _summary(values: Sequence[float | None], n: int) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return f"0/{n} reached"
    mean = statistics.fmean(got)
    sd = statistics.stdev(got) if len(got) > 1 else 0.0
    return f"{mean:.1f} ± {sd:.1f} ({len(got)}/{n} reached)"


def report(table: str) -> str:
    recs = [r for r in _records(JSONL) if r["table"] == table] if JSONL.exists() else []
    lines = ["# Live searches against the replay", "",
             "Written by `benchmarks/replay/live.py` (its docstring says what is measured) "
             "from `search_live_vs_replay.jsonl` and the replay's records of the same method "
             f"in {', '.join(f'`{p.name}`' for p in REPLAYS)}.", "",
             "Mean ± standard deviation over the seeds that reached the target (a seed that "
             "did not is counted in the 'reached' figure, not in the mean).", ""]
    if not recs:
        return "\n".join(lines + ["No live searches recorded yet."])
    for method in METHODS.values():
        for sp in (False, True):
            for rows in sorted({r.get("rows", 81) for r in recs}):
                live = [r for r in recs if r.get("start_points", False) == sp
                        and r.get("method", "tpe-mix-front") == method
                        and r.get("rows", 81) == rows]
                if live:
                    lines += _section(table, live, _replay_side(table, method, sp, rows), sp)
    lines += ratios(recs)
    lines += ["The replay's budget is longer than a live search of this many trials: a "
              "target the replay reaches after the live search's last trial shows as "
              "not reached live, not as a disagreement."]
    return "\n".join(lines) + "\n"


def ratios(recs: Sequence[Mapping[str, Any]], base: str = "random-full") -> list[str]:
    """Each live method's compute to each target over the live baseline's on the seeds both
    hold (compare.py's paired ratio of means; a search that did not reach a target counts
    at its last trial, `total_s`: a censored baseline makes the ratio an upper bound),
    beside the replay's on the same seeds. The records at the densest table (those that
    keep `total_s`) are paired."""
    out: list[str] = []
    densest = max((r.get("rows", 81) for r in recs), default=0)
    for sp in (False, True):
        by = {(r["method"], r["seed"]): r for r in recs if r.get("start_points", False) == sp
              and r.get("rows", 81) == densest}
        live = {k: {**{key: v.get(f"{key}_s") for key in KEYS}, "budget_s": v["total_s"]}
                for k, v in by.items()}
        for method in sorted({m for m, _ in by if m != base}):
            seeds = sorted(s for m, s in by if m == method and (base, s) in by)
            if len(seeds) < 2:
                continue
            table = by[(base, seeds[0])]["table"]
            replay = {(r["method"], r["seed"]): r for m in (method, base)
                      for r in _replay_side(table, m, sp, by[(base, seeds[0])]["rows"])}
            rows = []
            for key in KEYS:
                got = compare.ratio(live, method, base, key, seeds)
                rep = compare.ratio(replay, method, base, key, seeds)
                censored = sum(by[(m, s)].get(f"{key}_s") is None for m in (method, base)
                               for s in seeds)
                rows.append(f"| {key} | {compare._fmt_ratio(got)} | {compare._fmt_ratio(rep)} "
                            f"| {censored} |")
            out += [f"## Live `{method}` over live `{base}`, start points "
                    f"{'on' if sp else 'off'}", "",
                    f"Paired seeds {', '.join(map(str, seeds))}: compute on the replay's clock "
                    "to each target, ratio of the means with a 95% bootstrap interval.", "",
                    "| target | live | replay, the same seeds | searches short of it |",
                    "|---|---|---|---|", *rows, ""]
    return out


def _section(table: str, live: Sequence[Mapping[str, Any]],
             replay: Sequence[Mapping[str, Any]], start_points: bool) -> list[str]:
    commits = sorted({r["commit"] for r in live})
    loads = [r["load"][0] for r in live]
    seeds = ", ".join(str(r["seed"]) for r in live)
    method = live[0].get("method", "tpe-mix-front")
    sampler = next(k for k, v in METHODS.items() if v == method)
    lines = [f"## `{method}` (`--sampler {sampler}`), start points "
             f"{'on' if start_points else 'off'}", "",
             f"Table `{table}` ({live[0].get('rows', 81)} rows trained: its reference front "
             f"and noise unit); live: {len(live)} seeds ({seeds}), `autoembed search --budget "
             f"{live[0]['budget_bytes']} --sampler {sampler} --workers 1 --trials "
             f"{live[0]['trials']} --seed S"
             f"{'' if start_points else ' --no-start-points'}"
             f"{''.join(' ' + f for f in FLAGS.get(sampler, []))}`, commits {', '.join(commits)}, "
             f"1-min load {min(loads):.1f}-{max(loads):.1f} on 2 cores; replay: {len(replay)} "
             "seeds.", "",
             "| target | live: trials | replay: trials | live: compute s (replay's clock) "
             "| replay: compute s | live: wall s |", "|---|---|---|---|---|---|"]
    for key in KEYS:
        lines.append(
            f"| {key} | {_summary([r[f'{key}_trials'] for r in live], len(live))} "
            f"| {_summary([r[f'{key}_trials'] for r in replay], len(replay))} "
            f"| {_summary([r[f'{key}_s'] for r in live], len(live))} "
            f"| {_summary([r[key] for r in replay], len(replay))} "
            f"| {_summary([r[f'{key}_wall_s'] for r in live], len(live))} |")
    fin = [r["final_frac"] for r in live]
    lines += ["", f"Live searches: {statistics.fmean(r['launched'] for r in live):.0f} "
              f"proposals launched on average ({statistics.fmean(r['complete'] for r in live):.0f}"
              f" complete, {statistics.fmean(r['pruned'] for r in live):.0f} stopped early, "
              f"{statistics.fmean(r['infeasible'] for r in live):.0f} over budget); start-up "
              f"and end {statistics.fmean(r['startup_s'] for r in live):.1f} s; final share of "
              f"the reference hypervolume {min(fin):.3f}-{max(fin):.3f}.", ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default="default")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--tables-dir", type=Path, default=HERE / "tables")
    ap.add_argument("--start-points", action="store_true",
                    help="start points on (the default search's), trained first")
    ap.add_argument("--sampler", choices=list(METHODS), default="tpe-mix")
    ap.add_argument("--report", action="store_true", help="write the results file only")
    ap.add_argument("--replays", type=Path, nargs="+", default=REPLAYS, metavar="JSONL",
                    help="compare.py's replay records to report beside the live searches "
                         "(default: the current results file)")
    a = ap.parse_args(argv)
    missing = [str(p) for p in a.replays if not p.exists()]
    if missing:
        ap.error(f"--replays {' '.join(missing)}: no such file of replays")
    REPLAYS[:] = a.replays
    path = a.tables_dir / f"{a.table}.jsonl.gz"
    if not a.report and not path.exists():
        ap.error(f"--table {a.table}: no such table in {a.tables_dir}; use the name of one of "
                 "its *.jsonl.gz files")
    if not a.report:
        table = Table.load(path)
        stick = Yardstick(table)
        rows = sum(s == 0 for _, s in table.trials)  # a seed is held at this density
        held = {r["seed"] for r in _records(JSONL) if r["table"] == a.table
                and r.get("start_points", False) == a.start_points
                and r.get("method", "tpe-mix-front") == METHODS[a.sampler]
                and r.get("rows", 81) == rows} if JSONL.exists() else set()
        for seed in range(a.seeds):
            if seed in held:
                continue
            rec = measure(table, stick, seed, a.trials, a.start_points, a.sampler)
            with JSONL.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"seed {seed}: hv95 after {rec['hv95_trials']} trials "
                  f"({rec['hv95_s']} s replay clock, {rec['hv95_wall_s']} s wall)", flush=True)
    out = RESULTS / "search_live_vs_replay.md"
    out.write_text(report(a.table))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
