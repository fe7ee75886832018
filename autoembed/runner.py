"""The trial runner: train one config and measure quality, memory, throughput, convergence
and latency; the same loop trains a chosen config for real (`autoembed.train`). Torch
threads are pinned; the first `warmup_steps` steps and all evaluation are out of the
throughput; device, versions and threads are recorded with every result; CUDA's peaks are
measured, on a CPU the estimate stands in (docs/contracts.md#memory-figures).
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from autoembed.config import EmbeddingConfig, with_data_tables
from autoembed.errors import ConfigError, DataError, UnsupportedError, did_you_mean
from autoembed.rules import Flag, Integer, Interval, field_rule
from autoembed.selection import BestStep, ValidScores, best_evaluation, to_target
from autoembed.trial import Evaluation, TrialResult

__all__ = ["RunSettings", "Evaluation", "TrialResult", "run_trial", "resolve_for_data",
           "quality_metrics", "default_target", "fit_settings", "check_run", "MAX_THREADS"]

# The share of the oracle's lift over chance that counts as converged (`default_target`)
TARGET_SHARE = 0.9
SERVING_BATCH = 256  # queries per request for the batched latency figure
# Timed requests at batch 1 and at SERVING_BATCH, after 5 untimed ones each
LATENCY_QUERIES = (40, 20)


# Threads torch may be given: far above any host's cores; 10**6 crashes torch (SIGSEGV)
MAX_THREADS = 1024
# The RunSettings fields that may be None (None: no limit, the whole split, torch's own)
_MAY_BE_NONE = ("max_seconds", "epochs", "test_batches", "target", "threads")


@dataclass(frozen=True)
class RunSettings:
    """How long and how a trial trains and is measured. Each field with a rule in its
    metadata is checked against it (`check_run`): bad values are a ConfigError here, never
    a crash in the loop."""

    max_steps: int = field(default=300, metadata=field_rule(Integer(1)))
    # a trial's training seconds: 30 days at most, as a trial's time limit
    max_seconds: float | None = field(
        default=None, metadata=field_rule(Interval(0, 30 * 86400, open_low=True)))
    epochs: int | None = field(default=None, metadata=field_rule(Integer(1)))
    eval_every: int = field(default=50, metadata=field_rule(Integer(1)))
    eval_batches: int = field(default=20, metadata=field_rule(Integer(1)))
    test_batches: int | None = field(default=40, metadata=field_rule(Integer(1)))
    warmup_steps: int = field(default=3, metadata=field_rule(Integer(0)))
    target: float | None = None
    device: str = "cpu"
    threads: int | None = field(default=None, metadata=field_rule(Integer(1, MAX_THREADS)))
    measure_latency: bool = field(default=True, metadata=field_rule(Flag()))
    # real data: the length from its size (`fit_settings`); judged by the best evaluation,
    # whose weights the test and serving figures are of
    fit_to_data: bool = field(default=False, metadata=field_rule(Flag()))
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False, repr=False)
    # the process's CPU seconds (train_cpu_seconds: the optimizer steps' share)
    cpu_clock: Callable[[], float] = field(default=time.process_time, compare=False,
                                           repr=False)

    def __post_init__(self) -> None:
        check_run({f.name: getattr(self, f.name) for f in fields(self)
                   if "rule" in f.metadata})


def check_run(run: Mapping[str, Any], source: str = "", prefix: str = "",
              keys: Sequence[str] | None = None) -> None:
    """Check a mapping of run settings (RunSettings fields) before anything uses them:
    each key one of `keys` (default: every field with a rule), each value within its
    field's rule (None where the field may be None). Raises ConfigError
    "SOURCE: key 'PREFIXKEY' = VALUE: RULE" (`Rule.check`; or "unknown key ...; valid: ...")."""
    rules = {f.name: f.metadata["rule"] for f in fields(RunSettings) if "rule" in f.metadata}
    valid = tuple(keys) if keys is not None else tuple(rules)
    where = f"{source}: " if source else ""
    for k, v in run.items():
        if k not in valid:
            raise ConfigError(f"{where}unknown key '{prefix}{k}'{did_you_mean(str(k), valid)}; "
                              f"valid: {', '.join(valid)}")
        if k in rules and not (v is None and k in _MAY_BE_NONE):
            rules[k].check(f"{prefix}{k}", v, f"{where}key")


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

    gpu = device.startswith("cuda") and torch.cuda.is_available()
    return {"device": device,
            "device_name": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
            "torch": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "host": platform.node()}


def resolve_for_data(config: EmbeddingConfig, dataset: Any) -> EmbeddingConfig:
    """The config with the data's task, tables (vocab sizes, bag sizes, frequencies),
    classes, sequence length and data spec written in, then resolved (mixed-dim dims).

    Per-table `dim`s and settings already in the config are kept when the table names
    match (`config.with_data_tables`). Text: a config's own `seq_len` (above 1: searched, or
    exported) is kept, and `run_trial` truncates or pads the documents to it; otherwise the
    data's."""
    text = dataset.task == "text"
    cfg = replace(
        config, task=dataset.task, tables=with_data_tables(config, dataset.tables),
        num_classes=dataset.num_classes if text else 2,
        seq_len=(config.seq_len if config.seq_len > 1 else dataset.seq_len) if text else 1,
        data=dataset.spec.to_dict())
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
        for b in dataset.batches("train", batch_size, seed=seed + epoch, shuffle=True,
                                 drop_last=True):
            any_batch = True
            yield b
        if not any_batch:
            raise DataError(f"the train split has fewer rows than one batch ({batch_size}); "
                            "use a smaller batch_size or more data")
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


def run_trial(config: EmbeddingConfig, data: Any, settings: RunSettings | None = None,
              report: Callable[[Evaluation], bool] | None = None, *,
              on_step: Callable[[Any, int], None] | None = None, trainer: Any = None,
              start_step: int = 0) -> TrialResult:
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
    cfg, dataset, s = _prepare(config, data, s)
    run = _Trial.of(cfg, dataset, s, wall0, start_step)
    try:
        if trainer is None:
            trainer = _new_trainer(cfg, dataset, s.device)
        from autoembed.models.idf import install_idf

        install_idf(trainer.model, dataset)  # pooling idf: this (truncated) train split's
        if s.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        stopped = run.train(trainer, report, on_step)
        return stopped if stopped is not None else run.finish(trainer)
    except UnsupportedError as e:
        return run.result("unsupported", error=str(e))
    except (ConfigError, DataError):
        raise  # bad input is the caller's to report, not a trial fault
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a trial fault is a result, not a crash
        return run.fault(e)


def _prepare(config: EmbeddingConfig, data: Any,
             s: RunSettings) -> tuple[EmbeddingConfig, Any, RunSettings]:
    """The data loaded, the config resolved for it, the text data at the config's sequence
    length, and the settings for the data's size (`fit_settings`)."""
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
    return cfg, dataset, s


def _new_trainer(cfg: EmbeddingConfig, dataset: Any, device: str) -> Any:
    from autoembed.models import make_trainer
    from autoembed.models.hot_cold import install_hot_sets

    trainer = make_trainer(cfg, device)
    install_hot_sets(trainer.model, dataset)
    return trainer


@dataclass
class _Loop:
    """A trial's training so far: its curve and counters (what its result reports), and the
    validation predictions of its last and of its best evaluation."""

    start_step: int  # where this run began (a resumed trial's checkpoint)
    t_start: float = 0.0  # the clock when the training loop began
    curve: list[Evaluation] = field(default_factory=list)
    steps: int = 0
    samples: int = 0
    timed_steps: int = 0  # the steps after the warm-up: throughput's
    timed_seconds: float = 0.0
    train_seconds: float = 0.0
    train_cpu: float = 0.0
    data_seconds: float = 0.0
    eval_seconds: float = 0.0
    best_weights: dict[str, Any] | None = None  # fit_to_data: the best evaluation's
    last_scores: ValidScores | None = None
    best_scores: ValidScores | None = None


@dataclass
class _Trial:
    """One `run_trial`: the resolved config, its data and settings, what every result
    carries (`base`: config, estimate, environment) and the loop's state."""

    cfg: EmbeddingConfig
    dataset: Any
    s: RunSettings
    wall0: float
    base: dict[str, Any]
    target: float | None
    loop: _Loop

    @classmethod
    def of(cls, cfg: EmbeddingConfig, dataset: Any, s: RunSettings, wall0: float,
           start_step: int) -> _Trial:
        from autoembed.trace import estimate

        env = environment(s.device)
        base = {"config": cfg, "estimate": estimate(cfg).to_dict(), "env": env}
        target = s.target if s.target is not None else default_target(dataset, cfg.task)
        return cls(cfg, dataset, s, wall0, base, target, _Loop(start_step))

    def result(self, status: str, **kw: Any) -> TrialResult:
        loop, per_step = self.loop, self.cfg.batch_size * self.cfg.grad_accum_steps
        thr = loop.timed_steps * per_step / loop.timed_seconds if loop.timed_seconds > 0 else None
        steps_to_target, samples_to_target = to_target(loop.curve, self.target) or (None, None)
        return TrialResult(
            status=status, curve=tuple(loop.curve), steps=loop.steps, samples=loop.samples,
            throughput=thr, steps_to_target=steps_to_target, samples_to_target=samples_to_target,
            target=self.target, train_seconds=loop.train_seconds, train_cpu_seconds=loop.train_cpu,
            wall_seconds=self.s.clock() - self.wall0, data_seconds=loop.data_seconds,
            eval_seconds=loop.eval_seconds, rss_peak=_rss_peak(), **self.base, **kw)

    def fault(self, e: Exception) -> TrialResult:
        """A trial fault as its result: `oom` (on CUDA with the peaks it reached: the size
        that failed) or `failed`."""
        if not is_oom(e):
            return self.result("failed", error=f"{type(e).__name__}: {str(e)[:500]}")
        peaks = _peaks(self.s.device)
        if self.s.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        return self.result("oom", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                           **peaks)

    def train(self, trainer: Any, report: Callable[[Evaluation], bool] | None,
              on_step: Callable[[Any, int], None] | None) -> TrialResult | None:
        """Train from the loop's start step to the settings' end (steps, epochs or seconds),
        evaluating on validation every `eval_every` steps and at the last; the result when
        the trial ends early (diverged, or pruned by `report`), else None."""
        cfg, s, loop = self.cfg, self.s, self.loop
        batches = _cycle(self.dataset, cfg.batch_size, cfg.seed, s.epochs)
        for _ in range(loop.start_step * cfg.grad_accum_steps):  # resume: the same data order
            next(batches, None)
        loop.t_start = s.clock()
        loop.steps = loop.start_step
        loop.samples = loop.start_step * cfg.batch_size * cfg.grad_accum_steps  # all it holds
        max_steps = s.max_steps if s.epochs is None else None
        while max_steps is None or loop.steps < max_steps:
            micro = self._micro_batches(batches)
            if micro is None:
                break  # the epochs are done
            loss = self._step(trainer, micro)
            if not math.isfinite(loss):
                return self.result("diverged", error=f"loss became {loss} at step {loop.steps}")
            if on_step is not None:
                on_step(trainer, loop.steps)
            last = max_steps is not None and loop.steps >= max_steps
            if loop.steps % s.eval_every == 0 or last:
                ev = self._evaluation(trainer)
                if report is not None and report(ev) is False:
                    return self.result("pruned", test_quality=ev.quality,
                                       valid_quality=ev.quality, metrics=ev.metrics)
            if s.max_seconds is not None and loop.train_seconds >= s.max_seconds:
                break
        return None

    def _micro_batches(self, batches: Iterator[Any]) -> list[Any] | None:
        """The next step's micro-batches (timed as data); None when the epochs are done."""
        t = self.s.clock()
        micro = []
        for _ in range(self.cfg.grad_accum_steps):
            b = next(batches, None)
            if b is None:
                break
            micro.append(b)
        self.loop.data_seconds += self.s.clock() - t
        return micro if len(micro) == self.cfg.grad_accum_steps else None

    def _step(self, trainer: Any, micro: list[Any]) -> float:
        """One optimizer step, timed (throughput counts the steps after the warm-up)."""
        s, loop = self.s, self.loop
        t0, c0 = s.clock(), s.cpu_clock()
        loss = trainer.step(micro)
        dt = s.clock() - t0
        loop.train_cpu += s.cpu_clock() - c0
        loop.steps += 1
        loop.samples += self.cfg.batch_size * self.cfg.grad_accum_steps
        loop.train_seconds += dt
        if loop.steps - loop.start_step > s.warmup_steps:
            loop.timed_steps += 1
            loop.timed_seconds += dt
        return loss

    def _valid(self, trainer: Any) -> tuple[dict[str, float], ValidScores]:
        return _scored(trainer, self.dataset, "valid", self.cfg.batch_size,
                       self.s.eval_batches, self.cfg.task)

    def _evaluation(self, trainer: Any) -> Evaluation:
        """A validation evaluation, appended to the curve (under fit_to_data a new best's
        weights and predictions are kept)."""
        s, loop = self.s, self.loop
        t = s.clock()
        m, loop.last_scores = self._valid(trainer)
        loop.eval_seconds += s.clock() - t
        q = m[primary(self.cfg.task)]
        ev = Evaluation(loop.steps, loop.samples, q, m, s.clock() - loop.t_start,
                        loop.train_seconds)
        if s.fit_to_data and _new_best(loop.curve, q):
            loop.best_weights, loop.best_scores = _snapshot(trainer.model), loop.last_scores
        loop.curve.append(ev)
        return ev

    def finish(self, trainer: Any) -> TrialResult:
        """The completed trial measured: the evaluation it is judged by, test quality, the
        host cache's figures, CUDA's peaks, serving bytes (of the quantized model when the
        config serves quantized: `_served`) and latency."""
        from autoembed.models.host_cached_table import cache_metrics

        s, loop, task = self.s, self.loop, self.cfg.task
        cache = cache_metrics(trainer.model, loop.steps - loop.start_step, loop.train_seconds)
        t_eval = s.clock()
        chosen, scores = self._choose_evaluation(trainer)
        test, _ = _scored(trainer, self.dataset, "test", self.cfg.batch_size, s.test_batches,
                          task)
        metrics = {**test, **cache}  # host_cached: hit rate and the cost of misses
        measured: dict[str, Any] = {"valid_quality": chosen.quality, "valid_scores": scores,
                                    "best_step": chosen.step, "best_samples": chosen.samples,
                                    **_peaks(s.device)}
        if self.cfg.serving != "none":
            trainer, metrics, served = self._served(trainer, metrics)
            measured.update(served)  # its validation too: what is served is what is selected
        else:
            from autoembed.models import serving_bytes

            measured["serving_bytes"] = int(serving_bytes(trainer.model))
        latency = _latency(trainer, self.dataset, s.clock) if s.measure_latency else {}
        loop.eval_seconds += s.clock() - t_eval
        return self.result("complete", test_quality=metrics[primary(task)], metrics=metrics,
                           latency_ms=latency, **measured)

    def _choose_evaluation(self, trainer: Any,
                           ) -> tuple[Evaluation | BestStep, ValidScores | None]:
        """The evaluation the trial is judged by and its validation predictions: the last
        (evaluated now when training stopped between evaluations), or under fit_to_data the
        best, whose weights go back into the model."""
        s, loop = self.s, self.loop
        if loop.curve and loop.curve[-1].step == loop.steps:
            final = loop.curve[-1]
        else:  # stopped by time or epochs between evaluations: evaluate the last weights
            m, loop.last_scores = self._valid(trainer)
            final = Evaluation(loop.steps, loop.samples, m[primary(self.cfg.task)], m,
                               s.clock() - loop.t_start, loop.train_seconds)
            if s.fit_to_data:
                if _new_best(loop.curve, final.quality):
                    loop.best_weights, loop.best_scores = None, loop.last_scores
                loop.curve.append(final)
        if not s.fit_to_data:
            return final, loop.last_scores
        chosen = best_evaluation(loop.curve) or final
        if chosen.step != loop.steps and loop.best_weights is not None:
            trainer.model.load_state_dict(loop.best_weights)
        return chosen, loop.best_scores

    def _served(self, trainer: Any, metrics: dict[str, float],
                ) -> tuple[Any, dict[str, float], dict[str, Any]]:
        """The model at the config's serving precision: its trainer, its test metrics (the
        full-precision ones beside them, `_before_quantization`), and what the result
        records of it (validation too: what is served is what is selected)."""
        from autoembed.models import quantize, serving_bytes

        cfg, task = self.cfg, self.cfg.task
        served = quantize(trainer.model, cfg.serving)
        q_trainer = replace(trainer, model=served)  # same device and autocast
        test, _ = _scored(q_trainer, self.dataset, "test", cfg.batch_size, self.s.test_batches,
                          task)
        valid, scores = self._valid(q_trainer)
        record = {"quality_before_quantization": metrics[primary(task)],
                  "serving_bytes": int(serving_bytes(served)),
                  "valid_quality": valid[primary(task)], "valid_scores": scores}
        both = {**test, **{f"{k}_before_quantization": v for k, v in metrics.items()}}
        return q_trainer, both, record


def _peaks(device: str) -> dict[str, int]:
    """CUDA's measured peaks since the trial's reset; none off CUDA."""
    if not device.startswith("cuda"):
        return {}
    import torch

    return {"measured_allocated_peak": int(torch.cuda.max_memory_allocated()),
            "measured_reserved_peak": int(torch.cuda.max_memory_reserved())}
