"""Whether a priced proposal may train: `Feasibility.judge(estimate) -> Verdict`. The rules are
checked in order and the first that does not fit decides; when all fit, the verdict is the
first rule's (the device budget's slack, negative). Overshoot is relative, > 0 infeasible
(Optuna's `memory` constraint):

* budget: (device_total - budget) / budget (of the largest rank, for a sharded plan);
* OOM ceiling: at or above the smallest predicted size that ran out of memory,
  (device_total - ceiling) / ceiling + OOM_VIOLATION;
* host budget (host_cached tables): (host_bytes - host budget) / host budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from autoembed.budget import Budget, MemoryBudget
from autoembed.memory.types import MemoryEstimate
from autoembed.trial import TrialRow

__all__ = ["Verdict", "Rule", "Feasibility", "budget_rule", "host_budget_rule", "oom_ceiling_rule",
           "oom_ceiling", "OOM_VIOLATION"]

OOM_VIOLATION = 0.01  # memory constraint of a trial that ran out of memory although priced in


@dataclass(frozen=True)
class Verdict:
    """fits: the proposal may train; overshoot: relative excess (> 0 over, <= 0 slack);
    reason: why it does not fit (None when it fits)."""

    fits: bool
    overshoot: float
    reason: str | None = None


Rule = Callable[[MemoryEstimate], Verdict]
Ceiling = Callable[[], "tuple[int, int] | None"]  # (bytes, trial) or None


def oom_ceiling(rows: Iterable[TrialRow]) -> tuple[int, int] | None:
    """(bytes, trial) of the smallest predicted device_total that ran out of memory."""
    ooms = [(r.device_total, r.number) for r in rows if r.status == "oom" and r.device_total > 0]
    return min(ooms) if ooms else None


def budget_rule(budget: Budget) -> Rule:
    """device_total within the device budget; an estimate of several ranks (`per_gpu`, each
    rank against the budget: a sharded plan) names the largest rank over it."""
    def rule(est: MemoryEstimate) -> Verdict:
        fits, over = budget.admits(est.device_total), budget.overshoot(est.device_total)
        return Verdict(fits, over, None if fits else _over_budget(est, budget, over))
    return rule


def _over_budget(est: MemoryEstimate, budget: Budget, over: float) -> str:
    excess = f"by {est.device_total - budget.bytes:,} B ({100 * over:.1f}%)"
    ranks = sorted((g for g in est.per_gpu if not budget.admits(g.device_total)),
                   key=lambda g: (-g.device_total, g.gpu))
    if not ranks:
        return (f"device_total {est.device_total:,} B exceeds the budget {budget.bytes:,} B by "
                f"{100 * over:.1f}%")
    also = (f"; rank{'s' if len(ranks) > 2 else ''} {', '.join(str(g.gpu) for g in ranks[1:])}"
            " too" if len(ranks) > 1 else "")
    return (f"rank {ranks[0].gpu} of {est.gpus} needs {est.device_total:,} B of device memory, "
            f"over the per-device budget {budget.bytes:,} B {excess}{also}")


def oom_ceiling_rule(ceiling: Ceiling) -> Rule:
    """device_total below the smallest predicted size that ran out of memory (read anew at
    each proposal: the ceiling drops as OOMs come in)."""
    def rule(est: MemoryEstimate) -> Verdict:
        c = ceiling()
        if c is None or est.device_total < c[0]:
            return Verdict(True, 0.0)
        over = (est.device_total - c[0]) / c[0] + OOM_VIOLATION
        return Verdict(False, over, (
            f"device_total {est.device_total:,} B is at or above {c[0]:,} B, the predicted "
            f"size of trial {c[1]} that ran out of memory (OOM calibration rule)"))
    return rule


def host_budget_rule(host_budget: Budget) -> Rule:
    """host_bytes (host_cached tables) within the host budget."""
    def rule(est: MemoryEstimate) -> Verdict:
        fits, over = host_budget.admits(est.host_bytes), host_budget.overshoot(est.host_bytes)
        return Verdict(fits, over, None if fits else (
            f"host_bytes {est.host_bytes:,} B exceeds the host budget {host_budget.bytes:,} B "
            f"by {100 * over:.1f}%"))
    return rule


@dataclass(frozen=True)
class Feasibility:
    """An ordered rule list; `judge` is pure apart from what the rules read."""

    rules: Sequence[Rule]

    @classmethod
    def for_search(cls, budget: MemoryBudget, ceiling: Ceiling) -> Feasibility:
        """The device budget, the OOM ceiling, the host budget (where given)."""
        rules = [budget_rule(budget.device), oom_ceiling_rule(ceiling)]
        if budget.host is not None:
            rules.append(host_budget_rule(budget.host))
        return cls(tuple(rules))

    def judge(self, estimate: MemoryEstimate) -> Verdict:
        first: Verdict | None = None
        for rule in self.rules:
            v = rule(estimate)
            if not v.fits:
                return v
            first = first or v
        return first or Verdict(True, 0.0)
