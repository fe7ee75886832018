"""Every compression of `autoembed.nn`'s layers, by name: the one registry (new compressions
plug in here)."""

from __future__ import annotations

from autoembed.nn.methods import METHOD_STORAGES
from autoembed.nn.storage import BASE_STORAGES, _Storage

__all__ = ["COMPRESSIONS"]

# compression name -> storage class
COMPRESSIONS: dict[str, type[_Storage]] = {**BASE_STORAGES, **METHOD_STORAGES}
