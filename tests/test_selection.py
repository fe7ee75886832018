"""Selection on validation: the noise of a validation figure, read from the split's labels."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoembed.config import EmbeddingConfig
from autoembed.data import DataSpec, load_dataset
from autoembed.errors import ConfigError
from autoembed.pareto import quality_noise
from autoembed.runner import Evaluation, RunSettings
from autoembed.selection import (
    BestStep,
    best_evaluation,
    label_counts,
    measure_noise,
    to_target,
    training_length,
)


def _clicks(tmp_path: Path, n: int = 500) -> tuple[pd.DataFrame, object]:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.integers(0, 30, n).astype(str),
                          "y": (rng.random(n) < 0.3).astype(int)})
    path = tmp_path / "clicks.csv"
    frame.to_csv(path, index=False)
    return frame, load_dataset(DataSpec(str(path), label="y", categorical=("a",)))


def test_label_counts_read_the_first_rows(tmp_path: Path) -> None:
    frame, data = _clicks(tmp_path)
    yv = frame["y"].to_numpy()[data.split_rows("valid")]  # type: ignore[attr-defined]
    assert label_counts(data, "valid") == (int((yv == 0).sum()), int((yv == 1).sum()))
    assert label_counts(data, "valid", 7) == (int((yv[:7] == 0).sum()), int((yv[:7] == 1).sum()))


@dataclass(frozen=True)
class Row:
    number: int
    values: dict[str, float]
    config: EmbeddingConfig = field(default_factory=lambda: EmbeddingConfig(batch_size=16))


def pick_noise(rows: list[Row], data: object, eval_batches: int | None) -> float | None:
    m = measure_noise(rows, data, eval_batches)  # type: ignore[arg-type]
    return None if m is None else m.slack


def test_noise_is_that_of_the_best_on_the_rows_it_was_measured_on(tmp_path: Path) -> None:
    frame, data = _clicks(tmp_path)
    yv = frame["y"].to_numpy()[data.split_rows("valid")]  # type: ignore[attr-defined]
    pos, neg = int(yv[:32].sum()), int(32 - yv[:32].sum())
    a = 0.7  # Hanley-McNeil by hand
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    want = math.sqrt((a * (1 - a) + (pos - 1) * (q1 - a * a) + (neg - 1) * (q2 - a * a))
                     / (pos * neg))
    rows = [Row(1, {"quality": 0.6}), Row(2, {"quality": 0.7}), Row(3, {"quality": math.nan})]
    assert pick_noise(rows, data, eval_batches=2) == pytest.approx(want)  # 2 x 16 rows
    assert quality_noise("auc", 0.7, label_counts(data, "valid", 32)) == pytest.approx(want)
    assert pick_noise(rows, None, 2) is None
    assert pick_noise([Row(1, {"quality": math.nan})], data, 2) is None
    assert pick_noise(rows, data, None) == pytest.approx(
        quality_noise("auc", 0.7, label_counts(data, "valid", len(yv))))


def _curve(qualities: list[float], every: int = 50, batch: int = 512) -> list[Evaluation]:
    return [Evaluation((i + 1) * every, (i + 1) * every * batch, q, {"auc": q}, float(i))
            for i, q in enumerate(qualities)]


def test_best_evaluation_of_an_injected_curve() -> None:
    # rises, peaks at step 200, overfits; a tie at step 300 and a NaN later never win
    curve = _curve([0.70, 0.74, 0.77, 0.79, 0.78, 0.79, math.nan, 0.76])
    assert best_evaluation(curve) == BestStep(0.79, 200, 200 * 512)
    assert best_evaluation(list(reversed(curve))) == BestStep(0.79, 200, 200 * 512)
    assert best_evaluation(_curve([math.nan])) is None
    assert best_evaluation([]) is None


def test_steps_and_samples_to_a_target() -> None:
    curve = _curve([0.70, 0.74, 0.77, 0.79, 0.78])
    assert to_target(curve, 0.7721) == (200, 200 * 512)  # 0.77 is below it, 0.79 is not
    assert to_target(curve, 0.77) == (150, 150 * 512)  # reaching the target exactly counts
    assert to_target(curve, 0.80) is None  # never reached
    assert to_target(curve, None) is None  # no baseline, no target
    assert to_target(list(reversed(curve)), 0.75) == (150, 150 * 512)  # in step order


def test_training_length_follows_the_data_size() -> None:
    # MovieLens' 80,004 train rows at batch 512: ceil(600k / 80,004) = 8 epochs of 156 steps
    ml = training_length(80_004, 512)
    assert (ml.epochs, ml.max_steps) == (8, None)
    assert ml.samples == 8 * 156 * 512 and ml.eval_every == 8 * 156 // 8
    assert ml.run_settings(20) == {"eval_every": 156, "eval_batches": 20, "warmup_steps": 3,
                                   "epochs": 8}
    # 1,780 BBC articles: capped at 20 epochs
    assert training_length(1_780, 32).epochs == 20
    # 10M rows: less than one epoch, ceil(600k / 1024) = 586 steps
    big = training_length(10_000_000, 1024)
    assert (big.epochs, big.max_steps, big.samples) == (None, 586, 586 * 1024)
    assert big.run_settings(5)["max_steps"] == 586
    RunSettings(**big.run_settings(5))  # the runner takes it
    RunSettings(**ml.run_settings(5))
    with pytest.raises(ConfigError, match="train_rows"):
        training_length(0, 512)


# ------------------------------------------------------------------ paired noise


def _delong_brute(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """DeLong et al. (1988) by its definition: psi over every (positive, negative) pair."""
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)

    def psi(x: float, z: float) -> float:
        return 1.0 if x > z else 0.5 if x == z else 0.0

    v10 = np.array([[np.mean([psi(s[i], s[j]) for j in neg]) for i in pos] for s in (a, b)])
    v01 = np.array([[np.mean([psi(s[i], s[j]) for i in pos]) for j in neg] for s in (a, b)])
    s10, s01 = np.cov(v10), np.cov(v01)  # 2 x 2, ddof 1
    var = ((s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / pos.size
           + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / neg.size)
    return float(v10[0].mean()), float(v10[1].mean()), math.sqrt(var)


def test_paired_auc_is_delong_by_its_definition() -> None:
    from sklearn.metrics import roc_auc_score

    from autoembed.selection import paired_auc

    rng = np.random.default_rng(0)
    y = (rng.random(60) < 0.4).astype(int)
    a = np.round(y + rng.normal(0, 1, 60), 1)  # rounded: ties within and across classes
    b = np.round(a + rng.normal(0, 0.7, 60), 1)
    got = paired_auc(a, b, y)
    assert got == pytest.approx(_delong_brute(a, b, y), rel=1e-9)
    assert got[:2] == pytest.approx((roc_auc_score(y, a), roc_auc_score(y, b)))
    with pytest.raises(ConfigError, match="both classes"):
        paired_auc(a, b, np.zeros(60))


def test_paired_auc_se_agrees_with_a_bootstrap() -> None:
    from sklearn.metrics import roc_auc_score

    from autoembed.selection import paired_auc

    rng = np.random.default_rng(1)
    n = 400
    y = (rng.random(n) < 0.3).astype(int)
    a = y + rng.normal(0, 1, n)
    b = a + rng.normal(0, 0.8, n)
    _, _, se = paired_auc(a, b, y)
    diffs = []
    for _ in range(400):  # resample rows: both models on the same resampled rows
        i = rng.integers(0, n, n)
        diffs.append(roc_auc_score(y[i], a[i]) - roc_auc_score(y[i], b[i]))
    assert se == pytest.approx(float(np.std(diffs)), rel=0.2)


def test_paired_accuracy_is_the_se_of_the_per_row_difference() -> None:
    from autoembed.selection import paired_accuracy

    rng = np.random.default_rng(2)
    ca, cb = rng.random(300) < 0.8, rng.random(300) < 0.75
    d = ca.astype(float) - cb.astype(float)
    gap, se = paired_accuracy(ca, cb)
    assert gap == pytest.approx(d.mean())
    assert se == pytest.approx(d.std() / math.sqrt(d.size))  # numpy, not the counts
    assert paired_accuracy(ca, ca) == (0.0, 0.0)


def test_valid_scores_round_trip_through_json() -> None:
    """A trial's report carries its scores packed: the logits' order and the labels come
    back (the ranks are all the paired AUC reads), class predictions as they are."""
    import json

    from autoembed.selection import ValidScores

    s = ValidScores.of("ctr", np.array([[0.5], [-1.25], [0.5]]), np.array([1, 0, 0]))
    assert s.scores.dtype == np.float32
    back = ValidScores.unpack(json.loads(json.dumps(s.pack())))
    assert back is not None and back.scores.tolist() == [1, 0, 1]  # ties stay tied
    assert back.labels.tolist() == [1, 0, 0]
    t = ValidScores.of("text", np.array([[0.1, 0.9, 0.0], [2.0, 0.0, 1.0]]), np.array([1, 2]))
    assert t.scores.tolist() == [1, 0] and t.labels.tolist() == [1, 2]
    back = ValidScores.unpack(t.pack())
    assert back is not None and back.scores.tolist() == [1, 0] and back.labels.tolist() == [1, 2]
    assert ValidScores.unpack(None) is None and ValidScores.unpack('{"scores": 1}') is None


def test_packed_scores_give_the_same_paired_gaps_in_about_two_bytes_a_row() -> None:
    """What the study stores of a trial's validation scores: the paired AUC gap of every
    prefix the pick may read (DeLong on the float logits, computed here) is the same from
    the packed scores, ties included; text's predicted classes come back as they were."""
    from autoembed.selection import ValidScores, paired_gap

    rng = np.random.default_rng(4)
    n = 20_480
    y = (rng.random(n) < 0.3).astype(int)
    a = ValidScores.of("ctr", np.round(y + rng.normal(0, 1, n), 2).reshape(-1, 1), y)
    b = ValidScores.of("ctr", (y + rng.normal(0, 1.2, n)).reshape(-1, 1), y)
    text_a, text_b = a.pack(), b.pack()
    assert len(text_a) + len(text_b) < 2 * n * 2.7  # floats would be 4 bytes a row + labels
    pa, pb = ValidScores.unpack(text_a), ValidScores.unpack(text_b)
    assert pa is not None and pb is not None
    assert np.array_equal(pa.labels, y) and pa.rows == n
    for rows in (n, 5_000):  # a shorter read of the other trial: the first rows both read
        short = ValidScores(b.scores[:rows], b.labels[:rows])
        packed_short = ValidScores.unpack(short.pack())
        assert packed_short is not None
        want = paired_gap("auc", a, short, 1)
        got = paired_gap("auc", pa, packed_short, 1)
        assert want is not None and got is not None
        assert (got.gap, got.se, got.rows) == pytest.approx((want.gap, want.se, want.rows),
                                                            rel=1e-12)
    t = ValidScores.of("text", rng.normal(size=(300, 5)), rng.integers(0, 5, 300))
    back = ValidScores.unpack(t.pack())
    assert back is not None and np.array_equal(back.scores, t.scores)
    assert np.array_equal(back.labels, t.labels)
    assert ValidScores.unpack("") is None and ValidScores.unpack('{"z": "!!"}') is None


def test_paired_pick_rejects_a_member_unpaired_noise_would_take(tmp_path: Path) -> None:
    """A front where the rules disagree: trial 1 trails the best by less than one unpaired
    standard error, but loses to it on the same rows far beyond the paired one; trial 2
    makes the best's predictions (paired gap 0) at more memory than trial 1."""
    from sklearn.metrics import roc_auc_score

    from autoembed.pareto import pick
    from autoembed.selection import PAIRED_Z, ValidScores, measure_noise

    frame, data = _clicks(tmp_path, 3000)
    yv = frame["y"].to_numpy()[data.split_rows("valid")]  # type: ignore[attr-defined]
    rng = np.random.default_rng(4)
    best = yv + rng.normal(0, 1.2, yv.size)
    worse = best - 0.2 * yv * (rng.random(yv.size) < 0.5)  # half its positives a bit lower
    scores = {n: ValidScores.of("ctr", z[:, None], yv)
              for n, z in ((0, best), (1, worse), (2, best))}
    q = {n: float(roc_auc_score(yv, s.scores)) for n, s in scores.items()}
    members = [Row(0, {"quality": q[0], "memory": 3.0}),
               Row(1, {"quality": q[1], "memory": 1.0}),
               Row(2, {"quality": q[2], "memory": 2.0})]
    obj = [("quality", "maximize"), ("memory", "minimize")]

    unpaired = measure_noise(members, data, None)
    paired = measure_noise(members, data, None, scores)
    assert unpaired is not None and paired is not None
    # the situation: within one unpaired SE, yet several paired SEs behind
    gap = q[0] - q[1]
    assert 0 < gap < unpaired.slack
    g1 = next(g for g in paired.paired if g.trial == 1)
    assert g1.gap == pytest.approx(gap) and g1.gap > 2 * g1.se and not g1.within
    assert g1.rows == yv.size

    assert pick(members, "within-noise", obj, noise=unpaired.pick_noise(q)).number == 1
    assert pick(members, "within-noise", obj, noise=paired.pick_noise(q)).number == 2
    body = paired.to_dict()
    assert body["kind"] == "paired" and body["z"] == PAIRED_Z and "DeLong" in body["method"]
    assert [g["within"] for g in body["paired"]] == [False, True]

    # `autoembed export --pick within-noise` reads the record pareto.json holds
    import json

    from autoembed.export import pick_member

    raw = [{"trial": r.number, "metrics": r.values} for r in members]
    objs = [{"name": n, "direction": d} for n, d in obj]
    for measured, want in ((paired, 2), (unpaired, 1), (None, 2)):  # None: ties to cheaper
        record = None if measured is None else json.loads(json.dumps(measured.to_dict()))
        assert pick_member(raw, "within-noise", objs, record)["trial"] == want

    # one candidate without scores (a resumed trial): the unpaired measure, said so
    fallback = measure_noise(members, data, None, {0: scores[0], 2: scores[2]})
    assert fallback is not None and not fallback.paired
    assert fallback.to_dict()["kind"] == "unpaired" and "trial(s) 1" in str(
        fallback.unpaired_reason)
    assert fallback.slack == unpaired.slack


def test_paired_gap_reads_the_rows_both_read_and_refuses_other_rows() -> None:
    from autoembed.selection import ValidScores, paired_gap

    y = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    long = ValidScores.of("text", np.eye(2)[[1, 0, 1, 0, 0, 1, 1, 0]], y)  # 6 of 8 right
    short = ValidScores.of("text", np.eye(2)[[1, 0, 0, 0]], y[:4])  # 3 of 4 right
    g = paired_gap("accuracy", long, short, 7)
    assert g is not None and g.rows == 4 and g.gap == pytest.approx(1 / 4)  # 4/4 vs 3/4
    other = ValidScores.of("text", np.eye(2)[[1, 0, 0, 0]], np.array([0, 0, 0, 0]))
    assert paired_gap("accuracy", long, other, 7) is None
