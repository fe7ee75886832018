"""Shared test settings: hypothesis is deterministic and deadline-free on 2 slow cores."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """What tests asked to show (tests/_report.py): e.g. the examples' substitutions."""
    from _report import SECTIONS

    for title, lines in SECTIONS.items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.line(line)
