"""One row per trial, the objective values read from it, and their round trip through
Optuna's user attributes (the study storage is the single record of a search).

Pure Python plus the runner's dataclasses: no Optuna, no Ray.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.rules import plain
from autoembed.runner import Evaluation, TrialResult

__all__ = [
    "TRAINED_STATUSES",
    "TrialRow",
    "objective_metrics",
    "objective_vector",
    "optuna_values",
    "result_from_dict",
    "ATTR",
]

ATTR = "autoembed"  # the Optuna user-attribute key holding a trial's row
# Statuses of trials that reached a trainable (count against --trials).
TRAINED_STATUSES = ("complete", "pruned", "unsupported", "oom", "diverged", "failed")
# Optuna needs finite numbers for every objective of a COMPLETE trial. Placeholders for
# trials that produced none (infeasible, oom, diverged, unsupported): worse than any real
# value. Memory is the estimate itself (known even for those that never ran).
WORST = {"quality": 0.0, "throughput": 0.0, "latency": 1e9, "steps_to_target": 1e9}


@dataclass(frozen=True)
class TrialRow:
    """Everything the search knows about one Optuna trial (satisfies tracking.TrialRecord).

    config: the priced config (full-size tables, resolved, carrying its data spec);
    estimate: its MemoryEstimate.to_dict(); metrics: objective metrics and extras (None
    where unknown); params: the Optuna params; result: the TrialResult of the stand-in run
    (None when it never trained or ended without a result).
    """

    number: int
    status: str
    config: EmbeddingConfig
    estimate: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    result: TrialResult | None = None
    reason: str | None = None
    ray_trial_id: str | None = None
    overshoot: float = 0.0  # (device_total - budget) / budget; > 0 is over budget
    concurrency: int = 0  # most trials running at once while this one ran (0: never ran)
    retry_of: int | None = None
    interrupted: bool = False  # the driver stopped while it ran (not counted; re-queued)
    # where it ran: ray_node_id, ray_node_ip, ray_resources (custom resources it was given)
    node: Mapping[str, str] = field(default_factory=dict)

    @property
    def counted(self) -> bool:
        """Whether it used one of the search's trained trials (--trials)."""
        return self.status in TRAINED_STATUSES and not self.interrupted

    @property
    def values(self) -> Mapping[str, float]:
        """Objective metrics with missing values as NaN (pareto.Candidate)."""
        return {k: (math.nan if v is None else float(v)) for k, v in self.metrics.items()}

    @property
    def device_total(self) -> int:
        return int(self.estimate.get("device_total", 0))

    @property
    def feasible(self) -> bool:
        return self.overshoot <= 0

    def to_attr(self) -> dict[str, Any]:
        """Plain JSON for Optuna's user attribute."""
        return {
            "status": self.status,
            "config": self.config.to_dict(),
            "estimate": plain(self.estimate),
            "params": plain(self.params),
            "metrics": plain(self.metrics),
            "result": self.result.to_dict() if self.result is not None else None,
            "reason": self.reason,
            "ray_trial_id": self.ray_trial_id,
            "overshoot": self.overshoot,
            "concurrency": self.concurrency,
            "retry_of": self.retry_of,
            "interrupted": self.interrupted,
            "node": dict(self.node),
        }

    @classmethod
    def from_attr(cls, number: int, raw: Mapping[str, Any]) -> TrialRow:
        result = raw.get("result")
        return cls(
            number=number,
            status=str(raw["status"]),
            config=config_from_dict(raw["config"], f"trial {number} config"),
            estimate=dict(raw.get("estimate") or {}),
            params=dict(raw.get("params") or {}),
            metrics=dict(raw.get("metrics") or {}),
            result=result_from_dict(result) if result else None,
            reason=raw.get("reason"),
            ray_trial_id=raw.get("ray_trial_id"),
            overshoot=float(raw.get("overshoot", 0.0)),
            concurrency=int(raw.get("concurrency", 0)),
            retry_of=raw.get("retry_of"),
            interrupted=bool(raw.get("interrupted", False)),
            node=dict(raw.get("node") or {}),
        )

    def with_(self, **kw: Any) -> TrialRow:
        return replace(self, **kw)


def result_from_dict(d: Mapping[str, Any]) -> TrialResult:
    """Rebuild a TrialResult from `TrialResult.to_dict()` (it crossed Ray as JSON)."""
    kw = dict(d)
    kw["config"] = config_from_dict(kw["config"], "trial result config")
    kw["curve"] = tuple(Evaluation(**e) for e in kw.get("curve") or ())
    kw["metrics"] = dict(kw.get("metrics") or {})
    kw["latency_ms"] = dict(kw.get("latency_ms") or {})
    kw["estimate"] = dict(kw.get("estimate") or {})
    kw["env"] = dict(kw.get("env") or {})
    return TrialResult(**kw)


def _finite(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def objective_metrics(
    result: TrialResult, estimate: Mapping[str, Any], *, use_measured: bool
) -> dict[str, float | None]:
    """Metric values by objective name (and extras) for a trained trial.

    memory: the estimate's device_total, or, when a GPU measured the real peak and the
    trained config is the priced one (`use_measured`), measured reserved peak + overhead.
    latency: p50 at batch 1 in ms. steps_to_target: None when never reached.
    """
    device_total = int(estimate.get("device_total", 0))
    memory: float = float(device_total)
    measured = result.measured_reserved_peak
    if use_measured and measured is not None:
        memory = float(measured + int(estimate.get("overhead", 0)))
    return {
        # the search selects on validation; the test split is reported only
        "quality": _finite(result.valid_quality if result.valid_quality is not None
                           else result.quality),
        "test_quality": _finite(result.quality),
        "memory": memory,
        "throughput": _finite(result.throughput),
        "latency": _finite(result.latency_ms.get("p50_b1")),
        "steps_to_target": _finite(result.steps_to_target),
        "device_total": float(device_total),
        "allocated_peak": float(int(estimate.get("allocated_peak", 0))),
        "measured_allocated_peak": _finite(result.measured_allocated_peak),
        "serving_bytes": _finite(result.serving_bytes),
        "steps": float(result.steps),
        "train_seconds": _finite(result.train_seconds),
        "wall_seconds": _finite(result.wall_seconds),
        # placement host_cached (issue 9): the measured cache and the cost of its misses
        **{k: _finite(v) for k, v in result.metrics.items() if k.startswith("cache_")},
    }


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


def optuna_values(
    metrics: Mapping[str, float | None], objectives: Sequence[tuple[str, str]],
    device_total: int, placeholder: bool,
) -> list[float]:
    """Finite values for Optuna's tell: the metrics, or WORST placeholders where missing
    (all of them, memory aside, when `placeholder`)."""
    out = []
    for name, _ in objectives:
        if name == "memory":
            v = metrics.get("memory")
            out.append(float(v) if v is not None and not placeholder else float(device_total))
            continue
        v = None if placeholder else metrics.get(name)
        if v is None or not math.isfinite(float(v)):
            out.append(WORST[name])
        else:
            out.append(float(v))
    return out
