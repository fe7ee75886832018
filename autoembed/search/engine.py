"""The search's bookkeeping, independent of Ray: ask Optuna, price, reject or launch, tell.

`SearchEngine.propose()` asks the sampler until a proposal fits the budget (or the search
is over): each over-budget proposal is priced with the analytic estimate and told to Optuna
at once as COMPLETE with placeholder values and a violated `memory` constraint, recorded as
`infeasible`, and never reaches a trainable. `finish()` tells the outcome of a trial that
ran. The Ray searcher (`autoembed.search.tune`) is a thin adapter over this class.

Constraints (Optuna: a value <= 0 is feasible): `memory` = (device_total - budget) / budget;
`runs` = 1 when the trial could not produce a result (invalid config, unsupported precision,
diverged), else 0. A real out-of-memory sets `memory` to at least OOM_VIOLATION.

OOM calibration (the documented rule): a trial that ran out of memory although its estimate
fit shows the estimate is too low from that size up. Its predicted device_total becomes a
ceiling: every later proposal whose predicted device_total is at or above the smallest such
ceiling is treated as infeasible (never trains; `memory` constraint > 0; reason names the
trial). Each OOM is logged to `calibration.json` in the study's folder (predicted bytes vs
the size that failed: the measured reserved peak plus overhead on a GPU, else the predicted
size) and, as metrics `oom_predicted_bytes` / `oom_failed_bytes`, on the trial's row and
MLflow run. The ceiling is rebuilt from the study's rows, so it survives a resume.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.memory import estimate
from autoembed.pareto import non_dominated
from autoembed.runner import RunSettings
from autoembed.search.early_stop import Progress, cannot_reach_front
from autoembed.search.optuna_space import suggest_values
from autoembed.search.records import (
    ATTR,
    TrialRow,
    objective_metrics,
    objective_vector,
    optuna_values,
    result_from_dict,
)
from autoembed.search.workload import Workload
from autoembed.space import SearchSpace

if TYPE_CHECKING:
    import optuna

    from autoembed.tracking import SearchTracker, TrialRecord

__all__ = ["Proposal", "SearchStatus", "SearchEngine", "OOM_VIOLATION",
           "MAX_REJECTIONS_IN_A_ROW", "HOST_BASE_BYTES"]

OOM_VIOLATION = 0.01  # memory constraint of a trial that ran out of memory although priced in
MAX_REJECTIONS_IN_A_ROW = 300  # proposals over budget in a row before the search gives up
# Host memory of a trial process besides its tensors: Python + torch + a Ray worker. Measured
# here: rss_peak 0.56 GB for tiny.yaml trials (torch 2.13 CPU), rounded up.
HOST_BASE_BYTES = 768 * 2**20
_RUN_DEFAULTS = {"max_steps": RunSettings().max_steps, "eval_every": RunSettings().eval_every}


@dataclass(frozen=True)
class Proposal:
    """A feasible proposal, ready to train."""

    number: int
    config: EmbeddingConfig  # priced (full-size, resolved)
    train_config: Mapping[str, Any]  # what the trial trains (plain data)
    estimate: Mapping[str, Any]
    host_bytes: int


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


@dataclass
class _Live:
    """A launched trial the driver is waiting for."""

    proposal: Proposal
    trial: Any  # optuna.Trial
    ray_trial_id: str | None = None
    evaluations: list[Mapping[str, Any]] = field(default_factory=list)
    concurrency: int = 1
    stopped: bool = False


class SearchEngine:
    """Ask/price/tell for one study. Not thread-safe: the driver's thread calls it."""

    def __init__(
        self,
        *,
        study: optuna.Study,
        space: SearchSpace,
        workload: Workload,
        budget_bytes: int,
        objectives: Sequence[tuple[str, str]],
        settings: Mapping[str, Any],
        trials: int,
        time_budget_s: float | None = None,
        grid: Sequence[Mapping[str, Any]] | None = None,
        early_stop: bool = False,
        use_measured: bool = False,
        host_memory: bool = True,
        host_budget_bytes: int | None = None,
        tracker: SearchTracker | None = None,
        progress: Callable[[SearchStatus], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        calibration_path: Path | None = None,
    ) -> None:
        from autoembed.search.study import load_rows

        self.study = study
        self.space = space
        self.workload = workload
        self.budget = budget_bytes
        self.objectives = tuple(objectives)
        self.settings = dict(settings)
        self.trials = trials
        self.time_budget_s = time_budget_s
        self.early_stop = early_stop
        self.use_measured = use_measured
        self.host_memory = host_memory
        self.host_budget = host_budget_bytes  # host_cached tables' host memory (issue 9)
        self.tracker = tracker
        self.progress = progress
        self.clock = clock
        self.started = clock()
        self.rows: dict[int, TrialRow] = load_rows(study)
        self.live: dict[int, _Live] = {}
        self.rejected_in_a_row = 0
        self.trainables_started = 0
        self.stop_reason: str | None = None
        self._grid = list(grid) if grid is not None else None
        self._grid_seen = {self._key(r.params) for r in self.rows.values()}
        self._front_cache: list[TrialRow] | None = None
        self.calibration_path = calibration_path

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
                     if r.status in ("failed", "oom", "diverged", "unsupported"))
        return SearchStatus(
            trained=self.trained, target=self.trials, running=len(self.live),
            complete=self.count("complete"), infeasible=self.count("infeasible"),
            pruned=self.count("pruned"), failed=failed, front=len(front), best_quality=best,
            elapsed_s=self.clock() - self.started, last=last, message=message,
        )

    def _emit(self, last: TrialRow | None = None, message: str | None = None) -> None:
        if self.progress is not None:
            self.progress(self.status(last, message))

    # ------------------------------------------------------------------ OOM calibration
    def oom_ceiling(self) -> tuple[int, int] | None:
        """(bytes, trial) of the smallest predicted device_total that ran out of memory."""
        ooms = [(r.device_total, r.number) for r in self.rows.values()
                if r.status == "oom" and r.device_total > 0]
        return min(ooms) if ooms else None

    def _calibrate(self, row: TrialRow) -> None:
        """Append this OOM to calibration.json (atomically replaced)."""
        if self.calibration_path is None:
            return
        path = self.calibration_path
        try:
            body = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            body = {}
        events = [e for e in body.get("oom", []) if e.get("trial") != row.number]
        predicted = int(row.metrics.get("oom_predicted_bytes") or row.device_total)
        failed = int(row.metrics.get("oom_failed_bytes") or predicted)
        events.append({"trial": row.number, "predicted_device_total": predicted,
                       "failed_bytes": failed, "measured": bool(
                           row.result and row.result.measured_reserved_peak is not None),
                       "failed_over_predicted": round(failed / predicted, 4) if predicted else
                       None, "error": row.reason})
        ceiling = self.oom_ceiling()
        body = {"rule": "proposals whose predicted device_total is at or above "
                        "ceiling_bytes are infeasible (autoembed.search.engine)",
                "ceiling_bytes": ceiling[0] if ceiling else None,
                "ceiling_trial": ceiling[1] if ceiling else None,
                "oom": sorted(events, key=lambda e: e["trial"])}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(body, indent=2) + "\n")
        os.replace(tmp, path)

    # ------------------------------------------------------------------ the front
    def front(self) -> list[TrialRow]:
        """Complete, feasible trials no other such trial dominates (trial order)."""
        if self._front_cache is None:
            done = [r for r in sorted(self.rows.values(), key=lambda r: r.number)
                    if r.status == "complete" and r.feasible]
            pts = [objective_vector(r.metrics, self.objectives) for r in done]
            self._front_cache = [done[i] for i in non_dominated(pts, [d for _, d in
                                                                      self.objectives])]
        return self._front_cache

    def _record(self, row: TrialRow) -> None:
        self.rows[row.number] = row
        self._front_cache = None
        if self.tracker is not None and row.status != "running":
            # TrialRow has TrialRecord's fields, read-only (a frozen dataclass)
            self.tracker.trial(cast("TrialRecord", row))

    # ------------------------------------------------------------------ proposing
    def _key(self, params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((str(k), repr(v)) for k, v in params.items()))

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

    def _next_grid_point(self) -> bool:
        """Enqueue the next unvisited grid point; False when the grid is exhausted."""
        from optuna.trial import TrialState

        assert self._grid is not None
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return True  # a re-queued trial goes first
        while self._grid:
            point = self._grid.pop(0)
            if self._key(point) not in self._grid_seen:
                self._grid_seen.add(self._key(point))
                self.study.enqueue_trial(dict(point))
                return True
        return False

    def propose(self) -> Proposal | None:
        """The next proposal that fits the budget, or None when the search is over."""
        while True:
            if self.done():
                return None
            if self._grid is not None and not self._next_grid_point():
                self.stop_reason = "every grid point was tried"
                return None
            if self.rejected_in_a_row >= MAX_REJECTIONS_IN_A_ROW:
                self.stop_reason = (
                    f"the sampler proposed {MAX_REJECTIONS_IN_A_ROW} configs in a row that do "
                    "not fit or are invalid; narrow the space towards cheaper configs"
                )
                return None
            proposal = self._ask_one()
            if proposal is not None:
                self.rejected_in_a_row = 0
                return proposal
            self.rejected_in_a_row += 1

    def _ask_one(self) -> Proposal | None:
        trial = self.study.ask()
        retry_of = trial.user_attrs.get("retry_of")
        try:
            values = suggest_values(self.space, trial)
            config = self.workload.priced(self.space.config_for(values))
        except ConfigError as e:
            self._reject_invalid(trial, str(e), retry_of)
            return None
        params = dict(trial.params)
        self._grid_seen.add(self._key(params))
        est = estimate(config).to_dict()
        overshoot = (int(est["device_total"]) - self.budget) / self.budget
        reason = (f"device_total {int(est['device_total']):,} B exceeds the "
                  f"budget {self.budget:,} B by {100 * overshoot:.1f}%")
        ceiling = self.oom_ceiling()
        if overshoot <= 0 and ceiling is not None and int(est["device_total"]) >= ceiling[0]:
            overshoot = (int(est["device_total"]) - ceiling[0]) / ceiling[0] + OOM_VIOLATION
            reason = (f"device_total {int(est['device_total']):,} B is at or above "
                      f"{ceiling[0]:,} B, the predicted size of trial {ceiling[1]} that ran "
                      "out of memory (OOM calibration rule)")
        host_b = int(est.get("host_bytes") or 0)
        if overshoot <= 0 and self.host_budget is not None and host_b > self.host_budget:
            overshoot = (host_b - self.host_budget) / self.host_budget
            reason = (f"host_bytes {host_b:,} B exceeds the host budget {self.host_budget:,} B "
                      f"by {100 * overshoot:.1f}%")
        if overshoot > 0:
            row = TrialRow(trial.number, "infeasible", config, est, params,
                           metrics={"device_total": float(est["device_total"])},
                           reason=reason, overshoot=overshoot, retry_of=retry_of)
            self._tell_complete(trial, row, placeholder=True, runs=0.0)
            self._emit(row)
            return None
        train_config = self.workload.trained(self.space.config_for(values))
        host = HOST_BASE_BYTES
        if self.host_memory:
            try:
                host += estimate(self._train_resolved(train_config)).allocated_peak
            except ConfigError:
                pass
        proposal = Proposal(trial.number, config, train_config.to_dict(), est, host)
        row = TrialRow(trial.number, "running", config, est, params, overshoot=overshoot,
                       retry_of=retry_of)
        trial.set_user_attr(ATTR, row.to_attr())
        self._record(row)
        self.live[trial.number] = _Live(proposal, trial)
        for live in self.live.values():
            live.concurrency = max(live.concurrency, len(self.live))
        self.trainables_started += 1
        self._emit(row)
        return proposal

    def _train_resolved(self, config: EmbeddingConfig) -> EmbeddingConfig:
        from autoembed.runner import resolve_for_data

        return resolve_for_data(config, self.workload.train_dataset)

    def _reject_invalid(self, trial: Any, reason: str, retry_of: int | None) -> None:
        base = self.space.base_config()
        row = TrialRow(trial.number, "failed", base, {"device_total": 0},
                       dict(trial.params), reason=f"invalid config: {reason}",
                       retry_of=retry_of)
        trial.set_constraint("memory", 0.0)
        trial.set_constraint("runs", 1.0)
        trial.set_user_attr(ATTR, row.to_attr())
        self.study.tell(trial, optuna_values({}, self.objectives, self.budget, True))
        self._record(row)
        self._emit(row)

    def _tell_complete(self, trial: Any, row: TrialRow, *, placeholder: bool,
                       runs: float) -> None:
        trial.set_constraint("memory", row.overshoot)
        trial.set_constraint("runs", runs)
        trial.set_user_attr(ATTR, row.to_attr())
        self.study.tell(trial, optuna_values(row.metrics, self.objectives, row.device_total,
                                             placeholder))
        self._record(row)

    # ------------------------------------------------------------------ results
    def attach(self, number: int, ray_trial_id: str) -> None:
        if number in self.live:
            self.live[number].ray_trial_id = ray_trial_id

    def observe(self, number: int, evaluation: Mapping[str, Any]) -> bool:
        """Note an intermediate evaluation; True when the trial should stop (early stop)."""
        live = self.live.get(number)
        if live is None:
            return False
        live.evaluations.append(evaluation)
        s = {**_RUN_DEFAULTS, **self.settings}
        if not self.early_stop or int(evaluation["step"]) >= int(s["max_steps"]):
            return False  # off, or the last evaluation: nothing is left to save
        target = self.space.target
        reached = next((int(e["step"]) for e in live.evaluations
                        if target is not None and float(e["quality"]) >= target), None)
        prog = Progress(
            qualities=tuple(float(e["quality"]) for e in live.evaluations),
            step=int(evaluation["step"]), samples=int(evaluation.get("samples", 0)),
            elapsed_s=float(evaluation.get("elapsed_s", 0.0)),
            max_steps=int(s["max_steps"]), eval_every=int(s["eval_every"]),
            device_total=float(live.proposal.estimate["device_total"]), target=target,
            reached_at=reached,
        )
        front = [r.metrics for r in self.front()]
        if cannot_reach_front(prog, front, self.objectives):
            live.stopped = True
            return True
        return False

    def finish(self, number: int, final: Mapping[str, Any] | None,
               error: str | None = None) -> TrialRow | None:
        """Tell the outcome of a launched trial. `final`: the trainable's last report
        (None when it ended without one: stopped early, or crashed with `error`)."""
        from optuna.trial import TrialState

        live = self.live.pop(number, None)
        if live is None:
            return None
        p = live.proposal
        old = self.rows[number]
        common: dict[str, Any] = dict(ray_trial_id=live.ray_trial_id,
                                      concurrency=live.concurrency, node=_node(final, live))
        trial = live.trial
        if final is None or final.get("result") is None:
            if live.stopped and final is None:
                last = live.evaluations[-1] if live.evaluations else {}
                q = last.get("quality")
                row = old.with_(status="pruned", metrics={
                    "quality": q, "memory": float(p.estimate["device_total"]),
                    "steps": float(last.get("step", 0))}, reason=(
                    f"stopped at step {last.get('step')}: a front member is at least as good "
                    "on every objective as this trial could still reach"), **common)
                trial.set_user_attr(ATTR, row.to_attr())
                self.study.tell(trial, state=TrialState.PRUNED)
            else:
                why = error or (final or {}).get("error") or "the trial ended without a result"
                row = old.with_(status="failed", reason=str(why), **common)
                trial.set_user_attr(ATTR, row.to_attr())
                self.study.tell(trial, state=TrialState.FAIL)
            self._record(row)
            self._emit(row)
            return row
        result = result_from_dict(final["result"])
        metrics = objective_metrics(result, p.estimate, use_measured=self.use_measured)
        status = result.status
        common["result"] = result
        if status == "complete":
            row = old.with_(status=status, metrics=metrics, reason=None, **common)
            self._tell_complete(trial, row, placeholder=False, runs=0.0)
        elif status == "oom":
            predicted = int(p.estimate["device_total"])
            measured = result.measured_reserved_peak
            failed = (measured + int(p.estimate.get("overhead", 0)) if measured is not None
                      and not self.workload.stand_in else predicted)
            metrics = {**metrics, "oom_predicted_bytes": float(predicted),
                       "oom_failed_bytes": float(failed)}
            row = old.with_(status=status, metrics=metrics, reason=(
                f"{result.error}; predicted device_total {predicted:,} B, failed at "
                f"{failed:,} B: later proposals at or above {predicted:,} B are infeasible"),
                overshoot=max(old.overshoot, OOM_VIOLATION), **common)
            self._tell_complete(trial, row, placeholder=True, runs=0.0)
            self._calibrate(row)
        elif status in ("diverged", "unsupported"):
            row = old.with_(status=status, metrics=metrics, reason=result.error, **common)
            self._tell_complete(trial, row, placeholder=True, runs=1.0)
        else:  # failed (or pruned by the runner itself, which the search never asks for)
            row = old.with_(status="failed" if status != "pruned" else "pruned",
                            metrics=metrics, reason=result.error, **common)
            trial.set_user_attr(ATTR, row.to_attr())
            self.study.tell(trial, state=TrialState.FAIL if status != "pruned"
                            else TrialState.PRUNED)
            self._record(row)
        self._emit(row)
        return row

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


NODE_KEYS = ("ray_node_id", "ray_node_ip", "ray_resources")


def _node(final: Mapping[str, Any] | None, live: _Live) -> dict[str, str]:
    """Where a trial ran, from its last report (every report carries it: a trial stopped
    early has no final one)."""
    for report in ((final or {}).get("node"), *reversed(live.evaluations)):
        if report and report.get("ray_node_id"):
            return {k: str(report[k]) for k in NODE_KEYS if k in report}
    return {}
