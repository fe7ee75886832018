"""Training throughput and host memory of every compression technique at the seed's shape.

Text task, V = 1,000,000, D = 300, batch 64, sequence 512, fp32, Adam for tables and tower
(dense gradients), naive pooling (F.embedding + mean, the seed's form) as the baseline.
Each config trains in a fresh subprocess with torch.set_num_threads(2): a few warm-up
steps (not timed: Adam's state is created at the first step), then timed steps; the
child reports samples/s and its RSS high-water (resource.getrusage ru_maxrss: host memory,
not GPU memory). "traced peak" is autoembed.trace's traced estimate of the allocated
peak when that module provides one at run time, else n/a.

    python benchmarks/model_throughput.py [--steps 4] [--warmup 2]

Prints a markdown table and writes it to benchmarks/results/model_throughput.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _common import stamp

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "model_throughput.md"
THREADS = 2
VOCAB, DIM, BATCH, SEQ, CLASSES = 1_000_000, 300, 64, 512, 5

# (label, config overrides); hash and qr at about the same size (10x fewer rows)
RUNS: list[tuple[str, dict[str, Any]]] = [
    ("none, naive (seed baseline)", {"compression": "none", "pooling": "naive"}),
    ("none, mean (embedding_bag)", {"compression": "none", "pooling": "mean"}),
    ("hash 100k buckets, mean", {"compression": "hash", "hash_buckets": 100_000}),
    ("qr m=10 mult, mean", {"compression": "qr", "qr_collisions": 10}),
    ("mixed_dim, mean", {"compression": "mixed_dim"}),
]
NOT_APPLICABLE = [("shared", "sharing needs several fields; the text task has one table")]


def seed_config(**overrides: Any) -> Any:
    from autoembed.config import EmbeddingConfig, TableConfig

    kw: dict[str, Any] = {
        "task": "text",
        "tables": (TableConfig("tok", VOCAB),),
        "dim": DIM,
        "num_classes": CLASSES,
        "seq_len": SEQ,
        "batch_size": BATCH,
        "dense_layers": (64,),
        "precision": "fp32",
        "table_optimizer": "adam",
        "dense_optimizer": "adam",
        "lr": 1e-3,
    }
    kw.update(overrides)
    return EmbeddingConfig(**kw).resolve()


def worker(overrides: dict[str, Any], steps: int, warmup: int) -> dict[str, Any]:
    """Runs in the child: build, warm up, time `steps` steps; return the measurements."""
    import resource

    import torch

    from autoembed.batch import Batch
    from autoembed.models import make_trainer

    torch.set_num_threads(THREADS)
    config = seed_config(**overrides)
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    trainer = make_trainer(config, "cpu")
    build_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    batches = [
        Batch(
            {"tok": torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)},
            torch.randint(0, CLASSES, (BATCH,), generator=g),
        )
        for _ in range(2)
    ]
    for k in range(warmup):
        trainer.step([batches[k % 2]])
    t0 = time.perf_counter()
    loss = 0.0
    for k in range(steps):
        loss = trainer.step([batches[k % 2]])
    step_s = (time.perf_counter() - t0) / steps
    param_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    return {
        "samples_per_s": BATCH / step_s,
        "step_ms": step_s * 1e3,
        "build_s": build_s,
        "rss_start_kib": rss_start,
        "rss_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "vmhwm_kib": _vmhwm_kib(),
        "param_bytes": param_bytes,
        "loss": loss,
    }


def _vmhwm_kib() -> int | None:
    """/proc/self/status VmHWM: this process image's own RSS high-water (Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def traced_peak(overrides: dict[str, Any]) -> str:
    """autoembed.trace's traced allocated peak, if that module offers it now."""
    try:
        from autoembed import trace

        est = trace.estimate(seed_config(**overrides), method="traced")
        return f"{est.allocated_peak / 1e6:,.0f} MB"
    except Exception as e:  # noqa: BLE001 - another engineer's module may not exist yet
        if isinstance(e, (ImportError, AttributeError)):
            return "n/a"
        return f"n/a ({type(e).__name__})"


def run_child(overrides: dict[str, Any], steps: int, warmup: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps(overrides),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(THREADS)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per config")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(json.loads(args.worker), args.steps, args.warmup)))
        return

    # Children first, from a parent that has not imported torch: Linux carries ru_maxrss
    # over from the parent across fork + exec, so a big parent would show in the children.
    results = []
    load_before = os.getloadavg()[0]
    for label, overrides in RUNS:
        print(f"running {label} ...", file=sys.stderr, flush=True)
        results.append((label, overrides, run_child(overrides, args.steps, args.warmup)))
    load_after = os.getloadavg()[0]
    rows = []
    base = None
    for label, overrides, r in results:
        if "error" in r:
            rows.append(f"| {label} | error: {r['error']} | | | | | |")
            continue
        if base is None:
            base = r["samples_per_s"]
        rows.append(
            f"| {label} | {r['param_bytes'] / 1e6:,.1f} | {r['samples_per_s']:,.1f} "
            f"| {r['samples_per_s'] / base:.2f}x | {r['step_ms']:,.0f} "
            f"| {r['rss_peak_kib'] / 1024:,.0f} | {traced_peak(overrides)} |"
        )
    for label, why in NOT_APPLICABLE:
        rows.append(f"| {label} | n/a: {why} | | | | | |")
    gaps = [
        abs(r["rss_peak_kib"] - r["vmhwm_kib"]) / r["rss_peak_kib"]
        for _, _, r in results
        if "error" not in r and r.get("vmhwm_kib")
    ]
    check = (
        f"getrusage agrees with /proc VmHWM within {max(gaps):.1%}." if gaps else "no VmHWM here."
    )
    header = [
        "# Model training throughput at the seed's shape (CPU)",
        "",
        f"Text task, V={VOCAB:,}, D={DIM}, batch {BATCH}, seq {SEQ}, fp32, Adam for tables "
        "and tower (dense gradients, foreach), tower 300 -> 64 -> 5. "
        f"Each config in a fresh process, torch.set_num_threads({THREADS}), "
        f"{args.warmup} warm-up steps excluded, {args.steps} timed steps. "
        "Peak RSS = the child's ru_maxrss (host memory high-water, interpreter and torch "
        f"included; not GPU memory; {check}) Params = every parameter's bytes.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs visible, "
        f"Python {platform.python_version()}, torch {version('torch')}; "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"1-minute load average {load_before:.1f} before and {load_after:.1f} after "
        f"on {os.cpu_count()} CPUs: other jobs shared them, so throughput is indicative.",
        "",
        stamp(),
        "",
        "| technique | params MB | samples/s | vs baseline | step ms | peak RSS MB | traced peak |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = [
        "",
        "Notes: mixed_dim sizes tables by their relative popularity, so a single table keeps "
        "the full dim (the row equals `none, mean`). qr mult pools each table's rows and "
        "multiplies the pooled vectors (DLRM's QREmbeddingBag) under mean pooling.",
    ]
    text = "\n".join(header + rows + notes) + "\n"
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
