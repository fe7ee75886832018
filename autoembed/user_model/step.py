"""A user's own model's training step: `models.user_step.UserStep`, the one training step
(`models.step.TrainStep`) with the user's model as its seam. The names stay importable here."""

from __future__ import annotations

from autoembed.models.optim import user_optimizers
from autoembed.models.tables import EMBEDDING_TYPES, embedding_modules
from autoembed.models.user_step import (
    OPTIMIZER_NAMES,
    LossFn,
    OptimizerSpec,
    UserStep,
    call_model,
    cast_floating,
    pin_foreach,
    resolve_loss,
)

__all__ = [
    "EMBEDDING_TYPES",
    "OPTIMIZER_NAMES",
    "LossFn",
    "OptimizerSpec",
    "UserStep",
    "call_model",
    "cast_floating",
    "embedding_modules",
    "pin_foreach",
    "resolve_loss",
    "user_optimizers",
]
