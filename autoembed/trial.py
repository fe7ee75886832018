"""One trial, one record: what the runner measured (`TrialResult` with its `Evaluation`s),
what a search knows about it (`TrialRow`), and the one codec between them and plain JSON
(for Ray, Optuna, metrics.json, pareto.json members, trials.csv rows; it reads every version
this project stored: an older result's test figure under `quality` as `test_quality`).
Imports only `config` (no torch, no Optuna).

A trial's *objective* quality is validation's primary metric at its last step, or under
`RunSettings.fit_to_data` at its best evaluation, `best_step` (`objective_quality`: the rule
lives here only); the test figure, `test_quality`, is reported, never selected on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from autoembed.config import EmbeddingConfig, config_from_dict
from autoembed.errors import ConfigError
from autoembed.rules import plain

__all__ = ["TRAINED_STATUSES", "METRIC_COLUMNS", "COST_COLUMNS", "Evaluation",
           "TrialResult", "TrialRow", "objective_quality", "encode_result", "decode_result",
           "encode_row", "decode_row", "encode_member", "csv_header", "encode_csv_row",
           "decode_csv_row", "ESTIMATE_COLUMNS", "rank_entry", "rank_figures", "config_from_flat",
           "plain"]

# Statuses of trials that reached a trainable (count against --trials).
TRAINED_STATUSES = ("complete", "pruned", "unsupported", "oom", "diverged", "timeout",
                    "failed")
# A row's metrics as trials.csv columns (docs/searching.md: `quality` the objective,
# `test_quality` reported; `best_step` the step `quality` is of)
METRIC_COLUMNS = ("quality", "test_quality", "memory", "throughput", "latency",
                  "latency_serving", "steps_to_target", "samples_to_target", "target",
                  "measured_allocated_peak", "steps", "best_step", "train_seconds",
                  "wall_seconds", "cpu_seconds", "ask_seconds", "pricing_seconds",
                  "overhead_seconds", "cache_hit_rate", "cache_time_share",
                  "cache_bytes_per_step")
# What a trial cost the search, on every row (docs/searching.md); a timed-out trial's
# seconds after its last evaluation count as training
COST_COLUMNS = ("train_seconds", "wall_seconds", "cpu_seconds", "ask_seconds",
                "pricing_seconds", "overhead_seconds")


def objective_quality(valid: float | None, test: float | None) -> float | None:
    """The quality a search selects on: validation if present, else test."""
    return valid if valid is not None else test


@dataclass(frozen=True)
class Evaluation:
    """One validation evaluation (what a scheduler sees). `elapsed_s`: seconds since the loop
    started; `train_s`: of them, in optimizer steps (None: not known apart, a user's loop)."""

    step: int
    samples: int
    quality: float
    metrics: dict[str, float]
    elapsed_s: float
    train_s: float | None = None


@dataclass(frozen=True)
class TrialResult:
    """Everything one trial measured. `test_quality` is the primary metric on the test split:
    AUC (ctr) or accuracy (text), reported, never selected on; `valid_quality` is the same
    metric on the validation split at `best_step` (the last step, or the best evaluation's
    under fit_to_data), which a search selects on (`objective_quality`); the test and
    serving figures are of the same weights."""

    status: str
    config: EmbeddingConfig
    test_quality: float | None = None
    valid_quality: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    curve: tuple[Evaluation, ...] = ()
    steps: int = 0
    samples: int = 0
    throughput: float | None = None
    steps_to_target: int | None = None
    samples_to_target: int | None = None
    target: float | None = None
    # the evaluation `valid_quality` is of (the last, or under fit_to_data the best): what
    # `autoembed train` reruns to reproduce the trial (export writes it)
    best_step: int | None = None
    best_samples: int | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    serving_bytes: int | None = None
    quality_before_quantization: float | None = None
    estimate: dict[str, Any] = field(default_factory=dict)
    measured_allocated_peak: int | None = None
    measured_reserved_peak: int | None = None
    rss_peak: int | None = None
    error: str | None = None
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    # CPU seconds of the process in the optimizer steps (its torch threads too); 0: unknown
    train_cpu_seconds: float = 0.0
    env: dict[str, Any] = field(default_factory=dict)
    # wall time fetching training batches, and evaluating (validation, test, latency)
    data_seconds: float = 0.0
    eval_seconds: float = 0.0
    # a trial that ran as several processes (a sharded TorchRec trial): each rank's figures,
    # its measured step peak beside its estimate (`rank_entry`)
    ranks: tuple[Mapping[str, Any], ...] = ()
    # the validation predictions `valid_quality` is of (selection.ValidScores): carried to
    # the driver beside the result (`final_report`) for the within-noise pick; never encoded
    valid_scores: Any = field(default=None, compare=False, repr=False)

    @property
    def objective_quality(self) -> float | None:
        """The search's `quality` objective (validation, else test)."""
        return objective_quality(self.valid_quality, self.test_quality)

    def to_dict(self) -> dict[str, Any]:
        return encode_result(self)


AS_WRITTEN = "as written"  # TrialRow.origin: the user's model as `build` returns it
ENQUEUED = "enqueued"  # TrialRow.origin: a config the user enqueued (--enqueue)


@dataclass(frozen=True)
class TrialRow:
    """Everything the search knows about one Optuna trial: the one trial record, read by the
    engine, the outputs, tracking and export.

    config: the priced config (full-size tables, resolved, carrying its data spec);
    estimate: its MemoryEstimate.to_dict() (the stored form); metrics: objective metrics and
    extras (None where unknown); params: the Optuna params; result: the TrialResult of the
    stand-in run (None when it never trained or ended without a result).
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
    # who chose it: AS_WRITTEN (the user's model without apply), ENQUEUED (the user's list),
    # None (the sampler, a start point or a retry of a sampler's trial)
    origin: str | None = None

    @property
    def counted(self) -> bool:
        """Whether it used one of the search's trained trials (--trials)."""
        return self.status in TRAINED_STATUSES and not self.interrupted

    @property
    def values(self) -> Mapping[str, float]:
        """Objective metrics with missing values as NaN (pareto.Candidate)."""
        return {k: (math.nan if v is None else float(v)) for k, v in self.metrics.items()}

    @property
    def reason_line(self) -> str:
        """The reason's first line, what a progress line or a one-line error quotes (the
        user's traceback below it stays in `reason`)."""
        return (self.reason or "").strip().split("\n", 1)[0]

    @property
    def device_total(self) -> int:
        return int(self.estimate.get("device_total", 0))

    @property
    def feasible(self) -> bool:
        return self.overshoot <= 0

    @classmethod
    def from_attr(cls, number: int, raw: Mapping[str, Any]) -> TrialRow:
        return decode_row(number, raw)

    def with_(self, **kw: Any) -> TrialRow:
        return replace(self, **kw)


_RESULT_FIELDS = frozenset(f.name for f in fields(TrialResult))
# keys earlier versions stored under another name: old -> current
_RESULT_RENAMED = {"quality": "test_quality"}


def encode_result(r: TrialResult) -> dict[str, Any]:
    """A TrialResult as plain data (crosses Ray as JSON; stored in Optuna; metrics.json)."""
    d = asdict(replace(r, valid_scores=None))
    del d["valid_scores"]  # carried beside the result (see the field)
    d["config"] = r.config.to_dict()
    d["curve"] = [asdict(e) for e in r.curve]
    return d


def decode_result(d: Mapping[str, Any]) -> TrialResult:
    """Rebuild a TrialResult from `encode_result` output, or from what an earlier version
    stored (its test figure under `quality`; fields it lacked take their defaults)."""
    kw = {_RESULT_RENAMED.get(k, k): v for k, v in d.items()
          if k not in _RESULT_RENAMED or _RESULT_RENAMED[k] not in d}
    kw = {k: v for k, v in kw.items() if k in _RESULT_FIELDS}
    kw["config"] = config_from_dict(kw["config"], "trial result config")
    kw["curve"] = tuple(Evaluation(**e) for e in kw.get("curve") or ())
    for k in ("metrics", "latency_ms", "estimate", "env"):
        kw[k] = dict(kw.get(k) or {})
    kw["ranks"] = tuple(dict(r) for r in kw.get("ranks") or ())
    return TrialResult(**kw)


def encode_row(row: TrialRow) -> dict[str, Any]:
    """A TrialRow as plain JSON (Optuna's user attribute `autoembed`): every field but
    `number`."""
    out = {f.name: getattr(row, f.name) for f in fields(TrialRow) if f.name != "number"}
    out.update(config=row.config.to_dict(), estimate=plain(row.estimate),
               params=plain(row.params), metrics=plain(row.metrics), node=dict(row.node),
               result=encode_result(row.result) if row.result is not None else None)
    return out


def decode_row(number: int, raw: Mapping[str, Any]) -> TrialRow:
    """Rebuild a TrialRow from `encode_row` output (any version's)."""
    result = raw.get("result")
    interrupted = bool(raw.get("interrupted", False))
    return TrialRow(
        number=number,
        # a version before the `interrupted` status stored such a trial as failed
        status="interrupted" if interrupted else str(raw["status"]),
        config=config_from_dict(raw["config"], f"trial {number} config"),
        estimate=dict(raw.get("estimate") or {}),
        params=dict(raw.get("params") or {}),
        metrics=dict(raw.get("metrics") or {}),
        result=decode_result(result) if result else None,
        reason=raw.get("reason"),
        ray_trial_id=raw.get("ray_trial_id"),
        overshoot=float(raw.get("overshoot", 0.0)),
        concurrency=int(raw.get("concurrency", 0)),
        retry_of=raw.get("retry_of"),
        interrupted=interrupted,
        node=dict(raw.get("node") or {}),
        origin=raw.get("origin"))


def encode_member(row: TrialRow) -> dict[str, Any]:
    """A front member as pareto.json holds it (export reads `trial`, `config`, `metrics`,
    `trained_config`)."""
    return {
        "trial": row.number,
        "config": row.config.to_dict(),
        "metrics": dict(row.metrics),
        "device_total": int(row.estimate.get("device_total", 0)),
        "allocated_peak": int(row.estimate.get("allocated_peak", 0)),
        "measured_allocated_peak": (None if row.result is None
                                    else row.result.measured_allocated_peak),
        "params": dict(row.params),
        "ray_trial_id": row.ray_trial_id,
        "origin": row.origin,  # AS_WRITTEN: export rebuilds it without apply
        # the config the trial trained, resolved on its data (a stand-in's, in the built-in
        # spaces): what `autoembed train` reruns (export's `trained_on`)
        "trained_config": None if row.result is None else row.result.config.to_dict()}


# The estimate's byte figures as trials.csv columns (`estimate_<name>`)
ESTIMATE_COLUMNS = ("device_total", "allocated_peak", "reserved_peak", "overhead", "parameters",
                    "gradients", "optimizer_state", "activations", "temporaries",
                    "serving_bytes", "host_bytes")


def csv_header(params: Sequence[str]) -> list[str]:
    """trials.csv's columns, for rows whose Optuna params are `params`."""
    return ["trial", "status", "reason", "on_front", "ray_trial_id", "ray_node", "retry_of",
            "origin", "concurrency", "overshoot", *METRIC_COLUMNS,
            *(f"estimate_{c}" for c in ESTIMATE_COLUMNS), "ranks",
            *(f"param.{p}" for p in params), "config_json"]


def rank_entry(rank: int, estimate: Mapping[str, Any], measured: Mapping[str, Any]
               ) -> dict[str, Any]:
    """One rank of a trial that ran as several processes: its priced figures (a
    `RankEstimate`'s) beside what it measured (`autoembed.pipeline.sharded_runner`'s result)."""
    out: dict[str, Any] = {"rank": rank}
    out.update({f"estimate_{k}": estimate[k] for k in
                ("allocated_peak", "device_total", "persistent") if k in estimate})
    out.update({f"measured_{k}": measured[k] for k in
                ("step_peak", "persistent_bytes", "table_bytes", "max_memory_allocated")
                if measured.get(k) is not None})
    return out


def rank_figures(row: TrialRow) -> list[dict[str, Any]]:
    """Each rank's figures of a row (trials.csv's `ranks`): measured beside priced where the
    trial ran (`TrialResult.ranks`), else the estimate's per-rank shares (`per_gpu`)."""
    if row.result is not None and row.result.ranks:
        return [dict(r) for r in row.result.ranks]
    return [{"rank": g.get("gpu"), "estimate_allocated_peak": g.get("allocated_peak"),
             "estimate_device_total": g.get("device_total")}
            for g in row.estimate.get("per_gpu") or ()]


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def encode_csv_row(row: TrialRow, on_front: bool, params: Sequence[str]) -> list[Any]:
    """One trials.csv row (columns of `csv_header(params)`)."""
    node = " ".join(str(p) for p in (row.node.get("ray_node_ip"), row.node.get("ray_node_id"),
                                     row.node.get("ray_resources")) if p)
    return [
        row.number, row.status, row.reason or "", str(on_front).lower(),
        row.ray_trial_id or "", node, "" if row.retry_of is None else row.retry_of,
        row.origin or "", row.concurrency, f"{row.overshoot:.6g}",
        *(_cell(row.metrics.get(m)) for m in METRIC_COLUMNS),
        *(_cell(row.estimate.get(c)) for c in ESTIMATE_COLUMNS),
        json.dumps(rank_figures(row)) if rank_figures(row) else "",
        *(_cell(row.params.get(p)) for p in params),
        json.dumps(row.config.to_dict(), sort_keys=True)]


_CONFIG_COLUMNS = ("config", "config_json")
_PREFIXES = ("config.", "params.", "param.")
_PY_WORDS = {"None": None, "True": True, "False": False}


def _flat_value(text: str) -> Any:
    """A value `str()` wrote ('64', 'None', '[64, 32]', '(64, 32)', '1e-08') back as data;
    anything else stays the string it is."""
    if text in _PY_WORDS:
        return _PY_WORDS[text]
    candidate = text
    if text[:1] == "(" and text[-1:] == ")":
        candidate = "[" + text[1:-1].rstrip().rstrip(",") + "]"
    try:
        return json.loads(candidate.replace("'", '"'))
    except ValueError:
        return text


def config_from_flat(flat: Mapping[str, str], source: str) -> dict[str, Any]:
    """Undo `EmbeddingConfig.flat_params()` (the data spec is not in it: add it after)."""
    raw: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for key, text in flat.items():
        if text is None or text == "":
            continue
        if key.startswith("table."):
            parts = key.split(".")
            if len(parts) < 3:
                raise ConfigError(f"{source}: column '{key}' is not table.<name>.<key>")
            name, field_name = ".".join(parts[1:-1]), parts[-1]
            tables.setdefault(name, {"name": name})[field_name] = _flat_value(text)
        else:
            raw[key] = _flat_value(text)
    if tables:
        raw["tables"] = list(tables.values())
    return raw


def _csv_config(row: Mapping[str, str], source: str) -> dict[str, Any]:
    for col in _CONFIG_COLUMNS:
        text = row.get(col)
        if text:
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{source}: column '{col}' is not JSON: {e}") from None
            if isinstance(raw, dict):
                return raw
    keys = {f.name for f in fields(EmbeddingConfig)} - {"data"}
    flat: dict[str, str] = {}
    for col, text in row.items():
        name = col
        for p in _PREFIXES:
            name = name.removeprefix(p)
        if name in keys or name.startswith("table."):
            flat[name] = text
    if "tables" not in flat and not any(k.startswith("table.") for k in flat):
        raise ConfigError(f"{source}: has no config columns to rebuild the config from")
    return config_from_flat(flat, source)


def csv_float(text: str | None) -> float | None:
    """A trials.csv cell as a number (None: empty or not a number)."""
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def decode_csv_row(row: Mapping[str, str], source: str) -> tuple[int, str, dict[str, Any],
                                                                   dict[str, float | None]]:
    """(trial, status, config as plain data, metrics) of one trials.csv row, any version's
    (`config_json`, or flat config columns in older or hand-made files)."""
    n = (row.get("trial") or row.get("number") or "").strip()
    if not n.isdigit():
        raise ConfigError(f"{source}: no trial number")
    metrics = {m: csv_float(row.get(m)) for m in METRIC_COLUMNS if m in row}
    return int(n), (row.get("status") or ""), _csv_config(row, source), metrics
