"""A user's own PyTorch model: price its whole training step (`estimate_torch_model`; the
public `autoembed.estimate_model` is `torchrec.public.estimate_model`, which dispatches
TorchRec models and calls this for the rest), run that step with autoembed's precision
machinery (`UserStep`)."""

from __future__ import annotations

from autoembed.models.table_modules import embedding_modules
from autoembed.models.user_step import UserStep
from autoembed.user.model.estimate import CPU_VS_CUDA, estimate_torch_model

__all__ = ["estimate_torch_model", "UserStep", "embedding_modules", "CPU_VS_CUDA"]
