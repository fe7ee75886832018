"""What one trial becomes in MLflow: params, metrics and tags as plain values. Pure functions
(no MLflow import); the metric names are documented in docs/mlflow.md: the curve
(`valid_quality`, `valid_<metric>` by step); `quality`, `test_quality` and the test split's
metrics; `estimate_<category>`, and only where a GPU measured them `measured_*_peak` and
`estimate_rel_error[_reserved]` = (estimate - measured) / measured; `rss_peak` (host memory);
speed and cost figures; the record's other objective values and `budget_overshoot`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoembed.memory.types import BYTE_FIGURES

__all__ = ["MAX_PARAM_CHARS", "MAX_TAG_CHARS", "MetricPoint", "RunPayload",
           "trial_payload", "run_name"]

# MLflow limits (mlflow.utils.validation): param values 6000 chars, tag values 8000.
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 8000
# Statuses whose MLflow run ends FAILED (the trial tried to train and could not finish).
_FAILED_STATUSES = frozenset({"unsupported", "oom", "diverged", "timeout", "failed"})


@dataclass(frozen=True)
class MetricPoint:
    """One metric value; `offset_ms` is its time after the trial's start."""

    key: str
    value: float
    step: int = 0
    offset_ms: int = 0


@dataclass(frozen=True)
class RunPayload:
    """Everything logged on one trial's run, and how the run ends."""

    name: str
    params: Mapping[str, str]
    metrics: tuple[MetricPoint, ...]
    tags: Mapping[str, str]
    run_status: str  # MLflow's: FINISHED, FAILED or KILLED (interrupted)
    duration_ms: int


def run_name(number: int, status: str) -> str:
    """`trial-0007`, or `infeasible-0007` for a proposal that never trained."""
    kind = "infeasible" if status == "infeasible" else "trial"
    return f"{kind}-{number:04d}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: Any) -> float | None:
    """A loggable float, or None for missing values (bools and non-numbers are skipped)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _relative_error(estimate: float | None, measured: float | None) -> float | None:
    if estimate is None or measured is None or measured <= 0:
        return None
    return (estimate - measured) / measured


def _result_metrics(result: Any, estimate: Mapping[str, Any]) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    for ev in result.curve:
        at = int(round(ev.elapsed_s * 1000))
        out.append(MetricPoint("valid_quality", float(ev.quality), ev.step, at))
        for k, v in sorted(ev.metrics.items()):
            f = _number(v)
            if f is not None:
                out.append(MetricPoint(f"valid_{k}", f, ev.step, at))
    final: dict[str, Any] = {
        "quality": result.objective_quality, "test_quality": result.test_quality,
        **dict(result.metrics),
        **{k: getattr(result, k) for k in (
            "throughput", "steps_to_target", "samples_to_target", "target", "steps", "samples",
            "serving_bytes", "quality_before_quantization", "measured_allocated_peak",
            "measured_reserved_peak", "rss_peak", "train_seconds", "wall_seconds")}}
    final.update({f"latency_{k}_ms": v for k, v in result.latency_ms.items()})
    trained = result.estimate or estimate  # the trained config's (a stand-in's, maybe)
    final["estimate_rel_error"] = _relative_error(
        _number(trained.get("allocated_peak")), _number(result.measured_allocated_peak))
    final["estimate_rel_error_reserved"] = _relative_error(
        _number(trained.get("reserved_peak")), _number(result.measured_reserved_peak))
    end = int(result.wall_seconds * 1000)
    return out + [MetricPoint(k, f, result.steps, end) for k, v in final.items()
                  if (f := _number(v)) is not None]


def trial_payload(record: Any, study: str) -> RunPayload:
    """The run of one trial record; an infeasible proposal's carries its params, estimate
    metrics and reason only."""
    result = record.result
    estimate: Mapping[str, Any] = record.estimate or (result.estimate if result else {})
    params = {k: _clip(str(v), MAX_PARAM_CHARS) for k, v in record.config.flat_params().items()}
    metrics = [MetricPoint(f"estimate_{name}", v) for name in BYTE_FIGURES
               if (v := _number(estimate.get(name))) is not None]
    tags = {
        "autoembed.role": "trial", "autoembed.study": study, "trial": str(record.number),
        "status": record.status}
    if record.ray_trial_id:
        tags["ray_trial_id"] = str(record.ray_trial_id)
    # where it ran: the Ray node and the custom resources it was given (read when present)
    for k, v in dict(getattr(record, "node", None) or {}).items():
        tags[str(k)] = _clip(str(v), MAX_TAG_CHARS)
    if estimate.get("method"):
        tags["estimate_method"] = str(estimate["method"])
    reason = record.reason or (result.error if result is not None else None)
    if reason:
        tags["reason"] = _clip(str(reason), MAX_TAG_CHARS)
    duration = int(result.wall_seconds * 1000) if result is not None else 0
    if result is not None:
        metrics.extend(_result_metrics(result, estimate))
    # The search's own objective values (e.g. `memory`, `latency`) where not logged already,
    # and how far over the budget a proposal was.
    logged = {m.key for m in metrics}
    for k, v in dict(getattr(record, "metrics", None) or {}).items():
        f = _number(v)
        if f is not None and str(k) not in logged and f"estimate_{k}" not in logged:
            metrics.append(MetricPoint(str(k), f, getattr(result, "steps", 0) or 0, duration))
    overshoot = _number(getattr(record, "overshoot", None))
    if overshoot is not None and overshoot > 0:
        metrics.append(MetricPoint("budget_overshoot", overshoot))
    if result is not None:
        for k in ("device", "device_name", "torch", "threads"):
            if k in result.env:
                tags[f"env.{k}"] = _clip(str(result.env[k]), MAX_TAG_CHARS)
    metrics = [m for m in metrics if not math.isinf(m.value)]  # MLflow stores NaN, not inf
    status = ("FAILED" if record.status in _FAILED_STATUSES else
              "KILLED" if record.status == "interrupted" else "FINISHED")
    return RunPayload(run_name(record.number, record.status), params, tuple(metrics), tags,
                      status, duration)
