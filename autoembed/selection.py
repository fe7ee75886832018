"""How a search tells trials apart on validation (issue 15): the noise of a validation figure,
the best evaluation of a training curve and the steps to a target, and a training length
suited to the data's size.

Pure functions of plain values, except `label_counts` and `validation_noise`, which read a
split's labels from a `Dataset`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from autoembed.errors import ConfigError
from autoembed.pareto import quality_noise

if TYPE_CHECKING:
    from autoembed.data.dataset import Dataset

__all__ = [
    "label_counts",
    "validation_noise",
    "pick_noise",
    "measure_noise",
    "NoiseMeasure",
    "Point",
    "BestStep",
    "best_evaluation",
    "to_target",
    "TrainingLength",
    "training_length",
    "TARGET_SAMPLES",
    "MAX_EPOCHS",
]

# Training length (`training_length`): a trial sees about TARGET_SAMPLES samples, in whole
# epochs when the train split is smaller (at most MAX_EPOCHS of them). 600k samples is 7-8
# epochs of MovieLens (80k rows), 2-3 of NYC flights (270k), where validation AUC has
# levelled off in benchmarks/real_data.py, and 20-40 s a trial on a 2-core CPU.
TARGET_SAMPLES = 600_000
MAX_EPOCHS = 20
WARMUP_STEPS = 3

_READ_BATCH = 8192  # rows per batch when reading labels


def label_counts(dataset: Dataset, split: str, rows: int | None = None) -> tuple[int, ...]:
    """Rows per class (ctr: negatives, positives) among a split's first `rows` rows in
    unshuffled order (None: all): the rows a validation evaluation of `eval_batches` x
    `batch_size` rows reads."""
    import numpy as np

    counts = np.zeros(dataset.num_classes, dtype=np.int64)
    seen = 0
    for b in dataset.batches(split, _READ_BATCH, shuffle=False):
        y = b.labels.numpy().astype(np.int64)
        if rows is not None:
            y = y[: max(rows - seen, 0)]
        counts += np.bincount(y, minlength=dataset.num_classes)[: dataset.num_classes]
        seen += y.size
        if rows is not None and seen >= rows:
            break
    return tuple(int(c) for c in counts)


def validation_noise(dataset: Dataset, quality: float, rows: int | None = None) -> float:
    """One standard error of a validation `quality` (AUC for ctr, accuracy for text)
    measured on the validation split's first `rows` rows (`pareto.quality_noise`)."""
    metric = "auc" if dataset.task == "ctr" else "accuracy"
    return quality_noise(metric, quality, label_counts(dataset, "valid", rows))


@dataclass(frozen=True)
class NoiseMeasure:
    """The `within-noise` slack and how it was measured: one standard error (`METHOD`) of
    the best candidate's validation `quality` (its `metric`) from the `class_rows` (rows
    per class) among the validation split's first `rows` rows, which its evaluation read."""

    slack: float
    metric: str
    quality: float
    trial: int | None
    rows: int
    class_rows: tuple[int, ...]

    METHOD = ("one standard error of the best validation quality on the validation rows "
              "its evaluation read (AUC: Hanley-McNeil; accuracy: binomial)")

    def to_dict(self) -> dict[str, Any]:
        return {"slack": self.slack, "metric": self.metric, "quality": self.quality,
                "trial": self.trial, "rows": self.rows, "class_rows": list(self.class_rows),
                "method": self.METHOD}


def measure_noise(
    candidates: Sequence[Any], dataset: Dataset | None, eval_batches: int | None
) -> NoiseMeasure | None:
    """`pick_noise` with how it was measured."""
    scored = [c for c in candidates if _finite(c.values.get("quality"))]
    if dataset is None or not scored:
        return None
    best = max(scored, key=lambda c: float(c.values["quality"]))
    rows = None if eval_batches is None else eval_batches * int(best.config.batch_size)
    metric = "auc" if dataset.task == "ctr" else "accuracy"
    quality = float(best.values["quality"])
    counts = label_counts(dataset, "valid", rows)
    try:
        slack = quality_noise(metric, quality, counts)
    except ConfigError:
        return None
    return NoiseMeasure(slack, metric, quality, getattr(best, "number", None), sum(counts),
                        counts)


def pick_noise(
    candidates: Sequence[Any], dataset: Dataset | None, eval_batches: int | None
) -> float | None:
    """The `within-noise` slack of a search's candidates (rows with `values["quality"]` and
    `config.batch_size`): the noise of the best quality on the rows its evaluation read
    (`eval_batches` batches of its batch size; None: the whole split). None when there is
    nothing to measure it on (no dataset, no quality, or a split without both classes)."""
    m = measure_noise(candidates, dataset, eval_batches)
    return None if m is None else m.slack


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v and abs(v) != float("inf")


class Point(Protocol):
    """One validation evaluation of a training curve (runner.Evaluation satisfies it)."""

    @property
    def step(self) -> int: ...

    @property
    def samples(self) -> int: ...

    @property
    def quality(self) -> float: ...


@dataclass(frozen=True)
class BestStep:
    """The evaluation a trial is judged by: its validation quality, step and samples."""

    quality: float
    step: int
    samples: int


def best_evaluation(curve: Sequence[Point]) -> BestStep | None:
    """The best validation evaluation of a curve: highest quality, the earliest step on
    ties (fewer steps reproduce it); NaN evaluations never win. None: no finite one."""
    best: Point | None = None
    for p in curve:
        q = float(p.quality)
        if not math.isfinite(q):
            continue
        if best is None or q > best.quality or (q == best.quality and p.step < best.step):
            best = p
    return None if best is None else BestStep(float(best.quality), int(best.step),
                                              int(best.samples))


def to_target(curve: Sequence[Point], target: float | None) -> tuple[int, int] | None:
    """(steps, samples) of the first evaluation whose quality reaches `target` (on real data
    the baseline's validation score), in step order; None when none does or no target."""
    if target is None or not math.isfinite(target):
        return None
    for p in sorted(curve, key=lambda p: p.step):
        if math.isfinite(float(p.quality)) and p.quality >= target:
            return int(p.step), int(p.samples)
    return None


@dataclass(frozen=True)
class TrainingLength:
    """How long a trial trains: whole `epochs`, or `max_steps` at the reference batch when
    one epoch is more than the target; `eval_every` steps between validation evaluations;
    `samples` the samples it trains on at the reference batch (an epoch's last short batch
    is dropped, as the runner does)."""

    epochs: int | None
    max_steps: int | None
    eval_every: int
    samples: int
    batch_size: int

    @property
    def steps(self) -> int:
        """Optimizer steps at the reference batch."""
        return self.samples // self.batch_size

    def run_settings(self, eval_batches: int) -> dict[str, Any]:
        """The space file's `run` mapping (RUN_KEYS of autoembed.space)."""
        run: dict[str, Any] = {"eval_every": self.eval_every, "eval_batches": eval_batches,
                               "warmup_steps": WARMUP_STEPS}
        if self.epochs is not None:
            run["epochs"] = self.epochs
        else:
            run["max_steps"] = self.max_steps
        return run

    def describe(self) -> str:
        how = f"{self.epochs} epochs" if self.epochs is not None else f"{self.max_steps} steps"
        return f"{how} ({self.samples:,} samples at batch {self.batch_size})"


def training_length(
    train_rows: int, batch_size: int, evals: int = 8, target_samples: int = TARGET_SAMPLES,
    max_epochs: int = MAX_EPOCHS,
) -> TrainingLength:
    """A training length suited to `train_rows` (TARGET_SAMPLES above), with about `evals`
    validation evaluations at `batch_size`."""
    for name, v in (("train_rows", train_rows), ("batch_size", batch_size), ("evals", evals),
                    ("target_samples", target_samples), ("max_epochs", max_epochs)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"training length: {name} = {v!r} must be an integer >= 1")
    if train_rows <= target_samples:
        epochs = min(max_epochs, math.ceil(target_samples / train_rows))
        steps = epochs * (train_rows // batch_size)  # the runner drops each epoch's last
        return TrainingLength(epochs, None, max(1, steps // evals), steps * batch_size,
                              batch_size)
    steps = math.ceil(target_samples / batch_size)
    return TrainingLength(None, steps, max(1, steps // evals), steps * batch_size, batch_size)
