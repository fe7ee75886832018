"""autoembed's per-rank estimate of a TorchRec plan against real DistributedModelParallel on
CPU: 2 processes over gloo, CPU plans, the optimizers FBGEMM's CPU kernel takes, each
configuration with at least 1 GB of table state per rank (examples/torchrec_dlrm.py at
Criteo's full cardinalities).

Per rank: (a) the shards and optimizer state priced (`RankEstimate.persistent`) against the
bytes of the FBGEMM kernels' weight and state storages after DMP init (must be equal to the
byte); (b) the priced step peak (`allocated_peak`) against the measured one: the tensors
live after a warm-up step of the same shapes plus the RSS high-water above them over two
steps (fresh processes, MALLOC_ARENA_MAX=1, MALLOC_MMAP_THRESHOLD_=65536, VmHWM reset
through /proc/self/clear_refs; `autoembed.pipeline.sharded_runner`), within max(3%, 32 MB).
TorchRec's own storage estimate for the same plan (the optimizer given per table, so it
reads it) is beside. Rows are appended to results/torchrec_dmp_cpu.jsonl as they finish.

    .venv/bin/python benchmarks/torchrec_dmp_cpu.py [--only C1,C2] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import RESULTS, git_commit, markdown_table, write_result  # noqa: E402

TOLERANCE, FLOOR = 0.03, 32 * 10**6
COLLECTION = "model.sparse_arch.embedding_bag_collection"
BIG = ("cat_2", "cat_3", "cat_11", "cat_15", "cat_20")  # the fields above 2M rows

# name: (dim, batch per rank, optimizer, data type, sharding: one type or "mixed")
CONFIGS: dict[str, tuple[int, int, str, str, str]] = {
    "C1": (24, 4096, "rowwise_adagrad", "fp32", "table_wise"),
    "C2": (32, 2048, "sgd", "fp32", "table_wise"),
    "C3": (16, 4096, "adagrad", "fp32", "table_wise"),
    "C4": (32, 2048, "rowwise_adagrad", "fp32", "column_wise"),
    "C5": (48, 8192, "rowwise_adagrad", "fp16", "table_wise"),
    "C6": (16, 2048, "adagrad", "fp32", "mixed"),
    "C7": (32, 4096, "sgd", "fp32", "table_column_wise"),
    "C8": (24, 1024, "adagrad", "fp16", "table_wise"),
}


def settings(optimizer: str, data_type: str, sharding: str) -> list[dict[str, Any]]:
    from examples.torchrec_dlrm import KEYS

    out = []
    for k in KEYS:
        st = sharding if sharding != "mixed" else ("column_wise" if k in BIG else "table_wise")
        out.append({"name": f"{COLLECTION}.t_{k}", "optimizer": optimizer,
                    "data_type": data_type, "sharding_type": st})
    return out


def run_one(name: str, scale: float) -> dict[str, Any]:
    from autoembed.pipeline.sharded_runner import run_sharded
    from autoembed.torchrec.settings import RankTopology
    from autoembed.torchrec.sharded import estimate_sharded
    from examples import torchrec_dlrm as ex

    dim, batch, opt, dtype, sharding = CONFIGS[name]
    params = {"scale": scale, "batch_size": batch, "dim": dim}
    tables = settings(opt, dtype, sharding)
    topo = {"world_size": 2, "batch_size": batch, "compute_device": "cpu"}
    est = estimate_sharded(lambda: ex.build(params), ex.example(params), RankTopology(**topo),
                           tables, loss=ex.loss, dense_optimizer="adagrad", lr=0.01)
    t0 = time.time()
    measured = run_sharded({
        "build": "examples.torchrec_dlrm:build", "example": "examples.torchrec_dlrm:example",
        "loss": "examples.torchrec_dlrm:loss", "path": str(ROOT), "params": params,
        "tables": tables, "topology": topo, "steps": 2, "dense_optimizer": "adagrad",
        "lr": 0.01, "timeout_s": 900})
    ranks = []
    for r, m in zip(est.ranks, measured, strict=True):
        ranks.append({"rank": r.rank, "persistent_est": r.persistent,
                      "persistent_real": m["table_bytes"], "peak_est": r.allocated_peak,
                      "peak_measured": m["step_peak"], "torchrec_hbm": r.torchrec_hbm,
                      "torchrec_ddr": r.torchrec_ddr, "dense_est": r.dense_peak,
                      "sparse_est": r.sparse_transient,
                      "live_after_warmup": m["live_after_warmup"]})
    return {"config": name, "dim": dim, "batch": batch, "optimizer": opt, "data_type": dtype,
            "sharding": sharding, "scale": scale, "wall_s": round(time.time() - t0, 1),
            "commit": git_commit(), "ranks": ranks}


def _ok(row: dict[str, Any]) -> tuple[bool, bool]:
    exact = all(r["persistent_est"] == r["persistent_real"] for r in row["ranks"])
    within = all(abs(r["peak_est"] - r["peak_measured"])
                 <= max(TOLERANCE * r["peak_measured"], FLOOR) for r in row["ranks"])
    return exact, within


def report(rows: list[dict[str, Any]], command: str) -> None:
    mb = 1e6
    table = []
    for row in rows:
        exact, within = _ok(row)
        for r in row["ranks"]:
            err = r["peak_est"] - r["peak_measured"]
            table.append([
                row["config"], r["rank"], f'{row["sharding"]} {row["optimizer"]} '
                f'{row["data_type"]} d{row["dim"]} B{row["batch"]}',
                f'{r["persistent_real"] / mb:.1f}',
                "equal" if r["persistent_est"] == r["persistent_real"]
                else f'{(r["persistent_est"] - r["persistent_real"]):+d} B',
                f'{r["peak_measured"] / mb:.1f}', f'{r["peak_est"] / mb:.1f}',
                f'{err / mb:+.1f} ({100 * err / r["peak_measured"]:+.2f}%)',
                "yes" if exact and within else "NO",
                f'{(r["torchrec_hbm"] + r["torchrec_ddr"]) / mb:.1f}'])
    n_ok = sum(all(_ok(r)) for r in rows)
    body = (f"{n_ok} of {len(rows)} configurations pass both checks on every rank.\n\n"
            + markdown_table(["config", "rank", "plan", "table state MB (real)",
                              "priced - real", "step peak MB (measured)",
                              "step peak MB (priced)", "priced - measured", "ok",
                              "TorchRec's storage MB"], table)
            + "\n\nTorchRec's figure is its planner's per-shard storage on that rank "
            "(parameters, the optimizer state it reads from `_optimizer_classes`, and its "
            "input/output terms); it prices no dense part and no step transients. "
            "`results/torchrec_vs_planner.md` compares the two on 20+ plans.")
    write_result("torchrec_dmp_cpu", "TorchRec plans on CPU: priced per rank vs real DMP",
                 body, command)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(CONFIGS))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    out = RESULTS / "torchrec_dmp_cpu.jsonl"
    if not args.report_only:
        for name in args.only.split(","):
            row = run_one(name, args.scale)
            print(json.dumps(row), flush=True)
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
    latest: dict[str, dict[str, Any]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        latest[row["config"]] = row
    report([latest[k] for k in CONFIGS if k in latest],
           "python benchmarks/torchrec_dmp_cpu.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
