"""Unsharded TorchRec models: `autoembed.estimate_model` (the traced step, KJTs made
traceable: `autoembed.torchrec.unsharded`) against the peak bytes of a real CPU training step of
the same model, measured independently of the tracer (`benchmarks/measure_cpu.py`: a fresh
process, MALLOC_MMAP_THRESHOLD_=65536, VmHWM reset after two warm-up steps of a small twin).
The model is examples/torchrec_dlrm.py (TorchRec's DLRM in DLRMTrain, its EmbeddingBagCollection
unsharded: nn.EmbeddingBag tables trained by the torch optimizer named).

    .venv/bin/python benchmarks/torchrec_unsharded_cpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from _common import markdown_table, write_result  # noqa: E402

TOLERANCE = 0.03
# (scale, batch, dim, optimizer)
CASES = [(0.05, 2048, 16, "adagrad"), (0.05, 4096, 16, "sgd"), (0.05, 2048, 32, "adam"),
         (0.02, 8192, 16, "rowwise_adagrad"), (0.1, 1024, 16, "adagrad")]


def main() -> None:
    from measure_cpu import measure_cpu_peak

    from autoembed.torchrec.unsharded import estimate_unsharded
    from examples import torchrec_dlrm as ex

    rows = []
    for scale, batch, dim, opt in CASES:
        size = {"scale": scale, "batch_size": batch, "dim": dim}
        est = estimate_unsharded(lambda s=size: ex.build_model(**s), ex.make_example(**size),
                                 loss=ex.loss, optimizer=opt)
        got = measure_cpu_peak("examples.torchrec_dlrm", size, ex.SIZES["twin"],
                               optimizer=opt, path=str(ROOT))
        err = (est.allocated_peak - got) / got
        rows.append([scale, batch, dim, opt, f"{got / 1e6:.1f}",
                     f"{est.allocated_peak / 1e6:.1f}", f"{100 * err:+.2f}%",
                     "yes" if abs(err) <= TOLERANCE else "NO"])
        print(rows[-1], flush=True)
    ok = sum(r[-1] == "yes" for r in rows)
    write_result("torchrec_unsharded_cpu", "Unsharded TorchRec DLRM: traced vs a real CPU step",
                 f"{ok} of {len(rows)} within {TOLERANCE:.0%}.\n\n" + markdown_table(
                     ["scale", "batch", "dim", "optimizer", "measured MB", "priced MB",
                      "priced - measured", "within 3%"], rows),
                 "python benchmarks/torchrec_unsharded_cpu.py")


if __name__ == "__main__":
    main()
