"""Quality on synthetic-ctr against its planted model (issue 4): a full-table config gets
within 0.02 AUC of the oracle; a heavily hashed one scores measurably lower.

How the margins were set. The data are seeded, so the test split (2,721 positives, 7,279
negatives) is the same on every run and its sampling error is common to the oracle and the
model: between runs the gap varies only with the training seed. Measured gaps (oracle 0.7938):
0.0166 with seed 0, 0.0158 with seed 1 (the third seed did not finish in 10 min on the loaded
machine). 0.02 lies 0.0034-0.0042 above them, over 5 times their spread (0.0008): a gap past
it is a learning regression, not noise. "Measurably lower" is against the test split's
sampling error, which the test computes (Hanley & McNeil 1982: SE 0.0055 at AUC 0.79 on
this split): hashing must cost 0.05 AUC, more than 9 standard errors (measured: 0.13).
"""

from __future__ import annotations

import math

import pytest

from autoembed.config import EmbeddingConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.runner import RunSettings, run_trial

# Three fields (10^3..10^5 ids), planted effects on each field's 300 head ids only
# (tail_scale 0), so the oracle is learnable in one pass over 100k rows.
SPEC = DataSpec(
    name="synthetic-ctr",
    vocab_sizes=(1000, 10_000, 100_000),
    rows=(100_000, 10_000, 10_000),
    tail_scale=0.0,
)
RUN = RunSettings(max_steps=400, eval_every=100, test_batches=None, measure_latency=False)


@pytest.fixture(scope="module")
def dataset():  # type: ignore[no-untyped-def]
    return load_dataset(SPEC)


def hanley_mcneil_se(auc: float, positives: int, negatives: int) -> float:
    """Standard error of an AUC measured on `positives` and `negatives` (Hanley-McNeil)."""
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (positives - 1) * (q1 - auc * auc)
           + (negatives - 1) * (q2 - auc * auc)) / (positives * negatives)
    return math.sqrt(var)


@pytest.mark.slow
def test_full_table_near_oracle_and_hashing_hurts(dataset) -> None:  # type: ignore[no-untyped-def]
    oracle = dataset.oracle_auc("test")  # measured: 0.794
    full = EmbeddingConfig(
        dim=16,
        batch_size=256,
        dense_layers=(32,),
        lr=0.01,
        table_optimizer="sparse_adam",
        dense_optimizer="adam",
    )
    r = run_trial(full, dataset, RUN)
    assert r.status == "complete", r.error
    assert r.test_quality is not None and oracle - r.test_quality < 0.02  # seeds 0/1: 0.0166/0.0158
    hashed = EmbeddingConfig(
        dim=16,
        batch_size=256,
        dense_layers=(32,),
        lr=0.01,
        table_optimizer="sparse_adam",
        dense_optimizer="adam",
        compression="hash",
        hash_buckets=20,
    )
    h = run_trial(hashed, dataset, RUN)
    assert h.status == "complete", h.error
    labels = dataset.split_labels("test")
    pos = int(labels.sum())
    se = hanley_mcneil_se(oracle, pos, len(labels) - pos)
    assert 0.05 > 9 * se  # the margin below is far outside the split's sampling error
    # measured: 0.647 vs 0.777
    assert h.test_quality is not None and h.test_quality < r.test_quality - 0.05
