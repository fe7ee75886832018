"""A data file's sha256: what a study records of the data it searched (a resume on an edited
file is refused, a rerun says the file changed) and how a shipped file is recognised on a
node. Read once per (path, size, mtime) in a process."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["data_file_digest", "digests", "file_sha256"]


@lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # the cache key: a rewritten file is read again
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of the file's bytes (OSError when it cannot be read)."""
    st = Path(path).stat()
    return _sha256(str(path), st.st_size, st.st_mtime_ns)


def digests(was: str, now: str | None) -> str:
    """How a changed file's digests are shown: "sha256 1a2b3c4d5e6f... then, ... now"."""
    return f"sha256 {was[:12]}... then, {str(now)[:12]}... now"


def data_file_digest(data: Mapping[str, Any]) -> str | None:
    """The sha256 of a data spec's file, None for built-in data."""
    from autoembed.data.spec import DataSpec

    spec = DataSpec.from_dict(data, "data")
    return file_sha256(spec.name) if spec.is_file else None
