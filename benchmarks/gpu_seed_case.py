"""GPU variant of seed_case.py: the baseline and the chosen config of each workload, measured on
CUDA: `max_memory_allocated` / `max_memory_reserved` and steady-state training throughput.

Configs come from `benchmarks/results/seed_case.json` (written by seed_case.py: the
baseline and the config its search picked, per workload) or from `--config FILE.json`
(an exported config or {"<label>": config, ...}). Batches are synthetic with the data's
shape: text documents of uniform length in [seq_len / 4, seq_len] right-padded with 0, ids
drawn from a Zipf law (exponent 1.2, as `synthetic-text` / `synthetic-ctr`) and scattered
over the table; quality is not measured here (seed_case.py measures it on CPU).

Per config: build on the device, WARMUP_STEPS untimed steps (Adam creates its state at the
first), then timed steps (synchronised) until `--seconds` or `--steps`. Measured memory is
above the baseline left by CUDA warm-up (context, cuBLAS workspace), i.e. comparable to the
estimate's `reserved_peak`; the estimate's `device_total` adds its `overhead` to that.
Rows are appended to the results file as they finish, so a time-out keeps what was measured.

Needs torch alone (no Optuna, Ray, MLflow, YAML, numpy); the whole run stays within 5 minutes.

    python benchmarks/gpu_seed_case.py [--out benchmarks/results/gpu_seed_case.md]
    python benchmarks/gpu_seed_case.py --device cpu --quick    # smoke test on a CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from _common import stamp  # noqa: E402

from autoembed.batch import PAD_ID, Batch  # noqa: E402
from autoembed.config import EmbeddingConfig, config_from_dict  # noqa: E402
from autoembed.trace import estimate  # noqa: E402

SEED_JSON = ROOT / "benchmarks" / "results" / "seed_case.json"
WARMUP_STEPS = 3  # untimed: Adam's state, cuBLAS autotuning, allocator growth
ZIPF_EXPONENT = 1.2  # the synthetic data's default (autoembed.data.spec.DataSpec)
TIME_LIMIT_S = 270  # no new config after this (the whole run must fit 5 minutes)
QUICK_SCALE = 1e-3  # --quick: every vocabulary (and hash bucket count) times this
SCATTER = 2_654_435_761  # Knuth's multiplicative hash constant: spreads ranks over the table


def zipf_ids(n: tuple[int, ...], vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Ranks in [0, vocab) with P(rank) ~ rank^-s (inverse CDF of a continuous power law,
    as autoembed.zipf), scattered over the table by a multiplicative hash."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    a = 1.0 - ZIPF_EXPONENT
    top = math.log(vocab + 1)
    x = torch.exp(torch.log1p(u * math.expm1(a * top)) / a)
    rank = (x.floor().long() - 1).clamp(0, vocab - 1)
    return (rank * SCATTER) % vocab


def make_batch(config: EmbeddingConfig, gen: torch.Generator) -> Batch:
    b = config.batch_size
    feats = {}
    if config.task == "text":
        (t,) = config.tables
        s = config.seq_len
        ids = 1 + zipf_ids((b, s), t.vocab_size - 1, gen)  # 0 is padding
        lengths = torch.randint(max(1, s // 4), s + 1, (b, 1), generator=gen)
        ids[torch.arange(s)[None, :] >= lengths] = PAD_ID
        feats[t.name] = ids
        labels = torch.randint(0, config.num_classes, (b,), generator=gen)
    else:
        for t in config.tables:
            w = max(1, math.ceil(t.pooling_factor))
            feats[t.name] = zipf_ids((b, w), t.vocab_size, gen)
        labels = torch.randint(0, 2, (b,), generator=gen).float()
    return Batch(feats, labels)


def scaled(config: EmbeddingConfig, scale: float) -> EmbeddingConfig:
    """The config with every vocabulary (and hash bucket count) times `scale` (--quick)."""
    tables = tuple(replace(t, vocab_size=max(8, int(t.vocab_size * scale)))
                   for t in config.tables)
    buckets = (max(4, int(config.hash_buckets * scale)) if config.hash_buckets is not None
               else None)
    qr = min(config.qr_collisions, max(2, min(t.vocab_size for t in tables) - 1))
    return replace(config, tables=tables, hash_buckets=buckets, qr_collisions=qr,
                   seq_len=min(config.seq_len, 64), batch_size=min(config.batch_size, 64))


def load_configs(path: Path) -> list[tuple[str, EmbeddingConfig]]:
    raw = json.loads(path.read_text())
    out: list[tuple[str, EmbeddingConfig]] = []
    if "config" in raw and isinstance(raw["config"], dict):  # one exported config
        return [(path.stem, config_from_dict(raw["config"], str(path)))]
    if "tables" in raw:
        return [(path.stem, config_from_dict(raw, str(path)))]
    for case, body in raw.items():
        if isinstance(body, dict) and "baseline_config" in body:  # seed_case.json
            out.append((f"{case} baseline", config_from_dict(body["baseline_config"], str(path))))
            out.append((f"{case} chosen", config_from_dict(body["chosen_config"], str(path))))
        elif isinstance(body, dict):
            out.append((case, config_from_dict(body, f"{path}: {case}")))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(config: EmbeddingConfig, device: torch.device, seconds: float,
            max_steps: int) -> dict[str, Any]:
    from autoembed.models import make_trainer

    cuda = device.type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        base_alloc = torch.cuda.memory_allocated()
        base_reserved = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator().manual_seed(0)
    # a few distinct batches, made before timing (data generation is not training)
    batches = [[make_batch(config, gen).to(device) for _ in range(config.grad_accum_steps)]
               for _ in range(4)]
    trainer = make_trainer(config, device)
    for k in range(WARMUP_STEPS):
        trainer.step(batches[k % len(batches)])
    sync(device)
    steps, t0 = 0, time.perf_counter()
    while steps < max_steps and time.perf_counter() - t0 < seconds:
        trainer.step(batches[steps % len(batches)])
        steps += 1
    sync(device)
    elapsed = time.perf_counter() - t0
    out: dict[str, Any] = {
        "steps": steps,
        "samples_per_s": steps * config.batch_size * config.grad_accum_steps / elapsed,
        "step_ms": 1e3 * elapsed / max(steps, 1),
    }
    if cuda:
        out["allocated"] = torch.cuda.max_memory_allocated() - base_alloc
        out["reserved"] = torch.cuda.max_memory_reserved() - base_reserved
    del trainer, batches
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=SEED_JSON,
                    help="seed_case.json, an exported config (JSON) or {label: config}")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gpu_seed_case.md")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=15.0, help="timed seconds per config")
    ap.add_argument("--steps", type=int, default=10_000, help="at most this many timed steps")
    ap.add_argument("--quick", action="store_true",
                    help=f"vocabularies x {QUICK_SCALE:g}, batch <= 64, seq <= 64, 3 steps")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_seed_case: no CUDA device visible; run on a GPU machine or pass "
              "--device cpu --quick", file=sys.stderr)
        return 2
    if not args.config.exists():
        print(f"gpu_seed_case: config file '{args.config}' does not exist; run "
              "benchmarks/seed_case.py first or pass --config FILE.json", file=sys.stderr)
        return 2
    configs = load_configs(args.config)
    if args.quick:
        configs = [(label, scaled(c, QUICK_SCALE)) for label, c in configs]
        args.steps, args.seconds = min(args.steps, 3), min(args.seconds, 5.0)
    if device.type == "cuda":  # context, cuBLAS handle and workspace before the baseline
        a = torch.randn(64, 64, device=device)
        (a @ a).sum().item()
        name = torch.cuda.get_device_name(device)
    else:
        name = "cpu"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/gpu_seed_case.py" + (f" --device {args.device} --quick"
                                                    if args.quick else "")
    args.out.write_text(
        f"# Seed case on {name}\n\nCommand: `{cmd}`; torch {torch.__version__}; configs from "
        f"`{args.config.name}`; {WARMUP_STEPS} warm-up steps, then up to {args.seconds:g} s "
        "timed. Measured memory is above the CUDA warm-up baseline (compare with the "
        f"estimate's reserved_peak; device_total adds the overhead).\n\n{stamp()}\n\n"
        "| config | est. reserved_peak | measured reserved | err | est. allocated_peak | "
        "measured allocated | err | est. device_total | samples/s | step ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n")
    t_start = time.time()
    results: dict[str, dict[str, Any]] = {}
    for label, cfg in configs:
        if time.time() - t_start > TIME_LIMIT_S:
            with args.out.open("a") as f:
                f.write(f"| {label} | skipped: time limit | | | | | | | | |\n")
            continue
        est = estimate(cfg)
        try:
            m = measure(cfg, device, args.seconds, args.steps)
        except torch.OutOfMemoryError:
            with args.out.open("a") as f:
                f.write(f"| {label} | {est.reserved_peak:,} | OOM | | | | | | | |\n")
            continue
        results[label] = m

        def err(e: int, key: str, m: dict[str, Any] = m) -> str:
            return f"{100 * (e - m[key]) / m[key]:+.1f}%" if m.get(key) else "n/a"

        def num(key: str, m: dict[str, Any] = m) -> str:
            return f"{m[key]:,}" if key in m else "n/a (cpu)"

        row = (f"| {label} | {est.reserved_peak:,} | {num('reserved')} | "
               f"{err(est.reserved_peak, 'reserved')} | {est.allocated_peak:,} | "
               f"{num('allocated')} | {err(est.allocated_peak, 'allocated')} | "
               f"{est.device_total:,} | {m['samples_per_s']:,.1f} | {m['step_ms']:,.1f} |\n")
        with args.out.open("a") as f:
            f.write(row)
        print(row, end="", flush=True)
    lines = []
    for case in sorted({label.rsplit(" ", 1)[0] for label in results}):
        b, c = results.get(f"{case} baseline"), results.get(f"{case} chosen")
        if not b or not c:
            continue
        thr = c["samples_per_s"] / b["samples_per_s"]
        mem = (f"measured reserved {c['reserved'] / b['reserved']:.3f}x"
               if b.get("reserved") else "no device memory on a CPU")
        lines.append(f"* {case}: chosen / baseline throughput {thr:.2f}x; {mem}.")
    with args.out.open("a") as f:
        f.write("\n" + "\n".join(lines) + f"\n\nWall time {time.time() - t_start:.0f} s.\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
