"""Which modules of a model are embedding tables: torch's nn.Embedding / nn.EmbeddingBag and
`autoembed.nn`'s drop-ins (a user's own model; the built-in `EmbeddingModel`'s tables are
`autoembed.nn` storages and go by `config.param_specs` instead)."""

from __future__ import annotations

from torch import nn

from autoembed.nn import Embedding as AeEmbedding
from autoembed.nn import EmbeddingBag as AeEmbeddingBag

__all__ = ["EMBEDDING_TYPES", "embedding_modules"]

EMBEDDING_TYPES: tuple[type[nn.Module], ...] = (
    nn.Embedding, nn.EmbeddingBag, AeEmbedding, AeEmbeddingBag)


def embedding_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(module path, module) of every embedding table in `model`, in module order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, EMBEDDING_TYPES)]
