"""Outcome: the study's rows, and how Optuna is told each trial (tell, costs, statuses).

`Outcomes.record` keeps a row and hands it to the `Recorder`; `Outcomes.ended` is the row of
a launched trial that ended and how Optuna is told it. A `timeout` is told as a diverged
trial is (COMPLETE with placeholder values, the `runs` constraint violated). The
constraints and the OOM ceiling (`oom_ceiling`): `pipeline.engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoembed.memory.objective import memory_value
from autoembed.pipeline.feasibility import OOM_VIOLATION, oom_ceiling
from autoembed.pipeline.propose import SearchSettings
from autoembed.pipeline.recorder import Recorder
from autoembed.pipeline.records import TrialRow, objective_metrics, optuna_values
from autoembed.pipeline.running import Live
from autoembed.selection import ValidScores
from autoembed.trial import decode_result

__all__ = ["Outcome", "Outcomes", "NODE_KEYS"]

NODE_KEYS = ("ray_node_id", "ray_node_ip", "ray_resources")


@dataclass(frozen=True)
class Outcome:
    """How Optuna is told a trial: COMPLETE with values and constraints, PRUNED or FAIL."""

    state: str  # complete | pruned | fail
    values: Sequence[float] = ()
    memory: float = 0.0  # constraints (Optuna: <= 0 is feasible)
    runs: float = 0.0


class Outcomes:
    """The study's rows (`rows`, loaded from the study) and its trials' validation scores
    (`valid_scores`, for the pick); what each trial is told."""

    def __init__(self, study: Any, settings: SearchSettings, recorder: Recorder,
                 clock: Callable[[], float]) -> None:
        from autoembed.pipeline.study import load_rows, load_scores

        self.study = study
        self.settings = settings
        self.workload = settings.workload
        self.recorder = recorder
        self.clock = clock
        self.rows: dict[int, TrialRow] = load_rows(study)
        # completed trials' validation predictions for the pick, stored with each trial
        self.valid_scores: dict[int, ValidScores] = load_scores(study)

    def oom_ceiling(self) -> tuple[int, int] | None:
        """(bytes, trial) of the smallest predicted device_total that ran out of memory."""
        return oom_ceiling(self.rows.values())

    def memory(self, estimate: Mapping[str, Any]) -> float:
        """The priced `memory` objective of a stored estimate (memory.objective)."""
        return memory_value(estimate, self.settings.memory_basis)

    def record(self, row: TrialRow, trial: Any = None, outcome: Outcome | None = None) -> None:
        """Keep `row`, and hand it to the recorder: attributes on `trial` first, then tell
        Optuna `outcome`, then the other sinks."""
        from optuna.trial import TrialState

        self.rows[row.number] = row

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

    def complete(self, row: TrialRow, *, placeholder: bool, runs: float) -> Outcome:
        """COMPLETE with `row`'s values (placeholders where it has none) and constraints."""
        s = self.settings
        return Outcome("complete", optuna_values(row.metrics, s.objectives,
                                                 self.memory(row.estimate), placeholder,
                                                 timing=not s.repeatable),
                       row.overshoot, runs)

    def rejected(self, row: TrialRow) -> Outcome:
        """How Optuna is told a proposal rejected before it ran: one that does not fit
        (`infeasible`) with placeholder values and its `memory` constraint; one its
        workload could not price (`failed`) with placeholder values and `runs` violated."""
        if row.status == "infeasible":
            return self.complete(row, placeholder=True, runs=0.0)
        values = optuna_values({}, self.settings.objectives, self.settings.budget.bytes, True)
        return Outcome("complete", values, 0.0, 1.0)

    def ended(self, live: Live, final: Mapping[str, Any] | None,
              error: str | None) -> tuple[TrialRow, Outcome]:
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
                    "quality": last.get("quality"), "memory": self.memory(p.estimate.to_dict()),
                    "steps": float(last.get("step", 0)), **cost}, reason=(
                    f"stopped at step {last.get('step')}: a front member is at least as good "
                    "on every objective as this trial could still reach")), Outcome("pruned")
            why = error or (final or {}).get("error") or "the trial ended without a result"
            return (old.with_(status="failed", metrics=cost, reason=str(why)),
                    Outcome("fail"))
        result = decode_result(final["result"])
        scores = ValidScores.unpack(final.get("valid_scores"))
        if scores is not None and result.status == "complete":
            self._keep_scores(live.trial, p.number, scores)
        metrics = {**objective_metrics(result, p.estimate.to_dict(),
                                       use_measured=self.workload.use_measured,
                                       memory_basis=self.settings.memory_basis), **cost}
        row = old.with_(status=result.status, metrics=metrics, reason=result.error,
                        result=result)
        if result.status == "complete":
            return row, self.complete(row, placeholder=False, runs=0.0)
        if result.status == "oom":
            return self._oom(row, live)
        if result.status in ("diverged", "unsupported"):
            return row, self.complete(row, placeholder=True, runs=1.0)
        # failed (or pruned by the runner itself, which the search never asks for)
        pruned = result.status == "pruned"
        return (row.with_(status="pruned" if pruned else "failed"),
                Outcome("pruned" if pruned else "fail"))

    def _oom(self, row: TrialRow, live: Live) -> tuple[TrialRow, Outcome]:
        """An out-of-memory trial: its predicted and failed sizes (the measured reserved
        peak plus overhead on a GPU, else the predicted size), `memory` violated."""
        p, result = live.proposal, row.result
        assert result is not None
        predicted = p.estimate.device_total
        measured = result.measured_reserved_peak
        failed = (measured + p.estimate.overhead if measured is not None
                  and not self.workload.stand_in else predicted)
        row = row.with_(metrics={**row.metrics, "oom_predicted_bytes": float(predicted),
                                 "oom_failed_bytes": float(failed)}, reason=(
            f"{result.error}; predicted device_total {predicted:,} B, failed at "
            f"{failed:,} B: later proposals at or above {predicted:,} B are infeasible"),
            overshoot=max(row.overshoot, OOM_VIOLATION))
        return row, self.complete(row, placeholder=True, runs=0.0)

    def _keep_scores(self, trial: Any, number: int, scores: ValidScores) -> None:
        """A completed trial's validation scores: for the pick, and stored on the trial
        before it is told (a resumed search picks by the same paired rule)."""
        from autoembed.pipeline.study import scores_attrs

        self.valid_scores[number] = scores
        for key, part in scores_attrs(scores).items():
            self.recorder.note(trial, key, part)

    def _cost(self, live: Live, final: Mapping[str, Any] | None) -> dict[str, float | None]:
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

    def _timeout(self, old: TrialRow, live: Live,
                 cost: Mapping[str, float | None]) -> tuple[TrialRow, Outcome]:
        """The row of a trial ended past its time limit, told to Optuna as a diverged one;
        its cost is the seconds it ran until it was ended (`_ran`)."""
        last = live.evaluations[-1] if live.evaluations else {}
        limit = live.proposal.time_limit or 0.0
        row = old.with_(status="timeout", metrics={
            "steps": float(last.get("step", 0)),
            "memory": self.memory(live.proposal.estimate.to_dict()),
            **self._ran(live, cost)}, reason=(
            f"ran past its time limit of {limit:g} s and was ended (at step "
            f"{last.get('step', 0)}); --trial-time-limit or the space's trial_time_limit "
            "sets the limit"))
        return row, self.complete(row, placeholder=True, runs=1.0)

    def _ran(self, live: Live, cost: Mapping[str, float | None]) -> dict[str, float | None]:
        """A timed-out trial's cost: its wall seconds from its start to its end reaching the
        driver (at least its stamp), those after its last report counted as training."""
        last = live.evaluations[-1] if live.evaluations else {}
        ran = self.clock() - live.started if live.started is not None else 0.0
        wall = max(float(cost.get("wall_seconds") or 0.0), ran)
        train = float(last.get("train_s") or 0.0) + max(
            wall - float(last.get("wall_s") or 0.0), 0.0)
        out = {**cost, "wall_seconds": wall, "train_seconds": train}
        if live.cost is not None:
            out.update(live.cost.metrics(self.clock(), train))
        return out


def _seconds(v: Any) -> float | None:
    return None if v is None else float(v)


def _node(final: Mapping[str, Any] | None, live: Live) -> dict[str, str]:
    """Where a trial ran, from its last report (every report carries it: a trial stopped
    early has no final one)."""
    for report in ((final or {}).get("node"), *reversed(live.evaluations)):
        if report and report.get("ray_node_id"):
            return {k: str(report[k]) for k in NODE_KEYS if k in report}
    return {}
