"""Early stopping that keeps the cheap end of the front: stop a running trial only when a
finished front member is at least as good on *every* objective as the best the trial could
still reach (its optimistic projection, `optimistic_metrics`):

* quality: the last validation quality plus its latest gain per evaluation times the
  evaluations left, plus QUALITY_SLACK; under `keeps_best` at least the best it has shown;
* memory: the priced memory objective (exact before training);
* throughput: samples / elapsed times THROUGHPUT_OPTIMISM;
* latency: unknown until the end, so 0 (never stopped under a latency objective);
* steps_to_target: the step it was reached at, or the next evaluation's step.

Decisions start at the MIN_EVALS-th evaluation. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoembed.pareto import dominates

__all__ = ["Progress", "optimistic_metrics", "cannot_reach_front", "MIN_EVALS", "QUALITY_SLACK",
           "THROUGHPUT_OPTIMISM"]

MIN_EVALS = 2  # evaluations before a trial may be stopped (one gives no slope)
QUALITY_SLACK = 0.005  # quality (AUC/accuracy) a trial may still gain beyond the projection
THROUGHPUT_OPTIMISM = 1.5  # elapsed includes evaluation; final throughput excludes it


@dataclass(frozen=True)
class Progress:
    """What a running trial has shown so far (its intermediate evaluations)."""

    qualities: tuple[float, ...]
    step: int
    samples: int
    elapsed_s: float
    max_steps: int
    eval_every: int
    device_total: float
    target: float | None = None
    reached_at: int | None = None
    keeps_best: bool = False  # its final quality is its best evaluation's (module docstring)


def optimistic_metrics(p: Progress) -> dict[str, float]:
    """The best each objective could still end at (see the module docstring)."""
    q = p.qualities[-1]
    gain = max(0.0, q - p.qualities[-2]) if len(p.qualities) >= 2 else 1.0
    left = max(0, math.ceil((p.max_steps - p.step) / p.eval_every))
    reach = q + gain * left
    if p.keeps_best:
        reach = max(reach, *p.qualities)
    quality = min(1.0, reach + QUALITY_SLACK)
    throughput = (p.samples / p.elapsed_s * THROUGHPUT_OPTIMISM) if p.elapsed_s > 0 else math.inf
    steps = float(p.reached_at) if p.reached_at is not None else float(
        min(p.max_steps, p.step + p.eval_every))
    return {
        "quality": quality, "memory": float(p.device_total), "throughput": throughput,
        "latency": 0.0, "steps_to_target": steps}


def cannot_reach_front(progress: Progress, front: Sequence[Mapping[str, float | None]],
                       objectives: Sequence[tuple[str, str]]) -> bool:
    """True when some front member dominates the trial's optimistic metrics."""
    if len(progress.qualities) < MIN_EVALS or not front:
        return False
    best = optimistic_metrics(progress)
    directions = [d for _, d in objectives]
    mine = [best[n] for n, _ in objectives]
    for member in front:
        vals = []
        for n, d in objectives:
            v = member.get(n)
            vals.append((-math.inf if d == "maximize" else math.inf) if v is None else float(v))
        if dominates(vals, mine, directions):
            return True
    return False
