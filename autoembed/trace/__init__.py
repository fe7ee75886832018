"""The memory model's entry and its torch tracer: `estimate(config, method="analytic" |
"traced")` returns a `MemoryEstimate`.

The analytic model (`autoembed.memory`, torch-free) is closed-form (microseconds); the traced
one (`trace.traced`, loaded only when asked for) runs one real training step of the built
model on fake tensors (no table is allocated) and counts live bytes with the CUDA caching
allocator's rounding (`trace.tracker`); `trace.traced_model` traces a user's own model.
"""

from __future__ import annotations

from dataclasses import replace

from autoembed.budget import Budget, BudgetLike
from autoembed.config import EmbeddingConfig
from autoembed.errors import ConfigError
from autoembed.memory.analytic import analytic_estimate
from autoembed.memory.types import CUDA_CONTEXT_BYTES, MemoryEstimate
from autoembed.rules import Integer, OneOf

__all__ = ["estimate", "METHODS"]

METHODS = ("analytic", "traced")
# Sharded pricing is O(gpus x tables): 4096 GPUs x 26 tables, row-wise, price in 1.3 s on the
# 2-core dev machine (a million took minutes). More than this is taken for a typo.
MAX_GPUS = 4096
SHARDINGS = ("table", "row")


def estimate(
    config: EmbeddingConfig,
    *,
    method: str = "analytic",
    budget: BudgetLike | None = None,
    gpus: int = 1,
    sharding: str = "table",
    reserve: int = 0,
    context_bytes: int = CUDA_CONTEXT_BYTES,
    host_budget: BudgetLike | None = None,
) -> MemoryEstimate:
    """Price one training step of `config` in bytes; `budget` fills in `fits`, `host_budget`
    (host memory, host_cached tables) `host_fits`; both take what `Budget.of` takes (bytes,
    "8GB", "80%" of the GPU's memory; the host's a size), checked before pricing."""
    if not isinstance(config, EmbeddingConfig):
        what = type(config).__name__
        if hasattr(config, "named_modules"):
            raise ConfigError(f"estimate() takes an EmbeddingConfig, got the nn.Module {what}; "
                              "for your own model use autoembed.estimate_model(model, example)")
        raise ConfigError(f"estimate() takes an EmbeddingConfig, got {what}; build one with "
                          "autoembed.load_config or EmbeddingConfig(...)")
    OneOf(METHODS).check_argument("method", method)
    OneOf(SHARDINGS).check_argument("sharding", sharding)
    Integer(1).check_argument("gpus", gpus)
    if gpus > MAX_GPUS:
        raise ConfigError(f"gpus = {gpus}: at most {MAX_GPUS} GPUs are priced; give the GPUs "
                          "one job shards its tables over")
    Integer(0).check_argument("reserve", reserve)
    device_budget = None if budget is None else Budget.of(budget)
    host = None if host_budget is None else Budget.for_host(host_budget)
    if method == "traced":
        from autoembed.trace.traced import traced_estimate
    price = traced_estimate if method == "traced" else analytic_estimate
    est = price(config, gpus=gpus, sharding=sharding, reserve=reserve, context_bytes=context_bytes)
    if host is not None:
        est = replace(est, host_budget=host.bytes)
    return est.with_budget(device_budget)
