"""Shared test settings: hypothesis is deterministic and deadline-free on 2 slow cores; the
`one_thread` fixture for tests of tiny tensors."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster than two (and fair on a shared CPU)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """What tests asked to show (tests/_report.py): e.g. the examples' substitutions."""
    from _report import SECTIONS

    for title, lines in SECTIONS.items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.line(line)
