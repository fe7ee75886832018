"""`estimate_torch_model`: price a plain-torch user model's whole training step by tracing it
on fake tensors (how: `autoembed.trace.traced_model`, with the tracer the built-in configs
use, `trace.traced.trace_step`). `autoembed.estimate_model` (`torchrec.public`, the one entry
point of the API and the CLI) calls it for every model but TorchRec's; call that one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from autoembed.budget import Budget, BudgetLike
from autoembed.errors import ConfigError
from autoembed.memory.types import CUDA_CONTEXT_BYTES, MemoryEstimate
from autoembed.models.user_step import LossFn, OptimizerSpec
from autoembed.trace.traced_model import ModelSpec, model_estimate

__all__ = ["estimate_torch_model"]


def estimate_torch_model(
    model: ModelSpec,
    example: Any,
    *,
    loss: LossFn | None = None,
    optimizer: OptimizerSpec = "adam",
    precision: str = "fp32",
    budget: BudgetLike | None = None,
    reserve: int = 0,
    context_bytes: int = CUDA_CONTEXT_BYTES,
) -> MemoryEstimate:
    """Price two training steps of `model` on `example` (contract figures, `modules`
    breakdown). `example`: a tensor -> model(x), a tuple -> model(*x), a dict -> model(**x);
    a list is several examples, and the largest price is returned. Tensors only give shapes
    and dtypes. The loss is the forward's output when it is a scalar (or its `.loss`), else
    `loss(output, example)`; with no `loss` a forward that returns logits is priced with a
    stand-in, cross-entropy over the output's last dimension in fp32 (`notes` says so).
    `budget` (what `Budget.of` takes: bytes, "8GB", "80%") fills in `fits`."""
    limit = None if budget is None else Budget.of(budget)  # bad input before the trace
    if isinstance(example, list):
        if not example:
            raise ConfigError("example = []: give at least one example input")
        try:
            ests = [estimate_torch_model(model, x, loss=loss, optimizer=optimizer,
                                         precision=precision, budget=limit, reserve=reserve,
                                         context_bytes=context_bytes)
                    for x in example]
        except ConfigError as e:
            if not all(isinstance(x, torch.Tensor) for x in example):
                raise
            raise ConfigError(f"{e}; a list example is several examples, each priced alone "
                              "(model(x) for each): for a forward that takes one list of "
                              "tensors, give ([...],)") from None
        return max(ests, key=lambda e: e.device_total)
    if not isinstance(model, nn.Module) and not callable(model):
        raise ConfigError(f"model = {type(model).__name__}: give an nn.Module or a zero-argument "
                          "factory that returns one")
    if loss is not None and not callable(loss):
        raise ConfigError(f"loss = {type(loss).__name__}: give a function (output, example) -> "
                          "scalar tensor")
    if reserve < 0:
        raise ConfigError(f"reserve = {reserve}: must be >= 0 bytes")
    est = model_estimate(model, example, loss=loss, optimizer=optimizer, precision=precision,
                         reserve=reserve, context_bytes=context_bytes)
    return est.with_budget(limit)
