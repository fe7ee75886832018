"""The objective values a search reads from a trial record, and what Optuna is told.

The record itself (`TrialRow`) and its codec live in `autoembed.trial`; the study storage
holds it as the user attribute `ATTR`. Pure Python: no Optuna, no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autoembed.memory.objective import MEMORY_BASIS, memory_value
from autoembed.pareto import non_dominated
from autoembed.runner import SERVING_BATCH
from autoembed.space.objectives import TIMING
from autoembed.trial import TRAINED_STATUSES, TrialResult, TrialRow

__all__ = ["params_key", "TRAINED_STATUSES", "TrialRow", "objective_metrics", "objective_vector",
           "optuna_values", "front_of", "ATTR"]

ATTR = "autoembed"  # the Optuna user-attribute key holding a trial's row


def params_key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A proposal's Optuna params, order-free (params asked; "already tried" is the priced
    config's rule, `propose.trial_key`, which holds these where the params reach a trial)."""
    return tuple(sorted((str(k), repr(v)) for k, v in params.items()))


# Optuna's placeholders for a COMPLETE trial without a value (infeasible, oom, diverged,
# unsupported): worse than any real one (memory: the estimate itself)
WORST = {"quality": 0.0, "throughput": 0.0, "latency": 1e9, "steps_to_target": 1e9}


def _finite(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def objective_metrics(result: TrialResult, estimate: Mapping[str, Any], *, use_measured: bool,
                      memory_basis: str = MEMORY_BASIS) -> dict[str, float | None]:
    """Metric values by objective name (and extras) for a trained trial (their meanings:
    `trial.METRIC_COLUMNS`). memory: `memory.objective.memory_value` on `memory_basis`,
    measured where a GPU measured the priced config itself (`use_measured`)."""
    device_total = int(estimate.get("device_total", 0))
    memory = memory_value(
        estimate, memory_basis,
        measured_allocated=result.measured_allocated_peak if use_measured else None,
        measured_reserved=result.measured_reserved_peak if use_measured else None)
    return {
        # the search selects on validation; the test split is reported only
        "quality": _finite(result.objective_quality),
        "test_quality": _finite(result.test_quality),
        "memory": memory,
        "throughput": _finite(result.throughput),
        "latency": _finite(result.latency_ms.get("p50_b1")),
        "latency_serving": _finite(result.latency_ms.get(f"p50_b{SERVING_BATCH}")),
        "steps_to_target": _finite(result.steps_to_target),
        "samples_to_target": _finite(result.samples_to_target),
        "target": _finite(result.target),
        "best_step": _finite(result.best_step),
        "device_total": float(device_total),
        "allocated_peak": float(int(estimate.get("allocated_peak", 0))),
        "measured_allocated_peak": _finite(result.measured_allocated_peak),
        "serving_bytes": _finite(result.serving_bytes),
        "steps": float(result.steps),
        "train_seconds": _finite(result.train_seconds),
        "wall_seconds": _finite(result.wall_seconds),
        # placement host_cached: the measured cache and the cost of its misses
        **{k: _finite(v) for k, v in result.metrics.items() if k.startswith("cache_")}}


def objective_vector(
    metrics: Mapping[str, float | None], objectives: Sequence[tuple[str, str]]
) -> list[float]:
    """Values in objective order for Pareto maths; missing -> the worst (+-inf)."""
    out = []
    for name, direction in objectives:
        v = metrics.get(name)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(-math.inf if direction == "maximize" else math.inf)
        else:
            out.append(float(v))
    return out


def optuna_values(metrics: Mapping[str, float | None], objectives: Sequence[tuple[str, str]],
                  memory: float, placeholder: bool, timing: bool = True) -> list[float]:
    """Finite values for Optuna's tell: the metrics, or WORST placeholders where missing
    (all of them, memory aside, when `placeholder`; `memory` is the priced memory
    objective, which stands in for a missing or placeholder one). `timing` False (a
    repeatable search): the wall-clock objectives (`TIMING`) are told as one constant, so
    the sampler learns nothing that differs from run to run."""
    out = []
    for name, _ in objectives:
        if name == "memory":
            v = metrics.get("memory")
            out.append(float(v) if v is not None and not placeholder else float(memory))
            continue
        if name in TIMING and not timing:
            out.append(WORST[name])
            continue
        v = None if placeholder else metrics.get(name)
        if v is None or not math.isfinite(float(v)):
            out.append(WORST[name])
        else:
            out.append(float(v))
    return out


def front_of(rows: Iterable[TrialRow], objectives: Sequence[tuple[str, str]]) -> list[TrialRow]:
    """Complete, feasible rows no other such row dominates, in trial order."""
    done = [r for r in sorted(rows, key=lambda r: r.number)
            if r.status == "complete" and r.feasible]
    pts = [objective_vector(r.metrics, objectives) for r in done]
    return [done[i] for i in non_dominated(pts, [d for _, d in objectives])]
