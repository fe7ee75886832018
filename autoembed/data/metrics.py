"""Quality metrics on numpy arrays (no scikit-learn, whose import and input checks cost more
than the metric on a trial's few thousand rows): ROC AUC, log-loss, accuracy, macro-F1.
Each equals its scikit-learn namesake (tests/test_runner.py checks them against it)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["roc_auc", "log_loss", "accuracy", "macro_f1"]


def roc_auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve: the Mann-Whitney U statistic with tied scores sharing their
    average rank (equals sklearn.metrics.roc_auc_score). NaN when one class is absent."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1) > 0.5
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts, dtype=np.float64)
    mid_rank = ends - (counts - 1) / 2.0  # 1-based average rank of each distinct score
    rank_sum = float(mid_rank[inverse][y].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def accuracy(predictions: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    p = np.asarray(predictions).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    return float((p == y).mean()) if y.size else float("nan")


def log_loss(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Mean binary cross-entropy of P(label = 1) (sklearn.metrics.log_loss, labels [0, 1])."""
    p = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1) > 0.5
    if not y.size:
        return float("nan")
    return float(-np.where(y, np.log(p), np.log1p(-p)).mean())


def macro_f1(predictions: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Unweighted mean over the classes seen (in labels or predictions) of
    F1 = 2 tp / (2 tp + fp + fn) (sklearn's f1_score, average="macro", zero_division=0)."""
    p = np.asarray(predictions).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    classes = np.union1d(p, y)
    if not classes.size:
        return float("nan")
    tp = np.array([np.sum((p == c) & (y == c)) for c in classes], dtype=np.float64)
    fp = np.array([np.sum((p == c) & (y != c)) for c in classes], dtype=np.float64)
    fn = np.array([np.sum((p != c) & (y == c)) for c in classes], dtype=np.float64)
    return float((2 * tp / (2 * tp + fp + fn)).mean())
