"""Shared helpers for benchmark scripts: markdown tables printed and written to results/."""

from __future__ import annotations

import platform
import sys
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    import os

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
    text = f"# {title}\n\nCommand: `{command}`\n\nMachine: {machine()}\n\n{body}\n"
    path.write_text(text)
    print(text)
    return path
