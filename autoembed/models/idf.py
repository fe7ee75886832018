"""Inverse document frequencies for `pooling: idf` (text tables without compression).

`idf_weights(docs, rows, skip)`: scikit-learn's smooth idf of each row id over the documents
(one row of ids each, PAD_ID padding), ``ln((1 + n) / (1 + df)) + 1`` with `df` the number
of documents holding the id, and 0 for the `skip` ids (padding, OOV: not terms, as in the
TF-IDF baseline). `install_idf(model, dataset)` writes the train split's into every table's
``idf`` buffer: a pure function of the data, so a search's trial and `autoembed train` of its
export compute the same weights from the same documents (after truncation to `seq_len`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from autoembed.batch import PAD_ID

__all__ = ["idf_weights", "install_idf", "non_terms"]

READ_BATCH = 4096


def idf_weights(
    docs: Iterable[npt.NDArray[np.int64]], rows: int, skip: Iterable[int] = (PAD_ID,)
) -> npt.NDArray[np.float64]:
    """Smooth idf (module docstring) of ids 0..rows-1 over `docs` ([N, S] id blocks)."""
    df = np.zeros(rows, dtype=np.int64)
    n = 0
    for block in docs:
        a = np.sort(np.asarray(block, dtype=np.int64), axis=1)
        first = np.ones(a.shape, dtype=bool)
        first[:, 1:] = a[:, 1:] != a[:, :-1]  # each id once per document
        df += np.bincount(a[first], minlength=rows)[:rows]
        n += a.shape[0]
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    idf[list(skip)] = 0.0
    return idf


def non_terms(dataset: Any) -> tuple[int, ...]:
    """Ids that are not terms: padding, and OOV where a token map says which it is."""
    oov = tuple(m.oov_id for m in getattr(dataset, "vocab_maps", {}).values()
                if m.kind == "tokens")
    return (PAD_ID, *oov)


def install_idf(model: nn.Module, dataset: Any) -> None:
    """Write the train split's idf into the ``idf`` buffer of each table of `model` that has
    one (pooling idf); a no-op for other models."""
    tables = getattr(model, "fields", ())
    for name in tables:
        table = model.table(name)  # type: ignore[operator]
        buf = getattr(table, "idf", None)
        if not isinstance(buf, torch.Tensor):
            continue
        docs = (b.features[name].numpy()
                for b in dataset.batches("train", READ_BATCH, shuffle=False))
        w = idf_weights(docs, int(buf.shape[0]), non_terms(dataset))
        with torch.no_grad():
            buf.copy_(torch.as_tensor(w, dtype=buf.dtype, device=buf.device))
