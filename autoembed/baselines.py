"""The simple model a user would try first, on the search's own splits.

* ctr: logistic regression on one-hot ids (multi-hot bags: one column per id), one column per
  table row, the OOV id included;
* text: TF-IDF of the token ids (truncated to `seq_len`; padding and OOV are not terms;
  scikit-learn's defaults: smooth idf, l2 rows) + multinomial logistic regression.

The L2 strength C is chosen from `C_GRID` by the validation split's primary metric (ties go
to the smaller C); the test split is scored once, with that C. The fits run on one BLAS
thread (faster on a busy machine, same results); scikit-learn and scipy load on first call.

    base = fit_baseline(dataset)   # Baseline(metric='auc', valid=..., test=..., c=..., ...)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from autoembed.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from scipy.sparse import csr_matrix

    from autoembed.data.dataset import Dataset

__all__ = ["C_GRID", "MAX_COLUMNS", "NAMES", "Baseline", "fit_baseline", "design_matrix",
           "positive_class"]

C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)  # inverse L2 strength, ~3x apart (flights: 0.03)
# One float64 weight per column and class: above this the regression is not a five-minute
# baseline any more (and its weights alone take hundreds of MB), so it is refused.
MAX_COLUMNS = 5_000_000
MAX_ITER = 2000
READ_BATCH = 8192  # rows per batch when reading a split
NAMES = {"ctr": "logistic regression on one-hot ids",
         "text": "TF-IDF + logistic regression"}


@dataclass(frozen=True)
class Baseline:
    """A fitted baseline's figures: `metric` ("auc" or "accuracy") on the validation and
    test splits, the chosen `c`, the wall `seconds` of reading, fitting and scoring, and the
    design matrix's `columns`."""

    name: str
    metric: str
    valid: float
    test: float
    c: float
    seconds: float
    columns: int
    # ctr on data with a label column: which value is the positive class (what AUC ranks
    # first), e.g. "clicked = 'yes'"; None where the data have none to name (synthetic)
    positive: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Baseline:
        """The inverse of `to_dict` (a study's stored baseline)."""
        return cls(str(raw["name"]), str(raw["metric"]), float(raw["valid"]),
                   float(raw["test"]), float(raw["c"]), float(raw["seconds"]),
                   int(raw["columns"]), raw.get("positive"))

    def describe(self) -> str:
        """One line: what it is and its scores."""
        positive = f"; positive class {self.positive}" if self.positive else ""
        return (f"baseline ({self.name}, C={self.c:g}): validation {self.metric} "
                f"{self.valid:.4f}, test {self.test:.4f} ({self.seconds:.1f} s){positive}")


def design_matrix(dataset: Dataset, split: str) -> tuple[csr_matrix, npt.NDArray[Any]]:
    """A split's sparse design matrix (rows unshuffled) and its labels. ctr: 0/1 one-hot
    columns, table after table (table offset + id); text: token counts, one column per token
    id (padding and OOV stay empty), for the caller's TF-IDF."""
    import numpy as np
    from scipy.sparse import csr_matrix

    offsets, width = _offsets(dataset)
    from autoembed.models.idf import non_terms  # the one rule for what is not a term

    skip = non_terms(dataset) if dataset.task == "text" else ()
    rows, cols, labels = [], [], []
    n = 0
    for b in dataset.batches(split, READ_BATCH, shuffle=False):
        for name, ids in b.features.items():
            a = ids.numpy()
            keep = a >= 0
            for s in skip:
                keep &= a != s
            r, c = np.nonzero(keep)
            rows.append(r + n)
            cols.append(a[r, c] + offsets[name])
        labels.append(b.labels.numpy())
        n += b.size
    ri = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    ci = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    x = csr_matrix((np.ones(ri.size), (ri, ci)), shape=(n, width))  # duplicates summed
    if dataset.task == "ctr":
        x.data[:] = 1.0  # an id twice in a bag is still one-hot
    return x, np.concatenate(labels) if labels else np.zeros(0)


def _offsets(dataset: Dataset) -> tuple[dict[str, int], int]:
    offsets, width = {}, 0
    for t in dataset.tables:
        offsets[t.name] = width
        width += t.vocab_size
    if width > MAX_COLUMNS:
        raise ConfigError(
            f"baseline: the one-hot design has {width:,} columns (sum of the tables' "
            f"vocab sizes), over {MAX_COLUMNS:,}; the baseline is for data of up to a few "
            f"million ids: compare on a smaller table")
    return offsets, width


def fit_baseline(dataset: Dataset, c_grid: tuple[float, ...] = C_GRID) -> Baseline:
    """Fit the task's baseline on the train split, choose C on valid, score test once."""
    from sklearn.feature_extraction.text import TfidfTransformer
    from threadpoolctl import threadpool_limits

    if not c_grid or any(not c > 0 for c in c_grid):
        raise ConfigError(f"baseline C grid {c_grid!r}: give positive numbers, e.g. {C_GRID}")
    start = time.perf_counter()
    task = dataset.task
    metric = "auc" if task == "ctr" else "accuracy"
    xtr, ytr = design_matrix(dataset, "train")
    xva, yva = design_matrix(dataset, "valid")
    xte, yte = design_matrix(dataset, "test")
    for split, y in (("train", ytr), ("valid", yva), ("test", yte)):
        _require_classes(y, split, 2 if metric == "auc" or split == "train" else 1)
    if task == "text":
        tfidf = TfidfTransformer().fit(xtr)
        xtr, xva, xte = tfidf.transform(xtr), tfidf.transform(xva), tfidf.transform(xte)
    with threadpool_limits(limits=1):
        c, valid, model = _choose_c(xtr, ytr, xva, yva, metric, c_grid)
        test = _score(model, xte, yte, metric)
    return Baseline(NAMES[task], metric, valid, test, c, time.perf_counter() - start,
                    int(xtr.shape[1]), positive_class(dataset))


def positive_class(dataset: Dataset) -> str | None:
    """"LABEL = 'VALUE'": the label value a ctr data set's 1 stands for (the second of its
    two classes, `data.tabular.binary_labels`), or None where the data have no label values
    (synthetic data) or are not ctr."""
    if dataset.task != "ctr":
        return None
    try:
        labels = dataset.vocabulary.labels
    except (AttributeError, NotImplementedError):
        return None
    if len(labels) != 2:
        return None
    return f"{dataset.spec.label} = {labels[1]!r}"


def _choose_c(xtr: Any, ytr: np.ndarray, xva: Any, yva: np.ndarray, metric: str,
              c_grid: tuple[float, ...]) -> tuple[float, float, Any]:
    """(C, validation score, fitted model) of the grid's best C on validation (the first
    best, the smaller C, on ties)."""
    from sklearn.linear_model import LogisticRegression

    best: tuple[float, float, Any] | None = None
    for c in sorted(c_grid):
        model = LogisticRegression(C=c, max_iter=MAX_ITER).fit(xtr, ytr)
        score = _score(model, xva, yva, metric)
        if best is None or score > best[1]:
            best = (c, score, model)
    assert best is not None
    return best


def _require_classes(y: np.ndarray, split: str, least: int) -> None:
    import numpy as np

    found = np.unique(y).size
    if found < least:
        raise ConfigError(
            f"baseline: the {split} split has {found} class(es) in {y.size} rows; it needs "
            f"{least}: use more rows or another split seed")


def _score(model: Any, x: Any, y: np.ndarray, metric: str) -> float:
    from sklearn.metrics import accuracy_score, roc_auc_score

    if metric == "auc":
        return float(roc_auc_score(y, model.decision_function(x)))
    return float(accuracy_score(y, model.predict(x)))
