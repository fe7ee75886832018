"""Lines a test wants shown at the end of the run, whatever its outcome (pytest captures a
passing test's output): `report(section, lines)`; conftest's terminal summary prints them."""

from __future__ import annotations

SECTIONS: dict[str, list[str]] = {}


def report(section: str, lines: list[str]) -> None:
    SECTIONS.setdefault(section, []).extend(lines)
