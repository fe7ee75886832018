"""The replay harness (issue 25): a search's REAL sampler, engine and scheduler run against a
replay table instead of training, so 50 seeds of a search take minutes.

    from harness import Replay, Method
    result = Replay(Table.load(path), seed=0).run(Method("random-full", "random"))

What is real and what is looked up:

* The engine (`pipeline.engine.SearchEngine`) with its sampler (`pipeline.study.make_sampler`
  or a method's own), its feasibility rules and its scheduler (`pipeline.scheduler`) run as
  in a search, on an in-memory Optuna study; the clock it reads is the replay's.
* A proposal is priced for real (`ReplayWorkload.price`: the table's workload's own pricing,
  `BuiltinWorkload.price`); one over the table's budget is told infeasible by the engine, as
  in a search, and never trained. A fitting one is snapped to the nearest trained row
  (`table.Snapper`, on its Optuna params); the row's memory figures stand in for the
  proposal's, and its trial record (drawn at one of the row's training seeds: a repeat of a
  row draws another seed, without replacement until they run out) for its training.
* `ReplayExecutor` (the seam's Executor protocol) runs trials on `workers` simulated
  workers over a discrete-event clock: each search evaluation of the record (the runner's
  own cadence, `search: true` points of the curve) reaches `engine.observe` at the time it
  would have (the record's `loop_*_s` there plus the search evaluations so far); a stop ends
  the trial there; otherwise `engine.finish` gets the record's result at its total cost.

What the clock charges (`Costs`): every trial's cost from its record (CPU seconds by
default: `time.thread_time` of one torch thread, comparable under load; `basis="wall"`
reads the wall seconds instead), a fixed overhead per launched trial and per search
(Ray, MLflow and Optuna storage: benchmarks/results/overhead.md), and the engine's own
decision time measured with `time.thread_time` around every call into it (ask, pricing,
tell, scheduling), as syne-tune's simulator charges its scheduler's time; the harness's own
work (snapping, look-ups) is measured and taken out. Decisions between trials (ask, price,
tell) move the clock; a decision on a running trial's evaluation overlaps that trial (the
driver decides while the worker trains) and moves the clock only past the trial's own time.

Workers: the driver is one thread. A free worker gets a trial when the driver asks for one
(its decision time and the driver's part of the per-trial charge, MLflow and Optuna
storage, move the clock before the hand-over); the worker then spends its part of the
charge (Ray Tune's: `Costs.per_trial_worker_s`) and the record's seconds; its evaluations and its
end reach the driver in time order, each at max(the clock, its own time). With one worker
`budget_s` is the engine's time budget (the clock); with N it caps the compute charged
(every worker's: `TrialLog.compute`), so each worker count spends the same compute and the
wall-clock is what N buys (the engine's time budget, on the wall-clock, never binds first:
the wall-clock is at most the compute).
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from table import Snapper, Table, check_data_file  # noqa: E402

__all__ = ["Costs", "Method", "Replay", "ReplayExecutor", "ReplayResult", "ReplayWorkload",
           "TrialLog", "table_workload"]

# Per launched trial (benchmarks/results/overhead.md, a 20-trial default search at baef62d
# on an idle machine): Ray Tune 4.50 s, MLflow 4.85 s, Optuna storage 2.67 s in all, 0.60 s
# per trial; per search: imports, Ray start and stop, outputs, driver (8.6 s).
SAMPLER_SEED_OFFSET = 1000  # replay seed k seeds its sampler with 1000 + k
PER_TRIAL_S = 0.60
PER_SEARCH_S = 8.6
# of it, Ray Tune's (4.50 s / 20: the trial's start and reports) is the worker's; MLflow
# and Optuna storage (0.38 s) the driver's
PER_TRIAL_WORKER_S = 0.225


@dataclass(frozen=True)
class Costs:
    """What the clock charges besides the engine's measured decision time."""

    per_trial_s: float = PER_TRIAL_S
    per_search_s: float = PER_SEARCH_S
    basis: str = "cpu"  # the record's CPU seconds ("cpu") or wall seconds ("wall")
    # the part of per_trial_s a worker spends before the trial trains (at most all of it);
    # the rest is the driver's, one trial after another
    per_trial_worker_s: float = PER_TRIAL_WORKER_S

    @property
    def worker_s(self) -> float:
        return min(self.per_trial_worker_s, self.per_trial_s)


@dataclass(frozen=True)
class Method:
    """A search to replay: `sampler` (a `make_sampler` kind, or a function (seed, context)
    -> Optuna sampler), MO-ASHA on or off (`schedule`, with fixed `rungs` or None: from the
    data), the front rule (`front_rule`: `early_stop`'s), start points trained first.
    `scheduler_factory`: another scheduler with `AshaScheduler`'s interface, built as
    factory(objectives, seed) (a peer's, `peers.py`; it replaces `schedule`); `note`: how
    the method is set up, written beside its results."""

    name: str
    sampler: str | Callable[[int, Any], Any] = "random"
    schedule: bool = False
    front_rule: bool = False
    rungs: tuple[float, ...] | None = None
    scheduler_kw: Mapping[str, Any] = field(default_factory=dict)
    scheduler_factory: Callable[[list[tuple[str, str]], int], Any] | None = None
    note: str = ""
    needs: str | None = None  # a peer's package (peers.PEERS: what to pip install)


@dataclass
class TrialLog:
    """One proposal as the replay ran it."""

    number: int
    status: str  # complete | pruned | infeasible | failed
    start: float
    end: float
    row: int | None = None
    seed: int | None = None
    quality: float | None = None  # validation quality at the end (complete trials)
    memory: float | None = None  # allocated_peak of the row (the memory objective)
    steps: int = 0
    cost: float = 0.0  # seconds of the trial itself (fixed overhead excluded)
    distance: float | None = None  # snapping distance
    repeat: bool = False
    # compute charged when it ended: every worker's trial seconds so far (running trials up
    # to now), the fixed charges and every decision (the clock overlaps those a driver makes
    # while a trial trains; this counts them); with one worker about the clock
    compute: float = 0.0


@dataclass
class ReplayResult:
    """A replayed search: its trials in the order they ended, and the clock's accounts."""

    method: str
    seed: int
    trials: list[TrialLog]
    clock_s: float
    decision_s: float
    trial_s: float
    overhead_s: float
    stop_reason: str | None
    rows: tuple[Any, ...] = ()  # the engine's TrialRows, in trial order (what a pick reads)


def table_workload(table: Table, data_file: str | Path | None = None) -> Any:
    """The table's workload for pricing (the search's `BuiltinWorkload` on the table's space
    and data, with its run settings and the baseline the table was made with, so its
    `target` is the search's). A table made from a data file prices on `data_file`, the
    same bytes (`Table.space`)."""
    from autoembed.baselines import Baseline
    from autoembed.pipeline.builtin import BuiltinWorkload

    if table.from_file:
        check_data_file(table.header, data_file)  # ConfigError: none given, or other bytes
    run = {k: v for k, v in table.header.get("run_settings", {}).items()
           if k not in ("device", "threads")}
    raw = table.header.get("baseline")
    return BuiltinWorkload.of(table.space(data_file), run=run,
                              given=bool(run.get("fit_to_data")),
                              baseline=Baseline.from_dict(raw) if raw else None)


class ReplayWorkload:
    """The `Workload` a replayed engine sees: the real one's pricing, then snapping (module
    docstring). `harness_s`: thread seconds spent snapping (not the search's)."""

    kind = "builtin"

    def __init__(self, real: Any, table: Table, rng: random.Random) -> None:
        self.real = real
        self.table = table
        self.rng = rng
        self.snapper = Snapper(table)
        self.budget = int(table.header["budget_bytes"])
        self.harness_s = 0.0
        self.drawn: dict[int, list[int]] = {}  # row -> seeds not drawn yet
        self.visits: dict[int, int] = {}

    space = property(lambda self: self.real.space)
    target = property(lambda self: self.real.target)
    stand_in = property(lambda self: self.real.stand_in)
    keeps_best = property(lambda self: self.real.keeps_best)
    use_measured = False

    def trains(self, values: Mapping[str, Any], priced: Any) -> Any:
        return self.real.trains(values, priced)

    def price(self, values: Mapping[str, Any]) -> Any:
        from autoembed.pipeline.workload import Invalid, Launch, Priced

        priced = self.real.price(values)
        if isinstance(priced, Invalid) or priced.estimate.device_total > self.budget:
            return priced
        t0 = time.thread_time()
        row, distance = self.snapper.nearest(self.space.optuna_params(values))
        figures = {k: int(v) for k, v in self.table.rows[row]["estimate"].items()
                   if k in _FIGURES}
        estimate = dataclasses.replace(priced.estimate, **figures)
        self.harness_s += time.thread_time() - t0

        def launch(number: int) -> Any:
            del number
            t1 = time.thread_time()
            seed, repeat = self._draw(row)
            rec = self.table.trials[(row, seed)]
            self.harness_s += time.thread_time() - t1
            return Launch({"row": row, "seed": seed, "distance": distance, "repeat": repeat},
                          0, (int(rec["max_steps"]), int(rec["search_eval_every"])))

        return Priced(priced.config, estimate, launch)

    def _draw(self, row: int) -> tuple[int, bool]:
        """A training seed of `row`: without replacement until they run out, then with."""
        repeat = row in self.visits
        self.visits[row] = self.visits.get(row, 0) + 1
        left = self.drawn.setdefault(row, [])
        if not left:
            left.extend(self.table.seeds(row))
            self.rng.shuffle(left)
        return left.pop(), repeat


_FIGURES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries",
            "allocated_peak", "reserved_peak", "overhead", "device_total")


@dataclass
class _Running:
    number: int
    start: float  # when the driver handed it to a worker; it trains from start + lead
    row: int
    seed: int
    reports: list[tuple[float, dict[str, Any]]]  # (offset s, evaluation report)
    total: float
    distance: float
    repeat: bool
    lead: float = 0.0  # the worker's part of the per-trial charge
    next: int = 0


class ReplayExecutor:
    """The seam's Executor over a discrete-event clock (module docstring)."""

    kind = "replay"

    def __init__(self, table: Table, workload: ReplayWorkload, costs: Costs, workers: int,
                 clock: list[float], compute_budget_s: float | None = None) -> None:
        self.table = table
        self.workload = workload
        self.costs = costs
        self.workers = workers
        self.clock = clock  # [now]: shared with the engine's clock function
        # no trial starts once this much compute is charged (None: the engine's budget only)
        self.compute_budget_s = compute_budget_s
        self.log: list[TrialLog] = []
        self._running: dict[int, _Running] = {}
        self.decision_s = 0.0
        self.trial_s = 0.0
        self.overhead_s = 0.0

    def __enter__(self) -> ReplayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def session(self) -> tuple[str | None, int | None]:
        return None, None

    def place(self, plan: Any) -> Any:
        return plan

    def _timed(self, call: Callable[[], Any]) -> Any:
        """Run a call into the engine and charge its thread time (the harness's own work
        inside it taken out)."""
        before = self.workload.harness_s
        t0 = time.thread_time()
        out = call()
        spent = time.thread_time() - t0 - (self.workload.harness_s - before)
        self.decision_s += spent
        self.clock[0] += spent
        return out

    def run(self, engine: Any, plan: Any = None) -> None:
        del plan
        self.clock[0] += self.costs.per_search_s
        self.overhead_s += self.costs.per_search_s
        running: dict[int, _Running] = {}
        self._running = running
        logged = set(engine.rows)
        exhausted = False
        while True:
            while not exhausted and len(running) < self.workers:
                if self.compute_budget_s is not None and self.compute() >= self.compute_budget_s:
                    exhausted = True
                    break
                p = self._timed(engine.propose)
                self._log_rejected(engine, logged)
                if p is None:
                    exhausted = True
                    break
                running[p.number] = self._start(p)
            if not running:
                return
            number, at = min(((n, r.start + self._next_offset(r)) for n, r in running.items()),
                             key=lambda x: (x[1], x[0]))
            self.clock[0] = max(self.clock[0], at)
            self._advance(engine, running, number, logged)

    def _start(self, p: Any) -> _Running:
        rec = self.table.trials[(p.payload["row"], p.payload["seed"])]
        lead = self.costs.worker_s
        self.clock[0] += self.costs.per_trial_s - lead  # the driver's part
        self.overhead_s += self.costs.per_trial_s
        return _Running(p.number, self.clock[0], p.payload["row"], p.payload["seed"],
                        _reports(rec, self.costs.basis), _total(rec, self.costs.basis),
                        p.payload["distance"], p.payload["repeat"], lead)

    def _next_offset(self, r: _Running) -> float:
        """Seconds from the hand-over to the trial's next event (evaluation or end)."""
        return r.lead + (r.reports[r.next][0] if r.next < len(r.reports) else r.total)

    def _advance(self, engine: Any, running: dict[int, _Running], number: int,
                 logged: set[int]) -> None:
        r = running[number]
        if r.next < len(r.reports):
            offset, report = r.reports[r.next]
            r.next += 1
            if not self._timed(lambda: engine.observe(number, report)):
                return
            running.pop(number)
            self.trial_s += offset
            self._timed(lambda: engine.finish(number, None))
            self._log(engine, r, offset, int(report["step"]), logged)
            return
        running.pop(number)
        self.trial_s += r.total
        rec = self.table.trials[(r.row, r.seed)]
        final = _final(rec, engine.live[number].proposal)
        self._timed(lambda: engine.finish(number, final))
        self._log(engine, r, r.total, int(rec.get("steps") or 0), logged)

    def _log(self, engine: Any, r: _Running, cost: float, steps: int,
             logged: set[int]) -> None:
        row = engine.rows[r.number]
        status = row.status
        quality = row.metrics.get("quality") if status == "complete" else None
        memory = float(self.table.rows[r.row]["estimate"]["allocated_peak"])
        self.log.append(TrialLog(r.number, status, r.start, self.clock[0], r.row, r.seed,
                                 quality, memory, steps, cost, r.distance, r.repeat,
                                 self.compute()))
        logged.add(r.number)

    def compute(self) -> float:
        """Compute charged so far (TrialLog.compute): trials ended, the running ones up to
        the clock (at most their whole cost: a trial whose end the driver has not reached
        yet trains no further), the fixed charges and the decisions."""
        running = sum(min(max(0.0, self.clock[0] - r.start - r.lead), r.total)
                      for r in self._running.values())
        return self.decision_s + self.overhead_s + self.trial_s + running

    def _log_rejected(self, engine: Any, logged: set[int]) -> None:
        """Proposals the engine rejected (over the budget, invalid) since the last call."""
        for n, row in engine.rows.items():
            if n not in logged and row.status in ("infeasible", "failed"):
                self.log.append(TrialLog(n, row.status, self.clock[0], self.clock[0],
                                         compute=self.compute()))
                logged.add(n)


def _reports(rec: Mapping[str, Any], basis: str) -> list[tuple[float, dict[str, Any]]]:
    """The search's evaluations of a trial record: (offset s, the report the runner sends),
    each at the loop's seconds there plus the search evaluations before and at it."""
    points = [p for p in rec["curve"] if p.get("search")]
    evals = float(rec["cost"][f"search_evals_{basis}_s"])
    each = evals / len(points) if points else 0.0
    out = []
    for k, p in enumerate(points, 1):
        offset = float(p[f"loop_{basis}_s"]) + k * each
        out.append((offset, {"quality": float(p["quality"]), "step": int(p["step"]),
                             "samples": int(p["samples"]), "elapsed_s": offset}))
    # the last evaluation is the trial's end: nothing left to decide there
    return [(o, r) for o, r in out if r["step"] < int(rec["max_steps"])]


def _total(rec: Mapping[str, Any], basis: str) -> float:
    return float(rec["cost"][f"total_{basis}_s"])


def _final(rec: Mapping[str, Any], proposal: Any) -> dict[str, Any]:
    """The final report a trial of `rec` sends (`workload.final_report` of its result)."""
    from autoembed.trial import Evaluation, TrialResult

    curve = tuple(Evaluation(int(p["step"]), int(p["samples"]), float(p["quality"]),
                             dict(p.get("metrics") or {}), float(p["loop_cpu_s"]))
                  for p in rec["curve"] if p.get("search"))
    result = TrialResult(
        status=str(rec["status"]), config=proposal.config,
        test_quality=rec.get("test_quality"), valid_quality=rec.get("valid_quality"),
        metrics=dict(rec.get("metrics") or {}), curve=curve, steps=int(rec.get("steps") or 0),
        samples=int(rec.get("samples") or 0), throughput=rec.get("throughput"),
        best_step=rec.get("best_step"), latency_ms=dict(rec.get("latency_ms") or {}),
        serving_bytes=rec.get("serving_bytes"), estimate=proposal.estimate.to_dict(),
        error=rec.get("error"), train_seconds=float(rec["cost"]["steps_cpu_s"]),
        wall_seconds=float(rec["cost"]["total_cpu_s"]))
    return {"status": result.status, "result": result.to_dict(), "error": result.error,
            "valid_scores": None}


class Replay:
    """One table, replayed (module docstring): `run(method)` for a seed."""

    def __init__(self, table: Table, *, seed: int = 0, workers: int = 1,
                 costs: Costs | None = None, start_points: bool = False,
                 budget_s: float | None = None, real: Any = None) -> None:
        self.table = table
        self.seed = seed
        self.workers = workers
        self.costs = costs or Costs()
        self.start_points = start_points
        self.budget_s = budget_s
        self.real = real if real is not None else table_workload(table)

    def start(self) -> list[dict[str, Any]]:
        """The start points' Optuna params (the table's start rows, trained first)."""
        return [dict(r["params"]) for r in self.table.rows.values()
                if r.get("source") == "start" and r.get("fits")]

    def run(self, method: Method) -> ReplayResult:
        import optuna

        from autoembed.budget import Budget
        from autoembed.pipeline.engine import SearchEngine, SearchSettings
        from autoembed.pipeline.scheduler import AshaScheduler
        from autoembed.pipeline.study import import_sampler, make_sampler

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # before the clock starts, as a search imports it while Ray starts (study.warm_sampler:
        # in the per-search overhead); else only a process's first replay would pay it
        import_sampler("ehvi")
        objectives = [tuple(o) for o in self.table.header["objectives"]]
        rng = random.Random(f"{self.table.header['name']}/{self.seed}")
        workload = ReplayWorkload(self.real, self.table, rng)
        # not the table's own sampling seed: at replay seed 0 a random search would retrace
        # the rows in the order the generator drew them (generate.SAMPLE_SEED = 0)
        seed = SAMPLER_SEED_OFFSET + self.seed
        sampler = (make_sampler(method.sampler, seed) if isinstance(method.sampler, str)
                   else method.sampler(seed, workload))
        study = optuna.create_study(
            directions=[d for _, d in objectives], sampler=sampler,
            storage=optuna.storages.InMemoryStorage())
        clock = [0.0]
        if method.scheduler_factory is not None:
            scheduler = method.scheduler_factory(objectives, seed)
        else:
            scheduler = (AshaScheduler(objectives, rungs=method.rungs, **method.scheduler_kw)
                         if method.schedule else None)
        engine = SearchEngine(study, SearchSettings(
            workload=workload,  # type: ignore[arg-type]
            budget=Budget.of(int(self.table.header["budget_bytes"])),
            objectives=objectives, trials=10**9, time_budget_s=self.budget_s,
            start=self.start() if self.start_points else (), early_stop=method.front_rule),
            clock=lambda: clock[0], scheduler=scheduler)
        engine.started = 0.0
        # with several workers the clock is wall-clock and `budget_s` caps the compute
        # (every worker's), so that each worker count spends the same compute
        executor = ReplayExecutor(self.table, workload, self.costs, self.workers, clock,
                                  self.budget_s if self.workers > 1 else None)
        executor.run(engine)
        return ReplayResult(method.name, self.seed, executor.log, clock[0],
                            executor.decision_s, executor.trial_s, executor.overhead_s,
                            engine.stop_reason,
                            tuple(engine.rows[n] for n in sorted(engine.rows)))
