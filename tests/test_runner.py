"""The trial runner with injected faults, an injected clock and a tiny in-memory dataset."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score, log_loss, roc_auc_score

from autoembed.batch import Batch
from autoembed.config import EmbeddingConfig, TableConfig
from autoembed.runner import RunSettings, quality_metrics, run_trial


@dataclass(frozen=True)
class _Spec:
    def to_dict(self) -> dict[str, Any]:
        return {"name": "in-memory"}


@dataclass
class TinyCTR:
    """Two one-hot fields; label = (id of field a is even). Rows are fixed per split."""

    rows: int = 512
    task: str = "ctr"
    num_classes: int = 2
    seq_len: int = 1
    spec: _Spec = field(default_factory=_Spec)

    @property
    def tables(self) -> tuple[TableConfig, ...]:
        return (TableConfig("a", 50), TableConfig("b", 20))

    def batches(
        self,
        split: str,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> Iterator[Batch]:
        g = torch.Generator().manual_seed({"train": 1, "valid": 2, "test": 3}[split])
        a = torch.randint(0, 50, (self.rows, 1), generator=g)
        b = torch.randint(0, 20, (self.rows, 1), generator=g)
        y = (a[:, 0] % 2 == 0).float()
        for i in range(0, self.rows - (batch_size - 1 if drop_last else 0), batch_size):
            sl = slice(i, i + batch_size)
            yield Batch({"a": a[sl], "b": b[sl]}, y[sl])


def cfg(**kw: Any) -> EmbeddingConfig:
    base: dict[str, Any] = dict(
        tables=(TableConfig("a", 50), TableConfig("b", 20)),
        dim=8,
        batch_size=32,
        dense_layers=(8,),
        lr=0.05,
    )
    base.update(kw)
    return EmbeddingConfig(**base)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class ScriptedTrainer:
    """Stands in for autoembed.models.Trainer: each step advances the clock by a scripted
    duration and returns a scripted loss (or raises)."""

    def __init__(self, clock: Clock, durations: list[float], losses: list[Any]) -> None:
        self.clock, self.durations, self.losses = clock, durations, losses
        self.device = torch.device("cpu")
        self.model = torch.nn.Linear(1, 1)
        self.n = 0

    def step(self, batches: list[Batch]) -> float:
        self.clock.t += self.durations[min(self.n, len(self.durations) - 1)]
        loss = self.losses[min(self.n, len(self.losses) - 1)]
        self.n += 1
        if isinstance(loss, BaseException):
            raise loss
        return float(loss)

    def predict(self, batch: Batch) -> torch.Tensor:
        return batch.features["a"][:, 0].float() % 2 * 2 - 1


def test_throughput_excludes_warmup_with_injected_clock() -> None:
    clock = Clock()
    # 3 warm-up steps take 100 s each; the 7 timed steps 0.5 s each -> 32 / 0.5 = 64 samples/s.
    tr = ScriptedTrainer(clock, [100, 100, 100, 0.5], [0.3])
    r = run_trial(
        cfg(),
        TinyCTR(),
        RunSettings(max_steps=10, eval_every=5, warmup_steps=3, clock=clock, measure_latency=False),
        trainer=tr,
    )
    assert r.status == "complete"
    assert r.throughput == pytest.approx(64.0)
    assert r.steps == 10 and r.samples == 320


def test_nan_loss_is_diverged_not_a_crash() -> None:
    clock = Clock()
    tr = ScriptedTrainer(clock, [0.1], [0.5, 0.4, math.nan])
    r = run_trial(cfg(), TinyCTR(), RunSettings(max_steps=10, clock=clock), trainer=tr)
    assert r.status == "diverged" and r.steps == 3 and "nan" in (r.error or "")


def test_injected_oom_is_recorded() -> None:
    clock = Clock()
    tr = ScriptedTrainer(clock, [0.1], [0.5, torch.OutOfMemoryError("CUDA out of memory. Tried")])
    r = run_trial(cfg(), TinyCTR(), RunSettings(max_steps=10, clock=clock), trainer=tr)
    assert r.status == "oom" and "out of memory" in (r.error or "")


def test_other_exception_is_failed_with_error() -> None:
    clock = Clock()
    tr = ScriptedTrainer(clock, [0.1], [RuntimeError("boom")])
    r = run_trial(cfg(), TinyCTR(), RunSettings(max_steps=10, clock=clock), trainer=tr)
    assert r.status == "failed" and "boom" in (r.error or "")


def test_report_false_prunes() -> None:
    seen = []

    def report(ev: Any) -> bool:
        seen.append(ev.step)
        return False

    r = run_trial(cfg(), TinyCTR(), RunSettings(max_steps=20, eval_every=4), report)
    assert r.status == "pruned" and seen == [4] and r.steps == 4


def test_real_training_learns_and_measures() -> None:
    r = run_trial(cfg(), TinyCTR(), RunSettings(max_steps=120, eval_every=40, target=0.9))
    assert r.status == "complete", r.error
    assert r.test_quality is not None and r.test_quality > 0.9
    assert r.steps_to_target is not None and r.steps_to_target <= 120
    assert [e.step for e in r.curve] == [40, 80, 120]
    assert {"p50_b1", "p99_b1", "p50_b256", "p99_b256"} <= set(r.latency_ms)
    assert r.estimate["allocated_peak"] > 0 and r.rss_peak and r.rss_peak > 0
    assert r.env["threads"] >= 1 and "torch" in r.env
    assert r.measured_allocated_peak is None  # no GPU: never called GPU memory


def test_metrics_agree_with_sklearn() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    z = rng.normal(size=300) + y
    m = quality_metrics("ctr", z, y)
    assert m["auc"] == pytest.approx(roc_auc_score(y, z))
    assert m["logloss"] == pytest.approx(log_loss(y, 1 / (1 + np.exp(-z))))
    yt = rng.integers(0, 4, 300)
    zt = rng.normal(size=(300, 4))
    zt[np.arange(300), yt] += 1.0
    mt = quality_metrics("text", zt, yt)
    assert mt["accuracy"] == pytest.approx(accuracy_score(yt, zt.argmax(1)))
    assert mt["macro_f1"] == pytest.approx(f1_score(yt, zt.argmax(1), average="macro"))


def test_metrics_agree_with_sklearn_on_ties_and_unseen_classes() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 2000)
    z = np.round(rng.normal(size=2000) + y, 1)  # many tied scores: ranks are averaged
    m = quality_metrics("ctr", z, y)
    assert m["auc"] == pytest.approx(roc_auc_score(y, z), rel=1e-12)
    p = np.clip(1 / (1 + np.exp(-z)), 1e-7, 1 - 1e-7)
    assert m["logloss"] == pytest.approx(log_loss(y, p), rel=1e-12)
    assert math.isnan(quality_metrics("ctr", z, np.ones(2000, dtype=np.int64))["auc"])
    yt = rng.integers(0, 3, 500)  # class 3 is predicted but never true; class 2 never predicted
    zt = rng.normal(size=(500, 5))
    zt[:, 2] -= 10.0
    zt[:, 4] -= 10.0
    pred = zt.argmax(1)
    assert 3 in pred and 2 not in pred
    mt = quality_metrics("text", zt, yt)
    assert mt["accuracy"] == pytest.approx(accuracy_score(yt, pred), rel=1e-12)
    f1 = f1_score(yt, pred, average="macro", zero_division=0)
    assert mt["macro_f1"] == pytest.approx(f1, rel=1e-12)


def test_int8_serving_measures_quality_before_and_after() -> None:
    r = run_trial(cfg(serving="int8"), TinyCTR(), RunSettings(max_steps=60, eval_every=30))
    assert r.status == "complete", r.error
    assert r.quality_before_quantization is not None and r.test_quality is not None
    assert abs(r.test_quality - r.quality_before_quantization) < 0.05
    # int8 rows: 8 values + fp16 scale and bias = 12 B -> 16 B aligned; 50 + 20 rows.
    assert r.serving_bytes is not None and r.serving_bytes >= (50 + 20) * 16
    assert "p50_b1" in r.latency_ms


@dataclass
class SlowFetchCTR(TinyCTR):
    """TinyCTR whose every training batch costs `fetch` seconds of an injected clock."""

    clock: Clock = field(default_factory=Clock)
    fetch: float = 2.0

    def batches(self, split: str, batch_size: int, **kw: Any) -> Iterator[Batch]:
        for b in super().batches(split, batch_size, **kw):
            if split == "train":
                self.clock.t += self.fetch
            yield b


class SlowPredictTrainer(ScriptedTrainer):
    def predict(self, batch: Batch) -> torch.Tensor:
        self.clock.t += 1.0
        return super().predict(batch)


def test_time_split_into_steps_data_and_evaluation() -> None:
    clock = Clock()
    data = SlowFetchCTR(clock=clock, fetch=2.0)
    tr = SlowPredictTrainer(clock, [0.5], [0.3])
    r = run_trial(
        cfg(), data,
        RunSettings(max_steps=10, eval_every=5, eval_batches=2, test_batches=3, clock=clock,
                    cpu_clock=clock, measure_latency=False),
        trainer=tr,
    )
    assert r.status == "complete"
    assert r.train_seconds == pytest.approx(10 * 0.5)  # 10 steps of 0.5 s
    assert r.train_cpu_seconds == pytest.approx(10 * 0.5)  # the steps' only: not fetching
    assert r.data_seconds == pytest.approx(10 * 2.0)  # 10 training batches of 2 s
    # two validation evaluations of 2 batches and one test pass of 3, 1 s per prediction
    assert r.eval_seconds == pytest.approx(2 * 2 + 3)
    assert r.wall_seconds == pytest.approx(5 + 20 + 7)


@dataclass
class FlippedTestCTR(TinyCTR):
    """TinyCTR whose test labels are inverted: a model that learns the training rule scores
    AUC near 1 on validation and near 0 on test, so the two splits cannot be confused."""

    def batches(self, split: str, batch_size: int, **kw: Any) -> Iterator[Batch]:
        for b in super().batches(split, batch_size, **kw):
            yield Batch(b.features, 1.0 - b.labels) if split == "test" else b


def test_search_objective_is_validation_quality_not_test() -> None:
    from autoembed.pipeline.records import objective_metrics

    r = run_trial(cfg(), FlippedTestCTR(), RunSettings(max_steps=120, eval_every=40))
    assert r.status == "complete", r.error
    assert r.valid_quality is not None and r.valid_quality > 0.9
    assert r.valid_quality == r.curve[-1].quality  # the last step's validation figure
    assert r.test_quality is not None and r.test_quality < 0.1  # test: reported only
    m = objective_metrics(r, r.estimate, use_measured=False)
    assert m["quality"] == r.valid_quality and m["test_quality"] == r.test_quality
