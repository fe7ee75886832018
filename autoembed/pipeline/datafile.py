"""A data file a trial reads, shipped to Ray nodes that may not share the driver's
filesystem: its bytes travel once through Ray's object store (`data_file_blob`, made in the
driver), and a node reads the driver's path when it holds the same bytes, else a local copy
written from them (`local_data`)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["data_file_blob", "data_file_digest", "local_data"]


@lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """A file's digest, read once per (path, size, mtime) in this worker, not every trial."""
    del size, mtime_ns  # the cache key: a rewritten file is read again
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def data_file_digest(data: Mapping[str, Any]) -> str | None:
    """The sha256 of a data file's bytes (read once per size and mtime), None for built-in
    data: what a study records, so a resume on an edited file is caught."""
    from autoembed.data.spec import DataSpec

    spec = DataSpec.from_dict(data, "data")
    if not spec.is_file:
        return None
    st = Path(spec.name).stat()
    return _sha256(spec.name, st.st_size, st.st_mtime_ns)


def data_file_blob(train_data: Mapping[str, Any]) -> dict[str, Any] | None:
    """A data file's bytes, to ship to the trials through Ray's object store (cluster nodes
    need not share a filesystem with the driver); None for built-in data, which every
    node generates from seeds or reads from its installed packages."""
    from autoembed.data.spec import DataSpec

    spec = DataSpec.from_dict(train_data, "trial data")
    if not spec.is_file:
        return None
    raw = Path(spec.name).read_bytes()
    return {"name": Path(spec.name).name, "sha256": hashlib.sha256(raw).hexdigest(),
            "bytes": raw}


def local_data(data: dict[str, Any], blob: dict[str, Any] | None,
               cache_dir: Path | None = None) -> dict[str, Any]:
    """The data spec with its file readable on this node: the driver's path when the file
    there has the shipped bytes (same machine or a shared filesystem), else a copy written
    from `blob` (the bytes shipped through Ray's object store) under `cache_dir`."""
    if blob is None:
        return data
    path = Path(str(data["name"]))
    try:
        st = path.stat()
        if path.is_file() and _sha256(str(path), st.st_size, st.st_mtime_ns) == blob["sha256"]:
            return data
    except OSError:
        pass
    root = cache_dir or Path(tempfile.gettempdir()) / "autoembed-data"
    copy = root / str(blob["sha256"]) / str(blob["name"])
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        part = copy.with_name(copy.name + ".part")
        part.write_bytes(blob["bytes"])
        part.replace(copy)  # atomic: two trials on one node never read half a file
    return {**data, "name": str(copy)}


