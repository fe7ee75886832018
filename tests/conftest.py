"""Shared test settings: hypothesis is deterministic and deadline-free on 2 slow cores; the
`one_thread` fixture for tests of tiny tensors; what tests ask to show (tests/_report.py) is
printed at the end, also when pytest-xdist runs the files in worker processes
(scripts/test.sh: `-n 2 --dist loadfile`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_SECTIONS_KEY = "autoembed_report_sections"


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
