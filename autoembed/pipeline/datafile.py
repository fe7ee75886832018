"""A data file a trial reads, shipped to Ray nodes that may not share the driver's
filesystem: its bytes travel once through Ray's object store (`data_file_blob`, made in the
driver), and a node reads the driver's path when it holds the same bytes, else a local copy
written from them (`local_data`)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoembed.data.digest import file_sha256

__all__ = ["data_file_blob", "local_data"]


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
        if path.is_file() and file_sha256(path) == blob["sha256"]:
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


