"""The search's bookkeeping, independent of Ray: ask Optuna, price, reject or launch, tell.

`SearchEngine.propose()` asks the sampler until a proposal fits (or the search is over); the
start points (`space.start`: known-good configs) are enqueued first, grid points instead:
each proposal is priced by its workload (`Workload.price`: the analytic estimate of
autoembed's own model, or the user's model traced) and judged by `Feasibility` (budget,
OOM ceiling, host budget); one that does not fit is told
to Optuna at once as COMPLETE with placeholder values and a violated `memory` constraint,
recorded as `infeasible`, and never reaches a trainable. A proposal of a config the study
has tried already (a re-queued retry aside) is neither priced nor trained again
(`_repeated`: told FAIL, no row); an untried config that fits is queued instead, or, the
space enumerated (`pipeline.untried`) and none left, the search ends: "every fitting config
tried: N" (so too when the sampler raises `SpaceExhausted`). `observe()` decides whether a
running trial stops; `finish()` tells the outcome of a trial that ran. Each launched trial
has a time limit (`pipeline.time_limit`): executors mark it `trial_started()`, end what
`overdue()` lists and say so with `time_out()`; a trial ended that way is `timeout`, told
to Optuna as a diverged one is (COMPLETE with placeholder values and the `runs`
constraint violated, so constrained samplers steer away from it). Every event goes to
one `Recorder` (Optuna attributes, MLflow, calibration.json); the engine writes no store
itself. Executors (`search.executor`, the Ray Tune adapters in `search.ray_tune`) drive it.

Constraints (Optuna: a value <= 0 is feasible): `memory` = (device_total - budget) / budget;
`runs` = 1 when the trial could not produce a result (invalid config, unsupported precision,
diverged), else 0. A real out-of-memory sets `memory` to at least OOM_VIOLATION.

OOM calibration (the documented rule): a trial that ran out of memory although its estimate
fit shows the estimate is too low from that size up. Its predicted device_total becomes a
ceiling: every later proposal whose predicted device_total is at or above the smallest such
ceiling is treated as infeasible (never trains; `memory` constraint > 0; reason names the
trial; `search.feasibility.oom_ceiling_rule`). Each OOM is logged to `calibration.json` in
the study's folder by the recorder's `CalibrationSink` (predicted bytes vs the size that
failed: the measured reserved peak plus overhead on a GPU, else the predicted size) and, as
metrics `oom_predicted_bytes` / `oom_failed_bytes`, on the trial's row and MLflow run. The
ceiling is rebuilt from the study's rows, so it survives a resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autoembed.budget import Budget, MemoryBudget
from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.memory import MemoryEstimate
from autoembed.memory.objective import MEMORY_BASIS, check_basis, memory_value
from autoembed.pipeline.early_stop import Progress, cannot_reach_front
from autoembed.pipeline.feasibility import OOM_VIOLATION, Feasibility, oom_ceiling
from autoembed.pipeline.optuna_space import suggest_values
from autoembed.pipeline.recorder import CalibrationSink, Recorder, Sink, TrackerSink
from autoembed.pipeline.records import (
    TrialRow,
    front_of,
    objective_metrics,
    optuna_values,
    params_key,
)
from autoembed.pipeline.scheduler import RUNGS_ATTR, AshaScheduler, RungPoint
from autoembed.pipeline.time_limit import TrialTimeLimit
from autoembed.pipeline.untried import (
    SpaceExhausted,
    exhausted_reason,
    space_configs,
    untried_fitting,
)
from autoembed.pipeline.workload import Invalid, Workload
from autoembed.selection import ValidScores
from autoembed.trial import AS_WRITTEN, decode_result

if TYPE_CHECKING:
    import optuna

    from autoembed.tracking import SearchTracker

__all__ = ["Proposal", "SearchStatus", "SearchEngine", "OOM_VIOLATION", "Feasibility",
           "MAX_REJECTIONS_IN_A_ROW", "Queued", "ORIGIN_ATTR"]

MAX_REJECTIONS_IN_A_ROW = 300  # proposals over budget in a row before the search gives up

ORIGIN_ATTR = "origin"  # the Optuna user attribute an enqueued trial's origin travels in


@dataclass(frozen=True)
class Queued:
    """A point to train before the sampler's: its Optuna params and who chose it
    (`TrialRow.origin`)."""

    params: Mapping[str, Any]
    origin: str | None = None


def _key(params: Mapping[str, Any], origin: str | None) -> Any:
    """What "already tried" means: the params, and for the model as written its origin too
    (its params are those of a proposal that applies nothing)."""
    return (AS_WRITTEN, params_key(params)) if origin == AS_WRITTEN else params_key(params)


@dataclass(frozen=True)
class Proposal:
    """A feasible proposal, ready to run: its number, the priced config (full-size,
    resolved) and estimate, the trial runner's payload (plain data), the host memory its
    process needs, its length for early stopping (`Launch.length`) and the seconds it may
    run (`time_limit`)."""

    number: int
    config: EmbeddingConfig
    payload: Mapping[str, Any]
    estimate: MemoryEstimate
    host_bytes: int
    length: tuple[int, int] | None = None
    time_limit: float | None = None


@dataclass(frozen=True)
class SearchStatus:
    """Counts and the best so far, for progress displays."""

    trained: int
    target: int
    running: int
    complete: int
    infeasible: int
    pruned: int
    failed: int
    front: int
    best_quality: float | None
    elapsed_s: float
    last: TrialRow | None = None
    message: str | None = None
    budget_bytes: int | None = None  # what each trial's device total is judged against


@dataclass(frozen=True)
class _Outcome:
    """How Optuna is told a trial: COMPLETE with values and constraints, PRUNED or FAIL."""

    state: str  # complete | pruned | fail
    values: Sequence[float] = ()
    memory: float = 0.0  # constraints (Optuna: <= 0 is feasible)
    runs: float = 0.0


@dataclass
class _Live:
    """A launched trial the driver is waiting for."""

    proposal: Proposal
    trial: Any  # optuna.Trial
    ray_trial_id: str | None = None
    evaluations: list[Mapping[str, Any]] = field(default_factory=list)
    concurrency: int = 1
    stopped: bool = False
    cost: _Asked | None = None
    started: float | None = None  # the engine's clock when its executor started it
    timed_out: bool = False  # ended by its executor for running past its time limit
    rungs: list[RungPoint] = field(default_factory=list)  # the scheduler's decisions
    stop_reason: str | None = None  # why the search stopped it (None: the front rule's)


@dataclass(frozen=True)
class _Asked:
    """When a proposal was asked (the engine's clock), and the seconds of its ask (the
    sampler's decision) and of its pricing (price and judge)."""

    at: float
    ask_s: float
    pricing_s: float

    def metrics(self, now: float, train_s: float | None = None) -> dict[str, float]:
        """Its cost columns known to the driver (`trial.COST_COLUMNS`): overhead is the
        seconds from the ask to `now` less `train_s`."""
        return {"ask_seconds": self.ask_s, "pricing_seconds": self.pricing_s,
                "overhead_seconds": now - self.at - (train_s or 0.0)}


class SearchEngine:
    """Ask/price/tell for one study. Not thread-safe: the driver's thread calls it."""

    def __init__(
        self,
        *,
        study: optuna.Study,
        workload: Workload,
        budget: Budget,
        objectives: Sequence[tuple[str, str]],
        trials: int,
        time_budget_s: float | None = None,
        grid: Sequence[Mapping[str, Any]] | None = None,
        start: Sequence[Mapping[str, Any] | Queued] = (),
        early_stop: bool = False,
        host_budget_bytes: Budget | None = None,
        memory_basis: str = MEMORY_BASIS,
        repeatable: bool = False,
        tracker: SearchTracker | None = None,
        progress: Callable[[SearchStatus], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        calibration_path: Path | None = None,
        recorder: Recorder | None = None,
        time_limit: TrialTimeLimit | None = None,
        scheduler: AshaScheduler | None = None,
    ) -> None:
        """`workload`: what is searched (its space, pricing, target; `pipeline.workload`).
        `recorder`: where events go (default: `tracker` and `calibration_path` as its
        sinks); it is caught up with the study's rows here, so that a resumed search's
        sinks hold every trial the study does. `grid`: the only points asked, in order;
        `start`: points asked first (Optuna params, `space.start`), then the sampler's; a
        point some trial of the study already had (a resume) is skipped. `repeatable`: what
        steers proposals and early stops never depends on wall-clock time (`TIMING`
        objectives are told as a constant, a running trial's speed is not projected), so
        the same seed repeats the same trials. `time_limit`: how long a trial may run
        (default: derived, `pipeline.time_limit`). `scheduler`: multi-fidelity stops at
        rungs (`pipeline.scheduler`; rebuilt here from the study's recorded rung points and
        finished trials), beside `early_stop`'s front rule."""
        from autoembed.pipeline.study import load_rows, load_scores

        self.study = study
        self.workload = workload
        self.space = workload.space
        self.budget = budget
        self.objectives = tuple(objectives)
        self.trials = trials
        self.time_budget_s = time_budget_s
        self.early_stop = early_stop
        self.memory_basis = check_basis(memory_basis)  # memory.objective
        self.repeatable = repeatable
        self.time_limit = time_limit or TrialTimeLimit(user=workload.kind == "user")
        self.host_budget = host_budget_bytes  # host_cached tables' host memory (issue 9)
        self.feasibility = Feasibility.for_search(
            MemoryBudget(budget, host_budget_bytes), self.oom_ceiling)
        self.progress = progress
        self.clock = clock
        self.started = clock()
        self.rows: dict[int, TrialRow] = load_rows(study)
        # completed trials' validation predictions for the pick, stored with each trial
        self.valid_scores: dict[int, ValidScores] = load_scores(study)
        self.live: dict[int, _Live] = {}
        self.rejected_in_a_row = 0
        self.trainables_started = 0
        self.stop_reason: str | None = None
        self._grid: list[Mapping[str, Any] | Queued] | None = (
            list(grid) if grid is not None else None)
        self._start: list[Mapping[str, Any] | Queued] = list(start)
        self._seen = {_key(r.params, r.origin) for r in self.rows.values()}
        # configs the study was proposed (an interrupted trial's is re-queued, not tried):
        # a sampler's proposal of one again is never priced or trained again (`_repeated`)
        self._told = {_key(r.params, r.origin) for r in self.rows.values()
                      if not r.interrupted}
        self._enumerated = False  # the space's configs (`_repeated`), enumerated once
        self._configs: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
        self._unfit: set[tuple[tuple[str, str], ...]] = set()
        self._front_cache: list[TrialRow] | None = None
        if recorder is None:
            sinks: list[Sink] = [] if tracker is None else [TrackerSink(tracker)]
            if calibration_path is not None:
                sinks.append(CalibrationSink(calibration_path))
            recorder = Recorder(sinks)
        self.recorder = recorder
        recorder.catch_up(self.rows.values())
        self.scheduler = scheduler
        if scheduler is not None:
            self._restore_rungs(scheduler)
        bind = getattr(getattr(study, "sampler", None), "bind", None)
        if callable(bind):  # a sampler that prices its candidates (pipeline.priced_ehvi)
            from autoembed.pipeline.priced_ehvi import Pricing

            bind(Pricing(price=self.price_candidate,
                         suggest=lambda t: suggest_values(self.space, t),
                         objectives=self.objectives, budget_bytes=float(budget.bytes),
                         repeatable=repeatable, spent=self.spent))

    # ------------------------------------------------------------------ counts
    @property
    def trained(self) -> int:
        return sum(1 for r in self.rows.values() if r.counted) + len(self.live)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows.values() if r.status == status)

    def status(self, last: TrialRow | None = None, message: str | None = None) -> SearchStatus:
        front = self.front()
        qs = [r.metrics.get("quality") for r in front]
        best = max((q for q in qs if q is not None), default=None)
        failed = sum(1 for r in self.rows.values()
                     if r.status in ("failed", "oom", "diverged", "unsupported", "timeout"))
        return SearchStatus(
            trained=self.trained, target=self.trials, running=len(self.live),
            complete=self.count("complete"), infeasible=self.count("infeasible"),
            pruned=self.count("pruned"), failed=failed, front=len(front), best_quality=best,
            elapsed_s=self.clock() - self.started, last=last, message=message,
            budget_bytes=self.budget.bytes,
        )

    def _emit(self, last: TrialRow | None = None, message: str | None = None) -> None:
        if self.progress is not None:
            self.progress(self.status(last, message))

    # ------------------------------------------------------------------ OOM calibration
    def oom_ceiling(self) -> tuple[int, int] | None:
        """(bytes, trial) of the smallest predicted device_total that ran out of memory."""
        return oom_ceiling(self.rows.values())

    # ------------------------------------------------------------------ the front
    def front(self) -> list[TrialRow]:
        """Complete, feasible trials no other such trial dominates (trial order)."""
        if self._front_cache is None:
            self._front_cache = front_of(self.rows.values(), self.objectives)
        return self._front_cache

    def _record(self, row: TrialRow, trial: Any = None,
                outcome: _Outcome | None = None) -> None:
        """Keep `row`, and hand it to the recorder: attributes on `trial` first, then tell
        Optuna `outcome`, then the other sinks."""
        from optuna.trial import TrialState

        self.rows[row.number] = row
        self._front_cache = None

        def tell() -> None:
            assert outcome is not None
            if outcome.state == "complete":
                trial.set_constraint("memory", outcome.memory)
                trial.set_constraint("runs", outcome.runs)
                self.study.tell(trial, list(outcome.values))
            else:
                self.study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned"
                                else TrialState.FAIL)

        self.recorder.record(row, trial, tell if outcome is not None else None)

    def _complete(self, row: TrialRow, *, placeholder: bool, runs: float) -> _Outcome:
        return _Outcome("complete", optuna_values(row.metrics, self.objectives,
                                                  self._memory(row.estimate), placeholder,
                                                  timing=not self.repeatable),
                        row.overshoot, runs)

    def _memory(self, estimate: Mapping[str, Any]) -> float:
        """The priced `memory` objective of a stored estimate (memory.objective)."""
        return memory_value(estimate, self.memory_basis)

    def spent(self) -> float:
        """The share of the search's budget spent: trials trained of its count or seconds of
        its time budget, whichever is further (at most 1)."""
        share = self.trained / self.trials
        if self.time_budget_s:
            share = max(share, (self.clock() - self.started) / self.time_budget_s)
        return min(1.0, share)

    # ------------------------------------------------------------------ proposing
    def _out_of_time(self) -> bool:
        return self.time_budget_s is not None and self.clock() - self.started >= self.time_budget_s

    def done(self) -> bool:
        """Whether no further trial should start (and why, in `stop_reason`)."""
        if self.stop_reason is not None:
            return True
        if self.trained >= self.trials:
            self.stop_reason = f"{self.trials} trials trained"
        elif self._out_of_time():
            self.stop_reason = f"time budget of {self.time_budget_s:g} s reached"
        return self.stop_reason is not None

    def _enqueue_next(self, points: list[Mapping[str, Any] | Queued]) -> bool:
        """Enqueue the first unvisited point of `points` (taken off it; a `Queued` carries
        its origin to the trial); False when none is left."""
        from optuna.trial import TrialState

        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return True  # a re-queued trial goes first
        while points:
            point = points.pop(0)
            params, origin = ((point.params, point.origin) if isinstance(point, Queued)
                              else (point, None))
            if _key(params, origin) not in self._seen:
                self._seen.add(_key(params, origin))
                self.study.enqueue_trial(dict(params), user_attrs={ORIGIN_ATTR: origin}
                                         if origin else None)
                return True
        return False

    def propose(self) -> Proposal | None:
        """The next proposal that fits the budget, or None when the search is over."""
        while True:
            if self.done():
                return None
            if self._grid is not None and not self._enqueue_next(self._grid):
                self.stop_reason = "every grid point was tried"
                return None
            if self._start:
                self._enqueue_next(self._start)
            if self.rejected_in_a_row >= MAX_REJECTIONS_IN_A_ROW:
                self.stop_reason = (
                    f"the sampler proposed {MAX_REJECTIONS_IN_A_ROW} configs in a row that do "
                    "not fit, are invalid or were tried; narrow the space towards cheaper "
                    "configs"
                )
                return None
            proposal = self._ask_one()
            if proposal is not None:
                self.rejected_in_a_row = 0
                return proposal
            self.rejected_in_a_row += 1

    def _ask_one(self) -> Proposal | None:
        from optuna.trial import TrialState

        t0 = self.clock()
        try:
            trial = self.study.ask()
        except SpaceExhausted as e:  # the sampler found nothing untried that fits
            self.study.tell(e.number, state=TrialState.FAIL)
            self.stop_reason = exhausted_reason(self._tried_fitting())
            return None
        t1 = self.clock()
        retry_of = trial.user_attrs.get("retry_of")
        origin = trial.user_attrs.get(ORIGIN_ATTR) or (
            self.rows[retry_of].origin if retry_of in self.rows else None)
        values = self._values(trial, origin)
        key = _key(trial.params, origin)
        if retry_of is None and key in self._told:
            self._repeated(trial)
            return None
        self._told.add(key)
        priced = self._price(trial, values, origin)
        if isinstance(priced, Invalid):
            asked = _Asked(t0, t1 - t0, self.clock() - t1)
            self._reject_invalid(trial, priced, retry_of, asked.metrics(self.clock()), origin)
            return None
        config = priced.config
        params = dict(trial.params)
        self._seen.add(_key(params, origin))
        verdict = self.feasibility.judge(priced.estimate)
        est = priced.estimate.to_dict()
        asked = _Asked(t0, t1 - t0, self.clock() - t1)
        if not verdict.fits:
            row = TrialRow(trial.number, "infeasible", config, est, params,
                           metrics={"device_total": float(priced.estimate.device_total),
                                    **asked.metrics(self.clock())},
                           reason=verdict.reason, overshoot=verdict.overshoot,
                           retry_of=retry_of, origin=origin)
            self._record(row, trial, self._complete(row, placeholder=True, runs=0.0))
            self._emit(row)
            return None
        launch = priced.launch(trial.number)
        walls = [r.metrics.get("wall_seconds") for r in self.rows.values()
                 if r.status == "complete"]
        limit = self.time_limit.for_trial(launch.length[0] if launch.length else None,
                                          [float(w) for w in walls if w is not None])
        proposal = Proposal(trial.number, config, launch.payload, priced.estimate,
                            launch.host_bytes, launch.length, limit)
        row = TrialRow(trial.number, "running", config, est, params,
                       overshoot=verdict.overshoot, retry_of=retry_of, origin=origin)
        self._record(row, trial)
        self.live[trial.number] = _Live(proposal, trial, cost=asked)
        for live in self.live.values():
            live.concurrency = max(live.concurrency, len(self.live))
        self.trainables_started += 1
        self._emit(row)
        return proposal

    def _repeated(self, trial: Any) -> None:
        """The sampler proposed a config the study has tried: it is not priced or trained
        again (told FAIL, no row). An untried config that fits goes next instead
        (enqueued; `untried.untried_fitting`), or, the space's configs enumerated and none
        of them left, the search ends."""
        from optuna.trial import TrialState

        self.study.tell(trial, state=TrialState.FAIL)
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return  # a queued trial goes next

        def suggest(t: Any) -> dict[str, Any]:
            return suggest_values(self.space, t)

        def fitting(values: Mapping[str, Any]) -> float | None:
            priced = self.price_candidate(values)
            return priced[0] if priced is not None and priced[1] else None

        if not self._enumerated:
            self._configs, self._enumerated = space_configs(suggest), True
        found = untried_fitting(self._configs, suggest, self._told | self._seen, self._unfit,
                                fitting, np.random.default_rng(trial.number))
        if found is not None:
            self._seen.add(params_key(found[0]))
            self.study.enqueue_trial(dict(found[0]))
        elif self._configs is not None:
            self.stop_reason = exhausted_reason(self._tried_fitting())

    def _tried_fitting(self) -> int:
        """Distinct configs the study trained or is training (priced: an invalid one is
        not)."""
        return len({params_key(r.params) for r in self.rows.values()
                    if (r.counted or r.status == "running") and r.device_total > 0})

    def _values(self, trial: Any, origin: str | None) -> dict[str, Any]:
        """The trial's values (Optuna's params drawn): for the model as written, all but
        the table rules' (it applies nothing)."""
        if origin == AS_WRITTEN:
            rules = {q for r in self.space.tables for q in r.searched.values()}
            return suggest_values(self.space, trial, skip=rules)
        return suggest_values(self.space, trial)

    def _price(self, trial: Any, values: Mapping[str, Any], origin: str | None = None) -> Any:
        """The workload's price of the trial's proposal (the model as written priced
        without apply by `price_as_written`). A ConfigError before any proposal of the
        study was priced is bad input (the trial told FAIL, the error raised: the search
        stops before any trial); a later one is that proposal's failure, its row carrying
        the first priced config."""
        from optuna.trial import TrialState

        try:
            if origin == AS_WRITTEN:
                return self.workload.price_as_written(values)  # type: ignore[attr-defined]
            return self.workload.price(values)
        except ConfigError as e:
            first = next((r.config for r in self.rows.values()
                          if r.status not in ("failed", "interrupted")), None)
            if first is None:
                self.study.tell(trial, state=TrialState.FAIL)  # bad input: nothing is kept
                raise
            return Invalid(str(e), first)

    def price_candidate(self, values: Mapping[str, Any]) -> tuple[float, bool] | None:
        """A candidate's memory objective and whether it fits, as a proposal of it would be
        judged; None when it cannot be priced. Nothing is recorded."""
        try:
            priced = self.workload.price(values)
        except ConfigError:
            return None
        if isinstance(priced, Invalid):
            return None
        est = priced.estimate
        fits = self.feasibility.judge(est).fits
        figures = {"allocated_peak": est.allocated_peak, "device_total": est.device_total}
        return memory_value(figures, self.memory_basis), fits  # to_dict costs ~1 ms

    def _reject_invalid(self, trial: Any, invalid: Invalid, retry_of: int | None,
                        cost: Mapping[str, float], origin: str | None = None) -> None:
        row = TrialRow(trial.number, "failed", invalid.config, {"device_total": 0},
                       dict(trial.params), metrics=dict(cost), reason=invalid.reason,
                       retry_of=retry_of, origin=origin)
        values = optuna_values({}, self.objectives, self.budget.bytes, True)
        self._record(row, trial, _Outcome("complete", values, 0.0, 1.0))
        self._emit(row)

    # ------------------------------------------------------------------ results
    def attach(self, number: int, ray_trial_id: str) -> None:
        if number in self.live:
            self.live[number].ray_trial_id = ray_trial_id

    def trial_started(self, number: int) -> None:
        """Its executor started trial `number`: its time limit counts from now (once)."""
        live = self.live.get(number)
        if live is not None and live.started is None:
            live.started = self.clock()

    def remaining(self, number: int) -> float | None:
        """Seconds trial `number` may still run (None: not running, or no limit)."""
        live = self.live.get(number)
        limit = None if live is None else live.proposal.time_limit
        if live is None or limit is None:
            return None
        return limit - (self.clock() - live.started if live.started is not None else 0.0)

    def overdue(self) -> list[int]:
        """Started trials past their time limit, not yet timed out: the executor ends them
        and calls `time_out`."""
        return sorted(n for n, live in self.live.items() if live.started is not None
                      and not live.timed_out and (self.remaining(n) or 0.0) <= 0.0)

    def time_out(self, number: int) -> None:
        """Its executor ended trial `number` for running past its limit: when it finishes
        without a result it is `timeout`."""
        if number in self.live:
            self.live[number].timed_out = True

    def observe(self, number: int, evaluation: Mapping[str, Any]) -> bool:
        """Note an intermediate evaluation; True when the trial should stop: at a rung the
        scheduler stops it at (its decision recorded first), or by the front rule."""
        live = self.live.get(number)
        if live is None:
            return False
        live.evaluations.append(evaluation)
        length = live.proposal.length
        if length is None or int(evaluation["step"]) >= length[0]:
            return False  # unprojectable, or the last evaluation: nothing to save
        if self.scheduler is not None and not self._at_rungs(live, evaluation, length):
            live.stopped = True
            live.stop_reason = (f"stopped at step {evaluation['step']}: outside the top "
                                f"1/{self.scheduler.eta} of its rung (multi-fidelity)")
            return True
        if not self.early_stop:
            return False
        max_steps, eval_every = length
        target = self.workload.target
        reached = next((int(e["step"]) for e in live.evaluations
                        if target is not None and float(e["quality"]) >= target), None)
        prog = Progress(
            qualities=tuple(float(e["quality"]) for e in live.evaluations),
            step=int(evaluation["step"]), samples=int(evaluation.get("samples", 0)),
            # 0: speed unknown (projected at its best), in a repeatable search
            elapsed_s=0.0 if self.repeatable else float(evaluation.get("elapsed_s", 0.0)),
            max_steps=max_steps, eval_every=eval_every,
            device_total=self._memory(live.proposal.estimate.to_dict()), target=target,
            reached_at=reached, keeps_best=self.workload.keeps_best,
        )
        front = [r.metrics for r in self.front()]
        if cannot_reach_front(prog, front, self.objectives):
            live.stopped = True
            return True
        return False

    def _at_rungs(self, live: _Live, evaluation: Mapping[str, Any],
                  length: tuple[int, int]) -> bool:
        """The scheduler's decision at each rung this evaluation reaches (False: stop),
        every rung point recorded on the trial before it is acted on."""
        assert self.scheduler is not None
        step = int(evaluation["step"])
        due = self.scheduler.due(step, length)
        if not due:
            return True
        values = {"quality": max(float(e["quality"]) for e in live.evaluations),
                  "memory": self._memory(live.proposal.estimate.to_dict())}
        elapsed = float(evaluation.get("elapsed_s", 0.0))
        if not self.repeatable and elapsed > 0:
            values["throughput"] = float(evaluation.get("samples", 0)) / elapsed
        decided = [self.scheduler.decide(live.proposal.number, f, step, values) for f in due]
        live.rungs.extend(decided)
        self.recorder.note(live.trial, RUNGS_ATTR, [p.encode() for p in live.rungs])
        for p in decided:
            self.scheduler.add(p)
        return all(p.go_on for p in decided)

    def _restore_rungs(self, scheduler: AshaScheduler) -> None:
        """The scheduler's state from the study: every recorded rung point, and the curves
        of the trials that ran to their full length."""
        for t in self.study.get_trials(deepcopy=False):
            raw = t.user_attrs.get(RUNGS_ATTR)
            if isinstance(raw, list):
                scheduler.restore(RungPoint.decode(t.number, p) for p in raw)
        for row in self.rows.values():
            self._learn(row)

    def _learn(self, row: TrialRow) -> None:
        """Tell the scheduler a trial that ran to its full length (its curve)."""
        result = row.result
        if self.scheduler is None or row.status != "complete" or result is None:
            return
        curve = [(e.step, e.quality) for e in result.curve]
        if len(curve) >= 2:
            length = (max(result.steps, curve[-1][0]), curve[0][0])
            self.scheduler.learn(row.number, curve, length, row.metrics.get("quality"))

    def finish(self, number: int, final: Mapping[str, Any] | None,
               error: str | None = None) -> TrialRow | None:
        """Tell the outcome of a launched trial. `final`: the trainable's last report
        (None when it ended without one: stopped early, or crashed with `error`)."""
        live = self.live.pop(number, None)
        if live is None:
            return None
        row, outcome = self._outcome(live, final, error)
        if row.status == "pruned" and live.stop_reason:
            row = row.with_(reason=live.stop_reason)
        self._record(row, live.trial, outcome)
        if not live.stopped:
            self._learn(row)
        self._emit(row)
        return row

    def _outcome(self, live: _Live, final: Mapping[str, Any] | None,
                 error: str | None) -> tuple[TrialRow, _Outcome]:
        """The row of a launched trial that ended, and how Optuna is told it."""
        p = live.proposal
        old = self.rows[p.number].with_(ray_trial_id=live.ray_trial_id,
                                        concurrency=live.concurrency, node=_node(final, live))
        cost = self._cost(live, final)
        if live.timed_out:  # past its limit: whatever it returned
            return self._timeout(old, live, cost)
        if final is None or final.get("result") is None:
            if live.stopped and final is None:
                last = live.evaluations[-1] if live.evaluations else {}
                return old.with_(status="pruned", metrics={
                    "quality": last.get("quality"), "memory": self._memory(p.estimate.to_dict()),
                    "steps": float(last.get("step", 0)), **cost}, reason=(
                    f"stopped at step {last.get('step')}: a front member is at least as good "
                    "on every objective as this trial could still reach")), _Outcome("pruned")
            why = error or (final or {}).get("error") or "the trial ended without a result"
            return (old.with_(status="failed", metrics=cost, reason=str(why)),
                    _Outcome("fail"))
        result = decode_result(final["result"])
        scores = ValidScores.decode(final.get("valid_scores"))
        if scores is not None and result.status == "complete":
            self._keep_scores(live.trial, p.number, scores)
        metrics = {**objective_metrics(result, p.estimate.to_dict(),
                                       use_measured=self.workload.use_measured,
                                       memory_basis=self.memory_basis), **cost}
        row = old.with_(status=result.status, metrics=metrics, reason=result.error,
                        result=result)
        if result.status == "complete":
            return row, self._complete(row, placeholder=False, runs=0.0)
        if result.status == "oom":
            predicted = p.estimate.device_total
            measured = result.measured_reserved_peak
            failed = (measured + p.estimate.overhead if measured is not None
                      and not self.workload.stand_in else predicted)
            row = row.with_(metrics={**metrics, "oom_predicted_bytes": float(predicted),
                                     "oom_failed_bytes": float(failed)}, reason=(
                f"{result.error}; predicted device_total {predicted:,} B, failed at "
                f"{failed:,} B: later proposals at or above {predicted:,} B are infeasible"),
                overshoot=max(old.overshoot, OOM_VIOLATION))
            return row, self._complete(row, placeholder=True, runs=0.0)
        if result.status in ("diverged", "unsupported"):
            return row, self._complete(row, placeholder=True, runs=1.0)
        # failed (or pruned by the runner itself, which the search never asks for)
        pruned = result.status == "pruned"
        return (row.with_(status="pruned" if pruned else "failed"),
                _Outcome("pruned" if pruned else "fail"))

    def _keep_scores(self, trial: Any, number: int, scores: ValidScores) -> None:
        """A completed trial's validation scores: for the pick, and stored on the trial
        before it is told (a resumed search picks by the same paired rule)."""
        from autoembed.pipeline.study import scores_attrs

        self.valid_scores[number] = scores
        for key, part in scores_attrs(scores).items():
            self.recorder.note(trial, key, part)

    def _cost(self, live: _Live, final: Mapping[str, Any] | None) -> dict[str, float | None]:
        """What a launched trial cost (`trial.COST_COLUMNS`): its final report's seconds, or
        (stopped early, crashed) its last evaluation's."""
        last = live.evaluations[-1] if live.evaluations else {}
        stamp = (final or {}).get("cost") or last
        result = (final or {}).get("result") or {}
        train = result.get("train_seconds", last.get("train_s"))
        wall = result.get("wall_seconds", stamp.get("wall_s"))
        out: dict[str, float | None] = {
            "train_seconds": _seconds(train), "wall_seconds": _seconds(wall),
            "cpu_seconds": _seconds(stamp.get("cpu_s"))}
        if live.cost is not None:
            out.update(live.cost.metrics(self.clock(), out["train_seconds"]))
        return out

    def _timeout(self, old: TrialRow, live: _Live,
                 cost: Mapping[str, float | None]) -> tuple[TrialRow, _Outcome]:
        """The row of a trial its executor ended past its time limit, told to Optuna as a
        diverged one (placeholder values, `runs` violated). What it cost is the seconds it
        ran until it was ended (`_ran`)."""
        last = live.evaluations[-1] if live.evaluations else {}
        limit = live.proposal.time_limit or 0.0
        row = old.with_(status="timeout", metrics={
            "steps": float(last.get("step", 0)),
            "memory": self._memory(live.proposal.estimate.to_dict()),
            **self._ran(live, cost)}, reason=(
            f"ran past its time limit of {limit:g} s and was ended (at step "
            f"{last.get('step', 0)}); --trial-time-limit or the space's trial_time_limit "
            "sets the limit"))
        return row, self._complete(row, placeholder=True, runs=1.0)

    def _ran(self, live: _Live, cost: Mapping[str, float | None]) -> dict[str, float | None]:
        """A timed-out trial's cost: its wall seconds from its start to its end reaching the
        driver (at least what its process stamped), the seconds after its last report
        counted as training (where it was when it was ended)."""
        last = live.evaluations[-1] if live.evaluations else {}
        ran = self.clock() - live.started if live.started is not None else 0.0
        wall = max(float(cost.get("wall_seconds") or 0.0), ran)
        train = float(last.get("train_s") or 0.0) + max(
            wall - float(last.get("wall_s") or 0.0), 0.0)
        out = {**cost, "wall_seconds": wall, "train_seconds": train}
        if live.cost is not None:
            out.update(live.cost.metrics(self.clock(), train))
        return out

    def abandon(self, reason: str) -> list[int]:
        """The driver is stopping with trials still running (Ctrl-C, an error): forget them;
        the driver then calls `study.recover` (FAIL + one retry), as a resume does after a
        crash. Returns their numbers."""
        del reason
        numbers = sorted(self.live)
        self.live.clear()
        return numbers

    # ------------------------------------------------------------------ finishing
    def feasible_rows(self) -> list[TrialRow]:
        return [r for r in self.rows.values() if r.status == "complete" and r.feasible]


def _seconds(v: Any) -> float | None:
    return None if v is None else float(v)


NODE_KEYS = ("ray_node_id", "ray_node_ip", "ray_resources")


def _node(final: Mapping[str, Any] | None, live: _Live) -> dict[str, str]:
    """Where a trial ran, from its last report (every report carries it: a trial stopped
    early has no final one)."""
    for report in ((final or {}).get("node"), *reversed(live.evaluations)):
        if report and report.get("ray_node_id"):
            return {k: str(report[k]) for k in NODE_KEYS if k in report}
    return {}
