"""A trial's own time, this tree against a baseline commit, side by side: where a default-space
trial's wall time goes (optimizer steps, fetching batches, evaluation, build and load).

Each side runs the same configs of the default space (its stand-in data and `run:` settings,
latency off and one torch thread, as a default search runs them) in a fresh process, no Ray,
no stores; the sides alternate, round by round, so the machine's load hits both alike. The
first trial of a process also pays its one-time costs (imports, generating kept splits) and is
reported apart. Each config's validation quality must agree between the sides (same data,
same seed).

    python benchmarks/trial_time.py [--baseline 30a7be5] [--rounds 2]

Writes benchmarks/results/trial_time.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Configs of the default space: every compression and table optimizer, all three batch sizes.
CONFIGS: list[dict[str, Any]] = [
    {"dim": 32, "compression": "hash", "hash_buckets": 200_000, "precision": "fp32",
     "table_optimizer": "adagrad", "lr": 0.01, "batch_size": 512},
    {"dim": 16, "compression": "none", "precision": "bf16_master",
     "table_optimizer": "rowwise_adagrad", "lr": 0.02, "batch_size": 1024},
    {"dim": 64, "compression": "qr", "qr_collisions": 8, "precision": "fp32",
     "table_optimizer": "adam", "lr": 0.005, "batch_size": 256},
    {"dim": 24, "compression": "mixed_dim", "mixed_dim_alpha": 0.3, "precision": "bf16",
     "table_optimizer": "sgd", "lr": 0.04, "batch_size": 512},
    {"dim": 8, "compression": "none", "precision": "fp32", "table_optimizer": "adam",
     "lr": 0.003, "batch_size": 256},
]


def worker() -> None:
    """Run CONFIGS in this process (the tree on PYTHONPATH); one JSON line per trial."""
    from autoembed.config import EmbeddingConfig
    from autoembed.pipeline.priced_data import build_priced_data, data_spec_for
    from autoembed.runner import RunSettings, run_trial
    from autoembed.space import builtin_space_path, load_space

    space = load_space(builtin_space_path("default"))
    workload = build_priced_data(*data_spec_for(space))
    settings = RunSettings(**space.run, threads=1, measure_latency=False)
    for i, values in enumerate(CONFIGS):
        cfg = EmbeddingConfig(**{**space.base, "dense_layers": tuple(space.base["dense_layers"]),
                                 **values})
        r = run_trial(workload.trained(cfg), workload.train_dataset, settings)
        print(json.dumps({"config": i, "status": r.status, "valid": r.valid_quality,
                          "wall": r.wall_seconds, "steps": r.train_seconds,
                          "batches": r.data_seconds, "eval": r.eval_seconds}), flush=True)


def run_side(tree: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, __file__, "--worker"], env=env, cwd=tree,
                         capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for pos, row in enumerate(rows):
        row["first"] = pos == 0
    return rows


def median(xs: list[float]) -> float:
    ys = sorted(xs)
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else (ys[mid - 1] + ys[mid]) / 2


def summary(rows: list[dict[str, Any]]) -> list[str]:
    later = [r for r in rows if not r["first"]]
    first = [r for r in rows if r["first"]]

    def ratio(key: str) -> str:
        return f"{median([r[key] / r['steps'] for r in later]):.2f}"

    build = [(r["wall"] - r["steps"] - r["batches"] - r["eval"]) / r["steps"] for r in later]
    outside = [1 - r["steps"] / r["wall"] for r in later]
    one_time = [r["wall"] - r["steps"] - r["batches"] - r["eval"] for r in first]
    return [ratio("batches"), ratio("eval"), f"{median(build):.2f}",
            f"{100 * median(outside):.0f}%", f"{median(one_time):.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="30a7be5", help="commit to compare with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker()
        return
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="autoembed-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {f"baseline {args.baseline}": Path(tmp), f"this tree ({here})": ROOT}
        rows: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            for label in order:
                rows[label] += run_side(sides[label])
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    base, new = (rows[k] for k in sides)
    same = all(a["status"] == b["status"] and abs((a["valid"] or 0) - (b["valid"] or 0)) < 1e-9
               for a, b in zip(base, new, strict=True))
    table = markdown_table(
        ["side", "batches / steps", "evaluation / steps", "build+load / steps",
         "trial's time outside its steps", "first trial's one-time s"],
        [[k, *summary(v)] for k, v in rows.items()])
    per_trial = markdown_table(
        ["side", "round trial", "config", "status", "valid quality", "wall s", "steps s",
         "batches s", "eval s"],
        [[k, i, r["config"], r["status"], f"{r['valid']:.6f}", f"{r['wall']:.2f}",
          f"{r['steps']:.2f}", f"{r['batches']:.2f}", f"{r['eval']:.2f}"]
         for k, v in rows.items() for i, r in enumerate(v)])
    body = "\n\n".join([
        f"{len(CONFIGS)} configs of the default space x {args.rounds} rounds per side, each "
        f"side a fresh process per round, sides alternating. Load average (1, 5, 15 min) "
        f"{' '.join(load0)} at the start, {' '.join(load1)} at the end: read the ratios, "
        "not the seconds. Ratios are medians over trials after each process's first; the "
        "trial's time outside its steps is 1 - steps / wall (the trial alone: no Ray, "
        "driver or stores).",
        table,
        "Validation quality per config identical on both sides (same data, same order): "
        f"**{'yes' if same else 'NO'}**.",
        per_trial,
    ])
    write_result("trial_time", "A trial's own time: this tree against a baseline", body,
                 f"python benchmarks/trial_time.py --baseline {args.baseline} "
                 f"--rounds {args.rounds}")


if __name__ == "__main__":
    main()
