"""The search's bookkeeping, independent of Ray: ask Optuna, price, reject or launch, tell
(docs/ARCHITECTURE.md, stage 6). `SearchEngine` coordinates `propose.Proposer` (ask, price,
judge, never a config twice), `running.Running` (launched trials, time limits, rungs) and
`outcome.Outcomes` (rows, tell, costs); executors drive it; every event goes to one
`Recorder`, the engine writes no store itself.

Constraints (Optuna: a value <= 0 is feasible): `memory` = (device_total - budget) / budget,
at least OOM_VIOLATION after a real out-of-memory; `runs` = 1 when the trial could not
produce a result (invalid config, unsupported precision, diverged), else 0. An OOM trial's
predicted device_total is a ceiling: later proposals at or above the smallest one are
infeasible (`Feasibility`); it is rebuilt from the study's rows on a resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoembed.budget import MemoryBudget
from autoembed.memory.objective import check_basis
from autoembed.pipeline.early_stop import Progress, cannot_reach_front
from autoembed.pipeline.feasibility import Feasibility
from autoembed.pipeline.outcome import Outcome, Outcomes
from autoembed.pipeline.propose import Asked, Proposal, Proposer, SearchSettings
from autoembed.pipeline.recorder import Recorder
from autoembed.pipeline.records import TrialRow, front_of
from autoembed.pipeline.running import Live, Rungs, Running
from autoembed.pipeline.scheduler import AshaScheduler

__all__ = ["Proposal", "SearchStatus", "SearchEngine", "SearchSettings", "Feasibility",
           "MAX_REJECTIONS_IN_A_ROW", "Outcome"]

MAX_REJECTIONS_IN_A_ROW = 300  # proposals over budget in a row before the search gives up

FAILED = ("failed", "oom", "diverged", "unsupported", "timeout")  # counted as failed


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


class SearchEngine:
    """Ask/price/tell for one study, coordinating its `Proposer` (ask, price, judge),
    `Running` (launched trials, time limits; `Rungs`) and `Outcomes` (rows, tell, costs).
    Not thread-safe: the driver's thread calls it."""

    def __init__(self, study: Any, settings: SearchSettings, *,
                 recorder: Recorder | None = None,
                 progress: Callable[[SearchStatus], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 scheduler: AshaScheduler | None = None) -> None:
        """`recorder`: where events go (default: nowhere); it is caught up with the
        study's rows here, so that a resumed search's sinks hold every trial the study
        does. `scheduler`: multi-fidelity stops at rungs (`pipeline.scheduler`; rebuilt
        here from the study's recorded rung points and finished trials), beside
        `settings.early_stop`'s front rule."""
        settings = replace(settings, memory_basis=check_basis(settings.memory_basis))
        self.study = study
        self.settings = settings
        self.workload = settings.workload
        self.progress = progress
        self.clock = clock
        self.started = clock()
        self.stop_reason: str | None = None
        self.rejected_in_a_row = 0
        self.trainables_started = 0
        self.recorder = recorder if recorder is not None else Recorder([])
        self.outcomes = Outcomes(study, settings, self.recorder, clock)
        self.feasibility = Feasibility.for_search(
            MemoryBudget(settings.budget, settings.host_budget_bytes), self.oom_ceiling)
        self.proposer = Proposer(study, settings, self.rows, self.feasibility, clock)
        self.running = Running(clock)
        self._front_cache: list[TrialRow] | None = None
        self.recorder.catch_up(self.rows.values())
        self.rungs = None if scheduler is None else Rungs(
            scheduler, self.recorder, settings.repeatable, self._memory)
        if self.rungs is not None:
            self.rungs.restore(study, self.rows.values())
        self.proposer.bind(getattr(study, "sampler", None), self.spent,
                           lambda: self.running.pending(self._memory))

    @property
    def rows(self) -> dict[int, TrialRow]:
        """Every trial of the study, by number."""
        return self.outcomes.rows

    @property
    def valid_scores(self) -> dict[int, Any]:
        return self.outcomes.valid_scores

    @property
    def live(self) -> dict[int, Live]:
        return self.running.live

    def oom_ceiling(self) -> tuple[int, int] | None:
        """(bytes, trial) of the smallest predicted device_total that ran out of memory."""
        return self.outcomes.oom_ceiling()

    def _memory(self, estimate: Mapping[str, Any]) -> float:
        return self.outcomes.memory(estimate)

    @property
    def trained(self) -> int:
        return sum(1 for r in self.rows.values() if r.counted) + len(self.running)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows.values() if r.status == status)

    def status(self, last: TrialRow | None = None, message: str | None = None) -> SearchStatus:
        front = self.front()
        qs = [r.metrics.get("quality") for r in front]
        best = max((q for q in qs if q is not None), default=None)
        failed = sum(1 for r in self.rows.values() if r.status in FAILED)
        return SearchStatus(
            trained=self.trained, target=self.settings.trials, running=len(self.running),
            complete=self.count("complete"), infeasible=self.count("infeasible"),
            pruned=self.count("pruned"), failed=failed, front=len(front), best_quality=best,
            elapsed_s=self.clock() - self.started, last=last, message=message,
            budget_bytes=self.settings.budget.bytes)

    def _emit(self, last: TrialRow | None = None, message: str | None = None) -> None:
        if self.progress is not None:
            self.progress(self.status(last, message))

    def front(self) -> list[TrialRow]:
        """Complete, feasible trials no other such trial dominates (trial order)."""
        if self._front_cache is None:
            self._front_cache = front_of(self.rows.values(), self.settings.objectives)
        return self._front_cache

    def _record(self, row: TrialRow, trial: Any = None, outcome: Outcome | None = None) -> None:
        self.outcomes.record(row, trial, outcome)
        self._front_cache = None

    def spent(self) -> float:
        """The share of the search's budget spent: trials trained of its count or seconds of
        its time budget, whichever is further (at most 1)."""
        s = self.settings
        share = self.trained / s.trials
        if s.time_budget_s:
            share = max(share, (self.clock() - self.started) / s.time_budget_s)
        return min(1.0, share)

    def done(self) -> bool:
        """Whether no further trial should start (and why, in `stop_reason`)."""
        s = self.settings
        if self.stop_reason is not None:
            return True
        if self.trained >= s.trials:
            self.stop_reason = f"{s.trials} trials trained"
        elif s.time_budget_s is not None and self.clock() - self.started >= s.time_budget_s:
            self.stop_reason = f"time budget of {s.time_budget_s:g} s reached"
        return self.stop_reason is not None

    def propose(self) -> Proposal | None:
        """The next proposal that fits the budget, or None when the search is over."""
        while True:
            if self.done():
                return None
            grid_done = self.proposer.enqueue()
            if grid_done is not None:
                self.stop_reason = grid_done
                return None
            if self.rejected_in_a_row >= MAX_REJECTIONS_IN_A_ROW:
                self.stop_reason = (
                    f"the sampler proposed {MAX_REJECTIONS_IN_A_ROW} configs in a row that do "
                    "not fit, are invalid or were tried; narrow the space towards cheaper "
                    "configs")
                return None
            proposal = self._take(self.proposer.ask())
            if proposal is not None:
                self.rejected_in_a_row = 0
                return proposal
            self.rejected_in_a_row += 1

    def _take(self, asked: Asked) -> Proposal | None:
        """Act on one ask: record its row (told at once when rejected), launch its proposal."""
        if asked.stop is not None:
            self.stop_reason = asked.stop
        if asked.row is None:
            return None
        if asked.proposal is None:  # rejected: told at once
            self._record(asked.row, asked.trial, self.outcomes.rejected(asked.row))
        else:
            self._record(asked.row, asked.trial)
            self.running.add(asked.proposal, asked.trial, asked.cost)
            self.trainables_started += 1
        self._emit(asked.row)
        return asked.proposal

    def attach(self, number: int, ray_trial_id: str) -> None:
        self.running.attach(number, ray_trial_id)

    def trial_started(self, number: int) -> None:
        """Its executor started trial `number`: its time limit counts from now (once)."""
        self.running.trial_started(number)

    def remaining(self, number: int) -> float | None:
        """Seconds trial `number` may still run (None: not running, or no limit)."""
        return self.running.remaining(number)

    def overdue(self) -> list[int]:
        """Started trials past their time limit, not yet timed out: the executor ends them
        and calls `time_out`."""
        return self.running.overdue()

    def time_out(self, number: int) -> None:
        """Its executor ended trial `number` for running past its limit: when it finishes
        without a result it is `timeout`."""
        self.running.time_out(number)

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
        if self.rungs is not None and not self.rungs.go_on(live, evaluation, length):
            live.stopped = True
            live.stop_reason = (f"stopped at step {evaluation['step']}: outside the top "
                                f"1/{self.rungs.scheduler.eta} of its rung (multi-fidelity)")
            return True
        if not self.settings.early_stop:
            return False
        front = [r.metrics for r in self.front()]
        if cannot_reach_front(self._progress(live, evaluation, length), front,
                              self.settings.objectives):
            live.stopped = True
            return True
        return False

    def _progress(self, live: Live, evaluation: Mapping[str, Any],
                  length: tuple[int, int]) -> Progress:
        """A running trial's progress, as the front rule projects it."""
        max_steps, eval_every = length
        target = self.workload.target
        reached = next((int(e["step"]) for e in live.evaluations
                        if target is not None and float(e["quality"]) >= target), None)
        return Progress(
            qualities=tuple(float(e["quality"]) for e in live.evaluations),
            step=int(evaluation["step"]), samples=int(evaluation.get("samples", 0)),
            # 0: speed unknown (projected at its best), in a repeatable search
            elapsed_s=(0.0 if self.settings.repeatable
                       else float(evaluation.get("elapsed_s", 0.0))),
            max_steps=max_steps, eval_every=eval_every,
            device_total=self._memory(live.proposal.estimate.to_dict()), target=target,
            reached_at=reached, keeps_best=self.workload.keeps_best)

    def finish(self, number: int, final: Mapping[str, Any] | None,
               error: str | None = None) -> TrialRow | None:
        """Tell the outcome of a launched trial. `final`: the trainable's last report
        (None when it ended without one: stopped early, or crashed with `error`)."""
        live = self.running.pop(number)
        if live is None:
            return None
        row, outcome = self.outcomes.ended(live, final, error)
        if row.status == "pruned" and live.stop_reason:
            row = row.with_(reason=live.stop_reason)
        self._record(row, live.trial, outcome)
        if not live.stopped and self.rungs is not None:
            self.rungs.learn(row)
        self._emit(row)
        return row

    def abandon(self, reason: str) -> list[int]:
        """The driver is stopping with trials still running: forget them (their numbers);
        the driver then recovers them (FAIL + one retry), as a resume does."""
        del reason
        return self.running.abandon()
