"""Search overhead: the share of a default search's wall time spent outside the trainables'
training steps (Ray start and Tune's scheduling, Optuna ask/tell, pricing, MLflow logging,
evaluation, writing outputs), per trial and in total.

The search is `autoembed search --budget 8GB` with every default (default.yaml, the default
sampler, seed 0, 20 trials, early stopping on, MLflow on an embedded SQLite store in a
temporary runs dir), called through the Python API. Nothing in the library is changed to measure it:

* in the driver, the functions of each stage are wrapped with timers that attribute time
  to the innermost running stage (exclusive time), so Optuna's share excludes the pricing
  and MLflow calls it makes;
* in the trials, `TrialResult` records `train_seconds` (the optimizer steps: forward,
  backward, update), `data_seconds` (fetching training batches) and `eval_seconds`
  (validation, test and latency); the rest of `wall_seconds` is building the model and
  loading the data in the worker;
* the "Ray start and shutdown" stage holds `ray.init` and `ray.shutdown` (in the driver's
  thread, after the report: a background stop raced the driver's Ray objects). Ray
  prestarts no idle worker (`search.ray_tune`): the first trial's
  "Ray" time includes starting its worker process;
* per trial, "Ray" is the time between the driver handing Tune the proposal and Tune
  handing back the result, less the trial's own `wall_seconds`: scheduling, the worker,
  reporting. Trials stopped early by the scheduler have no final result: their optimizer
  and wall seconds are their last evaluation's (the row's `train_seconds`, `wall_seconds`);
* CPU seconds, which load on a shared machine inflates far less than wall seconds: the
  driver process's (`getrusage`: imports, Ray's driver side, Tune, Optuna, MLflow,
  outputs), the trials' (`cpu_seconds` of each row) and their optimizer steps'
  (`train_cpu_seconds`; a trial stopped early: its steps' wall seconds). Ray's own daemons
  (GCS, raylet) are not counted.

    python benchmarks/overhead.py [--trials 20] [--quick]

Writes benchmarks/results/overhead.md: the headline figures (per completed trial, the median
share of its time outside its optimizer steps; the whole search's share outside them; the
fixed start-up), the ratio of each per-trial component to the steps, and how every figure
moved against the results file it replaces (read before it is overwritten).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, markdown_table, write_result  # noqa: E402

BUDGET = "8GB"  # the CLI example's budget (README)

# Driver stages, in report order.
STAGES = ("imports", "ray start/stop", "optuna", "pricing", "mlflow", "outputs", "tune")


@dataclass
class StageTimer:
    """Exclusive wall time per stage: a call's time goes to the innermost wrapped call
    running in the same thread. Also keeps each call's inclusive time (per-trial views)."""

    clock: Callable[[], float] = time.perf_counter
    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: list[tuple[str, str, float, float, Any, Any]] = field(default_factory=list)
    _local: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _stack(self) -> list[list[Any]]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        stack: list[list[Any]] = self._local.stack
        return stack

    def wrap(self, stage: str, fn: Callable[..., Any], name: str = "") -> Callable[..., Any]:
        label = name or getattr(fn, "__name__", stage)

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            stack = self._stack()
            t0 = self.clock()
            if stack:
                with self._lock:
                    self.totals[stack[-1][0]] += t0 - stack[-1][1]
            stack.append([stage, t0])
            out = None
            try:
                out = fn(*args, **kwargs)
                return out
            finally:
                t1 = self.clock()
                _, seg = stack.pop()
                with self._lock:
                    self.totals[stage] += t1 - seg
                    self.calls.append((stage, label, t0, t1, args, out))
                if stack:
                    stack[-1][1] = t1

        return inner


def instrument(timer: StageTimer) -> None:
    """Wrap the driver's stage functions in place (this process only)."""
    import autoembed.pipeline.engine as engine
    import autoembed.pipeline.outputs as outputs
    import autoembed.pipeline.ray_tune as ray_tune
    import autoembed.pipeline.study as study
    import autoembed.trace
    import autoembed.tracking as tracking

    est = timer.wrap("pricing", autoembed.trace.estimate, "estimate")
    autoembed.trace.estimate = est
    engine.estimate = est
    se = engine.SearchEngine
    for meth in ("propose", "finish", "observe"):
        setattr(se, meth, timer.wrap("optuna", getattr(se, meth), meth))
    for fn in ("open_storage", "find_study", "recover", "load_rows"):
        setattr(study, fn, timer.wrap("optuna", getattr(study, fn), fn))
    rs = ray_tune.ray_session
    for meth, label in (("__enter__", "ray.init"), ("__exit__", "ray.shutdown")):
        setattr(rs, meth, timer.wrap("ray start/stop", getattr(rs, meth), label))
    ray_tune.run_tune = timer.wrap("tune", ray_tune.run_tune, "run_tune")
    for fn in ("write_trials_csv", "write_pareto_png", "write_best_yaml", "write_pareto_json"):
        setattr(outputs, fn, timer.wrap("outputs", getattr(outputs, fn), fn))
    tracking.make_tracker = timer.wrap("mlflow", tracking.make_tracker, "make_tracker")


class TimedTracker:
    """Forwards every tracker call, timed as MLflow."""

    def __init__(self, inner: Any, timer: StageTimer) -> None:
        for m in ("start", "trial", "trials", "recorded", "finish", "close"):
            if hasattr(inner, m):
                setattr(self, m, timer.wrap("mlflow", getattr(inner, m), f"tracker.{m}"))


def per_trial(timer: StageTimer, rows: Any) -> list[dict[str, Any]]:
    """Driver time and in-flight span per launched trial, joined with its result."""
    proposed: dict[int, float] = {}
    driver_s: dict[int, float] = defaultdict(float)
    finished: dict[int, float] = {}
    for stage, label, t0, t1, args, out in sorted(timer.calls, key=lambda c: c[2]):
        if stage != "optuna":
            continue
        if label == "propose" and out is not None:
            proposed[out.number] = t1
            driver_s[out.number] += t1 - t0
        elif label == "finish":
            number = int(args[1])
            finished[number] = t0
            driver_s[number] += t1 - t0
    out_rows = []
    for r in rows:
        if r.number not in proposed:
            continue  # infeasible: priced inside the next trial's propose
        span = finished.get(r.number, proposed[r.number]) - proposed[r.number]
        res = r.result
        d: dict[str, Any] = {"trial": r.number, "status": r.status, "span": span,
                             "driver": driver_s[r.number],
                             "cpu": float(r.metrics.get("cpu_seconds") or 0.0)}
        if res is not None:
            d.update(steps=res.steps, train=res.train_seconds, data=res.data_seconds,
                     eval=res.eval_seconds, train_cpu=res.train_cpu_seconds,
                     setup=res.wall_seconds - res.train_seconds - res.data_seconds
                     - res.eval_seconds, wall=res.wall_seconds,
                     ray=span - res.wall_seconds)
        else:  # stopped early: its steps' seconds up to its last evaluation
            d.update(steps=int(r.metrics.get("steps") or 0),
                     loop=float(r.metrics.get("train_seconds") or 0.0),
                     train_cpu=float(r.metrics.get("train_seconds") or 0.0))
        out_rows.append(d)
    return out_rows


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def by_call(timer: StageTimer) -> list[list[str]]:
    """Calls of the driver's stages, by function: count and inclusive seconds."""
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for stage, label, t0, t1, _, _ in timer.calls:
        seconds[stage, label] += t1 - t0
        count[stage, label] += 1
    return [[stage, label, str(count[stage, label]), f"{v:.2f}"]
            for (stage, label), v in sorted(seconds.items(), key=lambda kv: -kv[1])]


def run(trials: int | None, runs: Path) -> tuple[float, float, StageTimer, Any]:
    """(wall seconds, CPU seconds, the driver's stage timer, the SearchResult)."""
    timer = StageTimer()
    t0, c0 = time.perf_counter(), cpu_seconds()
    # the search imports these on its first call; timed here as part of its cost
    import autoembed.pipeline.ray_tune  # noqa: F401
    import autoembed.tracking  # noqa: F401

    imports = time.perf_counter() - t0
    timer.totals["imports"] = imports
    instrument(timer)
    from autoembed import search
    from autoembed.tracking import make_tracker

    tracker = TimedTracker(make_tracker(None, runs), timer)
    result = search(budget=BUDGET, runs_dir=runs, study="overhead", trials=trials,
                    tracker=tracker)
    return time.perf_counter() - t0, cpu_seconds() - c0, timer, result


def fmt(v: float | None, nd: int = 2) -> str:
    return "" if v is None else f"{v:.{nd}f}"


def median(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else (ys[mid - 1] + ys[mid]) / 2


# Headline figures (issue 13's targets), by their label in the results file.
PER_TRIAL = "per completed trial, median share outside its optimizer steps"
WHOLE = "whole search, share outside the optimizer steps"
STARTUP = "fixed start-up s (imports, Ray start/stop, outputs, driver other)"
START_PARTS = ("imports (ray, tune, mlflow on first use)", "Ray start and shutdown",
               "outputs (trials.csv, pareto.json/png, best.yaml)",
               "driver, other (space, data, cheapest corner, study setup)")


def trial_share(d: dict[str, Any]) -> float | None:
    """1 - optimizer steps / (in flight + driver) of a completed trial, else None."""
    busy = d["span"] + d["driver"]
    return 1 - d["train"] / busy if "train" in d and busy > 0 else None


def parse_results(text: str) -> dict[str, float]:
    """Figures of a previous overhead.md: each stage's share (%) of the first table, keyed by
    its label, and the headline figures (the per-trial median from its per-trial table)."""
    out: dict[str, float] = {}
    tables = [t for t in re.split(r"\n\s*\n", text) if t.lstrip().startswith("|")]
    if not tables:
        return out
    seconds: dict[str, float] = {}
    for line in tables[0].splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].endswith("%") and not cells[0].startswith("**"):
            out[cells[0]] = float(cells[2].rstrip("%"))
            seconds[cells[0]] = float(cells[1])
    if all(k in seconds for k in START_PARTS):  # files before the start-up figure
        out[STARTUP] = sum(seconds[k] for k in START_PARTS)
    m = re.search(r"Counting only the optimizer steps as useful work, ([0-9.]+)% is outside",
                  text)
    if m:
        out[WHOLE] = float(m.group(1))
    m = re.search(r"fixed start-up ([0-9.]+) s", text)
    if m:
        out[STARTUP] = float(m.group(1))
    shares = [float(m.group(1)) for t in tables[1:] for m in
              [re.search(r"\|\s*complete\s*\|.*/\s*([0-9.]+)%\s*\|\s*$", line)
               for line in t.splitlines()] if m]
    if shares:
        out[PER_TRIAL] = median(shares) or 0.0
    return out


def moved(before: dict[str, float], now: dict[str, float], keys: list[str]) -> str:
    """Before and now of each figure, and the change in percentage points (or seconds)."""
    rows = []
    for k in keys:
        b, n = before.get(k), now.get(k)
        unit = " s" if k == STARTUP else "%"
        rows.append([k, "" if b is None else f"{b:.1f}{unit}", "" if n is None else
                     f"{n:.1f}{unit}", "" if b is None or n is None else f"{n - b:+.1f}"])
    return markdown_table(["figure", "previous results file", "this run", "moved"], rows)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


IDLE_LOAD = 0.5  # the 1-min load average below which this machine counts as idle


def idle_text(*loads: str) -> str:
    """How far from idle the run was, by its 1-min load averages."""
    try:
        worst = max(float(x.split()[0]) for x in loads)
    except (ValueError, IndexError):
        return ""
    if worst < IDLE_LOAD:
        return f" (idle: below {IDLE_LOAD})"
    return (f" (not idle: up to {worst:.1f} against {IDLE_LOAD} for idle, {worst / 2:.1f} "
            "runnable processes per core)")


def commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "n/a"


def main() -> None:
    from autoembed.pipeline.study import DEFAULT_SAMPLER

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=None,
                    help="trained trials (default: the default space's 20)")
    ap.add_argument("--quick", action="store_true", help="3 trials, a smoke run")
    args = ap.parse_args()
    trials = 3 if args.quick else args.trials
    name = "overhead" + ("_quick" if args.quick else "")
    previous = RESULTS / f"{name}.md"
    before = parse_results(previous.read_text()) if previous.is_file() else {}
    load0 = loadavg()
    with tempfile.TemporaryDirectory(prefix="autoembed-overhead-") as tmp:
        total, cpu_total, timer, result = run(trials, Path(tmp))
    load1 = loadavg()
    trows = per_trial(timer, result.rows)
    # time inside the trainables' training steps (the only time that is not overhead)
    train = sum(d.get("train", 0.0) for d in trows)
    data = sum(d.get("data", 0.0) for d in trows)
    evals = sum(d.get("eval", 0.0) for d in trows)
    setup = sum(d.get("setup", 0.0) for d in trows)
    ray_gap = sum(d.get("ray", 0.0) for d in trows)
    pruned_span = sum(d["span"] for d in trows if "wall" not in d)
    pruned_loop = sum((d.get("loop") or 0.0) for d in trows if "wall" not in d)
    t = timer.totals
    tune_rest = t["tune"] - sum(d["span"] for d in trows)
    driver_other = total - sum(t[s] for s in STAGES)
    parts: list[tuple[str, float]] = [
        ("training steps (forward, backward, update) of complete trials", train),
        ("fetching training batches (complete trials)", data),
        ("evaluation: validation, test, latency (complete trials)", evals),
        ("model build and data loading in the trial", setup),
        ("trials stopped early: steps up to the last evaluation", pruned_loop),
        ("trials stopped early: the rest of their time in flight", pruned_span - pruned_loop),
        ("Ray Tune per trial: scheduling, worker, reporting", ray_gap),
        ("Ray Tune otherwise (start of fit, between trials)", tune_rest),
        ("Ray start and shutdown", t["ray start/stop"]),
        ("imports (ray, tune, mlflow on first use)", t["imports"]),
        ("Optuna ask/tell, study storage", t["optuna"]),
        ("pricing (analytic estimates)", t["pricing"]),
        ("MLflow logging (store open, runs, tags, artifacts)", t["mlflow"]),
        ("outputs (trials.csv, pareto.json/png, best.yaml)", t["outputs"]),
        ("driver, other (space, data, cheapest corner, study setup)", driver_other),
    ]
    summary = markdown_table(
        ["where the wall time went", "seconds", "share"],
        [[k, f"{v:.2f}", f"{100 * v / total:.1f}%"] for k, v in parts]
        + [["**total wall time**", f"{total:.2f}", "100%"]],
    )
    # the training loops: optimizer steps and fetching their batches (for trials stopped
    # early, the loop up to their last evaluation, which includes validation)
    inside = train + data + pruned_loop
    outside = total - inside
    outside_steps = total - train - pruned_loop
    startup = sum(v for k, v in parts if k in START_PARTS)
    shares = [x for x in map(trial_share, trows) if x is not None]
    now = {k: 100 * v / total for k, v in parts}
    now[PER_TRIAL] = 100 * (median(shares) or 0.0)
    now[WHOLE] = 100 * outside_steps / total
    now[STARTUP] = startup
    header = ["trial", "status", "steps", "in flight s", "steps s", "batches s", "eval s",
              "build/load s", "Ray s", "driver s", "CPU s", "outside loop / steps"]
    rows = []
    for d in trows:
        busy = d["span"] + d["driver"]
        share = trial_share(d)
        loop_share = (1 - (d["train"] + d["data"]) / busy) if share is not None else None
        rows.append([d["trial"], d["status"], d["steps"], fmt(d["span"]), fmt(d.get("train")),
                     fmt(d.get("data")), fmt(d.get("eval")), fmt(d.get("setup")),
                     fmt(d.get("ray")), fmt(d["driver"], 3), fmt(d["cpu"]),
                     f"{100 * loop_share:.0f}% / {100 * share:.0f}%"
                     if share is not None and loop_share is not None else
                     f"steps {fmt(d.get('loop'))} s of {fmt(d['span'])}"])
    done = [d for d in trows if "train" in d and d["train"] > 0]

    def per_step(key: str) -> str:
        m = median([d[key] / d["train"] for d in done])
        return "n/a" if m is None else f"{m:.2f}"

    counts = {s: result.count(s) for s in ("complete", "pruned", "infeasible", "failed")}
    trial_cpu = sum(d["cpu"] for d in trows)
    steps_cpu = sum(d.get("train_cpu", 0.0) for d in trows)
    all_cpu = cpu_total + trial_cpu
    cpu_text = (
        f"CPU seconds (less inflated by the load than wall seconds): the driver process "
        f"{cpu_total:.1f} s, the trials {trial_cpu:.1f} s, of which their optimizer steps "
        f"{steps_cpu:.1f} s: **{100 * (1 - steps_cpu / all_cpu):.0f}% of the CPU (driver "
        f"and trials) outside the optimizer steps**; the trials' own CPU outside their "
        f"steps {100 * (1 - steps_cpu / trial_cpu):.0f}%; Ray's daemons not counted."
        if trial_cpu > 0 else "CPU seconds: not measured.")
    body = "\n\n".join([
        f"Commit {commit()}; load average (1, 5, 15 min) {load0} at the start, {load1} at "
        f"the end{idle_text(load0, load1)}: other work on this machine inflates the "
        "seconds, read the shares (and the CPU seconds, which load inflates less).",
        f"A default search (`autoembed search --budget {BUDGET}`: default.yaml, the "
        f"`{DEFAULT_SAMPLER}` sampler (its decision time is in the Optuna stage), seed 0, "
        f"{len(trows)} trials launched, early stopping on, MLflow on an embedded SQLite "
        f"store), through the Python API. Counts: {counts}. "
        f"Wall time {total:.1f} s, of which {inside:.1f} s "
        f"({100 * inside / total:.0f}%) inside the trainables' training loops (optimizer "
        f"steps and fetching their batches; for trials stopped early, their steps up to the "
        f"last evaluation) and **{outside:.1f} s ({100 * outside / total:.0f}%) outside**. "
        f"Counting only the optimizer steps as useful work, "
        f"{100 * outside_steps / total:.0f}% is outside.",
        f"Headline (targets: at most 35%, at most 50%, at most 10 s): {PER_TRIAL} "
        f"**{now[PER_TRIAL]:.0f}%**; {WHOLE} **{now[WHOLE]:.0f}%**; fixed start-up "
        f"{startup:.1f} s. Per completed trial (median of the ratio to its optimizer steps' "
        f"seconds): fetching batches {per_step('data')}, evaluation {per_step('eval')}, "
        f"build/load {per_step('setup')}, Ray {per_step('ray')}, driver {per_step('driver')}.",
        cpu_text,
        summary,
        "How it moved against the previous results file (shares of the wall time, "
        "percentage points; start-up in seconds):" if before else
        "No previous results file to compare with.",
        moved(before, now, [PER_TRIAL, WHOLE, STARTUP] + [k for k, _ in parts])
        if before else "",
        "Per launched trial (infeasible proposals are priced inside the next trial's "
        "`propose` and appear in its driver time). 'In flight': from the proposal handed "
        "to Tune to the result handed back; 'Ray': in flight less the trial's own wall "
        "time; 'driver': propose (ask, price, tell the infeasible) + finish (tell, MLflow); "
        "'outside loop / steps': 1 - (steps + batches) / (in flight + driver), and "
        "1 - steps / (in flight + driver).",
        markdown_table(header, rows),
        "The driver's stages by function (inclusive seconds: a call's time includes the "
        "wrapped calls it makes):",
        markdown_table(["stage", "function", "calls", "seconds"], by_call(timer)),
        "Exclusive times: a stage's share excludes the stages it calls (Optuna's "
        "excludes pricing and MLflow). The machine is a shared 2-core CPU, so absolute "
        "seconds vary by ±20% between runs; the shares are the figure to read.",
    ])
    cmd = "python benchmarks/overhead.py" + (" --quick" if args.quick else "")
    write_result(name, "Search overhead: wall time outside the training loops", body, cmd)


if __name__ == "__main__":
    main()
