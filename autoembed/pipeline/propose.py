"""Proposal: ask the sampler, price the proposal, judge it, never repeat a config.

`Proposer.ask()` asks Optuna once; the start points (`space.start`: known-good configs) are
enqueued first (`Proposer.enqueue`), grid points instead. Each proposal is priced by its
workload (`Workload.price`) and judged by `Feasibility`; what one ask comes to is an `Asked`:
a row to record (told to Optuna at once when it does not fit or is invalid) and, when it
fits, the `Proposal` to launch. A proposal of a config the study has tried already or is
training (`trial_key`: the priced config as its model reads it, so params that change
nothing of it do not make it new; a re-queued retry aside) is not trained again, nor
priced again when its params were asked before (told FAIL, no row); an untried config that
fits is queued instead, or, the space enumerated (`pipeline.untried`) and none left, the
search ends: "every fitting config tried: N" (so too when the sampler raises
`SpaceExhausted`). The proposer records nothing itself: `SearchEngine` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from autoembed.budget import Budget
from autoembed.config import EmbeddingConfig, model_key
from autoembed.errors import ConfigError
from autoembed.memory import MemoryEstimate
from autoembed.memory.objective import MEMORY_BASIS, memory_value
from autoembed.pipeline.feasibility import Feasibility
from autoembed.pipeline.optuna_space import NotTheSpace, replay, suggest_values
from autoembed.pipeline.records import TrialRow, params_key
from autoembed.pipeline.time_limit import TrialTimeLimit
from autoembed.pipeline.untried import (
    SpaceExhausted,
    exhausted_reason,
    space_configs,
    untried_fitting,
)
from autoembed.pipeline.workload import Invalid, Workload
from autoembed.trial import AS_WRITTEN

if TYPE_CHECKING:
    from autoembed.pipeline.plan import SearchPlan
    from autoembed.pipeline.priced_ehvi import Pricing

__all__ = ["ORIGIN_ATTR", "Queued", "Proposal", "AskCost", "SearchSettings", "Asked",
           "Proposer", "PricingSampler", "trial_key"]

ORIGIN_ATTR = "origin"  # the Optuna user attribute an enqueued trial's origin travels in


@dataclass(frozen=True)
class Queued:
    """A point to train before the sampler's: its Optuna params and who chose it
    (`TrialRow.origin`)."""

    params: Mapping[str, Any]
    origin: str | None = None


def trial_key(trains: Any, params: Mapping[str, Any], origin: str | None) -> Any:
    """What "already tried" means, the one rule of a repeat: what the trial trains
    (`trains`: `Workload.trains`, so a param the proposal's other choices leave unread, or
    values that come to the same tables, change nothing); a proposal that could not be
    priced (`trains` None) by its params; the model as written by its origin too (its
    params are those of a proposal that applies nothing)."""
    key = ("params", params_key(params)) if trains is None else ("trains", trains)
    return (AS_WRITTEN, key) if origin == AS_WRITTEN else key


def _asked(params: Mapping[str, Any], origin: str | None) -> Any:
    """Params asked (with the model as written's origin): they price to one `trial_key`."""
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
class AskCost:
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


@dataclass(frozen=True)
class SearchSettings:
    """What one search's engine is told (`SearchSettings.of(plan)`): the `workload`
    searched (its space, pricing, target; `pipeline.workload`), the budget each trial's
    device total is judged against, the objectives, the trials to train and the seconds
    the search may take. `grid`: the only points asked, in order; `start`: points asked
    first (Optuna params, `space.start`), then the sampler's; a point some trial of the
    study already had (a resume) is skipped. `host_budget_bytes`: host_cached tables'
    host memory. `repeatable`: what steers proposals and early stops never depends on
    wall-clock time (`TIMING` objectives are told as a constant, a running trial's speed
    is not projected), so the same seed repeats the same trials. `time_limit`: how long a
    trial may run (default: derived, `pipeline.time_limit`)."""

    workload: Workload
    budget: Budget
    objectives: Sequence[tuple[str, str]]
    trials: int
    time_budget_s: float | None = None
    grid: Sequence[Mapping[str, Any]] | None = None
    start: Sequence[Mapping[str, Any] | Queued] = ()
    early_stop: bool = False
    host_budget_bytes: Budget | None = None
    memory_basis: str = MEMORY_BASIS
    repeatable: bool = False
    time_limit: TrialTimeLimit | None = None

    @classmethod
    def of(cls, plan: SearchPlan) -> SearchSettings:
        """The settings of a planned search; the grid sampler's points shuffled by its
        seed."""
        grid = None
        if plan.sampler == "grid":
            grid = plan.space.grid()
            random.Random(plan.seed).shuffle(grid)
        return cls(
            workload=plan.workload, budget=plan.budget, objectives=plan.objective_pairs,
            trials=plan.trials, time_budget_s=plan.request.time_budget, grid=grid,
            start=[Queued(p.params(plan.space), p.origin) for p in plan.start],
            early_stop=plan.early_stop, host_budget_bytes=plan.request.host_budget,
            memory_basis=plan.memory_basis, repeatable=plan.repeatable,
            time_limit=plan.time_limit)


@runtime_checkable
class PricingSampler(Protocol):
    """A sampler that prices its own candidates (`pipeline.priced_ehvi.PricedEHVI`): the
    engine binds its pricing (`Pricing`: `Proposer.price_candidate`, the space's suggest
    code, the objectives, the budget, the share spent, the running trials) before the first
    ask."""

    def bind(self, pricing: Pricing) -> None: ...


@dataclass(frozen=True)
class Asked:
    """What one ask came to. `row`: the trial's row to record (None: a repeat, told FAIL,
    or the space exhausted; `failed`: invalid, `infeasible`: does not fit, both told to
    Optuna at once; `running`: launched); `proposal`: the proposal to launch (it fits);
    `cost`: its ask and pricing seconds; `stop`: why the search ends here, if it does."""

    trial: Any = None
    row: TrialRow | None = None
    proposal: Proposal | None = None
    cost: AskCost | None = None
    stop: str | None = None


class Proposer:
    """Asks, prices and judges one study's proposals; remembers what was proposed."""

    def __init__(self, study: Any, settings: SearchSettings, rows: dict[int, TrialRow],
                 feasibility: Feasibility, clock: Callable[[], float]) -> None:
        """`rows`: the study's rows, by number (kept by `Outcomes`; read here)."""
        self.study = study
        self.workload = settings.workload
        self.space = settings.workload.space
        self.settings = settings
        self.rows = rows
        self.feasibility = feasibility
        self.clock = clock
        self.time_limit = settings.time_limit or TrialTimeLimit(
            user=settings.workload.kind == "user")
        self.grid: list[Mapping[str, Any] | Queued] | None = (
            list(settings.grid) if settings.grid is not None else None)
        self.start: list[Mapping[str, Any] | Queued] = list(settings.start)
        self._seen = {_asked(r.params, r.origin) for r in rows.values()}
        keys = {n: self._row_key(r) for n, r in rows.items()}
        # the trial key of params asked (`_asked`): known, they are not priced again
        self._keys = {_asked(r.params, r.origin): keys[n] for n, r in rows.items()}
        # configs the study was proposed (an interrupted trial's is re-queued, not tried):
        # a sampler's proposal of one again is never trained again (`_repeated`)
        told = [r for r in rows.values() if not r.interrupted]
        self._told = {keys[r.number] for r in told}
        # their priced configs' model keys, which equal trial keys share (`_tried`)
        self._told_models = {model_key(r.config) for r in told if r.device_total > 0}
        self._enumerated = False  # the space's configs (`_repeated`), enumerated once
        self._configs: list[tuple[dict[str, Any], dict[str, Any]]] | None = None
        self._unfit: set[tuple[tuple[str, str], ...]] = set()

    def enqueue(self) -> str | None:
        """Enqueue the next grid point and start point; why the search ends when the grid's
        points are all tried."""
        if self.grid is not None and not self._enqueue_next(self.grid):
            return "every grid point was tried"
        if self.start:
            self._enqueue_next(self.start)
        return None

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
            if _asked(params, origin) not in self._seen:
                self._seen.add(_asked(params, origin))
                self.study.enqueue_trial(dict(params), user_attrs={ORIGIN_ATTR: origin}
                                         if origin else None)
                return True
        return False

    def ask(self) -> Asked:
        """Ask the sampler once: what the proposal came to (module docstring)."""
        from optuna.trial import TrialState

        t0 = self.clock()
        try:
            trial = self.study.ask()
        except SpaceExhausted as e:  # the sampler found nothing untried that fits
            self.study.tell(e.number, state=TrialState.FAIL)
            return Asked(stop=exhausted_reason(self._tried_fitting()))
        t1 = self.clock()
        rows = self.rows
        retry_of = trial.user_attrs.get("retry_of")
        origin = trial.user_attrs.get(ORIGIN_ATTR) or (
            rows[retry_of].origin if retry_of in rows else None)
        values = self._values(trial, origin)
        asked = _asked(trial.params, origin)
        if retry_of is None and self._keys.get(asked) in self._told:
            return Asked(trial, stop=self._repeated(trial))  # the same params, not priced
        self._seen.add(asked)
        priced = self._price(trial, values, origin)
        trains = (None if isinstance(priced, Invalid)
                  else self.workload.trains(values, priced.config))
        key = self._keys[asked] = trial_key(trains, trial.params, origin)
        if retry_of is None and key in self._told:
            return Asked(trial, stop=self._repeated(trial))  # a config tried: not trained
        self._told.add(key)
        if not isinstance(priced, Invalid):
            self._told_models.add(model_key(priced.config))
        if isinstance(priced, Invalid):
            cost = AskCost(t0, t1 - t0, self.clock() - t1)
            return Asked(trial, TrialRow(
                trial.number, "failed", priced.config, {"device_total": 0},
                dict(trial.params), metrics=cost.metrics(self.clock()), reason=priced.reason,
                retry_of=retry_of, origin=origin))
        params = dict(trial.params)
        verdict = self.feasibility.judge(priced.estimate)
        est = priced.estimate.to_dict()
        cost = AskCost(t0, t1 - t0, self.clock() - t1)
        if not verdict.fits:
            row = TrialRow(trial.number, "infeasible", priced.config, est, params,
                           metrics={"device_total": float(priced.estimate.device_total),
                                    **cost.metrics(self.clock())},
                           reason=verdict.reason, overshoot=verdict.overshoot,
                           retry_of=retry_of, origin=origin)
            return Asked(trial, row)
        launch = priced.launch(trial.number)
        walls = [r.metrics.get("wall_seconds") for r in rows.values()
                 if r.status == "complete"]
        limit = self.time_limit.for_trial(launch.length[0] if launch.length else None,
                                          [float(w) for w in walls if w is not None])
        proposal = Proposal(trial.number, priced.config, launch.payload, priced.estimate,
                            launch.host_bytes, launch.length, limit)
        row = TrialRow(trial.number, "running", priced.config, est, params,
                       overshoot=verdict.overshoot, retry_of=retry_of, origin=origin)
        return Asked(trial, row, proposal=proposal, cost=cost)

    def _row_key(self, row: TrialRow) -> Any:
        """A recorded trial's `trial_key`: what its row's config and params train, where it
        was priced and its params are the space's (a row an older version stored without
        them is keyed by its params: the same params are a repeat of it)."""
        trains = None
        if row.device_total > 0:
            try:
                values = self._values(replay(row.params), row.origin)
            except NotTheSpace:  # a row an older version stored
                pass
            else:
                trains = self.workload.trains(values, row.config)
        return trial_key(trains, row.params, row.origin)

    def _repeated(self, trial: Any) -> str | None:
        """The sampler proposed a config the study has tried: it is not trained again
        (told FAIL, no row). An untried config that fits goes next instead (enqueued;
        `untried.untried_fitting`), or, the space's configs enumerated and none of them
        left, the search ends (the reason returned). A grid search's next point goes next
        instead: it trains its grid's points only."""
        from optuna.trial import TrialState

        self.study.tell(trial, state=TrialState.FAIL)
        if self.grid is not None or self.study.get_trials(
                deepcopy=False, states=(TrialState.WAITING,)):
            return None  # the next grid point, or a queued trial, goes next

        def suggest(t: Any) -> dict[str, Any]:
            return suggest_values(self.space, t)

        def fitting(values: Mapping[str, Any]) -> float | None:
            priced = self.price_candidate(values)
            return priced[0] if priced is not None and priced[1] else None

        if not self._enumerated:
            self._configs, self._enumerated = space_configs(suggest), True
        found = untried_fitting(self._configs, suggest, self._seen, self._unfit, fitting,
                                np.random.default_rng(trial.number))
        if found is not None:
            self._seen.add(params_key(found[0]))
            self.study.enqueue_trial(dict(found[0]))
        elif self._configs is not None:
            return exhausted_reason(self._tried_fitting())
        return None

    def _tried_fitting(self) -> int:
        """Distinct configs (`trial_key`) the study trained or is training (priced: an
        invalid one is not)."""
        return len({self._known_key(r) for r in self.rows.values()
                    if (r.counted or r.status == "running") and r.device_total > 0})

    def _known_key(self, row: TrialRow) -> Any:
        """`row`'s trial key as keyed when it was asked or loaded (`_keys`), else worked out."""
        key = self._keys.get(_asked(row.params, row.origin))
        return key if key is not None else self._row_key(row)

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
        """A candidate's memory objective and whether a proposal of it would train: it fits,
        as judged, and its config is untried (`trial_key`); None when it cannot be priced.
        Nothing is recorded."""
        try:
            priced = self.workload.price(values)
        except ConfigError:
            return None
        if isinstance(priced, Invalid):
            return None
        est = priced.estimate
        fits = self.feasibility.judge(est).fits and not self._tried(values, priced.config)
        figures = {"allocated_peak": est.allocated_peak, "device_total": est.device_total}
        return memory_value(figures, self.settings.memory_basis), fits  # to_dict: ~1 ms

    def _tried(self, values: Mapping[str, Any], config: EmbeddingConfig) -> bool:
        """Whether a proposal of `values`, priced to `config`, trains what the study has
        tried. Equal trial keys have equal priced model keys (`Workload.trains`), so a
        config whose model key no tried trial's has is untried without asking the workload
        (a stand-in's trained config costs milliseconds to build)."""
        if model_key(config) not in self._told_models:
            return False
        return trial_key(self.workload.trains(values, config), {}, None) in self._told

    def bind(self, sampler: Any, spent: Callable[[], float],
             pending: Callable[[], Sequence[tuple[Mapping[str, Any], float]]] = lambda: (),
             ) -> None:
        """Bind this proposer's pricing to a sampler that prices its candidates
        (`PricingSampler`); any other sampler is left as it is. `spent`: the share of the
        search's budget spent; `pending`: the running trials (`Running.pending`)."""
        if not isinstance(sampler, PricingSampler):
            return
        from autoembed.pipeline.priced_ehvi import Pricing

        s = self.settings
        sampler.bind(Pricing(price=self.price_candidate,
                             suggest=lambda t: suggest_values(self.space, t),
                             objectives=tuple(s.objectives),
                             budget_bytes=float(s.budget.bytes),
                             repeatable=s.repeatable, spent=spent, pending=pending))

