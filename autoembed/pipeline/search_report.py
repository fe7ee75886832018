"""`SearchReport`: what a finished search found, as a pure value built from its trial rows,
then written (`write`): trials.csv, pareto.png, best.yaml, the vocabulary, and pareto.json
last (a reader that finds it finds the other files complete).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoembed.budget import Budget, format_bytes
from autoembed.errors import AutoembedError, ConfigError
from autoembed.pareto import PICK_RULES, Pick, pick
from autoembed.pipeline.records import front_of
from autoembed.space import Objective
from autoembed.trial import TrialRow

if TYPE_CHECKING:
    from autoembed.selection import NoiseMeasure

# the results a search writes into runs/<study>/ (`SearchReport.write`): a new study never
# writes over another's (driver)
RESULT_FILES = ("trials.csv", "best.yaml", "pareto.json")


__all__ = ["SearchReport", "SearchFailedError", "COUNTED_STATUSES", "RESULT_FILES"]

# the statuses pareto.json counts, in its order
COUNTED_STATUSES = ("complete", "infeasible", "pruned", "failed", "oom", "diverged",
                    "unsupported", "timeout", "interrupted")


class SearchFailedError(AutoembedError):
    """The search ran but no trial completed (exit status 1)."""

    exit_code = 1


@dataclass(frozen=True)
class SearchReport:
    """The front, the pick and the counts of a search's finished trials."""

    study: str
    budget: Budget
    objectives: tuple[Objective, ...]
    rule: Pick
    rows: tuple[TrialRow, ...]  # finished trials, by number
    front: tuple[TrialRow, ...]
    best: TrialRow | None  # None: nothing completed within the budget
    picks: Mapping[str, int]
    stop_reason: str | None = None
    noise: NoiseMeasure | None = None  # the within-noise slack, and how it was measured
    memory_basis: str | None = None  # what `memory` is (memory.objective; None: not said)
    floor: float | None = None  # the quality every pick but trial:N keeps to (pareto.pick)

    @classmethod
    def build(cls, rows: Sequence[TrialRow], objectives: Sequence[Objective], rule: Pick,
              budget: Budget, study: str, stop_reason: str | None = None,
              noise: Callable[[Sequence[TrialRow]], NoiseMeasure | None] | None = None,
              memory_basis: str | None = None, floor: float | None = None) -> SearchReport:
        """Pure apart from `noise`: rank the rows (running ones are left out) and pick.
        `noise(candidates)`: the within-noise rule's noise, measured (paired or not,
        `selection.measure_noise`; None: 0); `floor`: the quality a pick (all but trial:N)
        clears by the noise's `floor_noise` when the best member reaches it (`pareto.pick`;
        the workload's target)."""
        done = tuple(sorted((r for r in rows if r.status != "running"), key=lambda r: r.number))
        pairs = [(o.name, o.direction) for o in objectives]
        front = tuple(front_of(done, pairs))
        best: TrialRow | None = None
        picks: dict[str, int] = {}
        measured: NoiseMeasure | None = None
        if front:
            candidates: Sequence[TrialRow] = front
            if rule.rule == "trial" and all(r.number != rule.trial for r in front):
                candidates = [r for r in done if r.status == "complete" and r.feasible]
            measured = noise(candidates) if noise is not None else None
            slack = None if measured is None else measured.pick_noise(
                {r.number: float(r.values.get("quality", float("nan"))) for r in candidates})
            margin = 0.0 if measured is None else measured.floor_noise
            chosen = pick(candidates, rule, pairs, slack, floor, margin)
            assert isinstance(chosen, TrialRow)
            best = chosen
            for r in PICK_RULES:
                if r == "trial:N":
                    continue
                try:
                    picks[r] = pick(front, r, pairs, slack, floor, margin).number
                except ConfigError:
                    pass
        return cls(study, budget, tuple(objectives), rule, done, front, best, picks,
                   stop_reason, measured, memory_basis, floor)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)

    @property
    def objective_pairs(self) -> list[tuple[str, str]]:
        return [(o.name, o.direction) for o in self.objectives]

    @property
    def title(self) -> str:
        return (f"study {self.study}: {len(self.front)} on the front of "
                f"{self.count('complete')} complete, {self.count('infeasible')} over budget "
                f"{self.budget.text}")

    def failure(self, trials_csv: Path) -> AutoembedError | None:
        """Why there is no best (None when there is one): nothing fit the budget (exit 3),
        or nothing that fit completed (exit 1)."""
        if self.best is not None:
            return None
        from autoembed.pipeline.workload import NothingFitsError

        if (self.count("complete") == 0 and self.count("infeasible") > 0
                and not any(r.counted for r in self.rows)):
            return NothingFitsError(
                f"no proposal fit the budget {self.budget.text} = "
                f"{format_bytes(self.budget.bytes)} ({self.count('infeasible')} over budget; "
                f"{self.stop_reason}); narrow the space towards cheaper configs. "
                f"Trials: {trials_csv}")
        reasons = sorted({(r.reason_line or r.status) for r in self.rows if r.counted})[:3]
        return SearchFailedError(f"no trial completed within the budget ({self.stop_reason}); "
                                 f"e.g. {' | '.join(reasons) or 'none ran'}. Trials: {trials_csv}")

    def pareto_body(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """pareto.json: the report's figures and the search's `context` (data, settings,
        environment, timings, `baseline`), in pareto.json's order; `noise`: the within-noise
        slack and how it was measured (None: the slack was 0)."""
        from autoembed.trial import encode_member

        assert self.best is not None
        ours = {
            "study": self.study, "budget": self.budget.text, "budget_bytes": self.budget.bytes,
            "objectives": [o.to_dict() for o in self.objectives],
            "members": [encode_member(r) for r in self.front], "best": self.best.number,
            "pick": str(self.rule), "picks": dict(self.picks),
            "counts": {s: self.count(s) for s in COUNTED_STATUSES}, "stop_reason": self.stop_reason,
            "concurrency": max((r.concurrency for r in self.rows), default=0),
            "noise": None if self.noise is None else self.noise.to_dict(), "floor": self.floor,
            "memory_basis": self.memory_basis}
        order = ("study", "budget", "budget_bytes", "objectives", "members", "best", "pick",
                 "picks", "noise", "floor", "baseline", "memory_basis", "counts",
                 "trainables_started", "stop_reason", "workload", "space", "data",
                 "data_sha256", "data_keys", "trained_on", "stand_in", "run",
                 "functions", "sampler", "seed", "repeatable",
                 "early_stop", "device", "workers", "concurrency", "threads", "cpus",
                 "versions", "recovered", "wall_seconds", "finished_at")
        merged = {**context, **ours}
        return {k: merged.get(k) for k in order}

    def budget_line(self) -> int:
        """The budget on the `memory` objective's scale (pareto.png): the budget itself, or,
        when memory is the allocated peak, the budget less the best's fixed overhead."""
        if self.memory_basis != "allocated_peak" or self.best is None:
            return self.budget.bytes
        return self.budget.bytes - int(self.best.estimate.get("overhead", 0))

    def plot_labels(self, workload: str | None = None) -> dict[str, str]:
        """pareto.png's legend for the budget line and the pick (what the budget judges),
        the memory axis's label (what the objective is) and, for a search of the user's
        own model (`workload` "user"), the quality axis's: what the loop reports, not
        autoembed's AUC or accuracy."""
        from autoembed.memory.objective import judged_text

        assert self.best is not None
        less = self.budget.bytes - self.budget_line()
        budget = f"budget {self.budget.text}" + (
            f" less the {format_bytes(less).split(' (')[0]} fixed overhead" if less else "")
        best = (f"best (trial {self.best.number}: "
                f"{judged_text(self.best.device_total, self.budget.bytes)})")
        basis = (self.memory_basis or "allocated_peak").replace("_", " ")
        out = {"budget": budget, "best": best, "memory": f"memory objective ({basis})"}
        if workload == "user":
            out["quality"] = "quality (what your loop reports)"
        return out

    def source(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """best.yaml's `source` block (`training.source_block`, the shape an exported file's
        has): the study, the trial, the pick, the budget, the pick's metrics, its memory as
        the budget judged it (`memory.objective.judged`) and the data it trained on."""
        from autoembed.memory.objective import judged
        from autoembed.training import source_block

        assert self.best is not None
        return source_block(
            self.study, self.best.number, str(self.rule), self.best.metrics,
            judged(self.best.estimate, self.budget.bytes, self.budget.text, self.memory_basis),
            budget=self.budget.text, budget_bytes=self.budget.bytes,
            trained_on=context.get("trained_on"))

    def write(self, out_dir: Path, context: Mapping[str, Any], vocab: Any = None,
              notes: dict[str, str] | None = None,
              best_record: Callable[[TrialRow, Mapping[str, Any]], Mapping[str, Any]]
              | None = None,
              ) -> dict[str, Path]:
        """Write the files (pareto.json last) and return them by name. No front: only
        trials.csv is written. `vocab(path)` saves the data's vocabulary (optional);
        `notes` collects errors that cost a file but not the search (plot, vocabulary);
        `best_record(row)`: what best.yaml holds of the pick (`Workload.best_record`;
        default its whole config)."""
        from autoembed.pipeline import outputs

        notes = notes if notes is not None else {}
        files: dict[str, Path] = {}
        files["trials.csv"] = outputs.write_trials_csv(
            self.rows, out_dir / "trials.csv", [r.number for r in self.front])
        if self.best is None:
            return files
        try:
            files["pareto.png"] = outputs.write_pareto_png(
                self.rows, self.front, self.best, self.objective_pairs, out_dir / "pareto.png",
                self.title, self.budget_line(), self.plot_labels(context.get("workload")))
        except Exception as e:  # noqa: BLE001 - a missing plot must not lose the search
            notes["plot_error"] = f"{type(e).__name__}: {e}"
        record = (best_record or (lambda r, c: {"config": r.config.to_dict()}))(
            self.best, context)
        files["best.yaml"] = outputs.write_best_yaml(self.best, out_dir / "best.yaml",
                                                     {**record, "source": self.source(context)})
        if vocab is not None:
            try:
                files["vocab"] = Path(vocab(out_dir / "vocab"))
            except Exception as e:  # noqa: BLE001 - export can still work from the data spec
                notes["vocab_error"] = f"{type(e).__name__}: {e}"
        if (out_dir / "calibration.json").exists():
            files["calibration.json"] = out_dir / "calibration.json"
        files["pareto.json"] = outputs.write_pareto_json(self.pareto_body(context),
                                                         out_dir / "pareto.json")
        return files
