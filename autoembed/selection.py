"""How a search tells trials apart on validation (issue 15): the noise of a validation figure,
the best evaluation of a training curve and the steps to a target, and a training length
suited to the data's size.

Pure functions of plain values, except `label_counts` and `validation_noise`, which read a
split's labels from a `Dataset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError
from autoembed.pareto import quality_noise

if TYPE_CHECKING:
    from autoembed.data.dataset import Dataset

__all__ = ["label_counts", "validation_noise", "pick_noise"]

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


def pick_noise(
    candidates: Sequence[Any], dataset: Dataset | None, eval_batches: int | None
) -> float | None:
    """The `within-noise` slack of a search's candidates (rows with `values["quality"]` and
    `config.batch_size`): the noise of the best quality on the rows its evaluation read
    (`eval_batches` batches of its batch size; None: the whole split). None when there is
    nothing to measure it on (no dataset, no quality, or a split without both classes)."""
    scored = [c for c in candidates if _finite(c.values.get("quality"))]
    if dataset is None or not scored:
        return None
    best = max(scored, key=lambda c: float(c.values["quality"]))
    rows = None if eval_batches is None else eval_batches * int(best.config.batch_size)
    try:
        return validation_noise(dataset, float(best.values["quality"]), rows)
    except ConfigError:
        return None


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v and abs(v) != float("inf")
