"""Quality metrics on numpy arrays (no scikit-learn): ROC AUC and accuracy."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["roc_auc", "accuracy"]


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
