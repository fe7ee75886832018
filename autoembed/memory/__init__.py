"""The memory model without torch: how many bytes of GPU memory a config needs to train.

`analytic` prices a config in closed form; `types` holds the estimate (`MemoryEstimate`) and
the allocator's constants; `computed`, `cache_model` and `objective` price computed rows, host
caches and the search's memory objective. `autoembed.trace` holds the torch tracer and
`estimate`, the one entry for either method; importing this package loads no torch.
"""

from __future__ import annotations

from autoembed.memory.types import MemoryEstimate

__all__ = ["MemoryEstimate"]
