"""The seed's headline on this project: a third of the memory, +40% throughput, no quality loss.

For each workload (the seed's text model; a recommender analogue):

1. the baseline is the seed's configuration (text: nn.Embedding(1M, 300) -> mean over the 512
   positions -> linear classifier; fp32 parameters, dense Adam, batch 64); its estimated
   `device_total` (analytic, and traced) sets the budget: one third of it;
2. `autoembed.search` searches `search_spaces/seed_<workload>.yaml` under that budget;
3. pick rule: the front's member with the best search quality (all are under the budget);
   the seed's bar is "no quality loss", so quality decides and memory and throughput are
   what the budget and the search's techniques give;
4. the baseline and the pick train side by side in this process, on the same data in the
   same order, one optimizer step at a time, always stepping the one that has seen fewer
   samples (so machine load hits both alike), until both have seen the same number of
   samples (equal samples); then the faster one trains on until its step time reaches the
   baseline's (at most `equal_time_cap` seconds more) and is tested again (equal time);
5. reported for both: estimated device_total (analytic, traced; measured only on a GPU:
   `gpu_seed_case.py`), steady-state training throughput (samples/s over the timed steps:
   the first WARMUP_STEPS excluded, data fetching and evaluation excluded), quality on the
   test split, and steps (samples) to the target quality; ratios in the last column.

The target is the baseline's own final validation quality less 0.5% (relative): how soon
does each reach the quality the baseline ends with. On a 2-core CPU the baseline's dense
Adam over a 1M x 300 table (4.8 GB touched per step) takes seconds per step, so the text
models are compared after 240 baseline steps, far from convergence (the baseline's lr is the
best of a validation sweep, see TEXT); CTR trains 100 steps, near its plateau. Quality is
compared at equal samples, with a paired bootstrap 95% interval of the relative difference
on the test rows.

    python benchmarks/seed_case.py [--quick] [--only text|ctr] [--text-samples N]

Writes benchmarks/results/seed_case.md (seed_case_quick.md with --quick).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, markdown_table, stamp, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUALITY_TOLERANCE = 0.005  # the seed's bar: quality within 0.5% relative
MEMORY_BAR = 1 / 3  # the seed's bar: 24 GB -> 8 GB
THROUGHPUT_BAR = 1.4  # the seed's bar: +40% training throughput
WARMUP_STEPS = 2  # untimed steps per model (Adam creates its state at the first step)
THREADS = 2  # torch threads (this machine has 2 cores)
BOOTSTRAP = 1000  # paired bootstrap resamples of the test rows


@dataclass(frozen=True)
class Case:
    """One workload: its data, the baseline config, the space and the side-by-side run."""

    name: str
    data: Mapping[str, Any]  # DataSpec fields, full size
    baseline: Mapping[str, Any]  # EmbeddingConfig fields of the seed's configuration
    space: Path
    samples: int  # training samples each model sees side by side
    eval_every: int  # samples between validation evaluations
    valid_rows: int
    test_rows: int
    trials: int | None = None  # search trials (None: the space's)
    search_seconds: float | None = None  # no new trial after this
    quick: bool = False  # smoke run: the space searched over `data` itself, no stand-in
    equal_time_cap: float = 120.0  # seconds a faster model may train on towards equal time
    lr_sweep: tuple[float, ...] = ()  # the baseline's lr: the best of these on validation
    sweep_steps: int = 40  # steps each swept lr trains before its validation score
    sweep_rows: int = 1_000  # validation rows that score it


TEXT = Case(
    name="text",
    data={"name": "synthetic-text", "vocab_size": 1_000_000, "seq_len": 512, "num_classes": 4,
          "rows": [100_000, 2_000, 20_000]},
    # The seed's model. Its table lr is swept in the run (`lr_sweep`, on validation); the
    # searched configs get the same treatment: the search tunes their lr on validation (up
    # to 1.0). The tower's rate is the search space's (0.01), so both sides differ only in
    # what the search chose.
    baseline={"task": "text", "dim": 300, "batch_size": 64, "precision": "fp32",
              "compression": "none", "pooling": "naive", "dense_layers": (),
              "table_optimizer": "adam", "dense_optimizer": "adam", "lr": 1.0,
              "dense_lr": 0.01},
    space=ROOT / "search_spaces" / "seed_text.yaml",
    samples=64 * 240,
    eval_every=64 * 60,
    valid_rows=2_000,
    test_rows=20_000,
    search_seconds=120,
    equal_time_cap=60.0,
    lr_sweep=(0.1, 0.3, 1.0),
)
CTR = Case(
    name="ctr",
    data={"name": "synthetic-ctr", "vocab_sizes": [4_000_000, 1_000_000, 100_000, 10_000],
          "rows": [2_000_000, 5_000, 20_000]},
    baseline={"task": "ctr", "dim": 32, "batch_size": 1024, "precision": "fp32",
              "compression": "none", "pooling": "naive", "dense_layers": (64,),
              "interaction": "concat", "table_optimizer": "adam", "dense_optimizer": "adam",
              "lr": 0.01, "dense_lr": 0.003},
    space=ROOT / "search_spaces" / "seed_ctr.yaml",
    samples=1024 * 100,
    eval_every=1024 * 25,
    valid_rows=5_000,
    test_rows=20_000,
    search_seconds=90,
    equal_time_cap=60.0,
)
CASES = {"text": TEXT, "ctr": CTR}


def quick(case: Case) -> Case:
    """A smoke-run version: small data, few samples, 3 trials."""
    data = dict(case.data)
    if case.name == "text":
        data.update(vocab_size=20_000, seq_len=64, rows=[4_000, 500, 1_000])
    else:
        data.update(vocab_sizes=[40_000, 10_000, 1_000, 100], rows=[8_000, 500, 1_000])
    bs = int(case.baseline["batch_size"])
    return replace(case, data=data, samples=bs * 8, eval_every=bs * 4, valid_rows=500,
                   test_rows=1_000, trials=3, search_seconds=None, quick=True,
                   equal_time_cap=2.0)


# ===================================================================== configs and memory


def load_data(case: Case) -> Any:
    from autoembed.data import DataSpec, load_dataset

    return load_dataset(DataSpec.from_dict(dict(case.data), f"seed case {case.name}"))


def baseline_config(case: Case, dataset: Any) -> Any:
    from autoembed.config import EmbeddingConfig
    from autoembed.runner import resolve_for_data

    return resolve_for_data(EmbeddingConfig(**dict(case.baseline)), dataset)


def sweep_baseline_lr(case: Case, cfg: Any, dataset: Any,
                      log: Callable[[str], None]) -> tuple[Any, str]:
    """The baseline with the best of `case.lr_sweep` on the validation split, measured here
    (`case.sweep_steps` steps each), and a sentence saying what the sweep measured."""
    if not case.lr_sweep:
        return cfg, ""
    from dataclasses import replace as dc_replace

    from autoembed.runner import RunSettings, run_trial

    rows = -(-case.sweep_rows // cfg.batch_size)
    settings = RunSettings(max_steps=case.sweep_steps, eval_every=case.sweep_steps,
                           eval_batches=rows, test_batches=1, measure_latency=False)
    scores: dict[float, float | None] = {}
    for lr in case.lr_sweep:
        r = run_trial(dc_replace(cfg, lr=lr), dataset, settings)
        scores[lr] = r.valid_quality if r.status == "complete" else None
        log(f"[{case.name}] baseline lr {lr:g}: {r.status}, validation {scores[lr]}")
    done = {lr: q for lr, q in scores.items() if q is not None}
    if not done:
        return cfg, " Baseline lr sweep: every rate failed; kept the configured lr."
    best = max(done, key=lambda lr: done[lr])
    said = ", ".join(f"{lr:g} -> {q:.3f}" if q is not None else f"{lr:g} -> failed"
                     for lr, q in scores.items())
    return dc_replace(cfg, lr=best), (
        f" Baseline lr: swept in this run on {case.sweep_rows:,} validation rows after "
        f"{case.sweep_steps} steps each ({said}); picked {best:g}. The search tunes the "
        "pick's lr the same way (on its stand-in's validation split).")


@dataclass(frozen=True)
class Priced:
    analytic: int  # device_total, bytes
    traced: int | None
    traced_s: float | None


def price(config: Any, traced: bool = True) -> Priced:
    from autoembed.trace import estimate

    analytic = int(estimate(config).device_total)
    if not traced:
        return Priced(analytic, None, None)
    t0 = time.perf_counter()
    try:
        tr: int | None = int(estimate(config, method="traced").device_total)
    except Exception as e:  # noqa: BLE001 - a traced failure is reported, not fatal
        print(f"traced estimate failed: {type(e).__name__}: {e}", file=sys.stderr)
        tr = None
    return Priced(analytic, tr, time.perf_counter() - t0)


# ===================================================================== search and pick


def pick_best_quality(front: Sequence[Any]) -> Any:
    """The front member with the highest search quality (ties: the higher throughput).
    Every front member is under the budget (the search never trains an over-budget
    proposal), so this is the best quality the search found within it. Members without a
    quality are skipped."""
    scored = [r for r in front if r.metrics.get("quality") is not None]
    if not scored:
        raise ValueError("no front member has a quality")
    return max(scored, key=lambda r: (float(r.metrics["quality"]),
                                      float(r.metrics.get("throughput") or 0.0)))


def run_search(case: Case, budget_bytes: int, runs: Path) -> Any:
    from autoembed import search
    from autoembed.space import load_space
    from autoembed.tracking import NullTracker

    space = load_space(case.space)
    if case.quick:  # the same space over the smoke run's small data
        import yaml

        raw = yaml.safe_load(case.space.read_text())
        raw["data"] = {**dict(case.data), "rows": list(case.data["rows"])}
        raw.pop("stand_in", None)
        p = runs / case.space.name
        p.write_text(yaml.safe_dump(raw, sort_keys=False))
        space = load_space(p)
    return search(budget=budget_bytes, space=space, trials=case.trials,
                  time_budget=case.search_seconds, runs_dir=runs, study=f"seed-{case.name}",
                  tracker=NullTracker(), device="cpu", pick_rule="max-quality")


# ===================================================================== side by side


@dataclass
class Lane:
    """One model training in the side-by-side run."""

    label: str
    config: Any
    trainer: Any
    batches: Any
    samples: int = 0
    steps: int = 0
    timed_steps: int = 0
    timed_samples: int = 0
    timed_seconds: float = 0.0
    step_seconds: float = 0.0  # every step, warm-up included (the equal-time clock)
    curve: list[tuple[int, int, float]] = field(default_factory=list)  # (step, samples, q)
    next_eval: int = 0

    @property
    def throughput(self) -> float | None:
        return self.timed_samples / self.timed_seconds if self.timed_seconds > 0 else None


@dataclass(frozen=True)
class Outcome:
    label: str
    config: Any
    steps: int
    samples: int
    throughput: float | None
    test_quality: float
    test_correct: Any  # per test row: (outputs, labels)
    curve: tuple[tuple[int, int, float], ...]
    step_seconds: float = 0.0
    # after training on to the slowest model's step time (capped): samples, step seconds,
    # test quality, per-row outputs; None when it did not train on
    equal_time: tuple[int, float, float, Any] | None = None


def evaluate(trainer: Any, dataset: Any, split: str, rows: int, task: str) -> tuple[float, Any]:
    """Primary quality on the first `rows` rows of `split` and the per-row outputs."""
    import torch

    from autoembed.runner import quality_metrics

    outs, labels, seen = [], [], 0
    for batch in dataset.batches(split, 500, seed=0, shuffle=False):
        outs.append(trainer.predict(batch).cpu())
        labels.append(batch.labels.cpu())
        seen += len(batch.labels)
        if seen >= rows:
            break
    z = torch.cat(outs)[:rows].numpy()
    y = torch.cat(labels)[:rows].numpy()
    if task == "text":
        return quality_metrics(task, z, y)["accuracy"], (z, y)
    yb = (y > 0.5).astype("int64")
    return quality_metrics(task, z, yb)["auc"], (z, yb)


def side_by_side(
    configs: Sequence[tuple[str, Any]], dataset: Any, samples: int, eval_every: int,
    valid_rows: int, test_rows: int, *, clock: Callable[[], float] = time.perf_counter,
    log: Callable[[str], None] = lambda s: None, equal_time_cap: float = 0.0,
) -> list[Outcome]:
    """Train every config on the same data (same order) until each has seen `samples`,
    always stepping the one that has seen fewest; evaluate on the validation rows every
    `eval_every` samples; then on the test rows. With `equal_time_cap` > 0, each faster model
    then trains on until its step time reaches the slowest one's (at most `equal_time_cap`
    more seconds) and is tested again."""
    import torch

    from autoembed.models import make_trainer

    torch.manual_seed(0)
    lanes = []
    for label, cfg in configs:
        lanes.append(Lane(label, cfg, make_trainer(cfg, "cpu"),
                          _cycle(dataset, cfg.batch_size), next_eval=eval_every))
    task = lanes[0].config.task
    while True:
        active = [ln for ln in lanes if ln.samples < samples]
        if not active:
            break
        ln = min(active, key=lambda x: x.samples)
        batch = [next(ln.batches) for _ in range(ln.config.grad_accum_steps)]
        t0 = clock()
        loss = ln.trainer.step(batch)
        dt = clock() - t0
        n = ln.config.batch_size * ln.config.grad_accum_steps
        ln.steps += 1
        ln.samples += n
        ln.step_seconds += dt
        if ln.steps > WARMUP_STEPS:
            ln.timed_steps += 1
            ln.timed_samples += n
            ln.timed_seconds += dt
        if ln.samples >= ln.next_eval or ln.samples >= samples:
            q, _ = evaluate(ln.trainer, dataset, "valid", valid_rows, task)
            ln.curve.append((ln.steps, ln.samples, q))
            ln.next_eval += eval_every
            log(f"  {ln.label}: step {ln.steps}, {ln.samples} samples, loss {loss:.4f}, "
                f"valid {q:.4f}, {dt:.3f} s/step")
    outcomes = []
    slowest = max(ln.step_seconds for ln in lanes)
    for ln in lanes:
        q, per_row = evaluate(ln.trainer, dataset, "test", test_rows, task)
        trained = ln.samples  # equal samples
        equal_time = None
        stop = min(slowest, ln.step_seconds + equal_time_cap)
        if equal_time_cap > 0 and ln.step_seconds < stop:
            while ln.step_seconds < stop:
                batch = [next(ln.batches) for _ in range(ln.config.grad_accum_steps)]
                t0 = clock()
                ln.trainer.step(batch)
                ln.step_seconds += clock() - t0
                ln.samples += ln.config.batch_size * ln.config.grad_accum_steps
            q_t, rows_t = evaluate(ln.trainer, dataset, "test", test_rows, task)
            equal_time = (ln.samples, ln.step_seconds, q_t, rows_t)
            log(f"  {ln.label}: equal time: {ln.samples} samples in {ln.step_seconds:.0f} s, "
                f"test {q_t:.4f}")
        outcomes.append(Outcome(ln.label, ln.config, ln.steps, trained,
                                ln.throughput, q, per_row, tuple(ln.curve), ln.step_seconds,
                                equal_time))
    return outcomes


def _cycle(dataset: Any, batch_size: int) -> Any:
    epoch = 0
    while True:
        yield from dataset.batches("train", batch_size, seed=epoch, shuffle=True,
                                   drop_last=True)
        epoch += 1


def to_target(curve: Sequence[tuple[int, int, float]], target: float) -> tuple[int, int] | None:
    """(steps, samples) at the first evaluation reaching `target`, or None."""
    for step, samples, q in curve:
        if q >= target:
            return step, samples
    return None


def paired_bootstrap(task: str, base: Any, other: Any, n: int = BOOTSTRAP,
                     seed: int = 0) -> tuple[float, float]:
    """95% interval of (quality(other) - quality(base)) / quality(base) over resampled test
    rows (the same rows for both)."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    zb, y = base
    zo, _ = other
    rng = np.random.default_rng(seed)
    rel = []
    for _ in range(n):
        idx = rng.integers(0, len(y), len(y))
        if task == "text":
            qb = float((zb[idx].argmax(1) == y[idx]).mean())
            qo = float((zo[idx].argmax(1) == y[idx]).mean())
        else:
            if len(np.unique(y[idx])) < 2:
                continue
            qb = float(roc_auc_score(y[idx], zb[idx]))
            qo = float(roc_auc_score(y[idx], zo[idx]))
        rel.append((qo - qb) / qb)
    lo, hi = np.percentile(rel, [2.5, 97.5])
    return float(lo), float(hi)


# ===================================================================== report


def describe(cfg: Any) -> str:
    parts = [f"dim {cfg.dim}", cfg.compression]
    if cfg.compression == "hash":
        parts[-1] = f"hash {cfg.hash_buckets:,} buckets"
    elif cfg.compression == "qr":
        parts[-1] = f"qr m={cfg.qr_collisions} {cfg.qr_operation}"
    elif cfg.compression == "mixed_dim":
        dims = "/".join(str(cfg.table_dim(t)) for t in cfg.tables)
        parts[-1] = f"mixed_dim alpha {cfg.mixed_dim_alpha:.2f} (dims {dims})"
    parts += [cfg.precision, f"{cfg.table_optimizer} lr {cfg.lr:.3g}", f"pooling {cfg.pooling}",
              f"batch {cfg.batch_size}"]
    if cfg.checkpointing:
        parts.append("checkpointing")
    return ", ".join(parts)


def gb(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 1e9:.3f} GB"


@dataclass(frozen=True)
class CaseReport:
    name: str
    text: str
    summary: dict[str, Any]


def run_case(case: Case, runs: Path, log: Callable[[str], None]) -> CaseReport:
    t_case = time.perf_counter()
    dataset = load_data(case)
    base_cfg, lr_note = sweep_baseline_lr(case, baseline_config(case, dataset), dataset, log)
    base_price = price(base_cfg)
    budget = base_price.analytic // 3
    if case.quick:  # small data: the fixed CUDA overhead alone would exceed a third
        from autoembed.trace import estimate

        budget += int(estimate(base_cfg).overhead)
    log(f"[{case.name}] baseline device_total {gb(base_price.analytic)} (traced "
        f"{gb(base_price.traced)}); budget {gb(budget)}; searching ...")
    t0 = time.perf_counter()
    result = run_search(case, budget, runs)
    search_s = time.perf_counter() - t0
    chosen_row = pick_best_quality(result.front)
    from autoembed.runner import resolve_for_data

    chosen_cfg = resolve_for_data(chosen_row.config, dataset)
    chosen_price = price(chosen_cfg)
    log(f"[{case.name}] search: {len(result.rows)} proposals in {search_s:.0f} s; pick trial "
        f"{chosen_row.number}: {describe(chosen_cfg)}; side by side ...")
    t0 = time.perf_counter()
    base_out, chosen_out = side_by_side(
        [("baseline", base_cfg), (f"chosen (trial {chosen_row.number})", chosen_cfg)],
        dataset, case.samples, case.eval_every, case.valid_rows, case.test_rows, log=log,
        equal_time_cap=case.equal_time_cap)
    side_s = time.perf_counter() - t0
    task = base_cfg.task
    target = base_out.curve[-1][2] * (1 - QUALITY_TOLERANCE)
    tt = [to_target(o.curve, target) for o in (base_out, chosen_out)]
    lo, hi = paired_bootstrap(task, base_out.test_correct, chosen_out.test_correct)
    mem_ratio = chosen_price.analytic / base_price.analytic
    tr_ratio = (chosen_price.traced / base_price.traced
                if chosen_price.traced and base_price.traced else None)
    thr_ratio = (chosen_out.throughput / base_out.throughput
                 if chosen_out.throughput and base_out.throughput else None)
    q_rel = (chosen_out.test_quality - base_out.test_quality) / base_out.test_quality
    metric = "accuracy" if task == "text" else "AUC"

    def tgt(x: tuple[int, int] | None) -> str:
        return f"{x[0]} ({x[1]:,})" if x else f"not reached in {base_out.samples:,}"

    def steps_ratio() -> str:
        if tt[0] and tt[1]:
            return f"{tt[1][1] / tt[0][1]:.2f}x samples"
        return "n/a"

    et = chosen_out.equal_time
    et_ci = (paired_bootstrap(task, base_out.test_correct, et[3]) if et is not None
             else None)
    et_rel = ((et[2] - base_out.test_quality) / base_out.test_quality if et is not None
              else None)

    def equal_time_row() -> list[str]:
        if et is None or et_ci is None or et_rel is None:
            return ["test quality at equal training time", "",
                    "n/a: the chosen model was not the faster", "", "", ""]
        return [f"test {metric} at equal step time (cap +{case.equal_time_cap:g} s)",
                f"{base_out.test_quality:.4f} ({base_out.samples:,} samples, "
                f"{base_out.step_seconds:.0f} s)",
                f"{et[2]:.4f} ({et[0]:,} samples, {et[1]:.0f} s)",
                f"{100 * et_rel:+.2f}% (95% CI {100 * et_ci[0]:+.2f}% .. "
                f"{100 * et_ci[1]:+.2f}%)", ">= -0.50%",
                "yes" if et_rel >= -QUALITY_TOLERANCE else "no"]

    table = markdown_table(
        ["", "baseline (seed)", f"chosen (trial {chosen_row.number})", "chosen / baseline",
         "seed's bar", "met"],
        [
            ["est. device_total, analytic", gb(base_price.analytic), gb(chosen_price.analytic),
             f"{mem_ratio:.3f}", "<= 0.333", "yes" if mem_ratio <= MEMORY_BAR else "no"],
            ["est. device_total, traced", gb(base_price.traced), gb(chosen_price.traced),
             f"{tr_ratio:.3f}" if tr_ratio else "n/a", "<= 0.333",
             ("yes" if tr_ratio <= MEMORY_BAR else "no") if tr_ratio else ""],
            ["measured device peak", "GPU only", "GPU only", "", "", ""],
            ["training throughput, samples/s", f"{base_out.throughput:,.1f}",
             f"{chosen_out.throughput:,.1f}", f"{thr_ratio:.2f}x" if thr_ratio else "n/a",
             ">= 1.40x", ("yes" if thr_ratio >= THROUGHPUT_BAR else "no") if thr_ratio else ""],
            [f"test {metric} ({case.test_rows:,} rows)", f"{base_out.test_quality:.4f}",
             f"{chosen_out.test_quality:.4f}",
             f"{100 * q_rel:+.2f}% (95% CI {100 * lo:+.2f}% .. {100 * hi:+.2f}%)",
             ">= -0.50%", "yes" if q_rel >= -QUALITY_TOLERANCE else "no"],
            equal_time_row(),
            [f"steps (samples) to valid {metric} {target:.4f}", tgt(tt[0]), tgt(tt[1]),
             steps_ratio(), "", ""],
            ["optimizer steps (samples) trained", f"{base_out.steps} ({base_out.samples:,})",
             f"{chosen_out.steps} ({chosen_out.samples:,})", "", "", ""],
        ],
    )
    counts = {s: result.count(s) for s in ("complete", "pruned", "infeasible", "failed",
                                           "unsupported")}
    front = markdown_table(
        ["trial", "config", "est. device_total", f"search {metric}", "search samples/s"],
        [[r.number, describe(r.config), gb(r.device_total),
          f"{r.metrics.get('quality') or float('nan'):.4f}",
          f"{r.metrics.get('throughput') or float('nan'):,.0f}"] for r in result.front],
    )
    curves = "; ".join(
        f"{o.label}: " + ", ".join(f"{s:,}: {q:.3f}" for _, s, q in o.curve)
        for o in (base_out, chosen_out))
    data_desc = json.dumps({k: v for k, v in case.data.items()})
    oracle = (f"oracle accuracy (planted scores) on the test split "
              f"{dataset.oracle_accuracy('test'):.3f}" if task == "text" else
              f"oracle AUC (planted logit) on the test split {dataset.oracle_auc('test'):.3f}")
    text = "\n\n".join([
        f"## {case.name}: {case.space.name}",
        f"Data: `{data_desc}`; {oracle}.",
        f"Baseline: {describe(base_cfg)}, dense layers {list(base_cfg.dense_layers)}."
        f"{lr_note} Budget = baseline analytic device_total / 3 = **{gb(budget)}**.",
        f"Search: `autoembed.search` over `search_spaces/{case.space.name}`, "
        f"{len(result.rows)} proposals in {search_s:.0f} s ({counts}); trials train the "
        f"space's stand-in. Front:",
        front,
        f"Pick rule: the front member with the best search quality (every member is under "
        f"the budget) -> trial "
        f"{chosen_row.number}: {describe(chosen_cfg)}.",
        f"Side by side at full size, equal samples ({case.samples:,} each), one step at a "
        f"time to whichever has seen fewer samples; throughput over the steps after the "
        f"first {WARMUP_STEPS}; then the faster model trains on until its step time "
        f"reaches the baseline's (at most {case.equal_time_cap:g} s more) and is tested "
        f"again (equal time); {side_s:.0f} s.",
        table,
        f"Validation curves (samples: {metric}): {curves}. Target = the baseline's final "
        f"validation {metric} less 0.5%.",
        f"Case wall time {time.perf_counter() - t_case:.0f} s.",
    ])
    summary = {"memory_ratio": mem_ratio, "traced_memory_ratio": tr_ratio,
               "throughput_ratio": thr_ratio, "quality_rel": q_rel, "quality_ci": [lo, hi],
               "baseline_quality": base_out.test_quality,
               "chosen_quality": chosen_out.test_quality,
               "baseline_throughput": base_out.throughput,
               "equal_time_quality_rel": et_rel, "equal_time_ci": et_ci,
               "equal_time_samples": et[0] if et is not None else None,
               "chosen_throughput": chosen_out.throughput,
               "baseline_device_total": base_price.analytic,
               "chosen_device_total": chosen_price.analytic,
               "chosen_config": chosen_cfg.to_dict(), "baseline_config": base_cfg.to_dict()}
    return CaseReport(case.name, text, summary)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small data, 3 trials")
    ap.add_argument("--only", choices=sorted(CASES), help="run one workload")
    ap.add_argument("--text-samples", type=int, help="side-by-side samples, text")
    ap.add_argument("--ctr-samples", type=int, help="side-by-side samples, ctr")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(THREADS)
    cases = [CASES[args.only]] if args.only else [TEXT, CTR]
    over = {"text": args.text_samples, "ctr": args.ctr_samples}
    cases = [replace(c, samples=over[c.name]) if over[c.name] else c for c in cases]
    if args.quick:
        cases = [quick(c) for c in cases]
    t0 = time.perf_counter()
    reports = []
    with tempfile.TemporaryDirectory(prefix="autoembed-seed-") as tmp:
        for c in cases:
            reports.append(run_case(c, Path(tmp), lambda s: print(s, file=sys.stderr,
                                                                    flush=True)))
    name = "seed_case_quick" if args.quick else "seed_case"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(
        {**{r.name: r.summary for r in reports}, "stamp": stamp()}, indent=2, default=str))
    import os

    intro = (
        "The seed's reference workload and a recommender analogue: the baseline's "
        "analytic device_total / 3 is the budget; `autoembed.search` finds a config under "
        "it; baseline and pick train side by side on the same data (equal samples). "
        f"Bars: memory <= 1/3, throughput >= 1.4x, quality within 0.5% relative. "
        f"torch threads {THREADS}; 1-minute load average at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (others' jobs share them). "
        f"Total {time.perf_counter() - t0:.0f} s. Figures as JSON: `results/{name}.json`.")
    only = f" --only {args.only}" if args.only else ""
    cmd = f"python benchmarks/seed_case.py{' --quick' if args.quick else ''}{only}"
    write_result(name, "Seed case: " + "; ".join(measured_title(r) for r in reports),
                 "\n\n".join([intro] + [r.text for r in reports]), cmd)


def measured_title(r: CaseReport) -> str:
    """What the run measured for one workload, outcome as it came (not the hoped-for bar)."""
    s = r.summary

    def num(key: str, fmt: str) -> str:
        return format(s[key], fmt) if s.get(key) is not None else "n/a"

    return (f"{r.name} memory {num('memory_ratio', '.2f')}x, throughput "
            f"{num('throughput_ratio', '.1f')}x, quality {num('quality_rel', '+.2%')} at "
            f"equal samples, {num('equal_time_quality_rel', '+.2%')} at equal time")


if __name__ == "__main__":
    main()
