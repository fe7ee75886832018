"""The yardstick and the comparison (issue 25): searches replayed on the tables
(`harness.Replay`: the real engine, samplers and MO-ASHA), paired by seed.

    nice -n 10 .venv/bin/python benchmarks/replay/compare.py --seeds 8      # run, then write
    .venv/bin/python benchmarks/replay/compare.py --report                  # write only
    .venv/bin/python benchmarks/replay/compare.py --workers 1 8 32 ...     # simulated workers
    ... compare.py --drop --methods ehvi-front ...   # replay a changed method again
    ... compare.py --jsonl /tmp/a.jsonl.gz ...; compare.py --merge /tmp/a.jsonl.gz  # processes
    .venv/bin/python benchmarks/replay/compare.py --data FILE --label COL --categorical A,B \
        --tables-dir DIR                       # the tables generate.py made of those data

Every replay is appended to results/search_efficiency_replay.jsonl.gz as it ends (a rerun skips
those held), then results/search_efficiency_replay.md and .png are written from it; with
`--data`, to DIR/replays-TABLE.jsonl.gz and its .md and .png.

**Workers.** With N simulated workers the clock is wall-clock; each record also holds the
compute to each target (`compute_hv95`, ...: every worker's), and the budget caps the
compute (harness.py, "Workers"), as one worker's does its clock. The report's main sections
read one worker's replays; a section per table gives, for each worker count, wall-clock and
compute to hv95 and best and their ratios to one worker's.

**The limit.** Beside every method, the oracle's compute to each target (oracle.py: the
cheapest set of seed-0 rows that reaches it, exact). In the Workers sections, beside it,
the wall-clock limit with unlimited workers (oracle.py, `wall_limits`: the per-search
charge, then the least costliest row of a set that reaches the target, exact, with its
per-trial charge; a lower bound, since the driver hands the rows over one after another).

**The yardstick.** Compute = the replay's clock with one worker: every trial's CPU seconds
from its record (pruned trials up to their stop, over-budget proposals priced only), a fixed
overhead per trial and per search (`harness.Costs`) and the engine's own measured time
(sampler, pricing, scheduler). Two targets, per table:
(a) HV: the hypervolume of the search's (validation quality, memory) front reaches 90/95/99%
of the table's reference front (every row trained at seed 0, at full fidelity). Memory is
the search's `memory` objective (allocated_peak) on a log axis from the cheapest trained row
to the table's budget (`memory_axis` in the header: a budget that rules out a third of the
space), quality from the worst to the best seed-0 row; throughput is left out (it is timing,
noisy on the shared machine the tables were made on).
(b) best: the best validation quality within one noise unit of the table's best seed-0 row
(noise unit: the median |difference| between seeds 0 and 1 of the same rows).
A search that does not reach a target within its budget counts at the budget (censored):
a censored method's ratio is then a lower bound, a censored baseline's an upper bound, and
the table says how many seeds reached it.

**Ratios** are paired by seed: mean compute of a method over mean compute of the baseline on
the same seeds, with a 95% interval from 2000 bootstrap resamples of the seeds. Methods may
hold different numbers of seeds (the `seeds` column): each ratio pairs the seeds both hold.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import peers  # noqa: E402 - imports no peer's package until a peer is built
import samplers  # noqa: E402 - the sampler kinds measured and left out of the product
from _common import append_jsonl, read_jsonl, results_stem, write_jsonl  # noqa: E402
from harness import Costs, Method, Replay, ReplayResult, table_workload  # noqa: E402
from oracle import limits, wall_limits  # noqa: E402
from table import Table, columns, data_identity  # noqa: E402

RESULTS = HERE.parent / "results"
JSONL = RESULTS / "search_efficiency_replay.jsonl.gz"
TABLES = ("default", "movielens", "flights", "bbcnews")
FRACTIONS = (0.90, 0.95, 0.99)
# A replay's budget: this many median full-length trials of the table. The baseline of every
# ratio, random search at full fidelity, must reach the targets within it, or the ratios are
# only upper bounds: at 80 it reached hv95 in 4 of 8 seeds on flights, 2 of 8 on MovieLens
# and 1 of 8 on BBC News (those replays: git history, fbf29c6); at 320 in 8, 8 and 7.
BUDGET_TRIALS = 320


def _prior_sampler(seed: int, workload: Any) -> Any:
    """tpe-mix with the table's start points as a piBO prior (`samplers.PriorTPE`), not
    trained first."""
    start = [dict(r["params"]) for r in workload.table.rows.values()
             if r.get("source") == "start" and r.get("fits")]
    return samplers.make_sampler("tpe-mix", seed, prior=start)


RANDOM_STARTUP = {"startup": 8, "spread": False}  # `ehvi`'s start-up before da0e799


def ehvi(**kw: Any) -> Callable[[int, Any], Any]:
    """`ehvi` with the knobs `kw` of its variants (variants.build; the product otherwise)."""
    def make(seed: int, workload: Any) -> Any:
        import variants

        return variants.build(seed, **kw)
    make.knobs = dict(kw)  # type: ignore[attr-defined]  # what the replay's sampler turns
    return make


_random_startup = ehvi(**RANDOM_STARTUP)  # `ehvi` as it was before da0e799


_DEHB, _DEHB_SCAL = peers.dehb("quality"), peers.dehb("scalarized")

# name -> the search it replays; "-front": the front rule (main's early stop before MO-ASHA).
# The TPE kinds are Optuna's multi-objective TPE on the search's three objectives (quality,
# memory, throughput: no scalarization), over-budget proposals told through the memory
# constraint, as in a search (`pipeline.study.make_sampler`).
METHODS = {
    "random-full": Method("random-full", "random"),
    "random-asha": Method("random-asha", "random", schedule=True),
    "tpe-mix-front": Method("tpe-mix-front", "tpe-mix", front_rule=True),
    "tpe-mix-asha": Method("tpe-mix-asha", "tpe-mix", schedule=True, front_rule=True),
    "tpe-full": Method("tpe-full", "tpe"),
    "tpe-mix-cost-asha": Method("tpe-mix-cost-asha", samplers.kind("tpe-mix-cost"), schedule=True,
                                front_rule=True),
    "tpe-mix-prior-asha": Method("tpe-mix-prior-asha", _prior_sampler, schedule=True,
                                 front_rule=True),
    "ehvi-front": Method("ehvi-front", "ehvi", front_rule=True),
    "ehvi-asha": Method("ehvi-asha", "ehvi", schedule=True, front_rule=True),
    # ehvi's start-up before da0e799: 8 random proposals (not spread over the memory axis)
    "ehvi-rs-front": Method("ehvi-rs-front", _random_startup, front_rule=True,
                            note="ehvi with 8 random start-up proposals (before da0e799)"),
    "ehvi-q1-front": Method("ehvi-q1-front", ehvi(quality_turns=1), front_rule=True,
                            note="ehvi with quality_turns=1: the first model turn of each "
                                 "run of 4 by the expected improvement of quality alone"),
    "ehvi-q2-front": Method("ehvi-q2-front", ehvi(quality_turns=2), front_rule=True,
                            note="ehvi with quality_turns=2: the first two model turns of "
                                 "each run of 4 by the expected improvement of quality alone"),
    **{f"ehvi-p{k}-front": Method(
        f"ehvi-p{k}-front", ehvi(pick_turns=k), front_rule=True,
        note=f"ehvi with pick_turns={k}: the first {k} model turn(s) of each run of 4 by "
             "the expected improvement of quality alone, not per predicted second")
       for k in (1, 2)},
    "ehvi-rq-front": Method("ehvi-rq-front", ehvi(random_quality=True), front_rule=True,
                            note="ehvi whose random turn of each run of 4 is by the expected "
                                 "improvement of quality alone, not per predicted second"),
    "ehvi-cc-front": Method("ehvi-cc-front", ehvi(cost_cooling=True), front_rule=True,
                            note="ehvi with cost cooling: the predicted seconds' exponent "
                                 "is the share of the budget left (CArBO)"),
    "ehvi-rs-asha": Method("ehvi-rs-asha", _random_startup, schedule=True, front_rule=True,
                           note="ehvi-asha with 8 random start-up proposals (before da0e799)"),
    # Peers (peers.py; README, "The peers"), not candidates for the default.
    "st-moasha": Method(
        "st-moasha", "random", scheduler_factory=peers.moasha(rank_fix=False),
        needs="syne_tune",
        note="syne-tune 0.16.0 MOASHA as shipped (its NonDominatedPriority rank read as "
             "Bracket reads it), metrics -quality and log10 memory minimized, time_attr = "
             "search evaluations, grace 1, rf 3, max_t = a trial's evaluations, 1 bracket; "
             "random proposals"),
    "st-moasha-rankfix": Method(
        "st-moasha-rankfix", "random", scheduler_factory=peers.moasha(rank_fix=True),
        needs="syne_tune",
        note="st-moasha with syne-tune's rank bug fixed (each item's position in the "
             "non-dominated order)"),
    "flaml-cfo": Method(
        "flaml-cfo", peers.flaml_sampler("cfo", "quality"), needs="flaml",
        note="FLAML 2.8.0 CFO, one metric: validation quality maximized (memory only "
             "through the budget rule), no low_cost_partial_config, full fidelity"),
    "flaml-cfo-scal": Method(
        "flaml-cfo-scal", peers.flaml_sampler("cfo", "scalarized"), needs="flaml",
        note="FLAML 2.8.0 CFO on quality - 0.01 * log10(memory bytes), full fidelity"),
    "dehb": Method(
        "dehb", _DEHB[0], scheduler_factory=_DEHB[1], needs="dehb",
        note="DEHB 0.1.2 ask/tell, one metric: validation quality maximized (memory only "
             "through the budget rule); fidelity = share of a trial's length, 1/9 to 1, eta "
             "3; a promoted config retrains from its start; over-budget proposals told "
             "fitness +inf at cost 0"),
    "dehb-scal": Method(
        "dehb-scal", _DEHB_SCAL[0], scheduler_factory=_DEHB_SCAL[1], needs="dehb",
        note="dehb on quality - 0.01 * log10(memory bytes)"),
    "flaml-bs": Method(
        "flaml-bs", peers.flaml_sampler("blendsearch", "quality"), needs="flaml",
        note="FLAML 2.8.0 BlendSearch (CFO + its Optuna TPE global search), validation "
             "quality maximized, full fidelity"),
    "optuna-gp": Method(
        "optuna-gp", peers.optuna_sampler("gp"),
        note="Optuna's GPSampler, its defaults (10 random start-up trials; constrained "
             "multi-objective logEHVI, qLogEHVI with running trials) on the search's "
             "objectives, the budget as Optuna's memory constraint (Trial.set_constraint, "
             "what constraints_func feeds), full fidelity, one torch thread"),
    "optuna-botorch": Method(
        "optuna-botorch", peers.optuna_sampler("botorch"), needs="optuna_integration",
        note="optuna-integration 5.0.0's BoTorchSampler with BoTorch 0.18.1's qNEHVI "
             "(qnehvi_candidates_func; 10 random start-up trials, running trials as pending "
             "points) on the search's objectives, the budget as Optuna's memory constraint "
             "(Trial.set_constraint), full fidelity, one torch thread"),
    "optuna-tpe": Method(
        "optuna-tpe", peers.optuna_sampler("tpe"),
        note="Optuna's multivariate TPESampler, its defaults otherwise (10 random start-up "
             "trials, constant liar; c-TPE) on the search's objectives, the budget as "
             "Optuna's memory constraint (Trial.set_constraint, what constraints_func "
             "feeds), full fidelity"),
}
# the peers (peers.py), not candidates for the default
PEER_METHODS = tuple(m for m in METHODS if m.startswith(("st-", "flaml-", "dehb", "optuna-")))
# the anytime figure's methods (the tables hold every method): a readable legend
FIGURE_METHODS = ("random-full", "random-asha", "tpe-mix-front", "ehvi-front", "ehvi-asha",
                  "st-moasha-rankfix", "flaml-bs", "dehb", "optuna-gp", "optuna-tpe",
                  "optuna-botorch")
CANDIDATES = ("random-asha", "tpe-mix-front", "tpe-mix-asha", "tpe-full",
              "tpe-mix-cost-asha", "ehvi-front", "ehvi-asha", "ehvi-rs-front",
              "ehvi-q1-front", "ehvi-rs-asha")  # the prior: reported beside


class Yardstick:
    """A table's reference front and noise unit, and the targets' times of a replay."""

    def __init__(self, table: Table, budget_trials: int = BUDGET_TRIALS) -> None:
        from autoembed.pareto import hypervolume

        self.hv = hypervolume
        axis = table.header["memory_axis"]
        self.mem_lo = math.log10(float(axis["low_bytes"]))
        self.mem_hi = math.log10(float(axis["high_bytes"]))
        seed0 = [(float(r["valid_quality"]), table.rows[row]["estimate"]["allocated_peak"])
                 for (row, s), r in table.trials.items()
                 if s == 0 and r["status"] == "complete" and r.get("valid_quality") is not None]
        self.q_lo = min(q for q, _ in seed0)
        self.q_best = max(q for q, _ in seed0)
        self.reference = self.volume(seed0)
        pairs = [abs(float(table.trials[(row, 0)]["valid_quality"])
                     - float(table.trials[(row, 1)]["valid_quality"]))
                 for (row, s) in table.trials if s == 1 and (row, 0) in table.trials]
        self.noise = statistics.median(pairs) if pairs else 0.0
        costs = [float(r["cost"]["total_cpu_s"]) for r in table.trials.values()]
        self.budget_s = budget_trials * statistics.median(costs)

    def volume(self, points: Sequence[tuple[float, float]]) -> float:
        """HV of (quality, allocated_peak) points, normalised to the unit square."""
        span = max(self.q_best - self.q_lo, 1e-12)
        pts = [((q - self.q_lo) / span,
                (self.mem_hi - math.log10(max(m, 1.0))) / (self.mem_hi - self.mem_lo))
               for q, m in points]
        return self.hv(pts, [0.0, 0.0], ["maximize", "maximize"]) if pts else 0.0

    def times(self, result: ReplayResult, at: str = "end") -> dict[str, Any]:
        """Compute until each target (None: not reached), and the anytime HV curve: the
        clock at the trial that reached it (`at` = "end"), or another of its TrialLog
        fields ("compute")."""
        done = sorted((t for t in result.trials if t.status == "complete"),
                      key=lambda t: t.end)
        out: dict[str, Any] = {f"hv{round(f * 100)}": None for f in FRACTIONS}
        out["best"] = None
        points: list[tuple[float, float]] = []
        curve = []
        for t in done:
            assert t.quality is not None and t.memory is not None
            points.append((t.quality, t.memory))
            frac = self.volume(points) / self.reference
            curve.append((round(t.end, 2), round(frac, 4)))
            for f in FRACTIONS:
                key = f"hv{round(f * 100)}"
                if out[key] is None and frac >= f - 1e-12:
                    out[key] = getattr(t, at)
            if out["best"] is None and t.quality >= self.q_best - self.noise:
                out["best"] = getattr(t, at)
        out["curve"] = curve
        return out

    def compute_times(self, result: ReplayResult) -> dict[str, Any]:
        """Compute charged until each target (`compute_hv95`, ..., `compute_best`; None:
        not reached) and in all (`compute_s`): with N workers the clock is wall-clock, and
        the compute is every worker's (`harness.TrialLog.compute`)."""
        out = {f"compute_{k}": v for k, v in self.times(result, "compute").items()
               if k != "curve"}
        out["compute_s"] = max((t.compute for t in result.trials), default=0.0)
        return out

    def oracle(self, table: Table, costs: Costs | None = None) -> dict[str, Any]:
        """The limit: the least compute that could reach each target (oracle.py)."""
        return limits(self, table, costs or Costs(), FRACTIONS)

    def wall_oracle(self, table: Table, costs: Costs | None = None) -> dict[str, Any]:
        """The wall-clock limit with unlimited workers (oracle.wall_limits)."""
        return wall_limits(self, table, costs or Costs(), FRACTIONS)


def run_one(table: Table, stick: Yardstick, name: str, seed: int,
            start_points: bool, workers: int = 1, real: Any = None) -> dict[str, Any]:
    """One replay's record: its targets on the clock (wall-clock with `workers` > 1) and
    in compute. `real`: the table's priced workload (`harness.table_workload`), built once."""
    started = time.monotonic()
    result = Replay(table, seed=seed, budget_s=stick.budget_s, workers=workers,
                    start_points=start_points, real=real).run(METHODS[name])
    trained = [t for t in result.trials if t.status in ("complete", "pruned")]
    note = {"note": METHODS[name].note} if METHODS[name].note else {}
    return {
        "table": table.header["name"], "method": name, "seed": seed, **note,
        "workers": workers, **stick.compute_times(result),
        "start_points": start_points, "budget_s": stick.budget_s, "clock_s": result.clock_s,
        "rows": sum(s == 0 for _, s in table.trials),  # trained rows: the table's density
        "decision_s": result.decision_s, "trial_s": result.trial_s,
        "overhead_s": result.overhead_s, "trials": len(trained),
        "pruned": sum(t.status == "pruned" for t in result.trials),
        "infeasible": sum(t.status == "infeasible" for t in result.trials),
        "repeats": sum(t.repeat for t in trained),
        "distance": statistics.fmean(t.distance or 0.0 for t in trained) if trained else None,
        "harness_s": time.monotonic() - started, **stick.times(result),
    }


def _held(path: Path) -> dict[tuple[str, str, int, bool, int], float]:
    """The replays held, each with its budget (one at another budget is not held)."""
    if not path.exists():
        return {}
    return {(r["table"], r["method"], r["seed"], r["start_points"], _workers(r)):
            float(r["budget_s"]) for r in _records(path)}


def _key(rec: Mapping[str, Any]) -> tuple[str, str, int, bool, int]:
    """What makes a replay the same replay (another at that key replaces it)."""
    return (rec["table"], rec["method"], int(rec["seed"]), bool(rec["start_points"]),
            _workers(rec))


def drop(path: Path, tables: Sequence[str], methods: Sequence[str], workers: Sequence[int],
         start_points: bool) -> int:
    """Take out of `path` the replays of `methods` on `tables` at `workers` (and these start
    points), so that a run replays them again (a changed sampler); the file is rewritten
    whole. Returns how many went."""
    if not path.exists():
        return 0
    recs = _records(path)
    keep = [r for r in recs if not (r["table"] in tables and r["method"] in methods
                                    and _workers(r) in workers
                                    and bool(r["start_points"]) == start_points)]
    if len(keep) < len(recs):
        write_jsonl(path, keep)
    return len(recs) - len(keep)


def merge(path: Path, others: Sequence[Path]) -> int:
    """Add the replays of `others` (files of replays run in other processes) to `path`, a
    replay of the same key replacing the one held; the file is rewritten whole. Returns how
    many came in."""
    recs = _records(path) if path.exists() else []
    at = {_key(r): k for k, r in enumerate(recs)}
    came = 0
    for other in others:
        for r in _records(other):
            came += 1
            if _key(r) in at:
                recs[at[_key(r)]] = r
            else:
                at[_key(r)] = len(recs)
                recs.append(r)
    write_jsonl(path, recs)
    return came


def _workers(rec: Mapping[str, Any]) -> int:
    return int(rec.get("workers", 1))  # records before --workers: one worker


def _records(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path)  # a torn last record of a killed run dropped


def run(tables: Sequence[str], tables_dir: Path, seeds: Sequence[int],
        methods: Sequence[str], start_points: bool, jsonl: Path = JSONL,
        workers: Sequence[int] = (1,), data: str | None = None,
        budget_trials: int = BUDGET_TRIALS) -> None:
    """Replay each method at each seed and worker count on each table, appending every
    replay to `jsonl` (those held at the same budget skipped). `data`: the file a table
    made from a data file prices on (`Table.space`); `budget_trials`: each replay's budget
    in median full-length trials of its table."""
    held = _held(jsonl)
    for name in tables:
        table = Table.load(tables_dir / f"{name}.jsonl.gz")
        stick = Yardstick(table, budget_trials)
        real = table_workload(table, data)
        oracle, wall = stick.oracle(table), stick.wall_oracle(table)
        for n, seed, m in ((n, s, m) for n in workers for s in seeds for m in methods):
            budget = held.get((table.header["name"], m, seed, start_points, n))
            if budget is not None and math.isclose(budget, stick.budget_s):
                continue
            rec = run_one(table, stick, m, seed, start_points, n, real)
            rec.update(oracle=oracle, oracle_wall=wall, commit=_commit(),
                       load=list(os.getloadavg()))
            append_jsonl(jsonl, rec)
            print(f"{name} {m} seed {seed} workers {n}: {rec['trials']} trials, hv95 "
                  f"{rec['hv95']}, best {rec['best']}, {rec['harness_s']:.1f} s", flush=True)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=HERE, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---------------------------------------------------------------------- the report
def _at(rec: Mapping[str, Any], key: str) -> float:
    """The record's compute (or clock) to `key`; one short of it counts at its budget (in
    compute: all it charged; on the wall-clock of N workers, whose budget caps the compute:
    the clock where it stopped)."""
    if key.startswith("compute_") and "compute_s" not in rec:
        key = key.removeprefix("compute_")  # one worker, before compute was recorded
    v = rec.get(key)
    if v is not None:
        return float(v)
    if key.startswith("compute_"):
        return float(rec["compute_s"])
    return float(rec["budget_s"] if _workers(rec) == 1 else rec["clock_s"])


def ratio(recs: Mapping[tuple[str, int], Mapping[str, Any]], method: str, base: str,
          key: str, seeds: Sequence[int]) -> tuple[float, float, float] | None:
    """Paired ratio of mean compute to `key`, with a 95% bootstrap interval over seeds."""
    both = [s for s in seeds if (method, s) in recs and (base, s) in recs]
    if len(both) < 2:
        return None

    # each seed's figures read once: the bootstrap sums them 2000 times
    nums = {s: _at(recs[(method, s)], key) for s in both}
    dens = {s: _at(recs[(base, s)], key) for s in both}

    def of(sample: Sequence[int]) -> float:
        num = sum(map(nums.__getitem__, sample))
        den = sum(map(dens.__getitem__, sample))
        return num / den if den > 0 else math.inf

    rng = random.Random(0)
    choice = rng.choice
    boot = sorted(of([choice(both) for _ in both]) for _ in range(2000))
    return of(both), boot[49], boot[1949]


def _fmt_ratio(r: tuple[float, float, float] | None) -> str:
    return "n/a" if r is None else f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]"


def report(path: Path = JSONL, tables_dir: Path = HERE / "tables") -> str:
    """The results file of the replays in `path`: one worker's replays per table and start
    points, the leave-one-out, the replays at several worker counts, each beside the
    oracle (a record's, else computed from the table in `tables_dir` when it is there)."""
    everything = _records(path)
    oracles = _oracles(everything, tables_dir)
    walls = _oracles([r for r in everything if _workers(r) > 1], tables_dir, "oracle_wall")
    recs = [r for r in everything if _workers(r) == 1]
    lines = ["# Search efficiency on the replay tables", "",
             "Written by `benchmarks/replay/compare.py` (its docstring defines the yardstick)"
             f" from `{path.name}`.", ""]
    commits = sorted({r.get("commit", "?") for r in recs})
    loads = [r["load"][0] for r in recs if r.get("load")]
    lines += [f"Commits: {', '.join(commits)}; 1-min load while replaying "
              f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f} on 2 cores (the "
              "replay's figures are CPU seconds from the tables and the engine's thread time, "
              "so load changes them little).", ""]
    for sp in (False, True):
        sub = [r for r in recs if r["start_points"] == sp]
        if sub:
            lines += _section(sub, sp, oracles)
    lines += _leave_one_out([r for r in recs if not r["start_points"]])
    lines += _against_peers([r for r in recs if not r["start_points"]])
    for sp in (False, True):
        sub = [r for r in everything if r["start_points"] == sp]
        if any(_workers(r) > 1 for r in sub):
            lines += _workers_section(sub, sp, oracles, walls)
    lines += [f"![anytime HV]({results_stem(path).name}.png)", ""]
    if any(r["table"] in TABLES for r in everything):  # notes on the project's own tables
        lines.append(CAVEATS)
    return "\n".join(lines)


def _by_table(recs: Sequence[Mapping[str, Any]]
              ) -> dict[str, dict[tuple[str, int], Mapping[str, Any]]]:
    out: dict[str, dict[tuple[str, int], Mapping[str, Any]]] = {}
    budgets: dict[str, set[float]] = {}
    for r in recs:
        out.setdefault(r["table"], {})[(r["method"], r["seed"])] = r
        budgets.setdefault(r["table"], set()).add(round(float(r["budget_s"]), 3))
    mixed = {t: sorted(b) for t, b in budgets.items() if len(b) > 1}
    if mixed:  # a ratio pairs seeds at one budget: move the others to a file of their own
        raise ValueError(f"replays of one table at several budgets: {mixed}")
    return out


def _oracles(recs: Sequence[Mapping[str, Any]], tables_dir: Path, key: str = "oracle"
             ) -> dict[str, dict[str, Any] | None]:
    """Each table's oracle (`Yardstick.oracle`; `key` "oracle_wall": `wall_oracle`): its
    records', else its table's."""
    out: dict[str, dict[str, Any] | None] = {}
    for r in recs:
        if r.get(key) is not None:
            out[r["table"]] = r[key]
    for name in {r["table"] for r in recs} - set(out):
        base = name.partition(" without ")[0]
        if (tables_dir / f"{base}.jsonl.gz").exists():
            table = Table.named(tables_dir, name)
            stick = Yardstick(table)
            out[name] = stick.wall_oracle(table) if key == "oracle_wall" else stick.oracle(table)
        else:
            out[name] = None
    return out


def _oracle_line(oracle: Mapping[str, Any] | None) -> str:
    """The oracle's compute to each target, for a table's heading."""
    if oracle is None:
        return "oracle: n/a (no table to compute it from)"
    parts = [f"{k} {v['compute_s']:.1f} CPU s ({len(v['rows'])} "
             f"row{'s' if len(v['rows']) > 1 else ''})" if v else f"{k} n/a"
             for k, v in oracle.items()]
    return ("oracle (the least compute that could reach each target: the cheapest set of "
            "seed-0 rows at full fidelity, exact; oracle.py): " + ", ".join(parts))


def _wall_line(wall: Mapping[str, Any] | None) -> str:
    """The wall-clock limit to each target with unlimited workers, for a table's heading."""
    if wall is None:
        return "wall-clock limit: n/a (no table to compute it from)"

    def part(k: str, v: Mapping[str, Any] | None) -> str:
        if not v:
            return f"{k} n/a"
        turn = (f"; its {len(v['rows'])} rows handed over costliest first: "
                f"{v['schedule_s']:.1f} s" if len(v["rows"]) > 1 else "")
        return f"{k} {v['wall_s']:.1f} s (costliest row {v['max_row_s']:.1f} s{turn})"

    return ("wall-clock limit with unlimited workers (a lower bound, no decision time: the "
            "per-search charge, then the least costliest row of a set of seed-0 rows that "
            "reaches the target, exact, with its per-trial charge; oracle.py): "
            + ", ".join(part(k, v) for k, v in wall.items()))


def _vs_oracle(mean: float, oracle: Mapping[str, Any] | None, key: str) -> str:
    """`mean` beside the oracle's compute to `key`: "mean (x oracle)"."""
    o = (oracle or {}).get(key)
    return f"{mean:.0f}" if not o else f"{mean:.0f} ({mean / o['compute_s']:.1f}x)"


def _section(recs: Sequence[Mapping[str, Any]], start_points: bool,
             oracles: Mapping[str, Any] | None = None) -> list[str]:
    lines = [f"## Start points {'on' if start_points else 'off'}", ""]
    for table, by in _by_table(recs).items():
        seeds = sorted({s for _, s in by})
        methods = [m for m in METHODS if any((m, s) in by for s in seeds)]
        first = next(iter(by.values()))
        budget, rows = first["budget_s"], first.get("rows")
        density = f", {rows} rows trained" if rows else ""
        oracle = (oracles or {}).get(table)
        lines += [f"### {table} ({len(seeds)} seeds, budget {budget:.0f} CPU s{density})", "",
                  _oracle_line(oracle) + ".", "",
                  "| method | seeds | trials | pruned | repeats | engine s "
                  "| reached hv90/95/99/best | mean s to hv95 (x oracle) "
                  "| mean s to best (x oracle) | hv95 vs random-full "
                  "| hv95 vs random-asha | hv99 vs random-full | best vs random-full |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in methods:
            rs = [by[(m, s)] for s in seeds if (m, s) in by]
            reached = "/".join(str(sum(r[k] is not None for r in rs))
                               for k in ("hv90", "hv95", "hv99", "best"))
            lines.append(
                f"| {m} | {len(rs)} | {statistics.fmean(r['trials'] for r in rs):.0f} "
                f"| {statistics.fmean(r['pruned'] for r in rs):.0f} "
                f"| {statistics.fmean(r['repeats'] for r in rs):.0f} "
                f"| {statistics.fmean(r['decision_s'] for r in rs):.1f} | {reached} "
                f"| {_vs_oracle(statistics.fmean(_at(r, 'hv95') for r in rs), oracle, 'hv95')} "
                f"| {_vs_oracle(statistics.fmean(_at(r, 'best') for r in rs), oracle, 'best')} "
                f"| {_fmt_ratio(ratio(by, m, 'random-full', 'hv95', seeds))} "
                f"| {_fmt_ratio(ratio(by, m, 'random-asha', 'hv95', seeds))} "
                f"| {_fmt_ratio(ratio(by, m, 'random-full', 'hv99', seeds))} "
                f"| {_fmt_ratio(ratio(by, m, 'random-full', 'best', seeds))} |")
        lines.append("")
    return lines


def _against_peers(recs: Sequence[Mapping[str, Any]], default: str = "ehvi-front"
                   ) -> list[str]:
    """Per table and target (hv95, best): the default's ratio to random-full beside the
    peer with the lowest mean ratio, and which is ahead."""
    rows, ahead = [], 0
    for table, by in _by_table(recs).items():
        seeds = sorted({s for _, s in by})
        both = True
        for key in ("hv95", "best"):
            mine = ratio(by, default, "random-full", key, seeds)
            peers = [(r, m) for m in PEER_METHODS
                     if (r := ratio(by, m, "random-full", key, seeds)) is not None]
            if mine is None or not peers:
                both = False
                continue
            best, name = min(peers, key=lambda p: p[0][0])
            won = mine[0] < best[0]
            both = both and won
            n = sum((name, s) in by and ("random-full", s) in by for s in seeds)
            rows.append(f"| {table} | {key} | {_fmt_ratio(mine)} | {name} ({n} seeds) "
                        f"| {_fmt_ratio(best)} | {default if won else name} |")
        ahead += both
    if not rows:
        return []
    return ["## The default against the peers (start points off)", "",
            f"Compute to each target against random-full (mean, 95% interval) for the default "
            f"(`{default}`) and the peer with the lowest mean; the default is ahead on both "
            f"targets on {ahead} of {len({r.split(' | ')[0] for r in rows})} tables.", "",
            "| table | target | default vs random-full | best peer | peer vs random-full "
            "| ahead |", "|---|---|---|---|---|---|", *rows, ""]


def _workers_section(recs: Sequence[Mapping[str, Any]], start_points: bool,
                     oracles: Mapping[str, Any], walls: Mapping[str, Any]) -> list[str]:
    """Per table and method, each worker count: mean wall-clock (the clock) and compute to
    hv95 and best, and the ratios to one worker's on the same seeds."""
    lines = [f"## Workers (start points {'on' if start_points else 'off'})", "",
             "With N simulated workers the clock is wall-clock; compute is every worker's "
             "(trials, fixed charges, decisions). Ratios: to the same method with one worker, "
             "paired by seed (the budget caps the compute; a replay short of a target counts "
             "where it stopped: its wall-clock, or all it charged; a one-worker replay "
             "recorded before compute was counts "
             "its clock as compute).", ""]
    tables: dict[str, dict[tuple[str, int], Mapping[str, Any]]] = {}
    for r in recs:
        tables.setdefault(r["table"], {})[(f"{r['method']}@{_workers(r)}", r["seed"])] = r
    for table, by in tables.items():
        oracle = oracles.get(table)
        lines += [f"### {table}", "", _oracle_line(oracle) + ".", "",
                  _wall_line(walls.get(table)) + ".", "",
                  "| method | workers | seeds | wall s to hv95 | compute s to hv95 (x oracle) "
                  "| wall s to best | compute s to best (x oracle) | wall hv95 vs 1 "
                  "| compute hv95 vs 1 | wall best vs 1 | compute best vs 1 |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        keys = sorted({k for k, _ in by}, key=lambda k: (k.split("@")[0], int(k.split("@")[1])))
        lines += [_workers_row(by, k, oracle) for k in keys]
        lines.append("")
    return lines


def _workers_row(by: Mapping[tuple[str, int], Mapping[str, Any]], k: str,
                 oracle: Mapping[str, Any] | None) -> str:
    """One method at one worker count (`k` = "METHOD@N") of `_workers_section`."""
    m, n = k.split("@")
    seeds = sorted(s for kk, s in by if kk == k)
    rs = [by[(k, s)] for s in seeds]

    def mean(key: str) -> float:
        return statistics.fmean(_at(r, key) for r in rs)

    def vs1(key: str) -> str:
        return _fmt_ratio(ratio(by, k, f"{m}@1", key, seeds))

    return (f"| {m} | {n} | {len(rs)} | {mean('hv95'):.0f} "
            f"| {_vs_oracle(mean('compute_hv95'), oracle, 'hv95')} | {mean('best'):.0f} "
            f"| {_vs_oracle(mean('compute_best'), oracle, 'best')} | {vs1('hv95')} "
            f"| {vs1('compute_hv95')} | {vs1('best')} | {vs1('compute_best')} |")


def _shared_seeds(by: Mapping[tuple[str, int], Any], methods: Sequence[str]) -> list[int]:
    """The seeds every one of `methods` replayed on a table has (those it holds)."""
    sets = [{s for m2, s in by if m2 == m} for m in methods if any(m2 == m for m2, _ in by)]
    return sorted(set.intersection(*sets)) if sets else []


def _leave_one_out(recs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The default picked on the other tables (lowest mean log ratio to random-full at
    hv95, on the seeds every candidate has there: more seeds of one method do not move the
    choice), reported on the held-out one (all the pick's seeds)."""
    by = _by_table(recs)
    if len(by) < 2:
        return []
    lines = ["## Leave one out (start points off)", "",
             "For each table, the candidate with the lowest mean log hv95 ratio to random-full "
             "on the other tables, and its figures on the held-out one (target: upper end < "
             "0.5 vs random-full; < 0.8 vs random-asha on two tables).", "",
             "| held out | picked | hv95 vs random-full | hv95 vs random-asha | < 0.5x random-full "
             "| < 0.8x random-asha |",
             "|---|---|---|---|---|---|"]
    for held in by:
        scores = {}
        for m in CANDIDATES:
            logs = []
            for t, recs_t in by.items():
                seeds = _shared_seeds(recs_t, (*CANDIDATES, "random-full"))
                r = ratio(recs_t, m, "random-full", "hv95", seeds) if t != held else None
                if r is not None and r[0] > 0:
                    logs.append(math.log(r[0]))
            if logs and len(logs) == len(by) - 1:  # replayed on every other table
                scores[m] = statistics.fmean(logs)
        if not scores:
            continue
        pick = min(scores, key=lambda m: scores[m])
        seeds = sorted({s for _, s in by[held]})
        full = ratio(by[held], pick, "random-full", "hv95", seeds)
        same = ratio(by[held], pick, "random-asha", "hv95", seeds)
        lines.append(f"| {held} | {pick} | {_fmt_ratio(full)} | {_fmt_ratio(same)} "
                     f"| {_met(full, 0.5)} | {_met(same, 0.8)} |")
    return lines + ["", "A target is met when the interval's upper end is below it (`no`: "
                    "not met; the ratios count a search that never reached hv95 at its "
                    "budget as reaching it there: a censored method makes its ratio a lower "
                    "bound, a censored baseline an upper bound).", ""]


CAVEATS = """## How to read this, and what is not here

* The quality axis of HV starts at the table's worst seed-0 row, so a search's first decent
  trial already holds 70-80% of the reference HV (the figure): hv90/95 separate methods
  little, hv99 and `best` more.
* A proposal is snapped to the nearest trained row (about 300 per table here; earlier runs
  on the tables at about 160 and about 80 rows, the latter with the prior, cost-aware TPE
  and plain TPE beside, are in the git history at fbf29c6); a repeat of a row is charged
  as a new trial at another training seed. Replay seed k seeds its sampler 1000 + k (the
  tables' rows were drawn at seed 0; the earlier runs used k, so their seed 0 of a random
  method retraced the rows).
* Censoring: a search that does not reach a target within the budget (320 median trials
  of the table, `BUDGET_TRIALS`) counts at the budget. At 80, the budget before ef42e9b,
  random search at full fidelity, the baseline of every ratio, reached hv95 in 4 of 8
  seeds on flights, 2 of 8 on MovieLens and 1 of 8 on BBC News, so the ratios to it were
  upper bounds (those replays: git history at fbf29c6; ehvi-front's hv95
  there: 0.41 [0.29, 0.58] flights, 0.27 [0.18, 0.44] MovieLens, 0.57 [0.44, 0.76] default,
  0.74 [0.55, 0.91] BBC News). At 320 random-full reaches it in every seed but one on BBC
  News (start points off), so the ratios to random-full are nearly uncensored. With 300
  rows a long replay repeats rows often (`repeats`): a repeat draws the row at another
  training seed, so the spread between seeds stands in for new configs late in a replay.
* The tables' validation read the earliest rows of a split (README, "Validation order"):
  the replay measures a search against the objective the table holds. Live searches
  (live.py, live_time_budget.py) run today's code.
* Live searches of the default table (search_live_vs_replay.md, start points off, 5 seeds,
  load 1.0-1.6): today's `ehvi` (06f198e, against the 301-row table) reached hv95 on 5 of 5
  after 9.8 +- 3.4 trials (the replay, 50 seeds: 6.9 +- 2.5), at 34 s on the replay's clock
  (the replay: 28 s), and hv99 on 5 of 5 after 14 trials (the replay: 48 of 50, after 52).
  Live random search at full fidelity (`live.py --sampler random --trials 60`, 39710fe, the
  same seeds) gives the live ratio: `ehvi` reached hv95 in 0.32x [0.21, 0.57] of its
  compute on the replay's clock (the replay on those seeds: 0.41x [0.30, 0.67]); 2 of the 5
  random searches fell short of hv95 in 60 trials and count at their last, so the live
  ratio is an upper bound. The same `ehvi` seeds run before under load 4-5 (02cc6ba and
  eda5873; git history at fbf29c6) took the same 9.8 trials and 46 s.
  Before its spread start-up (the 81-row table) `ehvi` reached hv95 after 11 trials (the
  replay: 10).
  `tpe-mix` reached hv95 on 2 of 5 within 40 trials (the replay: 17 of 20): the replay
  flattered it.
* Seeds: `random-full`, `random-asha` and `ehvi-front` (start points off) hold 50 seeds on
  the default table and BBC News and 24 on MovieLens and flights, every other method 8 (the
  `seeds` column). They were added in steps, each after the intervals before it were read:
  the default table's interval was 0.42 [0.33, 0.58] at 8 seeds and 0.42 [0.33, 0.54] at
  24 (seeds 0-23), both straddling the target; seeds 24-49 alone give 0.25 [0.20, 0.34],
  all 50 0.32 [0.26, 0.39]. Random search's time to hv95 is heavy-tailed (17 to 290 s on
  this table; mean 71 s on seeds 0-23, 107 s on seeds 24-49; seeds 8-13 replayed again at
  9b85a47 gave their stored times within 0.1 s), so its mean moved more with the new seeds
  than `ehvi`'s did (30 s and 27 s). Adding seeds until an interval clears a target raises
  the chance of a false `yes`: the issue names 50 seeds, and every seed run is here. A
  ratio pairs the seeds both methods hold; the leave-one-out chooses on the seeds every
  candidate holds (0-7).
* Imports: since eda5873 a replay imports what `ehvi`'s first ask needs before its clock
  starts, as a search does while Ray starts (`study.warm_sampler`, in the per-search
  overhead). Before, the first `ehvi` replay in a process paid it (about 3 s of thread time
  under load): of the rows here, `ehvi-front` seeds 0 and 8 of the default table were
  replayed again after it (27.0 -> 26.1 s and 34.7 -> 32.3 s to hv95); other first-in-
  process rows (a `-rs-`/`-q1-` variant's seed 0, MovieLens `ehvi-front` seed 8) keep it,
  1-5% of their time to hv95.
* The front rule (`-front`, and `ehvi-asha`, `tpe-mix-*-asha`) counts, since 3e6b99b, the
  best evaluation a trial keeps (validation selection, the real-data tables): before, a
  curve that peaked and then overfit was stopped for its decline and its best lost (the
  replays before it: git history at fbf29c6). Every replay of flights,
  MovieLens and the default table here ran after it, at 320 (commits from ef42e9b on). On
  BBC News `ehvi-front` and `ehvi-asha` with start points off were replayed after it; its
  start-points-on rows and `tpe-mix-front` are from before it.
* `ehvi-front` (the default) ran at da0e799, start points off and on: `ehvi` with 5
  start-up proposals spread over the memory axis. `ehvi-rs-front` and `ehvi-rs-asha` are
  `ehvi` before it (8 random start-up proposals), replayed then as `ehvi-front` and
  `ehvi-asha`; `ehvi-q1-front` is today's with one quality turn in each run of 4. The
  spread start-up and its 5 proposals were chosen on a scratch replay of the four tables
  (8 seeds, the budget cut at random-full's slowest hv95; not a results file): hv95 /
  random-full with 5 spread proposals 0.42 / 0.10 / 0.25 / 0.18 (default, MovieLens,
  flights, BBC News), with 8 spread 0.49 / 0.10 / 0.25 / 0.34, with 8 random 0.56 / 0.15 /
  0.23 / 0.39; 3, 4 and 6 spread on the default table 0.41 / 0.42 / 0.51, 4 and 6 on BBC
  News 0.25 / 0.27. Each table left out, the other three pick 5 spread. The spread
  start-up reaches the single best quality (`best`) later on the default table and
  MovieLens, sooner on flights (the tables above): the hypervolume rewards the front's
  memory range, and a quality turn (`ehvi-q1-front`) gives some of that back.
* BBC News's `random-asha`, `tpe-*`, `st-moasha*` and FLAML rows ran before 81994d6 and
  67539de, which made `ehvi`'s asks and MO-ASHA's tie-break cheaper (the same proposals,
  less decision time on the clock; on flights an `ehvi` replay charged 30 s of decisions
  before and 22 s after): there they charge the older, larger decision time, as do
  `ehvi-rs-*` on BBC News. b6bd7ff made the tie-break cheaper again (5 ms against 12 ms
  on a 31-member front). `st-moasha` as shipped was not replayed at 320 on flights,
  MovieLens and the default table (at 80 it was 1.1-1.7x random; that report is in the
  git history at fbf29c6).
* `ehvi` prices 128 candidates and fits two tree ensembles an ask: its decision time (0.1 to
  0.3 s of thread time an ask) is on the clock, as every method's is.
* `ehvi`'s other constants (128 candidates, every 4th proposal random, 64 trees) were set
  before any replay and not changed after; the leave-one-out above picks among the
  methods replayed here.
* Peers (`peers.py`, README "The peers"): syne-tune's MOASHA with random proposals
  (`st-moasha` as shipped, `st-moasha-rankfix` with its rank bug fixed), FLAML's CFO on
  validation quality alone (`flaml-cfo`: a single-objective user's setup, memory only
  through the budget rule) or on quality - 0.01 log10(memory) (`flaml-cfo-scal`), and
  BlendSearch (`flaml-bs`), DEHB on validation quality (`dehb`: config and fidelity from its
  ask/tell, fidelity a share of the trial's length, 1/9 to 1, eta 3) or on the same
  scalarization (`dehb-scal`); Optuna's own `GPSampler` (`optuna-gp`) and multivariate
  `TPESampler` (`optuna-tpe`) with Optuna's defaults, on the search's objectives with the
  budget as Optuna's constraint (the engine's `Trial.set_constraint`); each record's `note`
  says how it was set up; optuna-integration's `BoTorchSampler` with BoTorch's qNEHVI
  (`optuna-botorch`) the same way.
* Workers (the "Workers" sections): the driver is one thread that asks, prices, tells and
  logs each trial (0.38 s of MLflow and Optuna storage a trial besides the ask); a worker
  spends Ray's 0.225 s and the trial's seconds. With N workers the budget caps the compute.
"""


def _met(r: tuple[float, float, float] | None, bound: float) -> str:
    return "n/a" if r is None else ("yes" if r[2] < bound else "no")


def figure(path: Path = JSONL, out: Path = RESULTS / "search_efficiency_replay.png") -> None:
    """Anytime curves: the median HV fraction over seeds against compute, per table (one
    worker's replays; where none, those of the fewest workers, on their wall-clock)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in _records(path) if not r["start_points"]]
    fewest = min((_workers(r) for r in recs), default=1)
    by = _by_table([r for r in recs if _workers(r) == fewest])
    if not by:
        return
    fig, axes = plt.subplots(1, len(by), figsize=(4.2 * len(by), 3.4), squeeze=False)
    for ax, (table, rs) in zip(axes[0], by.items(), strict=True):
        budget = next(iter(rs.values()))["budget_s"]
        grid = [budget * k / 100 for k in range(101)]
        for m in FIGURE_METHODS:
            curves = [r["curve"] for (mm, _), r in rs.items() if mm == m]
            if not curves:
                continue
            med = [statistics.median(_frac_at(c, x) for c in curves) for x in grid]
            ax.plot(grid, med, label=m, linestyle="--" if m in PEER_METHODS else "-")
        ax.set_title(table if fewest == 1 else f"{table}, {fewest} workers")
        ax.set_xlabel("compute (CPU s)" if fewest == 1 else "wall-clock (s)")
        ax.set_ylim(0, 1.02)
    axes[0][0].set_ylabel("HV / reference (median over seeds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def _frac_at(curve: Sequence[Sequence[float]], x: float) -> float:
    got = 0.0
    for t, f in curve:
        if t > x:
            break
        got = f
    return got


def _header(path: Path) -> dict[str, Any] | None:
    """The first record of `path` when it is a table's header."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            first = json.loads(f.readline() or "null")
    except (OSError, EOFError, ValueError, zlib.error):
        return None
    return first if isinstance(first, dict) and first.get("kind") == "table" else None


def _same_data(header: Mapping[str, Any], spec: Any) -> bool:
    """Whether a table was made from `spec`'s data: a file by its sha256, a built-in by
    name (tables made before `data_identity` name it in `data`), with the same options."""
    ident = header.get("data_identity")
    if ident is None:
        return not spec.is_file and header.get("data") == spec.name
    mine = data_identity(spec)
    return ident["sha256"] == mine["sha256"] and ident.get("options") == mine["options"]


def _tables_of_data(args: argparse.Namespace) -> list[str]:
    """The tables `--data` names (those in --tables-dir made from the same bytes and
    options, or the --tables given, checked); ConfigError when there are none."""
    from autoembed.errors import ConfigError
    from autoembed.pipeline.priced_data import given_spec

    spec = given_spec(args.data, args.label, columns(args.categorical), args.text_column)
    if spec.is_file and not Path(spec.name).is_file():
        raise ConfigError(f"--data {args.data}: no such file")
    names = args.tables or sorted(p.name.removesuffix(".jsonl.gz")
                                  for p in args.tables_dir.glob("*.jsonl.gz"))
    found = []
    for name in names:
        header = _header(args.tables_dir / f"{name}.jsonl.gz")
        if header is None:
            continue
        if args.space is not None and header.get("space") != args.space:
            continue
        if _same_data(header, spec):
            found.append(name)
        elif args.tables:
            raise ConfigError(f"--tables {name}: it was not made from --data {args.data} with "
                              "these options (generate.py names them in its header)")
    if not found:
        raise ConfigError(f"--data {args.data}: no table of these data in {args.tables_dir}; "
                          "make one with generate.py --data (the same options)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=None,
                    help=f"default: {' '.join(TABLES)}; with --data, the tables of those data")
    ap.add_argument("--tables-dir", type=Path, default=HERE / "tables")
    ap.add_argument("--data", default=None,
                    help="replay the tables made from these data (a CSV/Parquet file, checked "
                         "by its sha256, or a built-in name), with the options a search takes")
    ap.add_argument("--label", default=None)
    ap.add_argument("--categorical", nargs="+", default=None,
                    help="--data's id columns (user,item or user item)")
    ap.add_argument("--text-column", default=None)
    ap.add_argument("--space", default=None, help="with --data: the tables of this space")
    ap.add_argument("--workers", nargs="+", type=int, default=[1],
                    help="simulated workers: each count replays every method and seed")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--budget-trials", type=int, default=BUDGET_TRIALS, metavar="N",
                    help="each replay's budget: N median full-length trials of its table "
                         f"(default {BUDGET_TRIALS}; replays of a table at another budget "
                         "go to another --jsonl)")
    ap.add_argument("--seed-from", type=int, default=0, help="first seed (split a run)")
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS),
                    metavar="METHOD")
    ap.add_argument("--start-points", action="store_true")
    ap.add_argument("--report", action="store_true", help="write the results only")
    ap.add_argument("--drop", action="store_true",
                    help="first take the replays of --methods on --tables at --workers (and "
                         "--start-points) out of --jsonl, so that they run again")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="FILE",
                    help="add these files of replays (runs of other processes) to --jsonl, "
                         "then write the report")
    ap.add_argument("--jsonl", type=Path, default=None,
                    help="append the replays here (one file per process when several run); "
                         "with --report: report this file (beside it, .md and .png); default "
                         f"{JSONL.relative_to(HERE.parent.parent)}, with --data "
                         "TABLES-DIR/replays-TABLE.jsonl.gz")
    args = ap.parse_args(argv)
    if args.budget_trials < 1:
        ap.error(f"--budget-trials {args.budget_trials}: give at least 1")
    if any(n < 1 for n in args.workers):
        ap.error(f"--workers {' '.join(map(str, args.workers))}: each must be at least 1")
    if args.data is None:
        given = [o for o, v in (("--label", args.label), ("--categorical", args.categorical),
                                ("--text-column", args.text_column), ("--space", args.space))
                 if v is not None]
        if given:
            ap.error(f"{', '.join(given)} describe(s) --data: give --data FILE (or a "
                     "built-in data name)")
        args.tables = list(TABLES) if args.tables is None else args.tables
    else:
        from autoembed.errors import ConfigError

        try:
            args.tables = _tables_of_data(args)
        except ConfigError as e:
            print(f"compare.py: {e}", file=sys.stderr)
            return 2
    if args.jsonl is None:
        mine = args.data is not None and args.tables
        args.jsonl = args.tables_dir / f"replays-{args.tables[0]}.jsonl.gz" if mine else JSONL
    missing = [t for t in args.tables or ()
               if not (args.tables_dir / f"{t}.jsonl.gz").exists()]
    if args.merge:
        gone = [str(f) for f in args.merge if not f.exists()]
        if gone:
            ap.error(f"--merge {' '.join(gone)}: no such file of replays")
        print(f"merged {merge(args.jsonl, args.merge)} replays into {args.jsonl}")
        args.report = True
    if args.report and not args.jsonl.exists():
        held = sorted(p.name for p in RESULTS.glob("search_efficiency_replay*.jsonl*"))
        ap.error(f"--jsonl {args.jsonl}: no such file of replays; run the replays first, or "
                 f"name one in {RESULTS}: {', '.join(held)}")
    if missing and not args.report:
        ap.error(f"--tables {' '.join(missing)}: no such table in {args.tables_dir}; "
                 f"use the names of its *.jsonl.gz files")
    if not args.report:
        for m in args.methods:
            try:
                needs = METHODS[m].needs
                if needs is not None:
                    peers.require(needs)
            except peers.PeerMissing as e:
                print(f"compare.py: {m}: {e}", file=sys.stderr)
                return 2
        import optuna

        from autoembed.errors import ConfigError

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if args.drop:
            gone = drop(args.jsonl, args.tables, args.methods, args.workers, args.start_points)
            print(f"dropped {gone} replays from {args.jsonl}")
        try:
            run(args.tables, args.tables_dir, range(args.seed_from, args.seeds), args.methods,
                args.start_points, args.jsonl, args.workers, args.data, args.budget_trials)
        except ConfigError as e:  # a table of a data file, without the file or with others
            print(f"compare.py: {e}", file=sys.stderr)
            return 2
        if args.jsonl != JSONL and args.data is None:
            return 0  # merged into JSONL and reported by a later --report
    stem = results_stem(args.jsonl)
    stem.with_suffix(".md").write_text(report(args.jsonl, args.tables_dir))
    figure(args.jsonl, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
