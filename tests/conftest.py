"""Shared test settings: hypothesis is deterministic and deadline-free on 2 slow cores; the
`one_thread` fixture for tests of tiny tensors; the longest files run first (`SECONDS`); what
tests ask to show (tests/_report.py) is printed at the end, also when pytest-xdist runs the
files in worker processes (scripts/test.sh: `-n 3 --dist loadfile`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

# One torch (OpenMP) thread in every test process and in what it starts (the variable is
# inherited): CI runs two test processes on its two cores (scripts/test.sh), so a second
# thread in each only waits, spinning, for the core the other holds (tests/test_train.py:
# 52 CPU s on two threads, 20 on one). Search trials pin their own (plan.trial_threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_SECTIONS_KEY = "autoembed_report_sections"

# About how many seconds a file takes on the 2-core CI machine, the files of 5 s and more
# (each test's wall time on the shared machine times 2 / its load average; test_examples and
# the two cluster files as CI measured them; test_models_vs_memory, test_train, test_runner
# and test_models_fake scaled by their CPU seconds on one torch thread; test_replay_harness
# and test_replay_tables by their CPU seconds once their ehvi replays were cut;
# test_user_model_priced and test_memory_traced once their measuring processes were cut). The
# files run longest first, so that under `--dist loadfile` no long file starts last and runs
# alone while the other worker idles (xdist's own order, most tests first, put the long
# few-test files last). A file not listed runs after these, in collection order. A guess only orders
# the files.
SECONDS = {
    "test_examples.py": 140, "test_user_model_priced.py": 80, "test_search_resilience.py": 55,
    "test_cluster.py": 70, "test_cluster_user.py": 63, "test_memory_traced.py": 40,
    "test_search.py": 30, "test_user_search_faults.py": 20, "test_torchrec_search.py": 37,
    "test_cli_fuzz.py": 34, "test_tracking_server.py": 27, "test_user_search_local.py": 19,
    "test_torchrec.py": 25, "test_benchmarks.py": 20,
    "test_replay_variants.py": 19, "test_trials_end.py": 15, "test_search_progress.py": 14,
    "test_host_cache.py": 13, "test_priced_is_trained.py": 13, "test_team_store.py": 13,
    "test_trial_measures.py": 13, "test_train_checks.py": 12, "test_models_vs_memory.py": 10,
    "test_train.py": 8, "test_runner.py": 10, "test_train_rerun.py": 9, "test_docs.py": 9,
    "test_trial_isolation.py": 9, "test_search_engine.py": 9, "test_replay_harness.py": 9,
    "test_replay_tables.py": 8, "test_user_reference.py": 8,
    "test_user_search_guarantees.py": 8, "test_checks_first.py": 8,
    "test_data_synthetic.py": 7, "test_quiet_output.py": 7, "test_models_fake.py": 6,
    "test_user_model.py": 6, "test_models.py": 6, "test_sampler_guarantees.py": 6,
    "test_user_model_cli.py": 6, "test_search_auto.py": 6, "test_ray_placement.py": 5,
    "test_user_apply.py": 5, "test_tracking_template.py": 5,
}


def pytest_configure(config: pytest.Config) -> None:
    """xdist's own order (the files with the most tests first) would undo `SECONDS`'."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files by `SECONDS`, longest first; the tests of a file stay in their order."""
    def cost(item: pytest.Item) -> float:
        return -SECONDS.get(item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1], 0.0)

    items.sort(key=cost)  # stable


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two (and fair on a shared CPU)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand what its tests reported to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from _report import SECTIONS

        workeroutput[_SECTIONS_KEY] = {k: list(v) for k, v in SECTIONS.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In the xdist controller: take a finished worker's sections in."""
    from _report import SECTIONS

    for title, lines in getattr(node, "workeroutput", {}).get(_SECTIONS_KEY, {}).items():
        SECTIONS.setdefault(title, []).extend(lines)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What tests asked to show (tests/_report.py): e.g. the examples' substitutions."""
    from _report import SECTIONS

    for title, lines in SECTIONS.items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.line(line)
