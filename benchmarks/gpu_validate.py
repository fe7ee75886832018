"""GPU check of the memory model: one real training step per config on CUDA, measured.

For each validation config (every compression, precision and optimizer): build the model on
CUDA, run two training steps (the first creates optimizer state), and compare
`torch.cuda.max_memory_allocated` / `max_memory_reserved` (above the baseline left by CUDA
warm-up, e.g. the cuBLAS workspace, which the estimate counts in `overhead`) with the
analytic and traced `allocated_peak` / `reserved_peak`. Rows are appended to the results
file as they finish, so a time-out keeps what was measured.

Needs torch alone (no Optuna, Ray, MLflow or YAML); finishes within 5 minutes on one H200.

With `--examples`, the users' models instead (examples/, the grid of
benchmarks/estimator_accuracy_models.py): `estimate_model`'s allocated_peak (traced on CPU code
paths) against `torch.cuda.max_memory_allocated` of two real `UserStep` steps on CUDA, the
parameters counted and the build not (as on CPU); results/gpu_validate_examples.md.

    python benchmarks/gpu_validate.py [--out benchmarks/results/gpu_validate.md] [--scale 1.0]
    python benchmarks/gpu_validate.py --examples [--only gpt_lm,bert_mlm]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import itertools
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from _common import stamp  # noqa: E402
from validation_configs import validation_configs  # noqa: E402

import autoembed  # noqa: E402
from autoembed.batch import Batch  # noqa: E402
from autoembed.config import EmbeddingConfig  # noqa: E402
from autoembed.trace import estimate  # noqa: E402

TIME_LIMIT_S = 270  # stop starting new configs after this (the whole check must fit 5 min)


def real_batch(config: EmbeddingConfig, device: str, gen: torch.Generator) -> Batch:
    import math

    feats = {}
    b = config.batch_size
    for t in config.tables:
        if config.task == "text":
            feats[t.name] = torch.randint(1, t.vocab_size, (b, config.seq_len), generator=gen)
        else:
            w = max(1, math.ceil(t.pooling_factor))
            feats[t.name] = torch.randint(0, t.vocab_size, (b, w), generator=gen)
    labels = (torch.randint(0, config.num_classes, (b,), generator=gen) if config.task == "text"
              else torch.randint(0, 2, (b,), generator=gen).float())
    return Batch(feats, labels).to(device)


def measure(config: EmbeddingConfig) -> tuple[int, int]:
    from autoembed.models import make_trainer

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator().manual_seed(0)
    trainer = make_trainer(config, "cuda")
    batches = [real_batch(config, "cuda", gen) for _ in range(config.grad_accum_steps)]
    for _ in range(2):
        trainer.step(batches)
    torch.cuda.synchronize()
    alloc = torch.cuda.max_memory_allocated() - base
    reserved = torch.cuda.max_memory_reserved() - base_reserved
    del trainer, batches
    gc.collect()
    torch.cuda.empty_cache()
    return alloc, reserved


def rel(est: int, real: int) -> str:
    return f"{100 * (est - real) / real:+.1f}%" if real else "n/a"


def emit(out: Path, row: str) -> None:
    """Append `row` to the results file (kept if a later case fails) and print it."""
    with out.open("a") as f:
        f.write(row)
    print(row, end="", flush=True)


def to_device(example: Any, device: str) -> Any:
    """`example` (a tensor, tuple or dict of them, or an `autoembed.Example`, as
    estimate_model takes it) on `device`."""
    if isinstance(example, autoembed.Example):
        return autoembed.Example(to_device(example.args, device),
                                 to_device(dict(example.kwargs), device),
                                 to_device(example.targets, device))
    if isinstance(example, torch.Tensor):
        return example.to(device)
    if isinstance(example, tuple):
        return tuple(to_device(x, device) for x in example)
    if isinstance(example, dict):
        return {k: to_device(v, device) for k, v in example.items()}
    return example


def measure_example(mod: ModuleType, precision: str, optimizer: str, applied: bool) -> int:
    """Peak CUDA bytes of two real steps of `mod`'s SIZES['test'] model: parameters, state,
    gradients, activations and the example, above what was allocated before (not the build)."""
    from autoembed.models.user_step import UserStep
    from examples._demo import build_applied

    size = mod.SIZES["test"]
    torch.manual_seed(0)
    build = functools.partial(mod.build_model, **size)
    model = build_applied(build) if applied else build()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model = model.to("cuda")
    step = UserStep.build(model, precision=precision, optimizer=optimizer)
    example = to_device(mod.make_example(**size), "cuda")
    for _ in range(2):
        step.step(example, getattr(mod, "loss", None))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del model, step, example
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def examples_main(only: str, out: Path) -> None:
    """The users'-model grid on CUDA; a row per case, appended as it finishes."""
    from autoembed import estimate_model
    from examples._demo import build_applied

    out.write_text(
        f"# GPU validation of estimate_model on the users' models (examples/)\n\n"
        f"Device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}. Command: "
        f"`python benchmarks/gpu_validate.py --examples`\n\n{stamp()}\n\nEstimates are "
        "traced on CPU code paths (see results/estimator_accuracy_models.md for where they "
        "differ from CUDA's); measured: torch.cuda.max_memory_allocated of two real steps.\n\n"
        "| example | precision | optimizer | tables | estimate MB | measured CUDA MB | "
        "estimate vs measured |\n|---|---|---|---|---|---|---|\n")
    errs: list[float] = []
    t0 = time.time()
    for name in only.split(","):
        try:
            mod = importlib.import_module(f"examples.{name}")
        except ImportError as e:
            with out.open("a") as f:
                f.write(f"| {name} | skipped: {e} | | | | | |\n")
            continue
        size = mod.SIZES["test"]
        for precision, optimizer, applied in itertools.product(
                ("fp32", "bf16_master", "amp_bf16"), ("adam", "rowwise_adagrad"), (False, True)):
            tables = "applied" if applied else "as built"
            if time.time() - t0 > TIME_LIMIT_S:
                got = "skipped: time limit"
                est_mb = err = ""
            else:
                build = functools.partial(mod.build_model, **size)
                est = estimate_model(functools.partial(build_applied, build) if applied
                                     else build, mod.make_example(**size),
                                     precision=precision, optimizer=optimizer)
                real = measure_example(mod, precision, optimizer, applied)
                errs.append(abs(est.allocated_peak - real) / real)
                got, est_mb = f"{real / 1e6:.1f}", f"{est.allocated_peak / 1e6:.1f}"
                err = rel(est.allocated_peak, real)
            emit(out, f"| {name} | {precision} | {optimizer} | {tables} | {est_mb} | {got} | "
                      f"{err} |\n")
    with out.open("a") as f:
        if errs:
            f.write(f"\n|estimate - measured| / measured: median "
                    f"{100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}% over "
                    f"{len(errs)} cases")
        f.write(f"\n\nWall time {time.time() - t0:.0f} s.\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--examples", action="store_true",
                    help="the users' models of examples/ instead of the built-in configs")
    ap.add_argument("--only", default="seed_mean,shared_table,dlrm,checkpointed,gpt_lm,bert_mlm",
                    help="with --examples: which examples")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_validate: no CUDA device visible; run this on a GPU machine")
    if args.examples:
        a = torch.randn(64, 64, device="cuda")  # CUDA context and cuBLAS workspace first
        (a @ a).sum().item()
        examples_main(args.only, Path(args.out or ROOT / "benchmarks/results/"
                                      "gpu_validate_examples.md"))
        return
    args.out = args.out or str(ROOT / "benchmarks/results/gpu_validate.md")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Warm-up: create the CUDA context, cuBLAS handle and workspace before the baseline.
    a = torch.randn(64, 64, device="cuda")
    (a @ a).sum().item()
    head = (f"# GPU validation of the memory model\n\nDevice: {torch.cuda.get_device_name(0)}, "
            f"torch {torch.__version__}. Command: `python benchmarks/gpu_validate.py`\n\n"
            f"Measured figures are above the baseline left by CUDA warm-up.\n\n{stamp()}\n\n"
            "| config | measured allocated | analytic | err | traced | err | "
            "measured reserved | analytic reserved | err | traced reserved | err |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    out.write_text(head)
    errs_a: list[float] = []
    errs_t: list[float] = []
    t0 = time.time()
    for name, cfg in validation_configs(args.scale).items():
        if time.time() - t0 > TIME_LIMIT_S:
            with out.open("a") as f:
                f.write(f"| {name} | skipped: time limit | | | | | | | | | |\n")
            continue
        an = estimate(cfg)
        try:
            tr = estimate(cfg, method="traced")
            tr_a, tr_r = tr.allocated_peak, tr.reserved_peak
        except Exception as e:  # noqa: BLE001 - a traced failure is a result to record
            print(f"{name}: traced failed: {e}", file=sys.stderr)
            tr_a = tr_r = 0
        try:
            m_a, m_r = measure(cfg)
        except torch.OutOfMemoryError:
            with out.open("a") as f:
                f.write(f"| {name} | OOM | {an.allocated_peak:,} | | | | | | | | |\n")
            continue
        errs_a.append(abs(an.allocated_peak - m_a) / m_a)
        if tr_a:
            errs_t.append(abs(tr_a - m_a) / m_a)
        row = (f"| {name} | {m_a:,} | {an.allocated_peak:,} | {rel(an.allocated_peak, m_a)} | "
               f"{tr_a:,} | {rel(tr_a, m_a) if tr_a else 'n/a'} | {m_r:,} | "
               f"{an.reserved_peak:,} | {rel(an.reserved_peak, m_r)} | {tr_r:,} | "
               f"{rel(tr_r, m_r) if tr_r else 'n/a'} |\n")
        emit(out, row)
    with out.open("a") as f:
        if errs_a:
            f.write(f"\nAllocated peak, |relative error|: analytic median "
                    f"{100 * statistics.median(errs_a):.1f}%, max {100 * max(errs_a):.1f}%")
        if errs_t:
            f.write(f"; traced median {100 * statistics.median(errs_t):.1f}%, "
                    f"max {100 * max(errs_t):.1f}%")
        f.write(f"\n\nWall time {time.time() - t0:.0f} s.\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
