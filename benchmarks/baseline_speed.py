"""How long does the simple model take? `autoembed.baselines.fit_baseline` on the real data
sets a search compares with (issue 15: "in under a second" for the user; it counts inside each
search's 10-minute goal), wall and CPU seconds, with the C it chose and its scores.

    .venv/bin/python benchmarks/baseline_speed.py [movielens flights bbcnews] [--threads-as-before]

`--threads-as-before` adds a second row per data set with BLAS threads left as they were
before (no `threadpool_limits`), run right after, under the same load
(results/baseline_speed_threads.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_result  # noqa: E402

NAMES = ("movielens", "flights", "bbcnews")


def measure(name: str, threads_as_before: bool = False) -> list[object]:
    """One row: rows, columns, C, valid, test, wall s (reading + fitting + scoring), CPU s."""
    import contextlib

    import threadpoolctl

    from autoembed.baselines import fit_baseline
    from autoembed.data import DataSpec, load_dataset

    data = load_dataset(DataSpec(name))
    limits = threadpoolctl.threadpool_limits
    if threads_as_before:  # fit_baseline's one-thread limit undone
        threadpoolctl.threadpool_limits = lambda **kw: contextlib.nullcontext()  # type: ignore
    try:
        cpu = time.process_time()
        base = fit_baseline(data)
        cpu = time.process_time() - cpu
    finally:
        threadpoolctl.threadpool_limits = limits
    name += " (BLAS threads as before)" if threads_as_before else ""
    rows = " / ".join(f"{data.num_rows(s):,}" for s in ("train", "valid", "test"))
    return [name, rows, f"{base.columns:,}", base.name, base.metric, f"{base.c:g}",
            f"{base.valid:.4f}", f"{base.test:.4f}", f"{base.seconds:.1f}", f"{cpu:.1f}"]


def main(names: tuple[str, ...], threads_as_before: bool) -> None:
    rows = []
    for n in names:
        rows.append(measure(n))
        if threads_as_before:
            rows.append(measure(n, True))
    body = markdown_table(["data", "train / valid / test rows", "columns", "model", "metric",
                           "C", "valid", "test", "wall s", "CPU s"], rows)
    body += ("\n\nwall s: `Baseline.seconds` (reading the splits, fitting the C grid, "
             "scoring); CPU s: this process's CPU time over the same call (the fits run on "
             "one BLAS thread). Before (main 87a6336, BLAS threads unlimited, a loaded "
             "machine): 63.8 s, 95.2 s and 61.8 s wall (benchmarks/results/real_data.md).")
    write_result("baseline_speed_threads" if threads_as_before else "baseline_speed",
                 "Baseline fit time (fit_baseline)", body,
                 "benchmarks/baseline_speed.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--threads-as-before"]
    main(tuple(args) or NAMES, "--threads-as-before" in sys.argv[1:])
