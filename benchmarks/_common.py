"""Shared helpers for benchmark scripts: markdown tables printed and written to results/,
each stamped with the git commit measured and the machine's load (`stamp()`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parents[1]
START_LOAD = os.getloadavg()  # when the script imported this: the load it started under


def git_commit() -> str:
    """HEAD's commit, with "+uncommitted" when tracked files differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" +uncommitted changes" if dirty else "")


def stamp() -> str:
    """One line: the commit measured and the load averages (1/5/15 min) at start and now."""
    def fmt(load: tuple[float, float, float]) -> str:
        return "/".join(f"{x:.2f}" for x in load)

    return (f"Commit: {git_commit()}. Load average (1/5/15 min) on {os.cpu_count()} cpus: "
            f"{fmt(START_LOAD)} at start, {fmt(os.getloadavg())} when written.")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    try:
        import torch

        tv = str(torch.__version__)
        dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        tv, dev = "n/a", "cpu"
    return (
        f"python {sys.version.split()[0]}, torch {tv}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, device {dev}"
    )


def write_result(name: str, title: str, body: str, command: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    text = (f"# {title}\n\nCommand: `{command}`\n\nMachine: {machine()}\n\n{stamp()}\n\n"
            f"{body}\n")
    path.write_text(text)
    print(text)
    return path
