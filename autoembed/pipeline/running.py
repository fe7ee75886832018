"""Running trials: what the driver waits for, their time limits (`pipeline.time_limit`:
`trial_started`, `overdue`, `time_out`) and `Rungs`, the multi-fidelity scheduler's
decisions, each noted on the trial before it is acted on and rebuilt on a resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoembed.pipeline.propose import AskCost, Proposal
from autoembed.pipeline.recorder import Recorder
from autoembed.pipeline.records import TrialRow
from autoembed.pipeline.scheduler import RUNGS_ATTR, AshaScheduler, RungPoint

__all__ = ["Live", "Running", "Rungs"]


@dataclass
class Live:
    """A launched trial the driver is waiting for."""

    proposal: Proposal
    trial: Any  # optuna.Trial
    ray_trial_id: str | None = None
    evaluations: list[Mapping[str, Any]] = field(default_factory=list)
    concurrency: int = 1
    stopped: bool = False
    cost: AskCost | None = None
    started: float | None = None  # the engine's clock when its executor started it
    timed_out: bool = False  # ended by its executor for running past its time limit
    rungs: list[RungPoint] = field(default_factory=list)  # the scheduler's decisions
    stop_reason: str | None = None  # why the search stopped it (None: the front rule's)


class Running:
    """The launched trials (`live`, by number) and the seconds each may still run."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.live: dict[int, Live] = {}

    def __len__(self) -> int:
        return len(self.live)

    def add(self, proposal: Proposal, trial: Any, cost: AskCost | None) -> None:
        """A trial launched: every running trial ran beside this many at most."""
        self.live[proposal.number] = Live(proposal, trial, cost=cost)
        for live in self.live.values():
            live.concurrency = max(live.concurrency, len(self.live))

    def pending(self, memory: Callable[[Mapping[str, Any]], float],
                ) -> list[tuple[dict[str, Any], float]]:
        """Each running trial as a sampler sees it (`priced_ehvi.Pricing.pending`): its
        Optuna params and the `memory` objective of its priced estimate, by number."""
        return [(live.trial.params, memory(_figures(live.proposal)))
                for _, live in sorted(self.live.items())]

    def pop(self, number: int) -> Live | None:
        return self.live.pop(number, None)

    def attach(self, number: int, ray_trial_id: str) -> None:
        if number in self.live:
            self.live[number].ray_trial_id = ray_trial_id

    def trial_started(self, number: int) -> None:  # the engine's methods of these names
        live = self.live.get(number)
        if live is not None and live.started is None:
            live.started = self.clock()

    def remaining(self, number: int) -> float | None:
        live = self.live.get(number)
        limit = None if live is None else live.proposal.time_limit
        if live is None or limit is None:
            return None
        return limit - (self.clock() - live.started if live.started is not None else 0.0)

    def overdue(self) -> list[int]:
        return sorted(n for n, live in self.live.items() if live.started is not None
                      and not live.timed_out and (self.remaining(n) or 0.0) <= 0.0)

    def time_out(self, number: int) -> None:
        if number in self.live:
            self.live[number].timed_out = True

    def abandon(self) -> list[int]:
        """Forget every running trial; their numbers."""
        numbers = sorted(self.live)
        self.live.clear()
        return numbers


def _figures(proposal: Proposal) -> dict[str, int]:
    """The estimate's figures a `memory` objective reads (`to_dict` costs ~1 ms)."""
    est = proposal.estimate
    return {"allocated_peak": est.allocated_peak, "device_total": est.device_total,
            "overhead": est.overhead}


class Rungs:
    """The multi-fidelity scheduler's decisions at each running trial's rungs."""

    def __init__(self, scheduler: AshaScheduler, recorder: Recorder, repeatable: bool,
                 memory: Callable[[Mapping[str, Any]], float]) -> None:
        self.scheduler = scheduler
        self.recorder = recorder
        self.repeatable = repeatable
        self.memory = memory  # a stored estimate's `memory` objective

    def go_on(self, live: Live, evaluation: Mapping[str, Any],
              length: tuple[int, int]) -> bool:
        """The scheduler's decision at each rung this evaluation reaches (False: stop),
        every rung point recorded on the trial before it is acted on."""
        step = int(evaluation["step"])
        due = self.scheduler.due(step, length)
        if not due:
            return True
        values = {"quality": max(float(e["quality"]) for e in live.evaluations),
                  "memory": self.memory(live.proposal.estimate.to_dict())}
        elapsed = float(evaluation.get("elapsed_s", 0.0))
        if not self.repeatable and elapsed > 0:
            values["throughput"] = float(evaluation.get("samples", 0)) / elapsed
        decided = [self.scheduler.decide(live.proposal.number, f, step, values) for f in due]
        live.rungs.extend(decided)
        self.recorder.note(live.trial, RUNGS_ATTR, [p.encode() for p in live.rungs])
        for p in decided:
            self.scheduler.add(p)
        return all(p.go_on for p in decided)

    def restore(self, study: Any, rows: Iterable[TrialRow]) -> None:
        """The scheduler's state from the study: every recorded rung point, and the curves
        of the trials that ran to their full length."""
        for t in study.get_trials(deepcopy=False):
            raw = t.user_attrs.get(RUNGS_ATTR)
            if isinstance(raw, list):
                self.scheduler.restore(RungPoint.decode(t.number, p) for p in raw)
        for row in rows:
            self.learn(row)

    def learn(self, row: TrialRow) -> None:
        """Tell the scheduler a trial that ran to its full length (its curve)."""
        result = row.result
        if row.status != "complete" or result is None:
            return
        curve = [(e.step, e.quality) for e in result.curve]
        if len(curve) >= 2:
            length = (max(result.steps, curve[-1][0]), curve[0][0])
            self.scheduler.learn(row.number, curve, length, row.metrics.get("quality"))
