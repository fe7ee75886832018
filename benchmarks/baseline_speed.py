"""How long does the simple model take? `autoembed.baselines.fit_baseline` on the real data
sets a search compares with (issue 15: "in under a second" for the user; it counts inside each
search's 10-minute goal), wall and CPU seconds, with the C it chose and its scores.

    .venv/bin/python benchmarks/baseline_speed.py [movielens flights bbcnews]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402

NAMES = ("movielens", "flights", "bbcnews")


def measure(name: str) -> list[object]:
    """One row: rows, columns, C, valid, test, wall s (reading + fitting + scoring), CPU s."""
    from autoembed.baselines import fit_baseline
    from autoembed.data import DataSpec, load_dataset

    data = load_dataset(DataSpec(name))
    cpu = time.process_time()
    base = fit_baseline(data)
    cpu = time.process_time() - cpu
    rows = " / ".join(f"{data.num_rows(s):,}" for s in ("train", "valid", "test"))
    return [name, rows, f"{base.columns:,}", base.name, base.metric, f"{base.c:g}",
            f"{base.valid:.4f}", f"{base.test:.4f}", f"{base.seconds:.1f}", f"{cpu:.1f}"]


def main(names: tuple[str, ...]) -> None:
    rows = [measure(n) for n in names]
    body = markdown_table(["data", "train / valid / test rows", "columns", "model", "metric",
                           "C", "valid", "test", "wall s", "CPU s"], rows)
    body += ("\n\nwall s: `Baseline.seconds` (reading the splits, fitting the C grid, "
             "scoring); CPU s: this process's CPU time over the same call (the fits run on "
             "one BLAS thread). Before (main 87a6336, BLAS threads unlimited, a loaded "
             "machine): 63.8 s, 95.2 s and 61.8 s wall (benchmarks/results/real_data.md).")
    write_result("baseline_speed", "Baseline fit time (fit_baseline)", body,
                 "benchmarks/baseline_speed.py " + " ".join(names))


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or NAMES)
