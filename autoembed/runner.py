"""The trial runner: train one config and measure quality, memory, throughput, convergence
and latency, honestly. The same loop trains a chosen config for real (`autoembed.train`).

Measurement rules: torch threads are pinned (`RunSettings.threads`); the first
`warmup_steps` steps and all evaluation are excluded from throughput; device, versions and
thread count are recorded with every result. On CUDA, peak memory is measured with
`torch.cuda.max_memory_allocated/reserved`; on CPU the estimate stands in for device memory
and the process RSS high-water has its own field (DESIGN.md, Contracts).
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from autoembed.config import EmbeddingConfig, with_data_tables
from autoembed.errors import ConfigError, DataError, UnsupportedError
from autoembed.selection import ValidScores, best_evaluation, to_target
from autoembed.trial import STATUSES, Evaluation, TrialResult

__all__ = [
    "STATUSES",
    "RunSettings",
    "Evaluation",
    "TrialResult",
    "run_trial",
    "resolve_for_data",
    "quality_metrics",
    "default_target",
    "fit_settings",
]

# Share of the achievable lift over chance that counts as "converged" when no target is
# given: AUC target = 0.5 + 0.9 * (oracle AUC - 0.5); text: 0.9 * oracle accuracy.
TARGET_SHARE = 0.9
SERVING_BATCH = 256  # queries per request for the batched latency figure
# Timed requests at batch 1 and at SERVING_BATCH, after 5 untimed ones each: a few dozen, so
# that every completed trial can afford to record its latency.
LATENCY_QUERIES = (40, 20)


@dataclass(frozen=True)
class RunSettings:
    """How long and how a trial trains and is measured."""

    max_steps: int = 300
    max_seconds: float | None = None
    epochs: int | None = None
    eval_every: int = 50
    eval_batches: int = 20
    test_batches: int | None = 40
    warmup_steps: int = 3
    target: float | None = None
    device: str = "cpu"
    threads: int | None = None
    measure_latency: bool = True
    # Real data: the length from the data's size (`fit_settings`), and the trial judged by
    # its best validation evaluation, whose weights the test and serving figures are of.
    fit_to_data: bool = False
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False, repr=False)
    # the process's CPU seconds (train_cpu_seconds: the optimizer steps' share)
    cpu_clock: Callable[[], float] = field(default=time.process_time, compare=False,
                                           repr=False)

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigError(f"max_steps = {self.max_steps}: must be >= 1")
        if self.eval_every < 1:
            raise ConfigError(f"eval_every = {self.eval_every}: must be >= 1")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ConfigError(f"max_seconds = {self.max_seconds}: must be > 0")
        if self.epochs is not None and self.epochs < 1:
            raise ConfigError(f"epochs = {self.epochs}: must be >= 1")


def fit_settings(s: RunSettings, train_rows: int, batch_size: int) -> RunSettings:
    """The settings a trial of `batch_size` samples per optimizer step runs with: under
    `fit_to_data`, `selection.training_length` of the train split's `train_rows` (its steps,
    and its evaluations about 8 times a trial); otherwise `s` as given."""
    if not s.fit_to_data:
        return s
    from autoembed.selection import training_length

    length = training_length(max(train_rows, 1), batch_size)
    return replace(s, max_steps=max(1, length.steps), epochs=None, eval_every=length.eval_every)


def environment(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "device": device,
        "device_name": (
            torch.cuda.get_device_name(0)
            if device.startswith("cuda") and torch.cuda.is_available()
            else platform.processor() or "cpu"
        ),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "host": platform.node(),
    }
    return env


def resolve_for_data(config: EmbeddingConfig, dataset: Any) -> EmbeddingConfig:
    """The config with the data's task, tables (vocab sizes, bag sizes, frequencies),
    classes, sequence length and data spec written in, then resolved (mixed-dim dims).

    Per-table `dim`s and settings already in the config are kept when the table names
    match (`config.with_data_tables`). Text: a config's own `seq_len` (above 1: searched, or
    exported) is kept, and `run_trial` truncates or pads the documents to it; otherwise the
    data's."""
    text = dataset.task == "text"
    cfg = replace(
        config,
        task=dataset.task,
        tables=with_data_tables(config, dataset.tables),
        num_classes=dataset.num_classes if text else 2,
        seq_len=(config.seq_len if config.seq_len > 1 else dataset.seq_len) if text else 1,
        data=dataset.spec.to_dict(),
    )
    if cfg.compression == "hash" and cfg.hash_buckets is None:
        raise ConfigError("compression 'hash' needs hash_buckets")
    return cfg.resolve()


def default_target(dataset: Any, task: str) -> float | None:
    """The quality counted as converged, from the data's known best (synthetic data)."""
    if task == "ctr" and hasattr(dataset, "oracle_auc"):
        return 0.5 + TARGET_SHARE * (float(dataset.oracle_auc("valid")) - 0.5)
    if task == "text" and hasattr(dataset, "oracle_accuracy"):
        return TARGET_SHARE * float(dataset.oracle_accuracy("valid"))
    return None


def quality_metrics(task: str, logits: Any, labels: Any) -> dict[str, float]:
    """ctr: AUC and log-loss; text: accuracy and macro-F1 (scikit-learn's definitions,
    computed by `autoembed.data.metrics`)."""
    import numpy as np

    from autoembed.data.metrics import accuracy, log_loss, macro_f1, roc_auc

    y = np.asarray(labels)
    z = np.asarray(logits, dtype=np.float64)
    if task == "ctr":
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
        return {"auc": roc_auc(z, y), "logloss": log_loss(np.clip(p, 1e-7, 1 - 1e-7), y)}
    pred = z.argmax(axis=1)
    return {"accuracy": accuracy(pred, y), "macro_f1": macro_f1(pred, y)}


def primary(task: str) -> str:
    return "auc" if task == "ctr" else "accuracy"


def _evaluate(
    trainer: Any, dataset: Any, split: str, batch_size: int, limit: int | None, task: str
) -> dict[str, float]:
    return _scored(trainer, dataset, split, batch_size, limit, task)[0]


def _scored(
    trainer: Any, dataset: Any, split: str, batch_size: int, limit: int | None, task: str
) -> tuple[dict[str, float], ValidScores]:
    """A split's quality metrics and the per-row predictions they are of."""
    import numpy as np
    import torch

    outs, labels = [], []
    for i, batch in enumerate(dataset.batches(split, batch_size, seed=0, shuffle=False)):
        if limit is not None and i >= limit:
            break
        outs.append(trainer.predict(batch).cpu())
        labels.append(batch.labels.cpu())
    if not outs:
        raise DataError(f"the {split} split has no rows; use more data or other split fractions")
    z = torch.cat(outs).numpy()
    y = torch.cat(labels).numpy()
    y = y if task == "text" else (y > 0.5).astype(np.int64)
    return quality_metrics(task, z, y), ValidScores.of(task, z, y)


def _latency(trainer: Any, dataset: Any, clock: Callable[[], float]) -> dict[str, float]:
    import numpy as np

    out: dict[str, float] = {}
    for bs, n in zip((1, SERVING_BATCH), LATENCY_QUERIES, strict=True):
        times = []
        for i, batch in enumerate(_repeat(dataset, "test", bs)):
            if i >= n + 5:
                break
            t = clock()
            trainer.predict(batch)
            if trainer.device.type == "cuda":
                import torch

                torch.cuda.synchronize()
            if i >= 5:  # warm-up excluded
                times.append((clock() - t) * 1e3)
        if times:
            out[f"p50_b{bs}"] = float(np.percentile(times, 50))
            out[f"p99_b{bs}"] = float(np.percentile(times, 99))
    return out


def _repeat(dataset: Any, split: str, batch_size: int) -> Iterator[Any]:
    """Batches of `split`, starting over when it runs out (small test splits)."""
    seed = 1
    while True:
        got = False
        for b in dataset.batches(split, batch_size, seed=seed, shuffle=True):
            got = True
            yield b
        if not got:
            return
        seed += 1


def _cycle(dataset: Any, batch_size: int, seed: int, epochs: int | None) -> Iterator[Any]:
    epoch = 0
    while epochs is None or epoch < epochs:
        any_batch = False
        for b in dataset.batches(
            "train", batch_size, seed=seed + epoch, shuffle=True, drop_last=True
        ):
            any_batch = True
            yield b
        if not any_batch:
            raise DataError(
                f"the train split has fewer rows than one batch ({batch_size}); "
                "use a smaller batch_size or more data"
            )
        epoch += 1


def _new_best(curve: list[Evaluation], quality: float) -> bool:
    """Whether `quality` beats every evaluation of `curve` (`selection.best_evaluation`:
    the earliest wins ties, NaN never wins)."""
    if not math.isfinite(quality):
        return False
    best = best_evaluation(curve)
    return best is None or quality > best.quality


def _snapshot(model: Any) -> dict[str, Any]:
    """A host copy of the model's weights (the best evaluation's, under fit_to_data)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def is_oom(e: BaseException) -> bool:
    """Whether `e` is the device running out of memory (the `oom` status): torch's
    OutOfMemoryError, or an allocator error that says so."""
    import torch

    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


def _rss_peak() -> int:
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def run_trial(
    config: EmbeddingConfig,
    data: Any,
    settings: RunSettings | None = None,
    report: Callable[[Evaluation], bool] | None = None,
    *,
    on_step: Callable[[Any, int], None] | None = None,
    trainer: Any = None,
    start_step: int = 0,
) -> TrialResult:
    """Train `config` on `data` (a `DataSpec`, a `Dataset` or a data name) and measure it.

    `report(evaluation)` is called after each validation evaluation; returning False stops
    the trial as `pruned`. `on_step(trainer, step)` runs after each step (checkpoints).
    Never raises for trial faults: they come back as the result's status.
    """
    import torch

    s = settings or RunSettings()
    wall0 = s.clock()
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    dataset = data
    if not hasattr(data, "batches"):  # a data name or a DataSpec, not a loaded Dataset
        from autoembed.data import DataSpec, load_dataset

        dataset = load_dataset(DataSpec(name=data) if isinstance(data, str) else data)
    cfg = resolve_for_data(config, dataset)
    if cfg.task == "text" and cfg.seq_len != dataset.seq_len:
        from autoembed.data.sequence import with_seq_len

        dataset = with_seq_len(dataset, cfg.seq_len)
    if s.fit_to_data:
        s = fit_settings(s, dataset.num_rows("train"), cfg.batch_size * cfg.grad_accum_steps)
    env = environment(s.device)
    from autoembed.memory import estimate

    est = estimate(cfg).to_dict()
    base: dict[str, Any] = {"config": cfg, "estimate": est, "env": env}
    task = cfg.task
    target = s.target if s.target is not None else default_target(dataset, task)
    curve: list[Evaluation] = []
    steps = samples = 0
    timed_steps = 0
    timed_seconds = 0.0
    train_seconds = train_cpu = 0.0
    data_seconds = eval_seconds = 0.0
    best_weights: dict[str, Any] | None = None  # fit_to_data: the best evaluation's
    # the validation predictions of the last and of the best evaluation
    last_scores: ValidScores | None = None
    best_scores: ValidScores | None = None

    def result(status: str, **kw: Any) -> TrialResult:
        thr = (
            timed_steps * cfg.batch_size * cfg.grad_accum_steps / timed_seconds
            if timed_seconds > 0
            else None
        )
        steps_to_target, samples_to_target = to_target(curve, target) or (None, None)
        return TrialResult(
            status=status,
            curve=tuple(curve),
            steps=steps,
            samples=samples,
            throughput=thr,
            steps_to_target=steps_to_target,
            samples_to_target=samples_to_target,
            target=target,
            train_seconds=train_seconds,
            train_cpu_seconds=train_cpu,
            wall_seconds=s.clock() - wall0,
            data_seconds=data_seconds,
            eval_seconds=eval_seconds,
            rss_peak=_rss_peak(),
            **base,
            **kw,
        )

    try:
        if trainer is None:
            from autoembed.models import make_trainer
            from autoembed.models.hot_cold import install_hot_sets

            trainer = make_trainer(cfg, s.device)
            install_hot_sets(trainer.model, dataset)
        from autoembed.models.idf import install_idf

        install_idf(trainer.model, dataset)  # pooling idf: this (truncated) train split's
        if s.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        batches = _cycle(dataset, cfg.batch_size, cfg.seed, s.epochs)
        for _ in range(start_step * cfg.grad_accum_steps):  # resume: the same data order
            next(batches, None)
        t_start = s.clock()
        steps = start_step
        max_steps = s.max_steps if s.epochs is None else None
        while max_steps is None or steps < max_steps:
            micro = []
            t_data = s.clock()
            for _ in range(cfg.grad_accum_steps):
                b = next(batches, None)
                if b is None:
                    break
                micro.append(b)
            data_seconds += s.clock() - t_data
            if len(micro) < cfg.grad_accum_steps:
                break  # the epochs are done
            t0, c0 = s.clock(), s.cpu_clock()
            loss = trainer.step(micro)
            dt = s.clock() - t0
            train_cpu += s.cpu_clock() - c0
            steps += 1
            samples += cfg.batch_size * cfg.grad_accum_steps
            train_seconds += dt
            if steps - start_step > s.warmup_steps:
                timed_steps += 1
                timed_seconds += dt
            if not math.isfinite(loss):
                return result("diverged", error=f"loss became {loss} at step {steps}")
            if on_step is not None:
                on_step(trainer, steps)
            last = max_steps is not None and steps >= max_steps
            if steps % s.eval_every == 0 or last:
                t_eval = s.clock()
                m, last_scores = _scored(trainer, dataset, "valid", cfg.batch_size,
                                         s.eval_batches, task)
                eval_seconds += s.clock() - t_eval
                q = m[primary(task)]
                ev = Evaluation(steps, samples, q, m, s.clock() - t_start, train_seconds)
                if s.fit_to_data and _new_best(curve, q):
                    best_weights, best_scores = _snapshot(trainer.model), last_scores
                curve.append(ev)
                if report is not None and report(ev) is False:
                    return result("pruned", test_quality=q, valid_quality=q, metrics=m)
            if s.max_seconds is not None and train_seconds >= s.max_seconds:
                break
        from autoembed.models.host_cache import cache_metrics

        cache = cache_metrics(trainer.model, steps - start_step, train_seconds)
        t_eval = s.clock()
        if not curve or curve[-1].step != steps:
            # stopped by time or epochs between evaluations: evaluate the last weights
            m, last_scores = _scored(trainer, dataset, "valid", cfg.batch_size,
                                     s.eval_batches, task)
            final = Evaluation(steps, samples, m[primary(task)], m, s.clock() - t_start,
                               train_seconds)
            if s.fit_to_data:
                if _new_best(curve, final.quality):
                    best_weights, best_scores = None, last_scores
                curve.append(final)
        else:
            final = curve[-1]
        chosen: Any = final
        scores = last_scores
        if s.fit_to_data:  # judged by its best evaluation: go back to its weights
            chosen = best_evaluation(curve) or final
            scores = best_scores
            if chosen.step != steps and best_weights is not None:
                trainer.model.load_state_dict(best_weights)
        valid_quality = chosen.quality
        best_step = {"best_step": chosen.step, "best_samples": chosen.samples}
        metrics = _evaluate(trainer, dataset, "test", cfg.batch_size, s.test_batches, task)
        quality = metrics[primary(task)]
        metrics = {**metrics, **cache}  # host_cached: hit rate and the cost of misses
        extra: dict[str, Any] = {}
        if s.device.startswith("cuda"):
            extra["measured_allocated_peak"] = int(torch.cuda.max_memory_allocated())
            extra["measured_reserved_peak"] = int(torch.cuda.max_memory_reserved())
        if cfg.serving != "none":
            from autoembed.models import quantize, serving_bytes

            served = quantize(trainer.model, cfg.serving)
            before = quality
            q_trainer = replace(trainer, model=served)  # same device and autocast
            metrics_q = _evaluate(q_trainer, dataset, "test", cfg.batch_size, s.test_batches, task)
            # what is served is what is selected: validation of the quantized model too
            served_valid, scores = _scored(q_trainer, dataset, "valid", cfg.batch_size,
                                           s.eval_batches, task)
            valid_quality = served_valid[primary(task)]
            extra["quality_before_quantization"] = before
            extra["serving_bytes"] = int(serving_bytes(served))
            metrics = {**metrics_q, **{f"{k}_before_quantization": v for k, v in metrics.items()}}
            quality = metrics_q[primary(task)]
            trainer = q_trainer
        else:
            from autoembed.models import serving_bytes

            extra["serving_bytes"] = int(serving_bytes(trainer.model))
        latency = _latency(trainer, dataset, s.clock) if s.measure_latency else {}
        eval_seconds += s.clock() - t_eval
        return result("complete", test_quality=quality, valid_quality=valid_quality,
                      metrics=metrics, latency_ms=latency, valid_scores=scores, **best_step,
                      **extra)
    except UnsupportedError as e:
        return result("unsupported", error=str(e))
    except (ConfigError, DataError):
        raise  # bad input is the caller's to report, not a trial fault
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a trial fault is a result, not a crash
        if is_oom(e):
            peaks: dict[str, Any] = {}
            if s.device.startswith("cuda"):  # how far it got: the size that failed
                peaks = {"measured_allocated_peak": int(torch.cuda.max_memory_allocated()),
                         "measured_reserved_peak": int(torch.cuda.max_memory_reserved())}
                torch.cuda.empty_cache()
            return result("oom", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                          **peaks)
        return result("failed", error=f"{type(e).__name__}: {str(e)[:500]}")
