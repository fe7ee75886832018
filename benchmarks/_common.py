"""Shared helpers for benchmark scripts: markdown tables printed and written to results/,
each stamped with the git commit measured and the machine's load (`stamp()`)."""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole records of a JSON-lines results file, plain or gzipped (`.gz`: gzip
    members, one per append); a torn last record of a killed writer is dropped."""
    out: list[dict[str, Any]] = []
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz"
              else path.open(encoding="utf-8")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn last line
    except (EOFError, gzip.BadGzipFile, zlib.error):
        pass  # a torn last gzip member: the records before it stand
    return out


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record to a JSON-lines results file (gzipped when the name ends in .gz:
    the record is its own gzip member, so a killed writer loses only that record)."""
    line = json.dumps(record) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open(path, "at", encoding="utf-8") if path.suffix == ".gz"
          else path.open("a", encoding="utf-8")) as f:
        f.write(line)


def write_jsonl(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Write `records` as one file (one gzip member when the name ends in .gz), replacing
    the file whole: written beside it, then renamed."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".gz":
        tmp.write_bytes(gzip.compress(text.encode("utf-8"), 9, mtime=0))
    else:
        tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def results_stem(path: Path) -> Path:
    """`results/NAME.jsonl(.gz)` -> `results/NAME`: where its report (.md, .png) goes."""
    name = path.name.removesuffix(".gz").removesuffix(".jsonl")
    return path.with_name(name)
