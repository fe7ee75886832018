"""A user's own PyTorch model: price its whole training step (`estimate_model`), run that
step with autoembed's precision machinery (`UserStep`)."""

from __future__ import annotations

from autoembed.torchrec.public import estimate_model  # the one entry point (TorchRec's too)
from autoembed.user_model.estimate import CPU_VS_CUDA
from autoembed.user_model.step import UserStep, embedding_modules

__all__ = ["estimate_model", "UserStep", "embedding_modules", "CPU_VS_CUDA"]
