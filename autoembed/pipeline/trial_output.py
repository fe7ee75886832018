"""A trial's output on a Ray worker, kept: `trial_output(log_dir, number)` sends the process's
stdout and stderr (file descriptors 1 and 2 and `sys.stdout`/`sys.stderr`) to
`log_dir/trial-NNNN.log` while the trial runs, then restores them; on a node without
`log_dir` (another machine of a cluster) the output stays in Ray's own logs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["trial_output", "log_name"]


def log_name(number: int) -> str:
    """The log file of trial `number` (its MLflow run is trial-NNNN too)."""
    return f"trial-{number:04d}.log"


@contextlib.contextmanager
def trial_output(log_dir: str | None, number: int | None) -> Iterator[Path | None]:
    """While inside: this process's output goes to the trial's log (its path; None when
    `log_dir` is not a folder here)."""
    if not log_dir or number is None or not os.path.isdir(log_dir):
        yield None
        return
    path = Path(log_dir) / log_name(int(number))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = (os.dup(1), os.dup(2))
    py = (sys.stdout, sys.stderr)
    with open(path, "a", buffering=1, encoding="utf-8", errors="replace") as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            sys.stdout = sys.stderr = log
            yield path
        finally:
            sys.stdout, sys.stderr = py
            for stream in py:
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
