"""Row-wise int8 / int4 packed rows: `autoembed.nn.rowformat`, re-exported under their old
path."""

from __future__ import annotations

from autoembed.nn.rowformat import (
    QPARAM_BYTES,
    ROW_ALIGN_BYTES,
    SERVING_BITS,
    pack_rows,
    row_bytes,
    unpack_rows,
)

__all__ = [
    "ROW_ALIGN_BYTES",
    "QPARAM_BYTES",
    "SERVING_BITS",
    "row_bytes",
    "pack_rows",
    "unpack_rows",
]
