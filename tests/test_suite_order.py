"""The suite's own order (tests/conftest.py): the files conftest's `SECONDS` lists exist (a
renamed file would silently fall to the end of the run) and run first, longest first, each
file's tests together and in their own order; one torch thread in each test process."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SECONDS

HERE = Path(__file__).resolve().parent


def test_every_timed_file_exists() -> None:
    missing = sorted(name for name in SECONDS if not (HERE / name).is_file())
    assert not missing, f"conftest.SECONDS names files that are gone: {missing}"


def test_the_longest_files_run_first_and_each_file_stays_whole(
        request: pytest.FixtureRequest) -> None:
    files = [item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
             for item in request.session.items]
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(runs) == len(set(runs)), "a file's tests are split apart"
    timed = [f for f in runs if f in SECONDS]
    assert runs[:len(timed)] == timed, "an untimed file runs before a timed one"
    assert [SECONDS[f] for f in timed] == sorted((SECONDS[f] for f in timed), reverse=True)


def test_each_test_process_and_its_children_run_one_torch_thread() -> None:
    """conftest sets OMP_NUM_THREADS (1 unless the run set it): this process's torch and the
    processes tests start (inheriting it) keep to it, so that CI's two test processes on two
    cores do not spin second threads against each other."""
    import os
    import subprocess
    import sys

    import torch

    threads = os.environ.get("OMP_NUM_THREADS")
    assert threads is not None and torch.get_num_threads() == int(threads)
    show = "import os; print(os.environ['OMP_NUM_THREADS'])"
    child = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True,
                           check=True)
    assert child.stdout.strip() == threads
