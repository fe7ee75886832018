"""TorchRec plans on 1-2 GPUs: each rank's `torch.cuda.max_memory_allocated` over training
steps of DistributedModelParallel (NCCL) against autoembed's per-rank `allocated_peak` for
the same plan (examples/torchrec_dlrm.py, Criteo's cardinalities at `--scale`).

TorchRec is the point of this script, so unlike the other GPU scripts it needs TorchRec and
FBGEMM (the GPU build: `AUTOEMBED_TORCHREC=1 bash scripts/setup.sh` installs `fbgemm-gpu`
where `nvidia-smi` sees a GPU) and autoembed itself. Each case is measured in fresh
processes (`autoembed.pipeline.sharded_runner`): a warm-up step of the same shapes, the peak
statistics reset, two measured steps. Rows are written to results/gpu_torchrec.md as they
finish; the figures are UNVALIDATED until this runs on a GPU (none in the session that wrote
it).

    python benchmarks/gpu_torchrec.py                 # CUDA plans on 1 and 2 GPUs
    python benchmarks/gpu_torchrec.py --cpu-smoke     # the same code path on a CPU plan
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import markdown_table, write_result  # noqa: E402

COLLECTION = "model.sparse_arch.embedding_bag_collection"
# (ranks, dim, optimizer, sharding of every table, kernel, cache load factor)
CASES: list[tuple[int, int, str, str, str, float | None]] = [
    (1, 64, "rowwise_adagrad", "table_wise", "fused", None),
    (1, 64, "adam", "table_wise", "fused", None),
    (2, 64, "rowwise_adagrad", "table_wise", "fused", None),
    (2, 128, "adam", "row_wise", "fused", None),
    (2, 64, "adagrad", "column_wise", "fused", None),
    (2, 64, "rowwise_adagrad", "table_wise", "fused_uvm_caching", 0.2),
]
SMOKE = [(1, 16, "rowwise_adagrad", "table_wise", "fused", None),
         (2, 16, "sgd", "table_wise", "fused", None)]


def tables(optimizer: str, sharding: str, kernel: str, clf: float | None) -> list[dict[str, Any]]:
    from examples.torchrec_dlrm import KEYS

    return [{"name": f"{COLLECTION}.t_{k}", "optimizer": optimizer, "sharding_type": sharding,
             "compute_kernel": kernel, **({"cache_load_factor": clf} if clf else {})}
            for k in KEYS]


def run_case(case: tuple[int, int, str, str, str, float | None], scale: float, batch: int,
             device: str) -> list[list[Any]]:
    from autoembed.pipeline.sharded_runner import run_sharded
    from autoembed.torchrec.settings import RankTopology
    from autoembed.torchrec.sharded import estimate_sharded
    from examples import torchrec_dlrm as ex

    world, dim, opt, sharding, kernel, clf = case
    params = {"scale": scale, "batch_size": batch, "dim": dim}
    settings = tables(opt, sharding, kernel, clf)
    topo = {"world_size": world, "batch_size": batch, "compute_device": device}
    est = estimate_sharded(lambda: ex.build(params), ex.example(params), RankTopology(**topo),
                           settings, loss=ex.loss)
    measured = run_sharded({
        "build": "examples.torchrec_dlrm:build", "example": "examples.torchrec_dlrm:example",
        "loss": "examples.torchrec_dlrm:loss", "path": str(ROOT), "params": params,
        "tables": settings, "topology": topo, "steps": 2, "timeout_s": 280})
    rows = []
    for r, m in zip(est.ranks, measured, strict=True):
        got = m.get("max_memory_allocated", m["step_peak"])
        rows.append([world, r.rank, f"{sharding} {kernel} d{dim} {opt}", r.allocated_peak, got,
                     f"{100 * (r.allocated_peak - got) / got:+.2f}%", r.persistent,
                     m["table_bytes"]])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="CPU plans at a tiny scale (the path the tests keep from rotting)")
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--out", default="gpu_torchrec")
    args = ap.parse_args()
    import torch

    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_torchrec: no CUDA device; use --cpu-smoke")
    cases = SMOKE if args.cpu_smoke else [c for c in CASES
                                          if c[0] <= torch.cuda.device_count()]
    scale, batch = (0.0005, 64) if args.cpu_smoke else (args.scale, args.batch)
    rows: list[list[Any]] = []
    header = ["ranks", "rank", "plan", "priced allocated_peak B",
              "measured B (max_memory_allocated; CPU: step peak)", "priced - measured",
              "priced tables+state B", "real tables+state B"]
    for case in cases:
        t0 = time.time()
        rows += run_case(case, scale, batch, device)
        if args.cpu_smoke:  # the code path only: printed, never written as GPU figures
            print(markdown_table(header, rows), flush=True)
            continue
        write_result(args.out, "TorchRec plans: priced per rank vs measured",
                     "UNVALIDATED until reviewed: the first run on a GPU. Scale "
                     f"{scale}, batch {batch} per rank. Last case {time.time() - t0:.0f} s."
                     "\n\n" + markdown_table(header, rows),
                     "python benchmarks/gpu_torchrec.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
