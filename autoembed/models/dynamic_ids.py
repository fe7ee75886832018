"""Dynamic vocabulary (rows for ids never seen when the table was sized):
`autoembed.nn.dynamic_ids`, re-exported under its old path."""

from __future__ import annotations

from autoembed.nn.dynamic_ids import FREE, DynamicIds

__all__ = ["DynamicIds", "FREE"]
